#!/usr/bin/env bash
# Hierarchical ZeRO (issue 31, item 3; docs/hzero.md): GPT2Tiny on 4 ranks
# as 2 node groups of 2 (dp = 4, zero_across = 1, ranks_per_node = 2) under
# mpirun -np 4, against the serial trainer and against the formula.
#  - losses equal the serial run's (1e-5 relative) and the final weights,
#    gathered by --save-weights, are within 1e-3 of their update
#    (tests/tools/close_runs.py);
#  - the trainer's counters (its metrics log's "comm" line over the
#    training steps) per level, with P the parameters (all stored split
#    over dp: each has a dim 4 divides), Psi their elements, N = 2 dp ranks
#    a node group, B the gradient buckets (bucket_mb 0.25 MiB, the
#    parameters in reverse order, as tests/mpi_counts.sh counts them), per
#    step, elements being the whole tensor of each call:
#      zero = 3: all_gather.dp_node  2P calls, 2 Psi (forward and backward)
#                all_gather.dp_cross  P calls, Psi / N (once per update)
#      zero = 1: all_gather.dp_node   P calls, Psi; dp_cross as above
#      reduce_scatter.dp_node B calls, Psi; reduce_scatter.dp_cross B, Psi / N
#      all_reduce.dp 4 one-element calls (the loss, the label count, the
#      gradient norm's two partial sums: as flat ZeRO), and nothing on
#      dp itself but those;
#  - `mmc plan --json`'s "hzero" levels give the same calls and elements a
#    step, and node copies of 4 Psi / N bytes a rank.
# The located errors (a node size that does not divide dp, zero_across
# without zero, ranks_per_node alone) are tests/diag/plan_hzero_*.mm.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
G="$S/gpt2.mm"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
STEPS=4; [ "$SAN" -eq 1 ] && STEPS=2

"$MMC" dump-ir "$G" --model GPT2Tiny --after lower | sed -n 's/^param @[^ ]* : f32\[\([0-9, ]*\)\].*/\1/p' > "$T/sizes"
"$MMC" compile "$G" --model GPT2Tiny -o "$T/serial" || bad "compile serial"
"$T/serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/init.st" > /dev/null || bad "serial init"
"$T/serial" --steps $STEPS --eval-batches 1 --quiet --log "$T/serial.jsonl" --save-weights "$T/serial.st" > /dev/null ||
  bad "serial run"

cell() { # name zero
  local name=$1 zero=$2 flags="--dp 4 --zero $2 --zero-across 1 --ranks-per-node 2"
  # shellcheck disable=SC2086
  "$MMC" plan "$G" --model GPT2Tiny $flags --json > "$T/$name.plan.json" || { bad "$name: plan"; return; }
  # shellcheck disable=SC2086
  "$MMC" compile "$G" --model GPT2Tiny $flags -o "$T/$name" || { bad "$name: compile"; return; }
  "${MPIRUN[@]}" 4 "$T/$name" --steps $STEPS --eval-batches 1 --log "$T/$name.jsonl" --save-weights "$T/$name.st" \
    > "$T/$name.out" 2>&1 || { bad "$name: mpirun"; tail -5 "$T/$name.out"; return; }
  grep -q '^placement: hierarchical ZeRO: 2 node groups of 2 dp ranks' "$T/$name.out" && ok ||
    bad "$name: no hierarchical ZeRO placement line"
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/close_runs.py" "$name" "$T/serial.jsonl" "$T/$name.jsonl" "$T/init.st" \
    "$T/serial.st" "$T/$name.st" "$G" GPT2Tiny && ok || bad "$name: differs from the serial run"
  /usr/bin/python3 - "$T" "$name" "$zero" "$STEPS" <<'PY' && ok || bad "$name: collectives per level"
import json, sys
t, name, zero, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sizes = []
for line in open(t + "/sizes"):
    n = 1
    for d in line.split(","):
        n *= int(d)
    sizes.append(n)
P, psi, N = len(sizes), sum(sizes), 2
cap, buckets, fill = int(0.25 * 1048576), 0, 0
for n in reversed(sizes):
    fill += 4 * n
    if fill >= cap:
        buckets, fill = buckets + 1, 0
buckets += fill > 0
want = {  # per step: (calls, elements)
    "all_gather.dp_node": ((2 if zero == 3 else 1) * P, (2 if zero == 3 else 1) * psi),
    "all_gather.dp_cross": (P, psi // N),
    "reduce_scatter.dp_node": (buckets, psi),
    "reduce_scatter.dp_cross": (buckets, psi // N),
    "all_reduce.dp": (4, 4),
}
rows = [json.loads(l) for l in open("%s/%s.jsonl" % (t, name))]
comm = [r["comm"] for r in rows if "comm" in r]
c = {k: v for k, v in comm[0]["train"].items() if k != "bytes"} if len(comm) == 1 else {}
good = True
for k, (calls, elems) in want.items():
    g = c.pop(k, {"calls": 0, "elems": 0})
    same = g["calls"] == calls * steps and g["elems"] == elems * steps
    good &= same
    print("%s %-24s counted %4d calls %8d elements over %d steps %s %d x (%d calls, %d elements)"
          % (name, k, g["calls"], g["elems"], steps, "==" if same else "!=", steps, calls, elems))
if c:
    print("%s: collectives not in the formula: %s" % (name, c)); good = False
plan = json.load(open("%s/%s.plan.json" % (t, name)))["hzero"]
for lv in plan["levels"]:
    k = "%s.%s" % (lv["kind"], lv["axis"])
    same = (lv["calls"], lv["elements"]) == want[k]
    good &= same
    print("%s plan %-24s %4d calls %8d elements a step %s" % (name, k, lv["calls"], lv["elements"], "ok" if same else "WRONG"))
good &= plan["node_copy_bytes"] == 4 * psi // N and plan["node_dp_ranks"] == N and plan["node_groups"] == 2
print("%s: P %d parameters, Psi %d, %d buckets; node copies %d bytes a rank (4 Psi / N = %d)"
      % (name, P, psi, buckets, plan["node_copy_bytes"], 4 * psi // N))
sys.exit(0 if good else 1)
PY
}
cell hzero3 3
[ "$SAN" -eq 0 ] && cell hzero1 1

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
