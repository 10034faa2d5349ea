#!/usr/bin/env bash
# Pipeline throughput (issue 11): GPT2Tiny at a global batch of B = 16
# samples, serial (one step of 16) and pp = 2 under 1F1B and ZB-H1 with
# m = 8 micro-batches of 2, each on real mpirun ranks with one OpenMP thread
# per rank. Prints samples/s (median over the steps after the first) and,
# from the trainer's --trace (Chrome trace JSON), the measured bubble per
# step: (p x step time - sum of the ranks' compute time) / sum of compute,
# the simulator's definition (mmc plan prints the simulated one beside it).
# A benchmark, not a test: on a shared 2-core machine the figures move with
# the load. Usage: bench/pipeline.sh  (needs build/mmc; STEPS, default 30)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
STEPS=${STEPS:-30}
S="$ROOT/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np)
echo "cpu: $(lscpu | sed -n "s/^Model name: *//p"), $(getconf _NPROCESSORS_ONLN) CPUs, load $(cut -d" " -f1-3 /proc/loadavg)"
run() { # name ranks flags...
  local name=$1 np=$2; shift 2
  "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --set B=16 "$@" -o "$name"
  [ "$np" = 1 ] && ./"$name" --batch 16 --steps "$STEPS" --eval-batches 1 --quiet --log "$name.jsonl" --trace "$name.json" > /dev/null \
                || "${MPIRUN[@]}" "$np" ./"$name" --batch 16 --steps "$STEPS" --eval-batches 1 --quiet --log "$name.jsonl" --trace "$name.json" > /dev/null
  [ "$np" = 1 ] || "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --set B=16 "$@" | grep "simulated" | sed "s/^ */$name: /"
  /usr/bin/python3 - "$name" "$np" <<'PY'
import json, statistics, sys
name, p = sys.argv[1], int(sys.argv[2])
log = [json.loads(l) for l in open(name + ".jsonl") if '"loss"' in l]
ev = [e for e in json.load(open(name + ".json"))["traceEvents"] if e.get("ph") == "X"]
# steps: the update events end each one (the serial step is one event)
ends = sorted(e["ts"] + e["dur"] for e in ev if e["cat"] in ("update", "step") and e["tid"] == 0)
comp = [e for e in ev if e["cat"] in ("forward", "backward", "step")]
bub, times = [], []
for a, b in zip(ends[1:], ends[2:]):  # steps after the first
    busy = sum(min(e["ts"] + e["dur"], b) - max(e["ts"], a) for e in comp if e["ts"] < b and e["ts"] + e["dur"] > a)
    times.append((b - a) / 1e6)
    bub.append((p * (b - a) - busy) / busy)
sps = 16 / statistics.median(times)
print("%-10s %d rank(s): %7.1f samples/s (median step %.2f ms over %d steps)%s"
      % (name, p, sps, 1e3 * statistics.median(times), len(times),
         ", measured bubble %.3f" % statistics.median(bub) if p > 1 else ""))
PY
}
run serial 1
run pp2.1f1b 2 --pp 2 --micro-batches 8 --schedule 1f1b
run pp2.zbh1 2 --pp 2 --micro-batches 8 --schedule zbh1
