#!/usr/bin/env bash
# The main job: install, build, check the standard library, then compile the
# ViTFashion classifier into a native trainer and train it on Fashion-MNIST
# (Debian's dataset-fashion-mnist); prints the test accuracy at the end. Then
# the InternVL2Tiny captioner, trained from Fashion-MNIST written out as PNG
# files and a conversation JSONL, evaluated by exact match on the test split.
# STEPS (default 6000), RUN (runs/vit_fashion), CAP_STEPS (2000), CAP
# (runs/internvl2tiny) and CAP_DATA ($CAP/data) can be set.
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

# The captioner through the real path: Fashion-MNIST written out as a
# conversation dataset (PNG files and a JSONL of questions in several
# phrasings and class-name answers, tools/fmnist_conv/make_data.py), the
# committed BPE tokenizer.json (tools/fmnist_conv/make_tokenizer.py), and
# InternVL2TinyFashion (InternViT, pixel-shuffle projector, a Qwen2-style
# LLM) trained from those files by the conversation feeder; at the end it
# answers the 10,000 test questions greedily and scores exact match.
CAP=${CAP:-runs/internvl2tiny}
CAP_DATA=${CAP_DATA:-$CAP/data}
FMNIST=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
mkdir -p "$CAP"
start=$(date +%s)
if [ ! -s "$CAP_DATA/test.jsonl" ]; then # written whole, then renamed
  rm -rf "$CAP_DATA.tmp"
  python3 tools/fmnist_conv/make_data.py "$FMNIST" "$CAP_DATA.tmp"
  rm -rf "$CAP_DATA" && mv "$CAP_DATA.tmp" "$CAP_DATA"
fi
echo "conversation dataset in $CAP_DATA: $(wc -l < "$CAP_DATA/train.jsonl") train, $(wc -l < "$CAP_DATA/test.jsonl") test ($(( $(date +%s) - start )) s)"
./build/mmc compile stdlib_models/internvl2.mm --model InternVL2TinyFashion -o "$CAP/trainer"
start=$(date +%s)
"$CAP/trainer" --data "$CAP_DATA/train.jsonl" --eval-data "$CAP_DATA/test.jsonl" \
  --images "$CAP_DATA/img" --tokenizer tools/fmnist_conv/tokenizer.json --chat chatml \
  --max-tiles 1 --steps "${CAP_STEPS:-2000}" --lr 3e-3 --eval-batches all \
  --save-weights "$CAP/weights.safetensors" --log "$CAP/metrics.jsonl"
echo "captioner wall time: $(( $(date +%s) - start )) s; metrics in $CAP/metrics.jsonl"
