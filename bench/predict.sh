#!/usr/bin/env bash
# The cost model against this machine (docs/planner.md): `mmc calibrate`
# for 1, 2 and 4 ranks, then plans of GPT2Tiny, GPT-2 124M and InternVL2Tiny
# (serial, tp, dp, pp, cp) compiled with --device and the description of
# their rank count; each trainer prints its measured median step beside the
# prediction. A benchmark, not a test: it prints the table and fails on
# nothing but a broken run.
# Then, for serial GPT2Tiny, each op kind's time as the trainer's --profile
# measures it beside the time `mmc plan --device cpu1.dev --detail` predicts
# for it (the same figures as --json's predicted.by_op_kind), with their
# ratio: which kind the description gets wrong.
# Usage: bench/predict.sh [STEPS]   (needs build/mmc and mpirun; OMP_WAIT=spin|passive|
# active|auto: the OpenMP wait policy of calibrate and the trainers; REPS=3 runs a plan,
# the median of their medians is the measured figure; KINDS_ONLY=1: only
# the one-rank calibration and the per-op-kind table)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
STEPS=${1:-60}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One OpenMP wait policy for calibrate and every trainer (OMP_WAIT=spin, the
# runtime's default on a quiet machine: spin GOMP_SPINCOUNT rounds, then
# sleep; or passive, or active): left to itself each program samples the
# load at its start and goes passive when the machine is busy, and a
# passive two-thread GPT2Tiny step takes several times a spinning one's,
# so a calibration and a run that chose differently disagree by that much
# (runtime/core/mmrt_threads.c). OMP_WAIT=auto leaves each program its own.
OMP_WAIT=${OMP_WAIT:-spin}
case $OMP_WAIT in
  spin) export OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=30000 ;;
  passive) export OMP_WAIT_POLICY=passive; unset GOMP_SPINCOUNT ;;
  active) export OMP_WAIT_POLICY=active; unset GOMP_SPINCOUNT ;;
  auto) unset OMP_WAIT_POLICY GOMP_SPINCOUNT ;;
  *) echo "OMP_WAIT: spin, passive, active or auto, not '$OMP_WAIT'" >&2; exit 2 ;;
esac
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
MPI=(mpirun --oversubscribe --bind-to none)
[ "$OMP_WAIT" = auto ] || MPI+=(-x OMP_WAIT_POLICY)
[ "$OMP_WAIT" = spin ] && MPI+=(-x GOMP_SPINCOUNT)
S=$ROOT/stdlib_models
REPS=${REPS:-3}
NS="1 2 4"
[ "${KINDS_ONLY:-0}" = 1 ] && NS=1
for n in $NS; do
  if [ "$n" = 1 ]; then "$MMC" calibrate -o cpu1.dev 2> /dev/null
  else "${MPI[@]}" -np "$n" "$MMC" calibrate -o "cpu$n.dev" 2> /dev/null; fi
done
for n in $NS; do # what the model was given
  echo "cpu$n.dev: $(grep -E '^(fp32_tflops|vector_tflops|mem_bw_gbs|op_overhead_us|matmul_overhead_us|conv_overhead_us|attention_overhead_us|intra_bw_gbs|intra_lat_us) ' "cpu$n.dev" |
    awk '{ printf "%s %.4g; ", $1, $3 }')"
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); OpenMP waits: $OMP_WAIT"

kinds() { # file model: per op kind, the trainer's --profile (ms a step) beside the prediction
  local file=$1 model=$2
  "$MMC" compile "$S/$file" --model "$model" --device cpu1.dev -o kinds
  ./kinds --steps "$STEPS" --eval-batches 1 --profile > kinds.out 2> kinds.err ||
    { echo "kinds: the trainer failed"; tail -3 kinds.err; return 1; }
  "$MMC" plan "$S/$file" --model "$model" --device cpu1.dev --json > kinds.json
  echo "per op kind, $model serial on cpu1.dev (ms a step; measured: the trainer's --profile, compute only)"
  python3 - kinds.out kinds.json <<'PY'
import json, sys
pred = {k: 1e3 * (v["forward_s"] + v["backward_s"] + v["update_s"])
        for k, v in json.load(open(sys.argv[2]))["predicted"]["by_op_kind"].items()}
meas, calls = {}, {}
table = open(sys.argv[1]).read().split("  op kind ")[1].split("\n  layer ")[0]
for line in table.splitlines()[1:]:
    f = line.split()  # kind forward backward update comm total % calls
    if len(f) == 8:
        meas[f[0]] = float(f[1]) + float(f[2]) + float(f[3])
        calls[f[0]] = int(f[7])
print("  %-24s %6s %11s %12s %8s" % ("op kind", "calls", "measured", "predicted", "ratio"))
for k in sorted(set(meas) | set(pred), key=lambda k: -max(meas.get(k, 0), pred.get(k, 0))):
    m, p = meas.get(k, 0), pred.get(k, 0)
    r = "%8.2f" % (m / p) if p > 0 else "%8s" % "-"
    print("  %-24s %6s %11.4f %12.4f %s" % (k, calls.get(k, "-"), m, p, r))
tm, tp = sum(meas.values()), sum(pred.values())
print("  %-24s %6s %11.4f %12.4f %8.2f" % ("all kinds", "", tm, tp, tm / tp))
PY
}
if [ "${KINDS_ONLY:-0}" = 1 ]; then
  kinds gpt2.mm GPT2Tiny
  exit
fi
printf "%-30s %5s %12s %12s %8s\n" plan ranks "measured s" "predicted s" "ratio"
run() { # name ranks steps file model flags...
  local name=$1 np=$2 steps=$3 file=$4 model=$5; shift 5
  "$MMC" compile "$S/$file" --model "$model" --device "cpu$np.dev" "$@" -o "$name"
  local cmd=(./"$name" --steps "$steps" --eval-batches 1) line meas=() pred=
  # the median of REPS runs' medians: one run's start can meet another
  # program's burst (its OpenMP threads then wait passively the whole run)
  for ((r = 0; r < REPS; r++)); do
    if [ "$np" = 1 ]; then "${cmd[@]}" > /dev/null 2> "$name.err"
    else "${MPI[@]}" -np "$np" "${cmd[@]}" > /dev/null 2> "$name.err"; fi
    line=$(grep "step time: measured median" "$name.err") || { echo "$name: no step-time line"; tail -3 "$name.err"; return 1; }
    # "step time: measured median M s over N steps, predicted P s on D (measured / predicted R)"
    set -- $line
    meas+=("$5") pred=${11}
  done
  local m
  m=$(printf "%s\n" "${meas[@]}" | sort -g | sed -n "$(( (REPS + 1) / 2 ))p")
  printf "%-30s %5s %12s %12s %8.3f   (runs: %s)\n" "$name" "$np" "$m" "$pred" \
    "$(awk -v a="$m" -v b="$pred" 'BEGIN { print a / b }')" "${meas[*]}"
}
run gpt2tiny-serial 1 "$STEPS" gpt2.mm GPT2Tiny
run gpt2tiny-tp2 2 "$STEPS" gpt2.mm GPT2Tiny --tp 2
run gpt2tiny-dp2 2 "$STEPS" gpt2.mm GPT2Tiny --dp 2
run gpt2tiny-pp2-mb2 2 "$STEPS" gpt2.mm GPT2Tiny --pp 2 --micro-batches 2
run gpt2tiny-cp2 2 "$STEPS" gpt2.mm GPT2Tiny --cp 2
run gpt2tiny-cp2-ring 2 "$STEPS" gpt2.mm GPT2Tiny --cp 2 --cp-kind ring
run gpt2tiny-dp4 4 "$STEPS" gpt2.mm GPT2Tiny --dp 4
run internvl2tiny-serial 1 "$STEPS" internvl2.mm InternVL2Tiny
run internvl2tiny-dp2 2 "$STEPS" internvl2.mm InternVL2Tiny --dp 2
run internvl2tiny-tp2 2 "$STEPS" internvl2.mm InternVL2Tiny --tp 2
run gpt2-124m-serial 1 6 gpt2.mm GPT2
run gpt2-124m-tp2 2 6 gpt2.mm GPT2 --tp 2
run gpt2-124m-dp2 2 6 gpt2.mm GPT2 --dp 2
kinds gpt2.mm GPT2Tiny
