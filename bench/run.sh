#!/usr/bin/env bash
# Training-step speed of mmc against PyTorch (Debian's python3-torch, fp32,
# same model, batch and threads), side by side: ms/step for each and the
# ratio mmc/PyTorch (below 1: mmc is faster). A benchmark, not a test.
# Usage: bench/run.sh [STEPS]   (run from anywhere; builds nothing: needs build/mmc)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
STEPS=${1:-20}
THREADS=${THREADS:-$(nproc)}
export OMP_NUM_THREADS=$THREADS
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
printf "%-12s %-10s %12s %12s %8s\n" model "B x T" "mmc ms" "torch ms" ratio
for spec in "gpt2.mm GPT2 4 64" "gpt2.mm GPT2Tiny 4 32" "vit_fashion.mm ViTFashion 64 0"; do
  set -- $spec
  file=$1 model=$2 B=$3 S=$4
  sets=(--set B=$B); [ "$S" != 0 ] && sets+=(--set T=$S)
  "$MMC" compile "$ROOT/stdlib_models/$file" --model "$model" "${sets[@]}" -o "$model"
  ./"$model" --steps 0 --ckpt init --eval-batches 1 --quiet > /dev/null 2>&1
  ./"$model" --steps $((STEPS + 3)) --log "$model.jsonl" --eval-batches 1 --quiet > /dev/null 2>&1
  mmc_ms=$(/usr/bin/python3 - "$model.jsonl" "$B" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
# samples_per_s is the running average since the first step: difference the last two windows
a, b = rows[2], rows[-1]
B = int(sys.argv[2])
print("%.2f" % ((b["step"] * B / b["samples_per_s"] - a["step"] * B / a["samples_per_s"]) / (b["step"] - a["step"]) * 1000))
PY
)
  seq=(); [ "$S" != 0 ] && seq=(--seq "$S")
  torch_ms=$(/usr/bin/python3 "$ROOT/bench/torch_step.py" "$model" "init/$(cat init/latest)/rank-00000.safetensors" --batch "$B" "${seq[@]}" \
             --steps "$STEPS" --threads "$THREADS" | /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["ms_per_step"])')
  ratio=$(/usr/bin/python3 -c "print('%.2f' % ($mmc_ms / $torch_ms))")
  printf "%-12s %-10s %12s %12s %8s\n" "$model" "$B x $S" "$mmc_ms" "$torch_ms" "$ratio"
  rm -rf init
done
