#!/usr/bin/env bash
# PyTorch parity: ViTFashion, GPT2Tiny, InternVL2Tiny and its LoRA variant
# written independently in PyTorch
# (tests/torch/mmref.py) start from the mmc trainer's initial weights (loaded
# by name from its safetensors checkpoint), take the same batches (dumped by
# the trainer) and 3 AdamW steps with the model's settings: the losses agree
# to 1e-5 relative at every step and the final weights to 1e-4.
set -euo pipefail
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "python3-torch is not installed (tools/setup.sh installs it)"; exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
fail=0
for spec in "vit_fashion.mm ViTFashion" "gpt2.mm GPT2Tiny" "internvl2.mm InternVL2Tiny" "internvl2.mm InternVL2TinyLoRA"; do
  set -- $spec
  "$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/$1" --model "$2" -o "$2"
  ./"$2" --steps 0 --ckpt "$2.init" --eval-batches 1 --quiet > /dev/null 2>&1
  ./"$2" --steps 3 --ckpt "$2.final" --dump-inputs "$2.in" --log "$2.jsonl" --eval-batches 1 --quiet > /dev/null 2>&1
  echo "== $2"
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/torch/parity.py" "$2" "$2.init/rank-00000.safetensors" "$2.in" \
    "$2.jsonl" "$2.final/rank-00000.safetensors" 3 || fail=1
done
exit $fail
