#!/usr/bin/env bash
# LoRA in the trainer: InternVL2Tiny trained briefly, then InternVL2TinyLoRA
# starts from that checkpoint by name (--init-from), so its first loss is
# the trained base's, not a fresh model's; it allocates gradients and state
# for the adapters alone; --save-adapters writes exactly the adapters with
# their rank and alpha; the base plus --load-adapters gives the fine-tuned
# logits bit for bit; and the flags' misuse is refused by name.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
"$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny -o "$T/base" && "$MMC" compile "$S/internvl2.mm" --model InternVL2TinyLoRA -o "$T/lora" ||
  { echo "FAIL: compile"; exit 1; }
Q=(--quiet --eval-batches 2)
"$T/base" --steps 60 --ckpt "$T/ck" "${Q[@]}" --log "$T/base.jsonl" > /dev/null || bad "base run"
"$T/lora" --steps 20 --init-from "$T/ck" --save-adapters "$T/ad.safetensors" --dump-logits "$T/a.bin" "${Q[@]}" \
  --log "$T/lora.jsonl" > "$T/lora.out" 2> "$T/lora.err" || { bad "lora run"; cat "$T/lora.err"; }
"$T/lora" --steps 3 "${Q[@]}" --log "$T/fresh.jsonl" > /dev/null || bad "fresh lora run"
/usr/bin/python3 - "$T" <<'PY' && ok || bad "LoRA checks"
import json, struct, sys
T = sys.argv[1]
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
base, lora, fresh = losses(T + "/base.jsonl"), losses(T + "/lora.jsonl"), losses(T + "/fresh.jsonl")
print("first loss: fresh LoRA model %.4f, LoRA from the base %.4f (base's last %.4f)" % (fresh[0], lora[0], base[-1]))
assert lora[0] < fresh[0] - 1.0, "--init-from did not load the base"
b = open(T + "/ad.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); meta = h.pop("__metadata__")
names = sorted(h)
print("adapters:", len(names), meta)
assert len(names) == 8 and all(k.endswith((".lora_a", ".lora_b")) for k in names), names
assert meta["lora_rank"] == "4" and meta["lora_alpha"] == "8"
for k in names:  # A [r, in], B [out, r]
    sh = h[k]["shape"]
    assert (sh[0] == 4 and sh[1] == 64) if k.endswith("lora_a") else sh[1] == 4, (k, sh)
PY
grep -q "grad=7168 opt=14336" "$T/lora.out" && ok || bad "LoRA arenas: $(grep allocated "$T/lora.out")"
"$T/lora" --steps 0 --init-from "$T/ck" --load-adapters "$T/ad.safetensors" --dump-logits "$T/b.bin" "${Q[@]}" > /dev/null &&
  cmp -s "$T/a.bin" "$T/b.bin" && { ok; echo "base + adapters: the fine-tuned logits, bit for bit"; } || bad "reloaded adapters differ"
"$T/base" --steps 1 --save-adapters "$T/x.safetensors" "${Q[@]}" > /dev/null 2> "$T/err"
[ $? -eq 1 ] && grep -q "has no LoRA adapters" "$T/err" && ok || bad "--save-adapters on a model without LoRA"
"$T/lora" --steps 1 --load-adapters "$T/ck/$(cat "$T/ck/latest")/manifest.json" "${Q[@]}" > /dev/null 2> "$T/err"
[ $? -eq 1 ] && grep -q "manifest.json" "$T/err" && ok || bad "--load-adapters of a non-safetensors file: $(cat "$T/err")"
"$T/lora" --steps 1 --load-adapters "$T/ck/$(cat "$T/ck/latest")/rank-00000.safetensors" "${Q[@]}" > /dev/null 2> "$T/err"
[ $? -eq 1 ] && grep -q "no tensor 'llm.blocks.0.attn.q_proj.lora_a'" "$T/err" && ok || bad "--load-adapters without adapters: $(cat "$T/err")"
"$T/base" --steps 1 --init-from "$T/ad.safetensors" "${Q[@]}" > /dev/null 2> "$T/err"
[ $? -eq 1 ] && grep -q "none of the model's parameters" "$T/err" && ok || bad "--init-from with nothing to load: $(cat "$T/err")"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
