#!/usr/bin/env bash
# The planner against published figures (issue 32; docs/planner.md):
# Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
# GPU Clusters Using Megatron-LM", SC21), Table 1: GPT models of 1.7 B to
# 1 T parameters on 32 to 3,072 A100 80 GB (DGX A100 nodes, NVLink3, 8 HDR
# InfiniBand adapters a node), sequence 2,048, vocabulary 51,200, bf16 mixed
# precision, full activation recomputation.
#   - each row is written as a .mm model (stdlib GPT with the row's heads,
#     hidden size and layers) with the row's tp, pp and global batch; dp =
#     GPUs / (tp pp) from --devices; one sample a rank a micro-batch, so
#     micro_batches = batch / dp (an assumption: the table does not give the
#     micro-batch size; the paper uses 1 or 2 at scale); the non-interleaved
#     1F1B schedule;
#   - `mmc plan --device a100 --devices N --json` predicts the step; the
#     test counts TFLOP/s per GPU the paper's way, 96 B s l h^2 (1 + s/(6h) +
#     V/(16 l h)) FLOPs a step (recompute's extra forward included) over the
#     step and the GPUs, and asserts it within 15% of the published figure
#     for every row (the weight-gradient matmuls accumulate into the
#     micro-batches' sums themselves, as Megatron's GEMMs do: without that,
#     the separate add of the sums put 7.5 B and 18.4 B at 0.835 and 0.846;
#     docs/accumulation.md);
#   - the 1 T row plans in a few seconds (the whole script stays < 20 s);
#   - `--search` on the first row's 32 GPUs, the model given without the
#     published plan, ranks first a plan predicted at least as fast as the
#     published one and explains the ranking (against the file's default
#     plan); the other rows' searches take minutes: bench/table1_search.sh.
# Nothing here is fitted to the rows: the cost model's figures are the
# device file's (devices/a100.dev, each with its source).
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3
# params (B), heads, hidden, layers, tp, pp, GPUs, global batch, published TFLOP/s per GPU
cat > "$T/table1.txt" <<'TAB'
1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008.0 160 25600 128 8 64 3072 3072 163
TAB
fail=0
if [ "$SAN" = 1 ]; then
  # The debug build's placement check refuses dp > 1 under bf16 (a fused
  # embedding's gradient on dp: "no sharding of fused explains its
  # placements", main's own ASan build too), so under ASan the first row is
  # only planned in fp32 and its prediction read; the ratios are release's.
  read -r P a h l t p n B pub < "$T/table1.txt"
  printf 'import "gpt2.mm"\nmodel Row {\n  let B = %s\n  let T = 2048\n  gpt = GPT(vocab = 51200, ctx = 2048, dim = %s, depth = %s, heads = %s)\n  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }\n  parallel { micro_batches = 16; recompute = full }\n}\n' "$B" "$h" "$l" "$a" > "$T/san.mm"
  "$MMC" plan "$T/san.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --device a100 --devices "$n" --json > "$T/san.json" 2> "$T/e" ||
    { echo "FAIL: row $P B in fp32 under ASan"; cat "$T/e"; exit 1; }
  $PY -c "import json,sys; p=json.load(open('$T/san.json'))['predicted']; sys.exit(0 if p['step_s'] > 0 and p['devices'] == $n else 1)" ||
    { echo "FAIL: no prediction under ASan"; exit 1; }
  echo "planner_table1: ASan: row $P B planned in fp32 (the ratios are checked in release)"
  exit 0
fi
while read -r P a h l t p n B pub; do
  d=$((n / (t * p)))
  cat > "$T/row$P.mm" <<MM
import "gpt2.mm"
model Row {
  let B = $B
  let T = 2048
  gpt = GPT(vocab = 51200, ctx = 2048, dim = $h, depth = $l, heads = $a)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  train {
    precision = bf16
    optimizer = adamw(lr = 1e-4, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
  }
  parallel { tp = $t; pp = $p; micro_batches = $((B / d)); recompute = full }
}
MM
  if ! "$MMC" plan "$T/row$P.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --device a100 --devices "$n" \
      --json > "$T/row$P.json" 2> "$T/e"; then
    echo "FAIL: row $P B: mmc plan"; cat "$T/e"; fail=$((fail + 1)); continue
  fi
  $PY - "$T/row$P.json" "$P" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$pub" <<'PY' || fail=$((fail + 1))
import json, sys
p = json.load(open(sys.argv[1]))["predicted"]
P = sys.argv[2]
a, h, l, t, pp, n, B, pub = (float(x) for x in sys.argv[3:])
s, V = 2048, 51200
flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
tf = flops / p["step_s"] / n / 1e12
b = p["breakdown"]
ok = abs(tf / pub - 1) <= 0.15 and p["devices"] == n
print(f"{'ok  ' if ok else 'FAIL'} {P:>6} B: predicted {tf:6.1f} TFLOP/s per GPU, published {pub:.0f}, "
      f"ratio {tf / pub:.3f} (step {p['step_s']:.4g} s: compute {b['compute_s']:.4g}, exposed "
      f"comm {b['exposed_comm_s']:.4g}, bubble {b['bubble_s']:.4g}, optimizer {b['optimizer_s']:.3g})")
sys.exit(0 if ok else 1)
PY
done < "$T/table1.txt" | tee "$T/rows.txt"
fail=$((fail + $(grep -c '^FAIL' "$T/rows.txt")))
rows=$(grep -c '^ok  ' "$T/rows.txt")
[ "$rows" = 10 ] || { echo "FAIL: $rows of 10 rows within 15%"; fail=$((fail + 1)); }
# --search on the first row's 32 GPUs: the best plan predicts the published
# plan's step or faster, and the ranking is explained against it
if [ "$SAN" = 0 ]; then
  # the model without the published plan (no parallel section): the search
  # must find a plan at least as fast on its own
  sed '/^  parallel/d' "$T/row1.7.mm" > "$T/free.mm"
  "$MMC" plan "$T/free.mm" -I "$MMC_SOURCE_DIR/stdlib_models" --device a100 --devices 32 --search \
    > "$T/s.txt" 2> "$T/e" || { echo "FAIL: --search on 32 GPUs"; cat "$T/e"; fail=$((fail + 1)); }
  $PY - "$T/s.txt" "$T/row1.7.json" <<'PY' || fail=$((fail + 1))
import json, re, sys
t = open(sys.argv[1]).read()
pub = json.load(open(sys.argv[2]))["predicted"]["step_s"]
best = float(re.search(r"^#1  step (\S+) s", t, re.M).group(1))
errs = []
if best > pub * (1 + 1e-6): errs.append(f"--search's best {best} s is slower than the published plan's {pub} s")
# the file's own plan (no recompute, the whole batch at once) holds 127 GB
if not re.search(r"^  #1: step \S+ s = compute \S+ \+ exposed communication", t, re.M):
    errs.append("no breakdown of #1")
if not re.search(r"the file's plan is not ranked: it does not fit the device's memory", t):
    errs.append("the explanation does not say why the file's own plan is not ranked")
if not re.search(r"^  #1 changes: \S", t, re.M): errs.append("no list of the settings #1 changes")
for e in errs: print("FAIL:", e)
print("search on 32 GPUs:", re.search(r"^#1 .*\n.*", t, re.M).group(0))
sys.exit(1 if errs else 0)
PY
fi
[ "$fail" = 0 ] && echo "planner_table1: every row within 15% of the published TFLOP/s"
exit $((fail > 0))
