#!/usr/bin/env bash
# The tiny WF-VAE (stdlib_models/wfvae.mm, model WFVAEFit: 4x8x8
# compression, latent 8) on the moving-item clips: build mmc if needed,
# compile the trainer, train it, then compile the reconstructor, which loads
# the trained weights, prints the PSNR of the held-out clips (test split;
# decoder output clamped to [0, 1], peak 1, mean over clips) and writes
# input | reconstruction as PNG strips and animated GIFs.
# STEPS (default 700), RUN (runs/wfvae), THREADS (2), CLIPS (1000) and
# SHOW (4, the strips written) can be set. The weights (every parameter by
# name, with the optimizer's state) end in $RUN/weights.safetensors, the
# metrics in $RUN/metrics.jsonl, the strips in $RUN/strips.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/mmc ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build -j"$(nproc)"
fi
RUN=${RUN:-runs/wfvae}
mkdir -p "$RUN"
M=stdlib_models/wfvae.mm
./build/mmc compile "$M" --model WFVAEFit -o "$RUN/trainer"
./build/mmc compile "$M" --model WFVAEFit --set B=10 --task reconstruct -o "$RUN/reconstructor"
start=$(date +%s)
"$RUN/trainer" --steps "${STEPS:-700}" --threads "${THREADS:-2}" --eval-every 200 --eval-batches 4 \
  --log "$RUN/metrics.jsonl" --save-weights "$RUN/weights.safetensors"
trained=$(date +%s)
"$RUN/reconstructor" --weights "$RUN/weights.safetensors" --clips "${CLIPS:-1000}" --no-chunks \
  --show "${SHOW:-4}" --out "$RUN/strips"
echo "wall time: training $((trained - start)) s, scoring $(($(date +%s) - trained)) s;" \
  "weights $RUN/weights.safetensors, strips in $RUN/strips"
