#!/usr/bin/env bash
# The main job: install, build, check the standard library, then compile the
# ViTFashion classifier into a native trainer and train it on Fashion-MNIST
# (Debian's dataset-fashion-mnist); prints the test accuracy at the end.
# STEPS (default 6000) and RUN (default runs/vit_fashion) can be set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build -j"$(nproc)"
for f in stdlib_models/*.mm; do ./build/mmc check "$f"; done
echo "every stdlib model checks"
./build/mmc stats stdlib_models/vit_fashion.mm --model ViTFashion
./build/mmc plan stdlib_models/vit_fashion.mm --model ViTFashion
RUN=${RUN:-runs/vit_fashion}
mkdir -p "$RUN"
./build/mmc compile stdlib_models/vit_fashion.mm --model ViTFashion -o "$RUN/trainer"
start=$(date +%s)
"$RUN/trainer" --steps "${STEPS:-6000}" --eval-every 2000 --ckpt "$RUN/ckpt" --ckpt-every 2000 --log "$RUN/metrics.jsonl"
echo "wall time: $(( $(date +%s) - start )) s; metrics in $RUN/metrics.jsonl"
