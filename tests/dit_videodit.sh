#!/usr/bin/env bash
# VideoDiT and diffusion (stdlib_models/videodit.mm, diffusion.mm) on the
# text-to-video task (runtime/feeders/mmrt_feed_dit.c):
# 1. `mmc stats` of OSP13VideoDiT's DiT equals OpenSoraT2V_v1_3-2B/122's
#    parameter count from torch modules on the meta device, written from OSP's
#    __init__ (tests/torch/videoditref.py count_osp13): 2,771,981,600;
# 2. PyTorch parity of VideoDiTTiny (DDPM, v-prediction, zero-terminal-SNR,
#    min-SNR) and VideoDiTTinyFlow (flow matching): the reference of
#    tests/torch/videoditref.py (OSP's modules, diffusers' schedule in numpy),
#    the trainer's initial weights and batches (latents, captions, noise,
#    timesteps), 3 AdamW steps, the T5 encoder frozen: losses to 1e-5
#    relative, every tensor to 1e-3 of its update, frozen ones bit for bit;
#    and VideoDiTTinyPooled (VideoDiT pooled = 1: the mean text feature in
#    AdaLN-single); pooled = 2 is refused at the model's line;
# 3. the DDPM module against independent formulas to 1e-6
#    (tests/dit/ddpm_probe.mm, tests/torch/videodit_formulas.py): the whole
#    table (sqrt(abar), sqrt(1 - abar), min-SNR weight), x_t, the v target,
#    the weighted loss's gradient; zero SNR at the last step; the captions of
#    20 steps (about 10% null for classifier-free guidance);
# 4. the draws are the trainer's Philox stream: 3 steps, then --resume to 6,
#    gives the straight 6-step run's losses and weights bit for bit.
set -euo pipefail
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "python3-torch is not installed (tools/setup.sh installs it)"; exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
S="$MMC_SOURCE_DIR/stdlib_models"
P="$MMC_SOURCE_DIR/tests/torch"
fail=0

mmc_count=$("$MMC" stats "$S/videodit.mm" --model OSP13VideoDiT | awk '$1 == "dit" {print $2}')
ref_count=$(/usr/bin/python3 -c "import sys; sys.path.insert(0, '$P'); import videoditref
print(videoditref.count_osp13())")
echo "OpenSoraT2V_v1_3-2B/122: mmc stats $mmc_count, torch meta-device count $ref_count"
[ "$mmc_count" = "$ref_count" ] || { echo "FAIL: the counts differ"; fail=1; }

# VideoDiTTiny's kernels at the default -O3 (LLVM's -O3 is 11 of its 12 s
# compile); the flow-matching and pooled variants, the same kernels, at -O1
for m in VideoDiTTiny VideoDiTTinyFlow VideoDiTTinyPooled; do
  o=(); [ $m = VideoDiTTiny ] || o=(-O1)
  "$MMC" compile "$S/videodit.mm" --model $m "${o[@]}" -o $m
  ./$m --steps 0 --save-weights $m.init.st --eval-batches 1 --quiet > /dev/null 2>&1
  ./$m --steps 3 --save-weights $m.final.st --dump-inputs $m.in --log $m.jsonl --eval-batches 1 --quiet > /dev/null 2>&1
  /usr/bin/python3 "$P/t5_parity.py" "$S/videodit.mm" $m $m.init.st $m.in $m.jsonl $m.final.st 3 || fail=1
done

printf 'import "videodit.mm"\nmodel P2 extends VideoDiTTiny {\n  dit = VideoDiT(channels = 8, frames = 5, height = 8, width = 8, depth = 1, heads = 2,\n    head_dim = 24, text_dim = 32, pooled = 2)\n}\n' > p2.mm
if "$MMC" compile -I "$S" p2.mm --model P2 -o p2 > p2.txt 2>&1; then
  echo "FAIL: VideoDiT pooled = 2 compiled"; fail=1
elif grep -q "videodit.mm:[0-9]*:[0-9]*: error: VideoDiT takes pooled = 0" p2.txt; then
  echo "ok: pooled = 2 refused: $(grep -m1 'VideoDiT takes' p2.txt)"
else
  echo "FAIL: pooled = 2: $(cat p2.txt)"; fail=1
fi

"$MMC" compile -I "$S" "$MMC_SOURCE_DIR/tests/dit/ddpm_probe.mm" -o probe
./probe --steps 1 --save-weights probe.st --dump-inputs probe.in --eval-batches 1 --quiet > /dev/null 2>&1
./probe --steps 20 --dump-inputs probe20.in --eval-batches 1 --quiet > /dev/null 2>&1
/usr/bin/python3 "$P/videodit_formulas.py" probe.st probe.in/step-000001.safetensors probe20.in || fail=1

A=(--eval-batches 1 --quiet)
./VideoDiTTiny --steps 6 "${A[@]}" --log a.jsonl --save-weights a.st > /dev/null
./VideoDiTTiny --steps 3 "${A[@]}" --ckpt ck > /dev/null
./VideoDiTTiny --steps 6 "${A[@]}" --ckpt ck --resume --log b.jsonl --save-weights b.st > /dev/null
la=$(grep -o '"step": *[4-6][^}]*"loss": *[^,}]*' a.jsonl || true)
lb=$(grep -o '"step": *[4-6][^}]*"loss": *[^,}]*' b.jsonl || true)
if [ -n "$la" ] && [ "$la" = "$lb" ] && cmp -s a.st b.st; then
  echo "resume: steps 4-6 after --resume equal the straight run (losses and weights bit for bit) ok"
else
  echo "FAIL: resume: straight [$la] resumed [$lb]"; fail=1
fi
exit $fail
