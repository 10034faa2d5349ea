#!/usr/bin/env bash
# tools/t2v.sh: the text-to-video run end to end (README "Sampling"):
#   1. the frame classifier FrameCNN (stdlib_models/frame_classifier.mm,
#      FrameCNNFit: a small CNN) on frames of train-split clips, half of each
#      batch as 4x4 block means; its accuracy on held-out clips' frames as
#      they are (FrameCNNReal) and as block means (FrameCNNBlocks);
#   2. the DiT: VideoDiTSmall (stdlib_models/videodit.mm) on the DiT task
#      (its latents are still the task's stand-in downsample for the WF-VAE
#      encoder, standardised by the model, so there are no offline features
#      to extract on this route);
#   3. sampling with T2VStandIn (stdlib_models/t2v_sample.mm: the DiT's
#      weights, the stand-in's exact inverse as decode, the classifier) for
#      10 prompts per class (the 10 classes x 8 directions' captions, taken
#      in turn), classifying every frame: the fraction named as the prompted
#      class, samples/s, the wall time of each stage, one PNG strip.
# Usage: tools/t2v.sh [OUT] with, in the environment (defaults in brackets):
#   CLS_STEPS [2000] classifier steps, DIT_STEPS [9200] DiT steps,
#   CLIPS [1000] sampled clips (a multiple of 100: 10 prompts x 10 classes),
#   SAMPLE_STEPS [25], SCHEDULER [ddpm: ancestral; or ddim], GUIDANCE [4],
#   MMC [build/mmc], NICE [10];
#   VAE_WEIGHTS (a WFVAEFit weights file: tools/wfvae.sh's
#   runs/wfvae/weights.safetensors): then the DiT is T2VFit
#   (stdlib_models/t2v.mm) on WF-VAE latents instead: `--task extract`
#   writes FEAT_CLIPS [16384] clips' latents and text features once, the
#   trainer reads them (--features), and the sampler is T2VFitSample (the
#   WF-VAE decoder from VAE_WEIGHTS).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-t2v_run}
MMC=${MMC:-$SRC/build/mmc}
CLS_STEPS=${CLS_STEPS:-2000}
DIT_STEPS=${DIT_STEPS:-9200}
CLIPS=${CLIPS:-1000}
SAMPLE_STEPS=${SAMPLE_STEPS:-25}
SCHEDULER=${SCHEDULER:-ddpm}
GUIDANCE=${GUIDANCE:-4}
NICE=${NICE:-10}
VAE_WEIGHTS=${VAE_WEIGHTS:-}
FEAT_CLIPS=${FEAT_CLIPS:-16384}
[ -z "$VAE_WEIGHTS" ] || VAE_WEIGHTS=$(realpath "$VAE_WEIGHTS")
[ $((CLIPS % 100)) = 0 ] || { echo "t2v.sh: CLIPS must be a multiple of 100 (10 prompts x 10 classes), not $CLIPS"; exit 1; }
mkdir -p "$OUT"
cd "$OUT"
S="$SRC/stdlib_models"
run() { nice -n "$NICE" "$@"; }
t0=$(date +%s)
stamp() { echo "t2v.sh: $1 done at +$(($(date +%s) - t0)) s"; }

"$MMC" compile "$S/frame_classifier.mm" --model FrameCNNFit -o frame_cnn
run ./frame_cnn --steps "$CLS_STEPS" --save-weights frame_cnn.st --log frame_cnn.jsonl \
  --eval-batches 1 --quiet > /dev/null
# its accuracy on held-out clips' frames (3,200 of them) as they are and as
# 4x4 block means (the stand-in latents' resolution)
for m in FrameCNNReal FrameCNNBlocks; do
  "$MMC" compile "$S/frame_classifier.mm" --model $m -o $m
  echo "$m: $(run ./$m --steps 0 --init-from frame_cnn.st --eval-batches 50 --quiet | grep ^eval)"
done | tee classifier.txt
stamp "classifier ($CLS_STEPS steps)"

if [ -n "$VAE_WEIGHTS" ]; then
  # WF-VAE latents (T2VFit: WFVAEFit's encoder, VideoDiTSmall's DiT): the
  # frozen encoders once over FEAT_CLIPS clips, their latents' mean and
  # standard deviation (the DiT diffuses the standardised latents), then the
  # DiT from the features on two data-parallel one-thread ranks
  "$MMC" compile "$S/t2v.mm" --model T2VFit --task extract -o extract
  run ./extract --init-from "$VAE_WEIGHTS" --clips "$FEAT_CLIPS" --out feats
  read -r LAT_MEAN LAT_STD < <(/usr/bin/python3 - feats <<'PY'
import glob, json, struct, sys
import numpy as np
s = n = q = 0.0
for f in sorted(glob.glob(sys.argv[1] + "/train-*.safetensors")):
    with open(f, "rb") as fh:
        k = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(k))
        a, b = h["latents"]["data_offsets"]
        fh.seek(8 + k + a)
        x = np.frombuffer(fh.read(b - a), dtype=np.float32).astype(np.float64)
    s, q, n = s + x.sum(), q + (x * x).sum(), n + x.size
m = s / n
print("%.6g %.6g" % (m, (q / n - m * m) ** 0.5))
PY
)
  echo "t2v.sh: WF-VAE latents: mean $LAT_MEAN, standard deviation $LAT_STD"
  SETS=(--set "lat_mean=$LAT_MEAN" --set "lat_std=$LAT_STD")
  stamp "features ($FEAT_CLIPS clips)"
  "$MMC" compile "$S/t2v.mm" --model T2VFit "${SETS[@]}" --dp 2 -o dit
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  run mpirun -np 2 --oversubscribe --bind-to none ./dit --threads 1 --steps "$DIT_STEPS" \
    --eval-every "$DIT_STEPS" --eval-batches 10 --features feats --save-weights dit.st \
    --log dit.jsonl | grep -E "^eval|^step +$DIT_STEPS/"
  stamp "DiT ($DIT_STEPS steps, from the features)"
  "$MMC" compile "$S/t2v_sample.mm" --model T2VFitSample "${SETS[@]}" --task sample -o sampler
  DEC=(--weights "$VAE_WEIGHTS")
else
  # two data-parallel ranks of one thread each (the batch of 16 split 8 + 8,
  # the same losses): 7% more samples/s than one rank of two threads here
  "$MMC" compile "$S/videodit.mm" --model VideoDiTSmall --dp 2 -o dit
  # mpirun refuses root unless told (containers)
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  run mpirun -np 2 --oversubscribe --bind-to none ./dit --threads 1 --steps "$DIT_STEPS" \
    --eval-every "$DIT_STEPS" --eval-batches 10 --save-weights dit.st --log dit.jsonl |
    grep -E "^eval|^step +$DIT_STEPS/"
  stamp "DiT ($DIT_STEPS steps)"
  "$MMC" compile "$S/t2v_sample.mm" --model T2VStandIn --task sample -o sampler
  DEC=()
fi
# the prompts: for each class, 10 captions over its 8 directions in turn
# (mmrt_video_caption: the caption task's class name, "moving", the direction)
names=("a t-shirt" "a pair of trousers" "a pullover" "a dress" "a coat" "a sandal" "a shirt"
  "a sneaker" "a bag" "an ankle boot")
dirs=(left right up down up-left up-right down-left down-right)
for l in 0 1 2 3 4 5 6 7 8 9; do
  for k in 0 1 2 3 4 5 6 7 8 9; do echo "${names[$l]} moving ${dirs[$((k % 8))]}"; done
done > prompts.txt
run ./sampler --weights dit.st "${DEC[@]}" --weights frame_cnn.st --prompts prompts.txt \
  --clips $((CLIPS / 100)) --steps "$SAMPLE_STEPS" --scheduler "$SCHEDULER" --guidance "$GUIDANCE" \
  --seed 1 --show 10 --out samples --quiet | tee sample.txt
stamp "sampling ($CLIPS clips)"
echo "t2v.sh: total $(($(date +%s) - t0)) s; one clip's PNG strip: $OUT/samples/sample_00000.png"
