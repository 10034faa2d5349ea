#!/usr/bin/env bash
# bf16 mixed precision (--precision bf16, passes/precision.c) end to end.
# 1. ViTFashion, GPT2Tiny and InternVL2Tiny compiled with --precision bf16,
#    20 steps (5 under the sanitizers), against the PyTorch references
#    (tests/torch/mmref.py) under
#    torch.autocast("cpu", dtype=torch.bfloat16) on the trainer's initial
#    weights and batches, fp32 master weights and AdamW: losses within 1e-2
#    relative at every step (tests/torch/parity.py ... bf16). The start line
#    names the bf16 path.
# 2. bf16 is in effect: the GPT2Tiny losses differ from the fp32 trainer's
#    (at least 1e-5 relative at some step; the fp32 trainer is deterministic),
#    and mmc plan's act arena is smaller, with bf16 bytes listed.
# 3. The emulated path (oneDNN limited to AVX2 by DNNL_MAX_CPU_ISA, as on a
#    CPU without AVX-512, where oneDNN 2.6 makes no bf16 matmul): the start
#    line says emulated, the kernels pass check_rt_bf16 there too, and the
#    losses equal the native run's within 1e-3 relative.
# 4. dp = 2: every gradient reduction over dp is f32 (dump-ir).
# 5. tp = 2 (and tp = 2 + sp) under mpirun: the activations' collectives of
#    bf16 values move bf16 (dump-ir), and 10 steps' losses equal the serial
#    bf16 run's within 5e-4 relative (a bf16 partial sum is rounded before
#    the all-reduce adds it: one bf16 rounding, 2^-9, per row-parallel
#    output, where the serial run rounds the whole sum once).
set -euo pipefail
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "python3-torch is not installed (tools/setup.sh installs it)"; exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
S="$MMC_SOURCE_DIR/stdlib_models"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
fail=0
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
# the steps of 1. to 3.: under the sanitizers 5 (the same kernels each step;
# ViTFashion's 20 took 20 s there), the release build's 20
N=20
[ "$SAN" = 1 ] && N=5

losses() { /usr/bin/python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }
# close A B RTOL WHAT: every pair of losses within RTOL relative
close() {
  /usr/bin/python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
a, b, rtol, what = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
la = [json.loads(l)["loss"] for l in open(a) if '"loss"' in l]
lb = [json.loads(l)["loss"] for l in open(b) if '"loss"' in l]
if len(la) != len(lb) or not la:
    sys.exit("FAIL: %s: %d and %d losses" % (what, len(la), len(lb)))
worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
print("%s: %d losses, largest relative difference %.2e (tolerance %g)" % (what, len(la), worst, rtol))
sys.exit(0 if worst <= rtol else 1)
PY
}

# ---- 1. against PyTorch autocast
for spec in "vit_fashion.mm ViTFashion" "gpt2.mm GPT2Tiny" "internvl2.mm InternVL2Tiny"; do
  set -- $spec
  "$MMC" compile "$S/$1" --model "$2" --precision bf16 -o "$2"
  ./"$2" --steps 0 --save-weights "$2.init.st" --eval-batches 1 --quiet > /dev/null 2>&1
  ./"$2" --steps $N --save-weights "$2.final.st" --dump-inputs "$2.in" --log "$2.jsonl" \
    --eval-batches 1 > "$2.out" 2>&1
  if ! grep -Eq "precision bf16 (native|emulated)" "$2.out"; then
    echo "FAIL: $2: the start line does not name the bf16 path"; grep trainer: "$2.out" || true; fail=1
  fi
  echo "== $2 ($(grep -o 'precision bf16 [a-z]*' "$2.out"))"
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/torch/parity.py" "$S/$1" "$2" "$2.init.st" "$2.in" \
    "$2.jsonl" "$2.final.st" $N bf16 > "$2.parity" || { cat "$2.parity"; fail=1; }
  grep -E "^step (1|$N):|weights|: ok|failures" "$2.parity"
done

# ---- 2. bf16 is in effect
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o g32
./g32 --steps $N --log g32.jsonl --eval-batches 1 > g32.out 2>&1
grep -q "precision fp32" g32.out || { echo "FAIL: the fp32 trainer's start line"; fail=1; }
if close GPT2Tiny.jsonl g32.jsonl 1e-5 "GPT2Tiny bf16 against fp32 (must differ)" > differ.txt; then
  cat differ.txt; echo "FAIL: the bf16 trainer gives the fp32 losses"; fail=1
else
  cat differ.txt
fi
"$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --json > p32.json
"$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --precision bf16 --json > p16.json
"$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --precision bf16 > p16.txt
/usr/bin/python3 - p32.json p16.json p16.txt <<'PY' || fail=1
import json, re, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
txt = open(sys.argv[3]).read()
act32, act16 = a["by_role"]["act"], b["by_role"]["act"]
bf = b.get("bf16_act_bytes", 0)
print("GPT2Tiny act arena: fp32 %d bytes, bf16 %d bytes (the bf16 values of @train: %d bytes in all)" % (act32, act16, bf))
assert act16 < act32, "the bf16 act arena is not smaller"
assert bf > 0 and a.get("bf16_act_bytes", 0) == 0, "bf16_act_bytes: %r / %r" % (bf, a.get("bf16_act_bytes"))
assert re.search(r"bf16", txt), "mmc plan's text names no bf16 bytes"
PY

# ---- 3. the emulated path
DNNL_MAX_CPU_ISA=AVX2 ./GPT2Tiny --steps $N --log emu.jsonl --eval-batches 1 > emu.out 2>&1
grep -q "precision bf16 emulated" emu.out || { echo "FAIL: DNNL_MAX_CPU_ISA=AVX2: not emulated"; grep trainer: emu.out; fail=1; }
close emu.jsonl GPT2Tiny.jsonl 1e-3 "GPT2Tiny bf16 emulated against native" || fail=1
DNNL_MAX_CPU_ISA=AVX2 "$MMC_BINARY_DIR/tests/check_rt_bf16" > emu_kernels.out 2>&1 || { cat emu_kernels.out; fail=1; }
grep -q "bf16 path: emulated" emu_kernels.out || { echo "FAIL: check_rt_bf16 did not run emulated"; fail=1; }
echo "check_rt_bf16 emulated: $(tail -1 emu_kernels.out)"

# ---- 4. dp = 2: the gradients' reductions are f32 (after the bf16 gradients' casts)
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --precision bf16 --dp 2 --after bucket > dp2.ir
nbf=$(grep -cE "= (all_reduce|reduce_scatter)\(.*mesh = dp.* : bf16\[" dp2.ir || true)
nf=$(grep -cE "= all_reduce\(.*mesh = dp, bucket = [0-9]+.* : f32\[.*grad\(@" dp2.ir || true)
echo "GPT2Tiny bf16 --dp 2: $nf f32 gradient all-reduces in buckets, $nbf dp reductions of bf16 values"
[ "$nbf" -eq 0 ] && [ "$nf" -ge 30 ] || { echo "FAIL: dp gradient reductions are not f32"; fail=1; }

# ---- 5. tp = 2, tp = 2 + sp
export OMPI_MCA_btl_vader_single_copy_mechanism=none
./GPT2Tiny --steps 10 --log serial.jsonl --eval-batches 1 --quiet > /dev/null 2>&1
for plan in "--tp 2" "--tp 2 --sp"; do
  name=$(echo "$plan" | tr -d ' -')
  # shellcheck disable=SC2086
  "$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --precision bf16 $plan --after collectives > "$name.ir"
  nb=$(grep -cE "= (all_reduce|all_gather|reduce_scatter)\(.*mesh = tp.* : bf16\[" "$name.ir" || true)
  echo "GPT2Tiny bf16 $plan: $nb tp collectives of bf16 values"
  [ "$nb" -ge 4 ] || { echo "FAIL: $plan: the activations' collectives do not move bf16"; fail=1; }
  # shellcheck disable=SC2086
  "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --precision bf16 $plan -o "g$name"
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe "./g$name" --steps 10 --log "$name.jsonl" \
    --eval-batches 1 --quiet > "$name.out" 2>&1 || { tail -5 "$name.out"; fail=1; continue; }
  close "$name.jsonl" serial.jsonl 5e-4 "GPT2Tiny bf16 $plan against serial bf16" || fail=1
done
exit $fail
