#!/usr/bin/env bash
# GPT2Tiny (B = 4, T = 32) training samples/s on this machine: the one-rank
# trainer (1 and 2 OpenMP threads), and under mpirun -np 2 with one thread
# per rank, tensor parallel (tp=2) and data parallel (dp=2; each rank 2 of
# the 4 rows).  Steady state: the samples/s between step 10 and the last
# step (the trainer's running average, differenced).  A benchmark, not a test.
# Usage: bench/parallel.sh [STEPS]   (needs build/mmc and mpirun)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
STEPS=${1:-300}
# The trainer picks its wait policy itself (active on an idle machine, where
# passive waiting made 2 threads 8x slower: 270 samples/s instead of 2000;
# passive on a busy one) and says so in its start line; --threads sets the
# count.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
sps() { # log B: steady-state samples/s
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
B = int(sys.argv[2])
a, b = rows[9], rows[-1]
t = b["step"] * B / b["samples_per_s"] - a["step"] * B / a["samples_per_s"]
print("%.1f" % ((b["step"] - a["step"]) * B / t))
PY
}
printf "%-24s %6s %12s\n" plan ranks "samples/s"
run() { # name ranks threads flags...
  local name=$1 np=$2 th=$3; shift 3
  "$MMC" compile "$ROOT/stdlib_models/gpt2.mm" --model GPT2Tiny "$@" -o "$name"
  if [ "$np" = 1 ]; then
    ./"$name" --threads "$th" --steps "$STEPS" --eval-batches 1 --quiet --log "$name.jsonl" > /dev/null
  else
    mpirun --oversubscribe -np "$np" ./"$name" --threads "$th" \
      --steps "$STEPS" --eval-batches 1 --quiet --log "$name.jsonl" > /dev/null
  fi
  printf "%-24s %6s %12s\n" "$name ($th thread/rank)" "$np" "$(sps "$name.jsonl" 4)"
}
run serial 1 1
run serial 1 2
run tp2 2 1 --tp 2
run dp2 2 1 --dp 2
