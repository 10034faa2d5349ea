#!/usr/bin/env bash
# ZeRO and parameters dp divides no dim of (issue 32; docs/planner.md, "ZeRO
# and indivisible parameters"): passes/zero.c leaves such a parameter whole
# on every dp rank, with its gradient (all-reduced) and optimizer state;
# `mmc plan` says how many and what they cost instead of printing a ZeRO
# plan that silently does not shard them.
#   - a model of two Linears at dp = 3, zero = 3: the parameters whose dims 3
#     divides none of (counted here from `mmc dump-ir --after lower`'s param
#     shapes) are the plan's zero_replicated tensors, elements and bytes; the
#     param arena is theirs whole plus a third of the rest;
#   - GPT2Tiny at dp = 3 (dims 256 and 64: none divisible): all 36 replicated,
#     the param arena the serial one; at dp = 2 nothing is reported and the
#     param arena halves;
#   - the text line names the count and an example.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3
fail=0
cat > "$T/two.mm" <<'MM'
import "nn.mm"
model Two {
  let B = 6
  fc1 = Linear(6, 8)
  fc2 = Linear(8, 5)
  forward(x: f32[B, 6], y: i32[B]) -> loss { return cross_entropy(fc2(gelu(fc1(x))), y) }
  parallel { dp = 3; zero = 3 }
}
MM
G="$MMC_SOURCE_DIR/stdlib_models/gpt2.mm"
"$MMC" dump-ir "$T/two.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --after lower > "$T/two.ir" 2> "$T/e" &&
  "$MMC" plan "$T/two.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --json > "$T/two.json" 2>> "$T/e" &&
  "$MMC" plan "$T/two.mm" -I "$MMC_SOURCE_DIR/stdlib_models" > "$T/two.txt" 2>> "$T/e" &&
  "$MMC" dump-ir "$G" --model GPT2Tiny --after lower > "$T/g.ir" 2>> "$T/e" &&
  "$MMC" plan "$G" --model GPT2Tiny --set B=6 --dp 3 --zero 3 --json > "$T/g3.json" 2>> "$T/e" &&
  "$MMC" plan "$G" --model GPT2Tiny --set B=6 --dp 2 --zero 3 --json > "$T/g2.json" 2>> "$T/e" &&
  "$MMC" plan "$G" --model GPT2Tiny --set B=6 --json > "$T/g1.json" 2>> "$T/e" ||
  { echo "FAIL: mmc"; cat "$T/e"; exit 1; }
$PY - "$T" <<'PY' || fail=1
import json, re, sys
T = sys.argv[1]
errs = []
def params(path):
    out = []
    for line in open(path):
        m = re.match(r"\s*param @(\S+) : f32\[([0-9, ]*)\]", line)
        if m: out.append((m.group(1), [int(x) for x in m.group(2).split(",")]))
    return out
def numel(s):
    n = 1
    for x in s: n *= x
    return n
def expect(name, ps, dp, plan):
    whole = [(n, s) for n, s in ps if not any(d % dp == 0 for d in s)]
    split = [(n, s) for n, s in ps if any(d % dp == 0 for d in s)]
    z = plan.get("zero_replicated")
    if not z:
        errs.append(f"{name}: no zero_replicated, want {len(whole)} tensors"); return
    want = {"tensors": len(whole), "trainable_tensors": len(ps),
            "elements": sum(numel(s) for _, s in whole), "param_bytes": 4 * sum(numel(s) for _, s in whole)}
    for k, v in want.items():
        if z[k] != v: errs.append(f"{name}: zero_replicated.{k} = {z[k]}, want {v}")
    arena = plan["by_role"]["param"]
    al = lambda b: (b + 63) // 64 * 64  # each tensor 64-byte aligned (passes/memplan.h)
    want_arena = sum(al(4 * numel(s)) for _, s in whole) + sum(al(4 * numel(s) // dp) for _, s in split)
    if arena != want_arena: errs.append(f"{name}: param arena {arena}, want {want_arena}")
    print(f"{name}: {len(whole)} of {len(ps)} parameters whole at dp = {dp}, param arena {arena} bytes")
two = params(f"{T}/two.ir")
expect("Two", two, 3, json.load(open(f"{T}/two.json")))
if not 0 < json.load(open(f"{T}/two.json"))["zero_replicated"]["tensors"] < len(two):
    errs.append("Two: want some parameters split and some whole")
g = params(f"{T}/g.ir")
expect("GPT2Tiny", g, 3, json.load(open(f"{T}/g3.json")))
g1, g2 = json.load(open(f"{T}/g1.json")), json.load(open(f"{T}/g2.json"))
if "zero_replicated" in g2: errs.append("GPT2Tiny dp = 2: zero_replicated reported")
if g2["by_role"]["param"] * 2 != g1["by_role"]["param"]:
    errs.append(f"GPT2Tiny dp = 2: param arena {g2['by_role']['param']}, serial {g1['by_role']['param']}")
t = open(f"{T}/two.txt").read()
if not re.search(r"zero = 3 leaves 3 of 4 trainable parameters whole on every dp rank .*dp = 3 divides none of their dims, e\.g\. @fc1\.bias", t):
    errs.append("Two: the text line:\n" + t)
for e in errs: print("FAIL:", e)
sys.exit(1 if errs else 0)
PY
[ "$fail" = 0 ] && echo "zero_replicated: the plan reports the parameters ZeRO leaves whole, counted from their shapes"
exit $fail
