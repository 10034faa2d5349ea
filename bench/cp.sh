#!/usr/bin/env bash
# Context parallel at a long sequence: samples/s of bench/cp_long.mm (a
# small GPT, 2 layers, width 128, 8 heads, 2,048 tokens, batch 2) serial
# (2 OpenMP threads) against cp = 2 Ulysses and cp = 2 ring (2 ranks of 1
# thread each), ROUNDS alternating rounds of STEPS steps; the first step of
# each run is left out of the rate. For the ring, from its --trace (Chrome
# trace JSON): every "ring_shift" event (a K/V or dK/dV shift, from posting
# its send and receive to both done) and "ring_wait" event (the part of it
# the rank spent blocked in the wait rather than computing the block), both
# ranks, all steps: hidden fraction = 1 - sum(ring_wait) / sum(ring_shift);
# and the trainer's own "ring shifts" line (the same split from its timers).
# Prints figures; never fails on speed.
#   bench/cp.sh [build dir]    (STEPS=6 ROUNDS=2 by default)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
MMC=$B/mmc
STEPS=${STEPS:-6}
ROUNDS=${ROUNDS:-2}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
I=(-I "$HERE/../stdlib_models" --model GPTLong)
"$MMC" compile "$HERE/cp_long.mm" "${I[@]}" -o "$T/serial" || exit 1
"$MMC" compile "$HERE/cp_long.mm" "${I[@]}" --cp 2 --cp-kind ulysses -o "$T/ulysses" || exit 1
"$MMC" compile "$HERE/cp_long.mm" "${I[@]}" --cp 2 --cp-kind ring -o "$T/ring" || exit 1
rate() { # jsonl: mean samples/s of the steps after the first
  /usr/bin/python3 -c '
import json, sys
r = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if "\"samples_per_s\"" in l][1:]
print("%.3f" % (sum(r) / len(r)) if r else "nan")' "$1"
}
lscpu | sed -n 's/^Model name: *//p'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  "$T/serial" --steps "$STEPS" --eval-batches 1 --quiet --threads 2 --log "$T/s$round.jsonl" > /dev/null
  timeout 900 mpirun --oversubscribe -np 2 "$T/ulysses" --steps "$STEPS" --eval-batches 1 --quiet --threads 1 \
    --log "$T/u$round.jsonl" > "$T/u$round.out" 2>&1
  timeout 900 mpirun --oversubscribe -np 2 "$T/ring" --steps "$STEPS" --eval-batches 1 --quiet --threads 1 \
    --log "$T/r$round.jsonl" --trace "$T/r$round.trace.json" > "$T/r$round.out" 2>&1
  echo "round $round: samples/s serial $(rate "$T/s$round.jsonl"), cp=2 ulysses $(rate "$T/u$round.jsonl"), cp=2 ring $(rate "$T/r$round.jsonl")"
  sed -n 's/^ring shifts: \([0-9]*\), \([0-9.]*\) ms from start to wait (computing), \([0-9.]*\) ms blocked.*/\1 \2 \3/p' "$T/r$round.out" |
    awk '{printf "  ring (trainer timers, rank 0): %d shifts, %.1f ms computing while in flight, %.1f ms blocked: hidden fraction %.2f\n", $1, $2, $3, $2 / ($2 + $3)}'
  /usr/bin/python3 - "$T/r$round.trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
for tid in sorted({e["tid"] for e in ev}) + [None]:
    mine = [e for e in ev if tid is None or e["tid"] == tid]
    shift = [e["dur"] for e in mine if e["name"] == "ring_shift"]
    wait = sum(e["dur"] for e in mine if e["name"] == "ring_wait")
    if shift:
        print("  ring (--trace, %s): %d shifts, %.1f ms in flight, %.1f ms of it blocked in waits: hidden fraction %.2f"
              % ("rank %d" % tid if tid is not None else "both ranks", len(shift), sum(shift) / 1e3,
                 wait / 1e3, 1 - wait / sum(shift)))
PY
done
