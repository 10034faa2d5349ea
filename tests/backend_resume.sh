#!/usr/bin/env bash
# Resume is exact: 20 steps straight give the same losses and the same final
# weights and optimizer state, bit for bit, as 10 steps, a checkpoint, and
# --resume for 10 more (GPT2Tiny and ViTFashion).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0

same() { # name a.jsonl b.jsonl a.ckpt b.ckpt: identical losses and tensors
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
name, la, lb, ca, cb = sys.argv[1:6]
def losses(p):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p) if '"loss"' in l}
def tensors(p):
    b = open(p + "/rank-00000.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = losses(la), losses(lb)
if sorted(a) != list(range(1, 21)) or sorted(b) != list(range(1, 21)):
    print("%s: steps logged: %s and %s" % (name, sorted(a), sorted(b))); sys.exit(1)
diff = [s for s in a if a[s] != b[s]]
if diff:
    print("%s: losses differ at steps %s (e.g. %r vs %r)" % (name, diff, a[diff[0]], b[diff[0]])); sys.exit(1)
ta, tb = tensors(ca), tensors(cb)
bad = [k for k in ta if ta[k] != tb.get(k)]
if bad or set(ta) != set(tb):
    print("%s: tensors differ: %s" % (name, bad[:5])); sys.exit(1)
print("%s: 20 losses and %d tensors identical (step 20 loss %r)" % (name, len(ta), a[20]))
PY
}

check() { # name file model lr
  local name=$1
  if ! "$MMC" compile "$S/$2" --model "$3" -o "$T/$name"; then echo "FAIL: $name: mmc compile"; fail=$((fail+1)); return; fi
  local args=(--lr "$4" --eval-batches 1 --quiet)
  "$T/$name" --steps 20 "${args[@]}" --ckpt "$T/$name.a" --log "$T/$name.a.jsonl" > /dev/null &&
  "$T/$name" --steps 10 "${args[@]}" --ckpt "$T/$name.b" --log "$T/$name.b.jsonl" > /dev/null &&
  "$T/$name" --steps 20 "${args[@]}" --ckpt "$T/$name.b" --resume --log "$T/$name.b.jsonl" > /dev/null 2> "$T/$name.err"
  if [ $? -ne 0 ]; then echo "FAIL: $name: a trainer run failed"; cat "$T/$name.err"; fail=$((fail+1)); return; fi
  if same "$name" "$T/$name.a.jsonl" "$T/$name.b.jsonl" "$T/$name.a" "$T/$name.b"; then pass=$((pass+1)); else fail=$((fail+1)); fi
}

check gpt2tiny gpt2.mm GPT2Tiny 2e-3
# under the sanitizers (ten times slower) the small model is enough
grep -qs 'MMC_SANITIZE:BOOL=ON' "${MMC_BINARY_DIR:-.}/CMakeCache.txt" || check vit vit_fashion.mm ViTFashion 5e-3

# SIGINT: the step in flight finishes, a checkpoint is written, exit 1; the
# run then resumes from that step
"$T/gpt2tiny" --steps 1000000 --quiet --ckpt "$T/int" --log "$T/int.jsonl" > /dev/null 2> "$T/int.err" &
pid=$!
for _ in $(seq 200); do [ -s "$T/int.jsonl" ] && break; sleep 0.1; done
kill -INT $pid; wait $pid; st=$?
n=$(sed -n 's/.*stopped by signal 2 after step \([0-9]*\) (checkpoint written).*/\1/p' "$T/int.err")
if [ $st -eq 1 ] && [ -n "$n" ] && grep -q "\"step\": $n" "$T/int/manifest.json"; then
  pass=$((pass+1)); echo "SIGINT: stopped after step $n with a checkpoint"
  if "$T/gpt2tiny" --steps $((n + 3)) --quiet --eval-batches 1 --ckpt "$T/int" --resume > /dev/null 2>&1; then pass=$((pass+1))
  else echo "FAIL: resume after SIGINT"; fail=$((fail+1)); fi
else echo "FAIL: SIGINT: exit $st, $(cat "$T/int.err")"; fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
