#!/usr/bin/env bash
# The tiny WF-VAE (stdlib_models/wfvae.mm, model WFVAEFit: 4x8x8
# compression, latent 8, base 8, batch 2 as dp = 2) on the moving-item
# clips: build mmc if needed, compile the trainer (for two data-parallel
# ranks of one thread each) and the reconstructor (at once), train,
# then the reconstructor loads the trained weights, prints the PSNR of the
# held-out clips (test split; decoder output clamped to [0, 1], peak 1, mean
# over clips) and writes input | reconstruction as PNG strips and animated
# GIFs; the last line gives the wall time of each part.
# STEPS (default: as many as fit the command's BUDGET, 900 s of wall time
# in all, at the speed a 150-step calibration run of the trainer measures on
# this machine: what is left after compiling and the calibration, less
# SCORE_RESERVE (40 s) for the scoring and the trainer's start and
# evaluations), RUN (runs/wfvae), EVAL_EVERY (1000: the loss of 8 held-out
# batches), CLIPS (1000) and SHOW (4, the strips written) can be set, and
# PRECISION (auto: bf16 mixed precision where the CPU has AMX-BF16 tiles,
# which oneDNN's bf16 convolutions run on: on a Xeon with AMX the batch-1
# step is 35 against 52 ms fp32; fp32 elsewhere: without AMX bf16 was
# slower, 138 against 85 ms). The weights (every parameter by name, with
# the optimizer's state) end in $RUN/weights.safetensors, the metrics in
# $RUN/metrics.jsonl, the strips in $RUN/strips.
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
start=$(date +%s)
# the two compiles at once (one core each)
./build/mmc compile "$M" --model WFVAEFit --dp 2 --precision "$PRECISION" -o "$RUN/trainer" &
./build/mmc compile "$M" --model WFVAEFit --set B=10 --task reconstruct -o "$RUN/reconstructor"
wait $!
compiled=$(date +%s)
# mpirun refuses root unless told (containers)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
if [ -z "${STEPS:-}" ]; then
  # the step time between steps 50 and 150 of a calibration run (its log's
  # samples_per_s is the mean since the start: elapsed(s) = 2 s / sps(s)),
  # 3% more for the evaluations and the speed's drift over a long run
  rm -f "$RUN/calibrate.jsonl"
  mpirun -np 2 --oversubscribe --bind-to none "$RUN/trainer" --steps 150 --threads 1 \
    --eval-batches 1 --quiet --log "$RUN/calibrate.jsonl" > /dev/null
  left=$((${BUDGET:-900} - ($(date +%s) - start) - ${SCORE_RESERVE:-40}))
  STEPS=$(awk -v left="$left" -F'[:,]' '
    /"loss"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"/) s = $(i + 1); if ($i ~ /"samples_per_s"/) r = $(i + 1) }
               if (s == 50) e50 = 2 * s / r; if (s == 150) e150 = 2 * s / r }
    END { if (e150 <= e50 || left <= 0) { print 0; exit }
          print int(left / (1.03 * (e150 - e50) / 100) / 100) * 100 }' "$RUN/calibrate.jsonl")
  if [ "$STEPS" -lt 1000 ]; then
    echo "wfvae.sh: $left s left for training is too little (the calibration in $RUN/calibrate.jsonl); set STEPS" >&2
    exit 1
  fi
fi
calibrated=$(date +%s)
echo "precision $PRECISION, $STEPS steps"
mpirun -np 2 --oversubscribe --bind-to none "$RUN/trainer" --steps "$STEPS" --threads 1 \
  --eval-every "${EVAL_EVERY:-1000}" --eval-batches 8 \
  --log "$RUN/metrics.jsonl" --save-weights "$RUN/weights.safetensors"
trained=$(date +%s)
"$RUN/reconstructor" --weights "$RUN/weights.safetensors" --clips "${CLIPS:-1000}" --no-chunks \
  --show "${SHOW:-4}" --out "$RUN/strips"
end=$(date +%s)
echo "wall time: compile $((compiled - start)) s, calibration $((calibrated - compiled)) s, training $((trained - calibrated)) s," \
  "scoring $((end - trained)) s, in all $((end - start)) s;" \
  "weights $RUN/weights.safetensors, strips in $RUN/strips"
