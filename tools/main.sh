#!/usr/bin/env bash
# The main job: install, build, then check every stdlib model and print the
# statistics of the reference models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build -j2
for f in stdlib_models/*.mm; do ./build/mmc check "$f"; done
echo "every stdlib model checks"
./build/mmc stats stdlib_models/gpt2.mm --model GPT2
./build/mmc stats stdlib_models/internvl2.mm --model InternVL2_2B
./build/mmc stats stdlib_models/vit_fashion.mm --model ViTFashion
# the backend: the memory plan, then a trainer compiled and run briefly
./build/mmc plan stdlib_models/vit_fashion.mm --model ViTFashion
./build/mmc compile stdlib_models/vit_fashion.mm --model ViTFashion -o build/vit_fashion_trainer
OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ./build/vit_fashion_trainer --steps 100 --lr 5e-3 --eval-batches 20
