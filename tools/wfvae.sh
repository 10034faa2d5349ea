#!/usr/bin/env bash
# The tiny WF-VAE (stdlib_models/wfvae.mm, model WFVAEFit: 4x8x8
# compression, latent 8, base 8, batch 2 as dp = 2) on the moving-item
# clips: build mmc if needed, compile the trainer (for two data-parallel
# ranks of one thread each) and the reconstructor (at once), train,
# then the reconstructor loads the trained weights, prints the PSNR of the
# held-out clips (test split; decoder output clamped to [0, 1], peak 1, mean
# over clips) and writes input | reconstruction as PNG strips and animated
# GIFs; the last line gives the wall time of each part.
# STEPS (default 10500 in bf16, 8000 in fp32: what fits the 15 minutes on a
# 2-core Xeon with AMX, and on the machines fp32 was measured on), RUN
# (runs/wfvae), EVAL_EVERY (1000: the loss of 8 held-out batches), CLIPS
# (1000) and SHOW (4, the strips written) can be set, and PRECISION (auto:
# bf16 mixed precision where the CPU has AMX-BF16 tiles, which oneDNN's bf16
# convolutions run on: on a Xeon with AMX the batch-1 step is 71 against
# 84 ms fp32, and 3,000-step proxies gave 24.69 dB against fp32's 24.46;
# fp32 elsewhere: without AMX bf16 was slower, 138 against 85 ms). The
# weights (every parameter by name, with the optimizer's state) end in
# $RUN/weights.safetensors, the metrics in $RUN/metrics.jsonl, the strips
# in $RUN/strips.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/mmc ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build -j"$(nproc)"
fi
RUN=${RUN:-runs/wfvae}
mkdir -p "$RUN"
M=stdlib_models/wfvae.mm
PRECISION=${PRECISION:-auto}
if [ "$PRECISION" = auto ]; then
  PRECISION=fp32
  if grep -qw amx_bf16 /proc/cpuinfo; then PRECISION=bf16; fi
fi
if [ -z "${STEPS:-}" ]; then
  STEPS=8000
  if [ "$PRECISION" = bf16 ]; then STEPS=10500; fi
fi
echo "precision $PRECISION, $STEPS steps"
start=$(date +%s)
# the two compiles at once (one core each)
./build/mmc compile "$M" --model WFVAEFit --dp 2 --precision "$PRECISION" -o "$RUN/trainer" &
./build/mmc compile "$M" --model WFVAEFit --set B=10 --task reconstruct -o "$RUN/reconstructor"
wait $!
compiled=$(date +%s)
# mpirun refuses root unless told (containers)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpirun -np 2 --oversubscribe --bind-to none "$RUN/trainer" --steps "$STEPS" --threads 1 \
  --eval-every "${EVAL_EVERY:-1000}" --eval-batches 8 \
  --log "$RUN/metrics.jsonl" --save-weights "$RUN/weights.safetensors"
trained=$(date +%s)
"$RUN/reconstructor" --weights "$RUN/weights.safetensors" --clips "${CLIPS:-1000}" --no-chunks \
  --show "${SHOW:-4}" --out "$RUN/strips"
end=$(date +%s)
echo "wall time: compile $((compiled - start)) s, training $((trained - compiled)) s," \
  "scoring $((end - trained)) s, in all $((end - start)) s;" \
  "weights $RUN/weights.safetensors, strips in $RUN/strips"
