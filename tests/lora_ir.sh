#!/usr/bin/env bash
# The `lora` pass on InternVL2TinyLoRA (rank 4, alpha 8, q_proj and v_proj of
# the LLM's 2 layers): `mmc dump-ir --after lora` round-trips (print -> parse
# -> print byte-identical), holds the 8 adapters with their shapes and inits,
# every other parameter frozen, and in @forward 4 adapter paths
# (linear, linear, mul_scalar {value = 2}, add); after autodiff the only
# gradients are the adapters'.
set -euo pipefail
F="$MMC_SOURCE_DIR/stdlib_models/internvl2.mm"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

"$MMC" dump-ir "$F" --model InternVL2TinyLoRA --after lora > "$T/a.mmir"
"$MMC" dump-ir "$T/a.mmir" > "$T/b.mmir"
cmp -s "$T/a.mmir" "$T/b.mmir" || { bad "--after lora does not round-trip"; diff "$T/a.mmir" "$T/b.mmir" | head; }
for l in 0 1; do
  for spec in "q_proj.lora_a : f32\[4, 64\]\{[^}]*\} init\(fan_in, 1\)" "q_proj.lora_b : f32\[64, 4\]\{[^}]*\} init\(zeros\)" \
              "v_proj.lora_a : f32\[4, 64\]\{[^}]*\} init\(fan_in, 1\)" "v_proj.lora_b : f32\[32, 4\]\{[^}]*\} init\(zeros\)"; do
    grep -qE "^param @llm\.blocks\.$l\.attn\.$spec layer\(\"llm.blocks\", $l\)" "$T/a.mmir" || bad "no adapter llm.blocks.$l.attn.$spec"
  done
done
adapters=$(grep -cE '^param @\S+\.lora_[ab] ' "$T/a.mmir" || true)
[ "$adapters" -eq 8 ] || bad "$adapters adapters, expected 8"
grep -E '^param @\S+\.lora_[ab] ' "$T/a.mmir" | grep -q ' frozen' && bad "an adapter is frozen"
unfrozen=$(grep '^param ' "$T/a.mmir" | grep -vE '^param @\S+\.lora_[ab] ' | grep -vc ' frozen' || true)
[ "$unfrozen" -eq 0 ] || bad "$unfrozen base parameters are not frozen"
paths=$(grep -cE '= mul_scalar\(%[0-9]+\) \{value = 2\} .* scope\("llm\.blocks\.[01]\.attn\.[qv]_proj"\)' "$T/a.mmir" || true)
[ "$paths" -eq 4 ] || bad "$paths adapter scalings in @forward, expected 4"

"$MMC" dump-ir "$F" --model InternVL2TinyLoRA --after autodiff > "$T/t.mmir"
grads=$(grep -oE ' grad\(@[^)]*\)' "$T/t.mmir" | sort -u)
ngrads=$(echo "$grads" | grep -c . || true)
[ "$ngrads" -eq 8 ] || bad "$ngrads gradients after autodiff, expected 8"
echo "$grads" | grep -vqE '\.lora_[ab]\)$' && bad "a gradient of a base parameter: $(echo "$grads" | grep -vE '\.lora_[ab]\)$' | head -3)"

if [ $fail -ne 0 ]; then echo "0 passed, $fail failed"; exit 1; fi
echo "1 passed, 0 failed"
