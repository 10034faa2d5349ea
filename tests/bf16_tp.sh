#!/usr/bin/env bash
# Tensor parallelism's collectives under precision = bf16 move bf16, as
# Megatron-LM's do (docs/bf16-tp.md): the row-parallel linears' partial
# products are all-reduced (sp: reduce-scattered) before their cast to f32,
# the column-parallel linears' input gradients likewise in the backward, and
# sp's all-gathers move the bf16 casts; what is not a product (the
# vocabulary-parallel embedding's output and its gradient, the replicated
# weights' gradients, the cross entropy's statistics) stays f32.
# GPT2Tiny (L = 2, s = 32, b = 4, h = 64), 10 steps, real mpirun:
# 1. the trainers' collective counters (the "comm" line of --log), per
#    phase and kind, against counts from the model's sizes: calls and
#    elements as under fp32, bytes 2 per element for the activations'
#    collectives and 4 for the rest (tp = 2 and tp = 2 + sp); the fp32
#    trainers' bytes 4 per element; the bf16 trainers' tp bytes printed
#    against the fp32 ones. `mmc plan --json` gives the same bytes per
#    phase (the plan lists no cross entropy statistics: its kernel's).
# 2. losses of tp = 2, tp = 2 + sp (2 ranks) and tp = 4 (4 ranks) within
#    5e-4 relative of the serial bf16 trainer's. Serial rounds a
#    row-parallel output once (the whole product); tp = n rounds each of the
#    n partial products and then each of the n - 1 pairwise sums of the
#    all-reduce: every element is off by at most about n roundings of 2^-9
#    of its partials' magnitude, errors of either sign that the loss (a mean
#    over 128 tokens after two layers) averages; measured 2.5e-5 to 4.1e-5,
#    f32-wire all-reduces of the same bf16 partials 3.3e-5 (docs/bf16-tp.md).
#    5e-4 is a quarter of one bf16 rounding of the loss itself.
# 3. Narayanan et al.'s 18.4 B row (tp = 8; tests/tools/table1.sh) planned
#    with and without precision = bf16: the same tp all-reduces, each
#    sending exactly half fp32's bytes but the embedding's (f32 in both),
#    and the tp total at most 0.51 of fp32's.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
export OMPI_MCA_btl_vader_single_copy_mechanism=none
S="$MMC_SOURCE_DIR/stdlib_models"
PY=/usr/bin/python3
STEPS=10
[ "$SAN" = 1 ] && STEPS=3

train() { # name np flags...
  local name=$1 np=$2
  shift 2
  "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny "$@" -o "$T/$name" || { bad "$name: compile"; return 1; }
  if [ "$np" = 1 ]; then
    "$T/$name" --steps $STEPS --eval-batches 1 --quiet --log "$T/$name.jsonl" > "$T/$name.out" 2>&1
  else
    "${MPIRUN[@]}" "$np" "$T/$name" --steps $STEPS --eval-batches 1 --quiet \
      --log "$T/$name.jsonl" > "$T/$name.out" 2>&1
  fi || { bad "$name: run"; tail -5 "$T/$name.out"; return 1; }
}

train ser16 1 --precision bf16
for plan in tp sp; do
  flags="--tp 2"
  [ $plan = sp ] && flags="--tp 2 --sp"
  # shellcheck disable=SC2086
  train ${plan}16 2 --precision bf16 $flags
  # shellcheck disable=SC2086
  train ${plan}32 2 $flags
  # shellcheck disable=SC2086
  "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --precision bf16 $flags --json > "$T/${plan}16.plan" ||
    bad "$plan: mmc plan"
done
train tp4_16 4 --precision bf16 --tp 4

# ---- 1. bytes
for plan in tp sp; do
  $PY - "$T" "$plan" "$STEPS" <<'PY' && ok || bad "$plan: collective bytes"
import json, sys
T, plan, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
L, s, b, h, n = 2, 32, 4, 64, 2
a, r = s * b * h, b * s * (n + 1)  # an activation; the cross entropy's statistics
# per phase and kind: (bf16 elements, f32 elements) a rank sends a step under
# bf16, as the runtime counts them: an all-reduce's buffer 2(n-1)/n, a gather's
# or a reduce-scatter's full tensor (n-1)/n (n = 2: 1 and 1/2)
if plan == "tp":
    want = {
        ("train_forward", "all_reduce.tp"): (2 * L * a, a + r),  # row-parallel outputs; embedding, CE
        ("train_backward", "all_reduce.tp"): ((2 * L + 1) * a, 0),  # column-parallel input gradients, head's
        ("train_update", "all_reduce.tp"): (0, 1),  # the gradient norm
    }
else:
    want = {
        ("train_forward", "all_gather.tp"): ((2 * L + 1) * a // 2, 0),  # the bf16 casts before q/fc1/head
        ("train_forward", "reduce_scatter.tp"): (2 * L * a // 2, a // 2),  # row-parallel; the embedding
        ("train_forward", "all_reduce.tp"): (0, r),
        # the forward's gathers again (the backward re-gathers what it reads
        # rather than keep the gathered tensor, as Megatron does), then the
        # gathers of the row-parallel outputs' gradients; the wte, wpe gradients
        ("train_backward", "all_gather.tp"): ((4 * L + 1) * a // 2, (a + s * h) // 2),
        ("train_backward", "reduce_scatter.tp"): ((2 * L + 1) * a // 2, 0),
        ("train_backward", "all_reduce.tp"): (0, (2 * L + 1) * 2 * h + 2 * L * h),  # norms, biases
        ("train_update", "all_reduce.tp"): (0, 1),
    }
def comm(name):
    rows = [json.loads(l) for l in open(f"{T}/{name}.jsonl")]
    c = [x["comm"] for x in rows if "comm" in x]
    assert len(c) == 1 and c[0]["steps"] == steps, f"{name}: one comm line for {steps} steps"
    return c[0]
c16, c32 = comm(plan + "16"), comm(plan + "32")
errs, tot16, tot32 = [], 0, 0
for c, bf in ((c16, True), (c32, False)):
    for ph in ("train_forward", "train_backward", "train_update"):
        got = {k: v for k, v in c[ph].items() if k != "bytes"}
        keys = {k for (p, k) in want if p == ph}
        if set(got) != keys:
            errs.append(f"{'bf16' if bf else 'fp32'} {ph}: kinds {sorted(got)}, want {sorted(keys)}")
        for k in keys:
            e16, e32 = want[(ph, k)]
            wb = (2 * e16 + 4 * e32 if bf else 4 * (e16 + e32)) * steps
            gb = got.get(k, {}).get("bytes", -1)
            if gb != wb:
                errs.append(f"{'bf16' if bf else 'fp32'} {ph} {k}: {gb} bytes in {steps} steps, want {wb}")
            if bf: tot16 += gb
            else: tot32 += gb
# the plan's bytes a step, per phase and kind (it lists no CE statistics)
p = json.load(open(f"{T}/{plan}16.plan"))
pb = {}
for x in p["collectives"]:
    if x["axis"] == "tp":
        key = ("train_" + x["phase"], x["kind"] + ".tp")
        pb[key] = pb.get(key, 0) + x["sent_bytes"]
for (ph, k), (e16, e32) in want.items():
    w = 2 * e16 + 4 * e32 - (4 * r if (ph, k) == ("train_forward", "all_reduce.tp") else 0)
    w -= 4 if ph == "train_update" else 0
    if pb.get((ph, k), 0) != w:
        errs.append(f"mmc plan --json {ph} {k}: {pb.get((ph, k), 0)} bytes a step, want {w}")
for e in errs: print("FAIL:", e)
print(f"GPT2Tiny --tp 2{' --sp' if plan == 'sp' else ''}: tp bytes a rank sends in {steps} steps, bf16 {tot16}, "
      f"fp32 {tot32}: {tot16 / tot32:.3f}; the activations' collectives 2 bytes an element, "
      f"the embedding's, the replicated weights' gradients and the CE statistics 4")
sys.exit(1 if errs else 0)
PY
done

# ---- 2. losses against serial bf16
for name in tp16 sp16 tp4_16; do
  $PY - "$T/$name.jsonl" "$T/ser16.jsonl" "$name" <<'PY' && ok || bad "$name: losses"
import json, sys
la, lb = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:3])
if len(la) != len(lb) or not la: sys.exit(f"FAIL: {sys.argv[3]}: {len(la)} and {len(lb)} losses")
worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
print(f"{sys.argv[3]} against serial bf16: {len(la)} losses, largest relative difference {worst:.2e} (tolerance 5e-4)")
sys.exit(0 if worst <= 5e-4 else 1)
PY
done

# ---- 3. a Table 1 row planned in bf16 and fp32
. "$MMC_SOURCE_DIR/tests/tools/table1.sh"
table1_mm 48 6144 40 8 1 256 1024 > "$T/row.mm"
grep -v 'precision = bf16' "$T/row.mm" > "$T/row32.mm"
for r in row row32; do
  "$MMC" plan "$T/$r.mm" -I "$S" --device a100 --devices 256 --json > "$T/$r.json" || bad "$r: mmc plan"
done
$PY - "$T/row.json" "$T/row32.json" <<'PY' && ok || bad "18.4 B row: tp bytes"
import json, sys
a, b = (json.load(open(f))["collectives"] for f in sys.argv[1:3])
a = [x for x in a if x["axis"] == "tp"]
b = [x for x in b if x["axis"] == "tp"]
errs = []
if len(a) != len(b) or not a:
    sys.exit(f"FAIL: {len(a)} and {len(b)} tp collectives")
halved, whole = 0, []
for x, y in zip(a, b):
    if (x["kind"], x["phase"], x["sent_elements"]) != (y["kind"], y["phase"], y["sent_elements"]):
        errs.append(f"bf16 {x} against fp32 {y}")
    elif x["sent_bytes"] == 2 * x["sent_elements"] and y["sent_bytes"] == 2 * x["sent_bytes"]:
        halved += 1
    elif x["sent_bytes"] == y["sent_bytes"]:
        whole.append(f"{x['kind']} {x['scope']} {x['phase']}")
    else:
        errs.append(f"{x['scope']}: {x['sent_bytes']} bytes, fp32 {y['sent_bytes']}")
# one f32 collective: the vocabulary-parallel embedding's forward all-reduce
if whole != ["all_reduce gpt forward"]: errs.append(f"the tp collectives left f32: {whole}")
t16, t32 = sum(x["sent_bytes"] for x in a), sum(y["sent_bytes"] for y in b)
if t16 > 0.51 * t32: errs.append(f"tp bytes {t16} of {t32}")
for e in errs[:5]: print("FAIL:", e)
print(f"18.4 B (tp = 8): {len(a)} tp all-reduces a micro-batch, {halved} at half fp32's bytes, f32: {whole}; "
      f"tp bytes bf16 {t16 / 1e9:.3f} GB, fp32 {t32 / 1e9:.3f} GB ({t16 / t32:.4f})")
sys.exit(1 if errs else 0)
PY

echo "bf16_tp: $pass passed, $fail failed"
[ "$fail" = 0 ]
