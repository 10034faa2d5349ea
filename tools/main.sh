#!/usr/bin/env bash
# The main job: install, build, check the standard library, then compile the
# ViTFashion classifier into a native trainer and train it on Fashion-MNIST
# (Debian's dataset-fashion-mnist); prints the test accuracy at the end. Then
# the InternVL2Tiny captioner: trained, evaluated (exact match on the test
# split) and run on five test images by its own generator.
# STEPS (default 6000), RUN (runs/vit_fashion), CAP_STEPS (1500) and CAP
# (runs/internvl2tiny) can be set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"
for f in stdlib_models/*.mm; do ./build/mmc check "$f"; done
echo "every stdlib model checks"
./build/mmc stats stdlib_models/vit_fashion.mm --model ViTFashion
./build/mmc plan stdlib_models/vit_fashion.mm --model ViTFashion
RUN=${RUN:-runs/vit_fashion}
mkdir -p "$RUN"
./build/mmc compile stdlib_models/vit_fashion.mm --model ViTFashion -o "$RUN/trainer"
start=$(date +%s)
"$RUN/trainer" --steps "${STEPS:-6000}" --eval-every 2000 --eval-batches all --ckpt "$RUN/ckpt" --resume --ckpt-every 2000 --log "$RUN/metrics.jsonl"
echo "wall time: $(( $(date +%s) - start )) s; metrics in $RUN/metrics.jsonl"

# The captioner: InternVL2Tiny (InternViT, pixel-shuffle projector, a
# Qwen2-style LLM) learns to describe the images ("what is this ?" -> "an
# ankle boot"), then a separately compiled evaluator captions the 10,000 test
# images greedily with its KV cache and scores exact match.
CAP=${CAP:-runs/internvl2tiny}
mkdir -p "$CAP"
./build/mmc compile stdlib_models/internvl2.mm --model InternVL2Tiny --set B=64 -o "$CAP/trainer"
./build/mmc compile stdlib_models/internvl2.mm --model InternVL2Tiny --task eval -o "$CAP/evaluator"
./build/mmc compile stdlib_models/internvl2.mm --model InternVL2Tiny --task generate -o "$CAP/captioner"
start=$(date +%s)
"$CAP/trainer" --steps "${CAP_STEPS:-1500}" --lr 3e-3 \
  --save-weights "$CAP/weights.safetensors" --log "$CAP/metrics.jsonl"
"$CAP/evaluator" --weights "$CAP/weights.safetensors"
"$CAP/captioner" --weights "$CAP/weights.safetensors" --images "${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}/t10k-images-idx3-ubyte.gz" --limit 5
echo "captioner wall time: $(( $(date +%s) - start )) s; metrics in $CAP/metrics.jsonl"
