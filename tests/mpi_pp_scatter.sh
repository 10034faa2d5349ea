#!/usr/bin/env bash
# Megatron's scatter/gather of the pipeline's transfers (pp_scatter,
# docs/pp-transfers.md; Narayanan et al. 2021 section 4.1): a value the
# stages send that is replicated over tp leaves each tp rank as its 1/tp
# chunk and is all-gathered over tp by the receivers.
#   - tp = 2 x pp = 2 on 4 ranks, GPT2Tiny and InternVL2Tiny: the losses of
#     every step and the saved weights bit-identical with pp_scatter = false
#     (whole transfers; it only moves data); tests/mpi_pp.sh holds the same
#     plans against the serial trainer;
#   - rank 0's counters (--log's comm line): GPT2Tiny's stage 0 sends half of
#     each micro-batch's [B/M, T, h] activation forward (whole without it) and
#     all-gathers its gradient, [B/M, T, h] a micro-batch, over tp;
#   - mmc plan on Korthikanti et al. 2022 Table 5's 1 T row (tp 8, pp 64, 512
#     A100, full recompute, no sp): a transfer's bytes per rank 1/8 of the
#     activation's, and the bubble within 5% of (p - 1) / m of the compute (whole
#     transfers: above it);
#   - pp_scatter where it could do nothing (pp = 1) is refused at the setting.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
N=2

cat > "$T/off.mm" <<'MM'
import "gpt2.mm"
import "internvl2.mm"
model GOff extends GPT2Tiny { parallel { pp_scatter = false } }
model VOff extends InternVL2Tiny { parallel { pp_scatter = false } }
MM

# the weights of two --save-weights files (safetensors) byte for byte, the
# header's metadata (the model's name) aside
same_weights() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    d = b[8 + n:]
    return {k: (v["dtype"], v["shape"], d[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
print("%d tensors %s" % (len(a), "bit-identical" if same else "DIFFER"))
sys.exit(not same)
PY
}

# run name file model flags...: 4 ranks, $N steps
run() {
  local name=$1 file=$2 model=$3; shift 3
  "$MMC" compile "$file" -I "$S" --model "$model" "$@" --tp 2 --pp 2 --micro-batches 2 -o "$T/$name" \
    2> "$T/$name.cc" || { bad "$name: compile"; head -3 "$T/$name.cc"; return 1; }
  "${MPIRUN[@]}" 4 "$T/$name" --steps "$N" --eval-batches 1 --quiet --log "$T/$name.jsonl" \
    --save-weights "$T/$name.st" > "$T/$name.out" 2>&1 || { bad "$name: mpirun"; tail -5 "$T/$name.out"; return 1; }
}

# (the sanitizer build: GPT2Tiny only, its time budget)
MODELS=("gpt $S/gpt2.mm GPT2Tiny GOff --set B=8")
[ "$SAN" = 1 ] || MODELS+=("vlm $S/internvl2.mm InternVL2Tiny VOff")
for m in "${MODELS[@]}"; do
  set -- $m
  name=$1 file=$2 on=$3 off=$4; shift 4
  run "$name.on" "$file" "$on" "$@" && run "$name.off" "$T/off.mm" "$off" "$@" || continue
  /usr/bin/python3 - "$name" "$T/$name.on.jsonl" "$T/$name.off.jsonl" <<'PY' && ok || bad "$name: losses differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l] for p in sys.argv[2:4])
print("%s: %d steps' losses, pp_scatter on and off: %s" % (sys.argv[1], len(a), "bit-identical" if a == b and a else "DIFFER %s %s" % (a, b)))
sys.exit(not (a == b and a))
PY
  echo -n "$name: weights after $N steps: "
  same_weights "$T/$name.on.st" "$T/$name.off.st" && ok || bad "$name: weights differ"
done

# GPT2Tiny's counters on rank 0 (stage 0, tp rank 0): B = 8, M = 2, T = 32,
# h = 64, tp = 2, fp32 activations
/usr/bin/python3 - "$T/gpt.on.jsonl" "$T/gpt.off.jsonl" "$N" <<'PY' && ok || bad "gpt: the transfers' counters"
import json, sys
steps, B, M, T, h, tp = int(sys.argv[3]), 8, 2, 32, 64, 2
act = B // M * T * h  # one micro-batch's activation (and its gradient)
def comm(p):
    return [json.loads(l)["comm"] for l in open(p) if '"comm"' in l][-1]
on, off = comm(sys.argv[1]), comm(sys.argv[2])
fwd = lambda c: c["train_forward"].get("send.pp", {})
gat = lambda c: c["train_backward"].get("all_gather.tp")
want_on = {"n": 2, "calls": steps * M, "elems": steps * M * act // tp, "bytes": 4 * steps * M * act // tp}
want_off = {"n": 2, "calls": steps * M, "elems": steps * M * act, "bytes": 4 * steps * M * act}
want_gat = {"n": 2, "calls": steps * M, "elems": steps * M * act, "bytes": 4 * steps * M * act // tp}
ok = fwd(on) == want_on and fwd(off) == want_off and gat(on) == want_gat and gat(off) is None
print("gpt rank 0 forward sends: pp_scatter %s, whole %s; backward all_gather.tp %s%s" % (
    fwd(on), fwd(off), gat(on), "" if ok else ": expected %s, %s, %s" % (want_on, want_off, want_gat)))
sys.exit(not ok)
PY

# the 1 T row of Korthikanti et al. 2022 Table 5 (full recompute, no sp:
# tests/tools/table1.sh writes it as Table 1's GPT rows, at 512 GPUs),
# planned with and without the scatter
# (release only: the sanitizer build takes 24 s a plan of this row; its
# planner_table1 plans the pipelined rows through the same cost code)
. "$MMC_SOURCE_DIR/tests/tools/table1.sh"
[ "$SAN" = 1 ] || {
row() { table1_mm 160 25600 128 8 64 512 512 | sed "s/recompute = full/recompute = full; pp_scatter = $1/"; }
row true > "$T/k5on.mm" && row false > "$T/k5off.mm" || bad "the 1 T row's model"
for v in on off; do
  "$MMC" plan "$T/k5$v.mm" -I "$S" --device a100 --devices 512 --json > "$T/k5$v.json" 2> "$T/k5$v.err" ||
    { bad "plan of the 1 T row ($v)"; head -3 "$T/k5$v.err"; }
done
/usr/bin/python3 - "$T/k5on.json" "$T/k5off.json" "$T/k5on.mm" <<'PY' && ok || bad "the 1 T row's transfer and bubble"
import json, sys
on, off = (json.load(open(p))["predicted"] for p in sys.argv[1:3])
src = open(sys.argv[3]).read()
assert "pp_scatter = true" in src and "tp = 8" in src and "pp = 64" in src, src
p, m, tp = 64, 512, 8
x, xo = on["pp_transfer"], off["pp_transfer"]
ideal = (p - 1) / m * on["breakdown"]["compute_s"]
b, bo = on["breakdown"]["bubble_s"], off["breakdown"]["bubble_s"]
# a link's transfer: a micro-batch's residual stream [1, 2048, 25600] in fp32,
# replicated over tp (the tied head's bf16 copy of the embedding is made on
# the head's stage, which reads the embedding itself: nothing sent for it)
act, emb = 2048 * 25600 * 4, 0
near = lambda a, b: abs(a - b) <= 1e-6 * b
ok = (near(x["bytes"], act + emb) and near(x["bytes_per_rank"], act / tp + emb) and near(xo["bytes_per_rank"], act + emb)
      and x["tp_gather_s"] > 0 and xo["tp_gather_s"] == 0 and abs(b - ideal) <= 0.05 * ideal and bo > 1.2 * ideal)
print("1 T row: a transfer %.1f MB, %.2f MB a rank (whole: %.1f), send %.2f ms + gather %.2f ms (whole: %.2f ms); "
      "bubble %.2f s, (p-1)/m of the compute %.2f s, whole transfers %.2f s%s" % (
          x["bytes"] / 1e6, x["bytes_per_rank"] / 1e6, xo["bytes_per_rank"] / 1e6, 1e3 * x["send_s"],
          1e3 * x["tp_gather_s"], 1e3 * xo["send_s"], b, ideal, bo, "" if ok else ": NOT AS EXPECTED"))
sys.exit(not ok)
PY
}

# refused where it could do nothing: pp = 1 (the setting's line named)
printf 'import "gpt2.mm"\nmodel R extends GPT2Tiny {\n  parallel { tp = 2; pp_scatter = true }\n}\n' > "$T/r.mm"
"$MMC" plan "$T/r.mm" -I "$S" > "$T/r.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "r.mm:3:.*pp_scatter splits the pipeline's transfers over tp: it needs pp > 1 and tp > 1" "$T/r.out" &&
  ok || { bad "pp_scatter at pp = 1: exit $rc"; cat "$T/r.out"; }

echo "mpi_pp_scatter: $pass passed, $fail failed"
[ $fail -eq 0 ]
