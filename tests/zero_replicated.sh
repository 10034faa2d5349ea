#!/usr/bin/env bash
# ZeRO and parameters dp divides no dim of (issue 32; docs/planner.md, "ZeRO
# and indivisible parameters"), in the plan: passes/zero.c pads such a
# parameter along dim 0 to a multiple of dp (its piece ceil(n0 / dp) rows)
# unless another axis splits dim 0; those stay whole on every dp rank and
# `mmc plan` counts them. Counts here come from the shard pass's param
# shapes and placements (`mmc dump-ir --after shard`, before zero):
#   - two Linears at tp = 2, dp = 3, zero = 3 (a column-parallel fc1 of
#     [10, 5], a loss head fc2 its vocabulary padded to 256 rows by tp): fc1's
#     two tensors (dim 0 split by tp) whole, reported in zero_replicated;
#     fc2's padded to 258 rows, 86 a rank; the param arena against the sum;
#   - GPT2Tiny at dp = 3 (dims 256 and 64: none divisible): nothing
#     reported, every tensor padded, the param arena the padded pieces'
#     bytes (each 64-byte aligned), the reduce-scatter's and gathers'
#     elements sent those of the padded tensors, zero_padded's padding
#     elements theirs (not listed as padded vocabularies); at dp = 2 the
#     arena halves;
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
  fc1 = Linear(5, 10)
  fc2 = Linear(10, 5)
  forward(x: f32[B, 5], y: i32[B]) -> loss { return cross_entropy(fc2(gelu(fc1(x))), y) }
  parallel { tp = 2; dp = 3; zero = 3 }
}
MM
G="$MMC_SOURCE_DIR/stdlib_models/gpt2.mm"
"$MMC" dump-ir "$T/two.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --after shard > "$T/two.ir" 2> "$T/e" &&
  "$MMC" plan "$T/two.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --json > "$T/two.json" 2>> "$T/e" &&
  "$MMC" plan "$T/two.mm" -I "$MMC_SOURCE_DIR/stdlib_models" > "$T/two.txt" 2>> "$T/e" &&
  "$MMC" dump-ir "$G" --model GPT2Tiny --set B=6 --dp 3 --after shard > "$T/g.ir" 2>> "$T/e" &&
  "$MMC" plan "$G" --model GPT2Tiny --set B=6 --dp 3 --zero 3 --json > "$T/g3.json" 2>> "$T/e" &&
  "$MMC" plan "$G" --model GPT2Tiny --set B=6 --dp 2 --zero 3 --json > "$T/g2.json" 2>> "$T/e" &&
  "$MMC" plan "$G" --model GPT2Tiny --set B=6 --json > "$T/g1.json" 2>> "$T/e" ||
  { echo "FAIL: mmc"; cat "$T/e"; exit 1; }
$PY - "$T" <<'PY' || fail=1
import json, re, sys
T = sys.argv[1]
errs = []
def params(path, tp):
    out = []
    for line in open(path):
        m = re.match(r"\s*param @(\S+) : f32\[([0-9, ]*)\]\{dp:B, cp:B, tp:([^}]*)\}(.*)", line)
        if not m or m.group(1).startswith("adamw."): continue
        shape = [int(x) for x in m.group(2).split(",")]
        t = re.match(r"S\((\d+)\)", m.group(3))
        out.append((m.group(1), shape, int(t.group(1)) if t else -1))
    return out
al = lambda b: (b + 63) // 64 * 64  # each tensor 64-byte aligned (passes/memplan.h)
def expect(name, ps, dp, tp, plan):
    whole, arena, elems = [], 0, 0
    for n, s, td in ps:
        loc = [x // (tp if d == td else 1) for d, x in enumerate(s)]
        size = 1
        for x in loc: size *= x
        if any(loc[d] % dp == 0 for d in range(len(s))):
            arena += al(4 * size // dp)                   # split along a dim dp divides
        elif td != 0:
            arena += al(4 * size // loc[0] * -(-loc[0] // dp))  # padded: ceil(n0 / dp) rows
        else:
            whole.append(n); elems += size; arena += al(4 * size)
    z = plan.get("zero_replicated")
    if whole and not z: errs.append(f"{name}: no zero_replicated, want {whole}")
    if not whole and z: errs.append(f"{name}: zero_replicated {z}, want none")
    if z:
        want = {"tensors": len(whole), "trainable_tensors": len(ps), "elements": elems,
                "param_bytes": 4 * elems, "first": whole[0]}
        for k, v in want.items():
            if z[k] != v: errs.append(f"{name}: zero_replicated.{k} = {z[k]}, want {v}")
    got = plan["by_role"]["param"]
    if got != arena: errs.append(f"{name}: param arena {got} bytes a rank, want {arena}")
    print(f"{name}: {len(whole)} of {len(ps)} parameters whole at dp = {dp}, param arena {got} bytes a rank (counted {arena})")
expect("Two", params(f"{T}/two.ir", 2), 3, 2, json.load(open(f"{T}/two.json")))
expect("GPT2Tiny", params(f"{T}/g.ir", 1), 3, 1, json.load(open(f"{T}/g3.json")))
# the collectives move the padded tensors: the gradients' reduce-scatter
# sends (dp - 1) / dp of the padded elements, ZeRO-3's gathers twice that
g = params(f"{T}/g.ir", 1)
import math
padded = sum(-(-s[0] // 3) * 3 * math.prod(s[1:]) for _, s, _ in g)
ct = {c["kind"]: c["sent_elements"] for c in json.load(open(f"{T}/g3.json"))["collective_totals"] if c["axis"] == "dp"}
if ct.get("reduce_scatter") != padded * 2 // 3 or ct.get("all_gather") != 2 * padded * 2 // 3:
    errs.append(f"GPT2Tiny dp = 3: collectives {ct}, want reduce_scatter {padded * 2 // 3}, all_gather {2 * padded * 2 // 3} elements sent")
print(f"GPT2Tiny dp = 3: {padded} padded elements; sent {ct}")
psi = sum(math.prod(s) for _, s, _ in g)
zp, g3 = json.load(open(f"{T}/g3.json")).get("zero_padded"), json.load(open(f"{T}/g3.json"))
if zp != {"tensors": 36, "padding_elements": padded - psi} or g3["padded_vocab"]:
    errs.append(f"GPT2Tiny dp = 3: zero_padded {zp}, padded_vocab {g3['padded_vocab']}; want 36 tensors, {padded - psi} elements, no vocabulary")
g1, g2 = json.load(open(f"{T}/g1.json")), json.load(open(f"{T}/g2.json"))
if "zero_replicated" in g2: errs.append("GPT2Tiny dp = 2: zero_replicated reported")
if g2["by_role"]["param"] * 2 != g1["by_role"]["param"]:
    errs.append(f"GPT2Tiny dp = 2: param arena {g2['by_role']['param']}, serial {g1['by_role']['param']}")
t = open(f"{T}/two.txt").read()
if not re.search(r"zero = 3 leaves 2 of 4 trainable parameters whole on every dp rank .*dp = 3 divides none of their dims and another axis splits their dim 0 \(no padding\), e\.g\. @fc1\.weight", t):
    errs.append("Two: the text line:\n" + t)
for e in errs: print("FAIL:", e)
sys.exit(1 if errs else 0)
PY
[ "$fail" = 0 ] && echo "zero_replicated: padded pieces and the parameters ZeRO leaves whole, as counted from their shapes"
exit $fail
