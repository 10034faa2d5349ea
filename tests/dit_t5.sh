#!/usr/bin/env bash
# The T5 text encoder (stdlib_models/t5.mm):
# 1. `mmc stats` of MT5XXLEncoder's encoder (`text`) equals the parameter
#    count of a T5 v1.1 encoder at google/mt5-xxl's published sizes, counted
#    from torch modules on the meta device (tests/torch/t5ref.py), 5,655,173,120;
# 2. PyTorch parity of T5Tiny (tests/torch/t5ref.py, written from Hugging
#    Face's modeling_t5.py: relative-position buckets, T5LayerNorm, gated
#    GELU): the trainer's initial weights and batches, 3 AdamW steps, losses
#    to 1e-5 relative, every tensor to 1e-3 of its update (parity.py).
# 3. the padding mask: VideoDiTTinyT5 (stdlib_models/videodit.mm, the T5
#    trained through the DiT's loss) on the DiT task's captions, which have
#    unequal lengths (checked in the dumped ids) and are padded with PAD 0:
#    PyTorch parity with Hugging Face's extended attention mask in the T5 and
#    a key-padding mask in the DiT's cross-attention, 3 AdamW steps, losses
#    to 1e-5 relative, every tensor (the T5's too) to 1e-3 of its update.
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

mmc_count=$("$MMC" stats "$S/t5.mm" --model MT5XXLEncoder | awk '$1 == "text" {print $2}')
ref_count=$(/usr/bin/python3 -c "import sys; sys.path.insert(0, '$P'); import t5ref
print(t5ref.count_t5_encoder(vocab=250112, d_model=4096, d_kv=64, heads=64, d_ff=10240, layers=24, buckets=32))")
echo "mT5-XXL encoder: mmc stats $mmc_count, torch meta-device count $ref_count"
[ "$mmc_count" = "$ref_count" ] || { echo "FAIL: the counts differ"; fail=1; }

"$MMC" compile "$S/t5.mm" --model T5Tiny -o t5tiny
./t5tiny --steps 0 --save-weights init.st --eval-batches 1 --quiet > /dev/null 2>&1
./t5tiny --steps 3 --save-weights final.st --dump-inputs in --log log.jsonl --eval-batches 1 --quiet > /dev/null 2>&1
/usr/bin/python3 "$P/t5_parity.py" "$S/t5.mm" T5Tiny init.st in log.jsonl final.st 3 || fail=1

m=VideoDiTTinyT5
"$MMC" compile "$S/videodit.mm" --model $m -O1 -o $m  # -O1: half the compile time
./$m --steps 0 --save-weights $m.init.st --eval-batches 1 --quiet > /dev/null 2>&1
./$m --steps 3 --save-weights $m.final.st --dump-inputs $m.in --log $m.jsonl --eval-batches 1 --quiet > /dev/null 2>&1
/usr/bin/python3 - "$P" $m.in <<'PY' || fail=1
import glob, sys
sys.path.insert(0, sys.argv[1])
import mmref
lens = set()
for f in glob.glob(sys.argv[2] + "/step-*.safetensors"):
    for row in mmref.st_load(f)[0]["text"]:
        lens.add(int((row != 0).sum()))
print("caption lengths (tokens before padding) in the dumped batches:", sorted(lens))
sys.exit(0 if len(lens) > 1 and min(lens) < 8 else "FAIL: the captions are not of unequal, padded lengths")
PY
/usr/bin/python3 "$P/t5_parity.py" "$S/videodit.mm" $m $m.init.st $m.in $m.jsonl $m.final.st 3 || fail=1
exit $fail
