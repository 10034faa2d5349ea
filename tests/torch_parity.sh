#!/usr/bin/env bash
# PyTorch parity: ViTFashion, GPT2Tiny, InternVL2Tiny, its LoRA variant and
# InternVL2TinyFrozenVision (train { freeze = [vision] })
# written independently in PyTorch (tests/torch/mmref.py) start from the mmc
# trainer's initial weights (loaded by name), take the same batches (dumped
# by the trainer) and 3 AdamW steps with the optimizer settings and per-step
# learning rates that tests/torch/mmtrain.py reads from the model's train
# section: the losses agree to 1e-5 relative at every step, and each trained
# tensor's final value to 1e-3 of the size of its update (|w_mmc - w_ref| <=
# 1e-3 |w_ref - w_init| + 1e-7, norms per tensor; the key biases, whose
# update is at rounding level, by their elements' step sizes; frozen tensors
# bit for bit).
set -euo pipefail
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "python3-torch is not installed (tools/setup.sh installs it)"; exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
fail=0
for spec in "vit_fashion.mm ViTFashion" "gpt2.mm GPT2Tiny" "internvl2.mm InternVL2Tiny" "internvl2.mm InternVL2TinyLoRA" \
            "internvl2.mm InternVL2TinyFrozenVision"; do
  set -- $spec
  "$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/$1" --model "$2" -o "$2"
  ./"$2" --steps 0 --save-weights "$2.init.st" --eval-batches 1 --quiet > /dev/null 2>&1
  ./"$2" --steps 3 --save-weights "$2.final.st" --dump-inputs "$2.in" --log "$2.jsonl" --eval-batches 1 --quiet > /dev/null 2>&1
  echo "== $2"
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/torch/parity.py" "$MMC_SOURCE_DIR/stdlib_models/$1" "$2" "$2.init.st" "$2.in" \
    "$2.jsonl" "$2.final.st" 3 || fail=1
done
exit $fail
