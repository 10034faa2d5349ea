#!/usr/bin/env bash
# Fused loops against the unfused program: the same model compiled with and
# without the fuse pass (where every lone elementwise op runs in the
# runtime's C/oneDNN kernels) gives the same training losses and evaluation
# loss within 1e-5 relative, and the same logits of a test batch within
# 2e-6 (absolute, scaled by their largest magnitude); and `mmc compile --emit
# llvm` shows the fused loops vectorised for the host.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0

close() { # name a.jsonl b.jsonl
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, pa, pb = sys.argv[1:4]
def rows(p): return [json.loads(l) for l in open(p)]
a, b = rows(pa), rows(pb)
la = [r["loss"] for r in a if "loss" in r] + [r["eval_loss"] for r in a if "eval_loss" in r]
lb = [r["loss"] for r in b if "loss" in r] + [r["eval_loss"] for r in b if "eval_loss" in r]
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(la, lb))
print("%s: %d losses, largest relative difference fused vs unfused %.2e" % (name, len(la), worst))
sys.exit(0 if len(la) == len(lb) and len(la) > 1 and worst <= 1e-5 else 1)
PY
}

check() { # name file model
  local name=$1
  "$MMC" compile "$S/$2" --model "$3" -o "$T/$name.fused" && "$MMC" compile "$S/$2" --model "$3" --no-fuse -o "$T/$name.plain" || {
    echo "FAIL: $name: mmc compile"; fail=$((fail+1)); return; }
  local nf
  nf=$("$MMC" compile "$S/$2" --model "$3" --emit ir | grep -c ' = fused(')
  [ "$nf" -gt 0 ] && pass=$((pass+1)) || { echo "FAIL: $name: no fused node"; fail=$((fail+1)); }
  "$MMC" compile "$S/$2" --model "$3" --no-fuse --emit ir | grep -q ' = fused(' && { echo "FAIL: $name: --no-fuse fused"; fail=$((fail+1)); }
  for k in fused plain; do
    "$T/$name.$k" --steps 5 --eval-batches 2 --quiet --log "$T/$name.$k.jsonl" --dump-logits "$T/$name.$k.bin" > /dev/null ||
      { echo "FAIL: $name.$k run"; fail=$((fail+1)); return; }
  done
  close "$name ($nf fused nodes)" "$T/$name.fused.jsonl" "$T/$name.plain.jsonl" && pass=$((pass+1)) || fail=$((fail+1))
  /usr/bin/python3 - "$name" "$T/$name.fused.bin" "$T/$name.plain.bin" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[2], "rb").read()); b.frombytes(open(sys.argv[3], "rb").read())
scale = max(max(abs(x) for x in b), 1e-30)
worst = max(abs(x - y) for x, y in zip(a, b)) / scale
print("%s: %d logits, largest difference fused vs unfused %.2e of the largest logit" % (sys.argv[1], len(a), worst))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and worst <= 2e-6 else 1)
PY
}

check vit vit_fashion.mm ViTFashion
check gpt2tiny gpt2.mm GPT2Tiny

# the fused loops are vector code (any width: SSE, AVX2 or AVX-512)
"$MMC" compile "$S/vit_fashion.mm" --emit llvm -o "$T/vit.ll"
if grep -qE '^define internal .*@loop\.' "$T/vit.ll" && grep -qE '<(4|8|16) x float>' "$T/vit.ll"; then
  pass=$((pass+1)); echo "vit: $(grep -cE '^define internal .*@loop\.' "$T/vit.ll") loop functions, vectorised"
else echo "FAIL: no vectorised loop in the LLVM IR"; fail=$((fail+1)); fi
# large maps run split across the threads (mmrt_parallel_for): each element
# is one thread's, so 1 and 2 threads train to the same losses (within 1e-6:
# the gradient norm's sum is the one reduction whose order follows the threads)
npar=$(grep -c 'call void @mmrt_parallel_for' "$T/vit.ll")
for th in 1 2; do
  "$T/vit.fused" --threads $th --steps 3 --eval-batches 1 --quiet --log "$T/vit.t$th.jsonl" > /dev/null
done
if [ "$npar" -gt 0 ] && /usr/bin/python3 - "$T/vit.t1.jsonl" "$T/vit.t2.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
worst = max([abs(x - y) / abs(y) for x, y in zip(a, b)] or [1])
print("vit: 1 and 2 threads, %d losses, largest relative difference %.1e" % (len(a), worst))
sys.exit(0 if len(a) == len(b) == 3 and worst <= 1e-6 else 1)
PY
then pass=$((pass+1)); echo "vit: $npar threaded maps"
else echo "FAIL: threaded maps ($npar calls): 1 and 2 threads differ or did not run"; fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
