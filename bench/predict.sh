#!/usr/bin/env bash
# The cost model against this machine (docs/planner.md): `mmc calibrate`
# for 1, 2 and 4 ranks, then plans of GPT2Tiny, GPT-2 124M and InternVL2Tiny
# (serial, tp, dp, pp, cp) compiled with --device and the description of
# their rank count; each trainer prints its measured median step beside the
# prediction. In REPS rounds: each round calibrates again, compiles every
# plan and runs each once, so every run is set beside a calibration made
# minutes before it, and one program's burst on a shared machine meets
# one run of a plan, not all of them. A plan's measured and predicted
# figures are the medians of its rounds', its ratio the median of its
# rounds' ratios. A benchmark, not a test: it prints the table and fails on
# nothing but a broken run.
# Then, for serial GPT2Tiny, InternVL2Tiny and GPT-2 124M, each op kind's time as the trainer's --profile
# measures it beside the time `mmc plan --device cpu1.dev --detail` predicts
# for it (the same figures as --json's predicted.by_op_kind), with their
# ratio: which kind the description gets wrong.
# Usage: bench/predict.sh [STEPS]   (needs build/mmc and mpirun; OMP_WAIT=spin|passive|
# active|auto|round: the OpenMP wait policy of calibrate and the trainers; REPS=3 rounds;
# KINDS_ONLY=1: only the one-rank calibration and the per-op-kind table)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
STEPS=${1:-60}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One OpenMP wait policy for calibrate and every trainer of a round. Left
# to itself each program samples the machine's run queue at its start and
# spins (then sleeps) on a quiet machine, sleeps at once on a busy one
# (runtime/core/mmrt_threads.c); a two-thread GPT2Tiny step differs
# several times between the two, so a calibration and a run that chose
# differently disagree by that much. OMP_WAIT=round (the default): the
# round's one-rank calibration chooses as any program would (its header
# says what) and every other program of the round is given that choice;
# spin, passive or active: that one throughout; auto: each its own.
OMP_WAIT=${OMP_WAIT:-round}
policy() { # spin|passive|active|auto: export it
  unset OMP_WAIT_POLICY GOMP_SPINCOUNT
  case $1 in
    spin) export OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=30000 ;;
    passive) export OMP_WAIT_POLICY=passive ;;
    active) export OMP_WAIT_POLICY=active ;;
    auto) ;;
    *) echo "OMP_WAIT: round, spin, passive, active or auto, not '$1'" >&2; exit 2 ;;
  esac
  WAIT=$1
}
case $OMP_WAIT in round) policy auto ;; *) policy "$OMP_WAIT" ;; esac
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
mpi() { # mpirun with the policy's variables
  local x=()
  [ -n "${OMP_WAIT_POLICY:-}" ] && x+=(-x OMP_WAIT_POLICY)
  [ -n "${GOMP_SPINCOUNT:-}" ] && x+=(-x GOMP_SPINCOUNT)
  mpirun --oversubscribe --bind-to none "${x[@]}" "$@"
}
S=$ROOT/stdlib_models
REPS=${REPS:-3}
NS="1 2 4"
[ "${KINDS_ONLY:-0}" = 1 ] && NS=1
calibrate() {
  [ "$OMP_WAIT" = round ] && policy auto
  for n in $NS; do
    if [ "$n" = 1 ]; then
      "$MMC" calibrate -o cpu$n.dev 2> /dev/null
      if [ "$OMP_WAIT" = round ]; then # the choice of the one-rank calibration, for the round
        local h
        h=$(grep -m1 "OpenMP waits" cpu1.dev)
        case $h in *"waits spin"*) policy spin ;; *"waits actively"*) policy active ;; *) policy passive ;; esac
      fi
    else mpi -np "$n" "$MMC" calibrate -o "cpu$n.dev" 2> /dev/null; fi
  done
  echo "OpenMP waits: $WAIT ($(grep -m1 "OpenMP waits" cpu1.dev | sed 's/.*OpenMP waits //'))"
  for n in $NS; do # what the model was given
    echo "cpu$n.dev: $(grep -E '^(fp32_tflops|vector_tflops|threads|mem_bw_gbs|cache_bw_gbs|cold_bw_gbs|remote_bw_gbs|llc_bw_gbs|row_ns|op_overhead_us|parallel_overhead_us|matmul_overhead_us|conv_overhead_us|attention_overhead_us|attention_item_us|intra_bw_gbs|intra_lat_us|comm_compute_share) ' "cpu$n.dev" |
      awk '{ printf "%s %.4g; ", $1, $3 }')"
  done
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); OMP_WAIT=$OMP_WAIT"

kinds() { # file model [steps]: per op kind, the trainer's --profile (ms a step) beside the prediction
  local file=$1 model=$2 steps=${3:-$STEPS}
  "$MMC" compile "$S/$file" --model "$model" --device cpu1.dev -o kinds
  ./kinds --steps "$steps" --eval-batches 1 --profile > kinds.out 2> kinds.err ||
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
  calibrate
  kinds gpt2.mm GPT2Tiny
  kinds internvl2.mm InternVL2Tiny
  kinds gpt2.mm GPT2 6
  exit
fi
PLANS=(
  "gpt2tiny-serial 1 $STEPS gpt2.mm GPT2Tiny"
  "gpt2tiny-tp2 2 $STEPS gpt2.mm GPT2Tiny --tp 2"
  "gpt2tiny-dp2 2 $STEPS gpt2.mm GPT2Tiny --dp 2"
  "gpt2tiny-pp2-mb2 2 $STEPS gpt2.mm GPT2Tiny --pp 2 --micro-batches 2"
  "gpt2tiny-cp2 2 $STEPS gpt2.mm GPT2Tiny --cp 2"
  "gpt2tiny-cp2-ring 2 $STEPS gpt2.mm GPT2Tiny --cp 2 --cp-kind ring"
  "gpt2tiny-dp4 4 $STEPS gpt2.mm GPT2Tiny --dp 4"
  "internvl2tiny-serial 1 $STEPS internvl2.mm InternVL2Tiny"
  "internvl2tiny-dp2 2 $STEPS internvl2.mm InternVL2Tiny --dp 2"
  "internvl2tiny-tp2 2 $STEPS internvl2.mm InternVL2Tiny --tp 2"
  "gpt2-124m-serial 1 6 gpt2.mm GPT2"
  "gpt2-124m-tp2 2 6 gpt2.mm GPT2 --tp 2"
  "gpt2-124m-dp2 2 6 gpt2.mm GPT2 --dp 2"
)
run() { # name ranks steps file model flags...: one run; "measured predicted" into NAME.r
  local name=$1 np=$2 steps=$3 file=$4 model=$5 line; shift 5
  "$MMC" compile "$S/$file" --model "$model" --device "cpu$np.dev" "$@" -o "$name"
  local cmd=(./"$name" --steps "$steps" --eval-batches 1)
  if [ "$np" = 1 ]; then "${cmd[@]}" > /dev/null 2> "$name.err"
  else mpi -np "$np" "${cmd[@]}" > /dev/null 2> "$name.err"; fi
  line=$(grep "step time: measured median" "$name.err") || { echo "$name: no step-time line"; tail -3 "$name.err"; return 1; }
  # "step time: measured median M s over N steps, predicted P s on D (measured / predicted R)"
  set -- $line
  echo "$5 ${11}" >> "$name.r"
}
for ((r = 1; r <= REPS; r++)); do
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  calibrate
  for p in "${PLANS[@]}"; do run $p; done
done
echo "after the rounds: load average $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f within.txt
printf "%-22s %5s %11s %11s %7s   %s\n" plan ranks "measured s" "predicted s" ratio "rounds (measured/predicted)"
for p in "${PLANS[@]}"; do
  set -- $p
  python3 - "$1" "$2" "$1.r" <<'PY'
import statistics as st, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[3]) if l.strip()]
m, p = st.median(r[0] for r in rows), st.median(r[1] for r in rows)
ratio = st.median(r[0] / r[1] for r in rows)
print("%-22s %5s %11.4g %11.4g %7.3f   %s" % (sys.argv[1], sys.argv[2], m, p, ratio,
      ", ".join("%.4g/%.4g" % r for r in rows)))
open("within.txt", "a").write("%d\n" % (abs(ratio - 1) <= 0.15))
PY
done
echo "within 15%: $(grep -c '^1' within.txt) of ${#PLANS[@]} plans (ratio of the rounds' median)"; rm -f within.txt
kinds gpt2.mm GPT2Tiny
kinds internvl2.mm InternVL2Tiny
kinds gpt2.mm GPT2 6
