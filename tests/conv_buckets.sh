#!/usr/bin/env bash
# Varying tile counts done by tile pools, buckets and encoder balance
# (docs/architecture.md "Data", docs/conversations.md "Tile pools, buckets
# and encoder balance"), on the 200 samples of tests/conv_ref/make.py (0-12
# tiles a sample):
#  - InternVL2TinyConvPool compiled with --tile-buckets 4,8 (the model
#    at K = 4 and 8 linked into the trainer beside its own K = 12) gives the
#    losses of InternVL2TinyConv, whose every step encodes B x 12 tiles
#    (1e-5), serially and under dp = 2 with the encoder balance on, and
#    runs steps on buckets smaller than 12 (its report of steps by bucket);
#  - the balance: each dp rank's tiles a step (the trainer's report) equal
#    a Python reference's greedy dealing of the same batches (each batch's
#    tile counts read from the serial K-slot run's --dump-inputs); with
#    --no-tile-balance they are the batch-order halves;
#  - mmc plan names the pool; bad --tile-buckets values and a
#    --no-tile-balance that would change nothing are refused by name.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
hf_script tokenizers
R="$MMC_SOURCE_DIR/tests/conv_ref"
cd "$T" || exit 1
"$PY" "$R/make.py" "$T" > /dev/null || { echo "FAIL the fixtures"; echo "0 passed, 1 failed"; exit 1; }
M="$MMC_SOURCE_DIR/stdlib_models/internvl2.mm"
"$MMC" compile "$M" --model InternVL2TinyConv -o slots > /dev/null &&
  "$MMC" compile "$M" --model InternVL2TinyConvPool --tile-buckets 4,8 -o pool > /dev/null &&
  "$MMC" compile "$M" --model InternVL2TinyConvPool --tile-buckets 4,8 --dp 2 -o pool2 > /dev/null ||
  { echo "FAIL compile"; echo "0 passed, 1 failed"; exit 1; }
STEPS=12
[ "$SAN" = 1 ] && STEPS=4 # ASan+UBSan: fewer steps
D=(--data conv.jsonl --images img --tokenizer tok.json --max-tiles 2 --eval-batches 1 --steps $STEPS)
losses() { "$PY" -c "
import json, sys
print(' '.join('%.7f' % json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l and 'eval' not in l))" "$1"; }
close() { "$PY" -c "
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
sys.exit(0 if len(a) == len(b) > 0 and max(abs(x - y) for x, y in zip(a, b)) <= 1e-5 else 1)" "$1" "$2"; }

# ---- the K-slot model, serial (its inputs dumped: the batches' tile counts) ----
./slots "${D[@]}" --quiet --log slots.jsonl --dump-inputs dump > slots.out 2>&1 || no "slots: $(tail -2 slots.out)"
ref=$(losses slots.jsonl)

# ---- the pool with buckets, serial ----
./pool "${D[@]}" --log pool.jsonl > pool.out 2>&1 || no "pool: $(tail -2 pool.out)"
a=$(losses pool.jsonl)
if close "$ref" "$a" && [ "$(echo "$a" | wc -w)" = $STEPS ]; then ok; else no "pool and K-slot losses differ: $a / $ref"; fi
# every step on a bucket, some below K = 12
"$PY" - pool.out $STEPS <<'EOF' && ok || no "the buckets' steps: $(grep 'by tile bucket' pool.out)"
import re, sys
line = [l for l in open(sys.argv[1]) if "steps by tile bucket" in l][0]
n = {int(k): int(v) for k, v in re.findall(r"K=(\d+) (\d+)", line)}
sys.exit(0 if sorted(n) == [4, 8, 12] and sum(n.values()) == int(sys.argv[2]) and n[12] < sum(n.values()) else 1)
EOF
grep -q "tile buckets K = 4, 8, 12" pool.out && ok || no "no bucket list in the start line: $(grep conversations pool.out)"

# ---- dp = 2: balanced, and not ----
for v in bal nobal; do
  extra=()
  [ $v = nobal ] && extra=(--no-tile-balance)
  timeout 300 mpirun --oversubscribe -x OMPI_ALLOW_RUN_AS_ROOT -x LSAN_OPTIONS -np 2 ./pool2 "${D[@]}" \
    "${extra[@]}" --log $v.jsonl > $v.out 2>&1 || no "dp=2 $v: $(tail -3 $v.out)"
  b=$(losses $v.jsonl)
  if close "$ref" "$b" && [ "$(echo "$b" | wc -w)" = $STEPS ]; then ok; else no "dp=2 $v losses differ from the K-slot run's: $b / $ref"; fi
done
# each rank's tiles a step against the reference dealing of the dumped batches
"$PY" - dump $STEPS bal.out nobal.out <<'EOF'
import json, re, struct, sys
dump, steps = sys.argv[1], int(sys.argv[2])
def tiles_of(step):  # each row's non-zero tiles in the K-slot model's pixels
    raw = open("%s/step-%06d.safetensors" % (dump, step), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])["pixels"]
    B, K = h["shape"][0], h["shape"][1]
    a, _ = h["data_offsets"]
    tile = 3 * 28 * 28 * 4
    base = 8 + n + a
    return [sum(1 for k in range(K) if raw[base + (r * K + k) * tile:base + (r * K + k + 1) * tile].strip(b"\0"))
            for r in range(B)]
def deal(t, dp):  # most tiles first (ties: the earlier row), to the least-loaded rank with room
    per, load, rows = len(t) // dp, [0] * dp, [[] for _ in range(dp)]
    for r in sorted(range(len(t)), key=lambda r: (-t[r], r)):
        best = min((q for q in range(dp) if len(rows[q]) < per), key=lambda q: (load[q], q))
        rows[best].append(r)
        load[best] += t[r]
    return load
def report(path):
    out = {}
    for l in open(path):
        m = re.search(r"rank (\d+) of dp 2: tiles a step ([\d ]+)", l)
        if m:
            out[int(m.group(1))] = list(map(int, m.group(2).split()))
    return out
bal, nobal = report(sys.argv[3]), report(sys.argv[4])
bad = 0
for s in range(1, steps + 1):
    t = tiles_of(s)
    want_bal, want_no = deal(t, 2), [sum(t[:len(t) // 2]), sum(t[len(t) // 2:])]
    got_bal = [bal.get(q, [None] * steps)[s - 1] for q in (0, 1)]
    got_no = [nobal.get(q, [None] * steps)[s - 1] for q in (0, 1)]
    if got_bal != want_bal or got_no != want_no:
        print("step %d: tiles %s: balanced %s (reference %s), unbalanced %s (reference %s)" % (s, t, got_bal, want_bal, got_no, want_no))
        bad += 1
spread = lambda rep: sum(abs(rep[0][i] - rep[1][i]) for i in range(steps))
print("balanced spread %d, unbalanced %d" % (spread(bal), spread(nobal)))
sys.exit(1 if bad or spread(bal) > spread(nobal) else 0)
EOF
[ $? -eq 0 ] && ok || no "the ranks' tiles a step against the reference dealing"

# ---- mmc plan, and refusals ----
"$MMC" plan "$M" --model InternVL2TinyConvPool > plan.out 2>&1
grep -q "tiles  12 a row in the pool, B x 12 in all (tiles f32\[B, 12, 3, 28, 28\]" plan.out && ok ||
  no "mmc plan: no pool line: $(grep tiles plan.out)"
refuse() { # what message args...
  local what=$1 msg=$2
  shift 2
  "$@" > r.out 2>&1
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$msg" r.out; then ok; else no "$what: exit $rc, $(head -c 300 r.out)"; fi
}
refuse "a bucket at K" "--tile-buckets '4,12': up to 8 ascending tile counts from 1 to below the model's K = 12" \
  "$MMC" compile "$M" --model InternVL2TinyConvPool --tile-buckets 4,12 -o x
refuse "buckets descending" "--tile-buckets '6,3'" "$MMC" compile "$M" --model InternVL2TinyConvPool --tile-buckets 6,3 -o x
refuse "no tiles input" "--tile-buckets: model InternVL2Tiny has no input pixels or tiles f32[B, K, 3, S, S]" \
  "$MMC" compile "$M" --model InternVL2Tiny --tile-buckets 2 -o x
refuse "--emit ir" "--tile-buckets: --emit ir prints the model's own IR only" \
  "$MMC" compile "$M" --model InternVL2TinyConvPool --tile-buckets 4 --emit ir -o x
[ ! -e x ] && ok || no "a refused compile left its output"
refuse "--no-tile-balance serially" "--no-tile-balance: model InternVL2TinyConvPool has no encoder balance to turn off" \
  ./pool "${D[@]}" --no-tile-balance

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
