#!/usr/bin/env bash
# One dp reduction a step under micro-batches (docs/accumulation.md):
# GPT2Tiny (B = 32) and bench/accum_gpt.mm's GPTMid (19M parameters, B = 16)
# under dp = 2 with micro_batches = 8 on 2 mpirun ranks (one OpenMP thread
# each), compiled with the deferral (the dp reductions once a step) and
# without it (MMC_TEST_NO_DEFER=1: once per micro-batch, as before), and
# deferred with every micro-batch sum made by a separate add after the
# weight-gradient matmul ("add": MMC_TEST_NO_FUSED_ACCUM=1, the program
# before the matmuls accumulated into the sums themselves): the
# median step time over steps 2..STEPS from the log's samples_per_s, and the
# dp gradient bytes a rank sends a step. A benchmark, not a test: on a
# shared 2-core machine the figures move with the load (printed).
# Usage: bench/accum.sh  (needs build/mmc; STEPS, default 8; MODES, default
# "per-mb add once")
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc} STEPS=${STEPS:-8} S="$ROOT/stdlib_models" T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
echo "cpu: $(lscpu | sed -n "s/^Model name: *//p"), $(getconf _NPROCESSORS_ONLN) CPUs, load $(cut -d" " -f1-3 /proc/loadavg)"
printf "%-9s %-9s %12s %16s\n" model reduce "step (ms)" "dp bytes/step"
for spec in "$S/gpt2.mm:GPT2Tiny:32" "$ROOT/bench/accum_gpt.mm:GPTMid:16"; do
  IFS=: read -r f model b <<< "$spec"
  for mode in ${MODES:-per-mb add once}; do
    env=()
    [ "$mode" = per-mb ] && env=(MMC_TEST_NO_DEFER=1)
    [ "$mode" = add ] && env=(MMC_TEST_NO_FUSED_ACCUM=1)
    env "${env[@]}" "$MMC" compile "$f" --model "$model" --set B="$b" --dp 2 --micro-batches 8 -o "$model.$mode"
    mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np 2 ./"$model.$mode" --steps "$STEPS" \
      --eval-batches 1 --quiet --log "$model.$mode.jsonl" > "$model.$mode.out"
    /usr/bin/python3 - "$model.$mode.jsonl" "$model" "$mode" "$b" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sps = [r["samples_per_s"] for r in rows if "samples_per_s" in r and r["step"] >= 2]
comm = [r for r in rows if "comm" in r][-1]["comm"]
dp = sum(v["bytes"] for k, v in comm["train"].items() if k.endswith(".dp")) / comm["steps"]
print("%-9s %-9s %12.1f %16d" % (sys.argv[2], sys.argv[3], 1e3 * int(sys.argv[4]) / statistics.median(sps), dp))
PY
  done
done
echo "load after: $(cut -d" " -f1-3 /proc/loadavg)"
