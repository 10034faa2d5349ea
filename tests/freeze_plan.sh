#!/usr/bin/env bash
# Freezing shows in `mmc plan --json`: InternVL2Tiny with `freeze = [vision]`
# (InternVL2TinyFrozenVision) has no gradient and no optimizer bytes for the
# vision parameters. Against InternVL2Tiny, the grad arena is exactly
# 4 bytes x the vision parameters smaller (f32 gradients) and the opt arena
# 8 bytes x (AdamW's m and v), the param arena the same; the vision count is
# `mmc stats --json` modules.vision.params. The training IR has no vision
# gradient, update or state. The LoRA variant: grad and opt bytes are 4 and
# 8 bytes x its trainable parameters, which are the adapters alone.
set -euo pipefail
F="$MMC_SOURCE_DIR/stdlib_models/internvl2.mm"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
json() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

"$MMC" plan "$F" --model InternVL2Tiny --json > "$T/base.json"
"$MMC" plan "$F" --model InternVL2TinyFrozenVision --json > "$T/frozen.json"
"$MMC" stats "$F" --model InternVL2TinyFrozenVision --json > "$T/stats.json"
vision=$(json "$T/stats.json" 'd["modules"]["vision"]["params"]')
vtrain=$(json "$T/stats.json" 'd["modules"]["vision"]["trainable"]')
[ "$vision" -gt 0 ] || bad "no vision parameters in mmc stats"
[ "$vtrain" -eq 0 ] || bad "mmc stats: $vtrain vision parameters still trainable"
for role in param grad opt; do
  b=$(json "$T/base.json" "d['by_role']['$role']"); f=$(json "$T/frozen.json" "d['by_role']['$role']")
  want=0; [ $role = grad ] && want=$((4 * vision)); [ $role = opt ] && want=$((8 * vision))
  if [ $((b - f)) -ne $want ]; then bad "$role bytes: $b unfrozen, $f with vision frozen: $((b - f)) less, expected $want"
  else echo "$role: $b -> $f bytes ($((b - f)) = $want less for $vision vision parameters)"; fi
done

"$MMC" dump-ir "$F" --model InternVL2TinyFrozenVision --after optimizer > "$T/frozen.mmir"
n=$(grep -cE 'grad\(@vision\.|adamw\(@vision\.|^param @adamw\.[mv]\.vision\.' "$T/frozen.mmir" || true)
[ "$n" -eq 0 ] || bad "$n vision gradients, updates or states in @train"
grep -q 'grad(@projector\.' "$T/frozen.mmir" || bad "the projector lost its gradients"

"$MMC" plan "$F" --model InternVL2TinyLoRA --json > "$T/lora.json"
"$MMC" stats "$F" --model InternVL2TinyLoRA --json > "$T/lstats.json"
tr=$(json "$T/lstats.json" 'd["trainable_params"]')
[ "$tr" -eq 1792 ] || bad "InternVL2TinyLoRA: $tr trainable parameters, expected 1792 (2 layers x (q: 4x64 + 64x4, v: 4x64 + 32x4))"
g=$(json "$T/lora.json" "d['by_role']['grad']"); o=$(json "$T/lora.json" "d['by_role']['opt']")
[ "$g" -eq $((4 * tr)) ] || bad "InternVL2TinyLoRA: grad bytes $g, expected $((4 * tr))"
[ "$o" -eq $((8 * tr)) ] || bad "InternVL2TinyLoRA: opt bytes $o, expected $((8 * tr))"
echo "LoRA: $tr adapter parameters, grad $g, opt $o bytes"

if [ $fail -ne 0 ]; then echo "0 passed, $fail failed"; exit 1; fi
echo "1 passed, 0 failed"
