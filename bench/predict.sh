#!/usr/bin/env bash
# The cost model against this machine (docs/planner.md): `mmc calibrate`
# for 1, 2 and 4 ranks, then plans of GPT2Tiny, GPT-2 124M and InternVL2Tiny
# (serial, tp, dp, pp, cp) compiled with --device and the description of
# their rank count; each trainer prints its measured median step beside the
# prediction. A benchmark, not a test: it prints the table and fails on
# nothing but a broken run.
# Usage: bench/predict.sh [STEPS]   (needs build/mmc and mpirun; REPS=3 runs a plan,
# the median of their medians is the measured figure)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
STEPS=${1:-60}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
MPI=(mpirun --oversubscribe --bind-to none)
"$MMC" calibrate -o cpu1.dev 2> /dev/null
"${MPI[@]}" -np 2 "$MMC" calibrate -o cpu2.dev 2> /dev/null
"${MPI[@]}" -np 4 "$MMC" calibrate -o cpu4.dev 2> /dev/null
for n in 1 2 4; do # what the model was given
  echo "cpu$n.dev: $(grep -E '^(fp32_tflops|vector_tflops|mem_bw_gbs|op_overhead_us|matmul_overhead_us|attention_overhead_us|intra_bw_gbs|intra_lat_us) ' "cpu$n.dev" |
    awk '{ printf "%s %.4g; ", $1, $3 }')"
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-30s %5s %12s %12s %8s\n" plan ranks "measured s" "predicted s" "ratio"
S=$ROOT/stdlib_models
REPS=${REPS:-3}
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
