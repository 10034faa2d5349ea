#!/usr/bin/env bash
# Generation and evaluation executables (mmc compile --task generate|eval)
# of InternVL2Tiny, trained briefly here:
#   - greedy captions with the KV cache are the same tokens as without it
#     (--no-cache recomputes the whole text per token), on 64 test images;
#   - the eval executable's exact match equals the trainer's own greedy
#     evaluation (its @forward, no cache) on the same images;
#   - PyTorch, decoding greedily on its own from the same prefixes, gives
#     the same tokens, with the weights PyTorch exported (they load into the
#     trainer and the generator);
#   - PNG and IDX inputs of the same images give the same captions;
#   - LoRA: base weights + adapters give the fine-tuned model's captions;
#   - bad inputs are refused with a message naming the file.
set -euo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
DATA=${MMC_FMNIST:-/usr/share/datasets/fashion-mnist}
IMGS=$DATA/t10k-images-idx3-ubyte.gz
SRC=$MMC_SOURCE_DIR/stdlib_models/internvl2.mm

# @prefill and @decode print, parse and print again byte for byte
"$MMC" dump-ir "$SRC" --model InternVL2Tiny --task generate > gen.mmir
"$MMC" dump-ir gen.mmir > gen2.mmir
check "the generate module's IR round-trips (kv_write, attention_cached, place, rope at pos)" "cmp -s gen.mmir gen2.mmir"
check "@decode holds no vision op" "! sed -n '/^func @decode/,/^}/p' gen.mmir | grep -q 'vision\.'"
"$MMC" compile "$SRC" --model InternVL2Tiny -o train
"$MMC" compile "$SRC" --model InternVL2Tiny --task generate -o gen
"$MMC" compile "$SRC" --model InternVL2Tiny --task eval -o ev
./train --steps 250 --eval-batches 8 --save-weights w.safetensors --quiet > train.out 2>&1
cat train.out | grep eval:

# the KV cache changes nothing: the same tokens, the same score
./ev --weights w.safetensors --limit 64 --ids cache.ids --quiet > cache.out
./ev --weights w.safetensors --limit 64 --ids nocache.ids --no-cache --quiet > nocache.out
cat cache.out
check "64 test images: the same tokens with and without the KV cache" "cmp -s cache.ids nocache.ids"
check "the same exact match with and without the KV cache" "cmp -s cache.out nocache.out"
want=$("$MMC" plan "$SRC" --model InternVL2Tiny --task eval --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])')
got=$(sed -n 's/^allocated arena bytes: .*total=\([0-9]*\)$/\1/p' cache.out)
check "mmc plan --task eval peak ($want bytes, KV caches included) = the evaluator's arenas ($got)" "[ '$want' = '$got' ]"
gen_tokens=$(awk -F'\t' '{n += split($3, a, " ")} END {print n}' cache.ids)
check "captions were generated ($gen_tokens tokens)" "[ $gen_tokens -ge 128 ]"
tr_em=$(sed -n 's/.*caption exact match \([0-9.]*\).*/\1/p' train.out)
ev_em=$(sed -n 's/.*caption exact match \([0-9.]*\).*/\1/p' cache.out)
check "eval executable ($ev_em) = trainer's greedy evaluation ($tr_em) on the same 64 images" "[ '$tr_em' = '$ev_em' ]"

# PyTorch: its export loads into the generator and the trainer; its own decoding agrees
/usr/bin/python3 "$MMC_SOURCE_DIR/tests/torch/gen_parity.py" export w.safetensors torch.safetensors
./gen --weights torch.safetensors --images "$IMGS" --limit 24 --ids torch.ids --out torch.txt --quiet
./gen --weights w.safetensors --images "$IMGS" --limit 24 --ids mmc.ids --out mmc.txt --quiet
check "PyTorch-exported weights: the generator's captions are the mmc weights' ones" "cmp -s torch.ids mmc.ids"
./train --steps 0 --init-from torch.safetensors --eval-batches 8 --quiet > torch_train.out 2>&1
check "PyTorch-exported weights load into the trainer (same evaluation)" \
  "[ \"\$(grep eval: torch_train.out)\" = \"\$(grep eval: train.out)\" ]"
check "PyTorch decodes the same tokens from the same prefixes" \
  "/usr/bin/python3 '$MMC_SOURCE_DIR/tests/torch/gen_parity.py' check torch.safetensors '$IMGS' torch.ids"
head -3 mmc.txt

# PNG input: the first 3 test images as PNG files give the IDX captions
/usr/bin/python3 - "$IMGS" <<'PY'
import gzip, struct, sys, zlib
d = gzip.decompress(open(sys.argv[1], "rb").read())
for k in range(3):
    px = d[16 + k * 784:16 + (k + 1) * 784]
    raw = b"".join(b"\0" + px[r * 28:(r + 1) * 28] for r in range(28))
    chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) + \
          chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open("img%d.png" % k, "wb").write(png)
open("bad.png", "wb").write(open("img0.png", "rb").read()[:100])
PY
./gen --weights w.safetensors --images img0.png img1.png img2.png --out png.txt --quiet
check "PNG and IDX inputs give the same captions" "[ \"\$(cut -f2 png.txt)\" = \"\$(head -3 mmc.txt | cut -f2)\" ]"

# LoRA: base + adapters reload into the fine-tuned model
"$MMC" compile "$SRC" --model InternVL2TinyLoRA -o lora
"$MMC" compile "$SRC" --model InternVL2TinyLoRA --task generate -o lgen
./lora --steps 30 --init-from w.safetensors --save-adapters ad.safetensors --save-weights lw.safetensors \
  --eval-batches 1 --quiet > /dev/null 2>&1
./lgen --weights w.safetensors --load-adapters ad.safetensors --images "$IMGS" --limit 16 --ids l1.ids --quiet >/dev/null
./lgen --weights lw.safetensors --images "$IMGS" --limit 16 --ids l2.ids --quiet > /dev/null
check "LoRA: base + adapters generate as the fine-tuned weights do" "cmp -s l1.ids l2.ids"

# bad input: a clear message naming the file, exit 1, never a crash
expect_err() { # name, pattern, command...
  local name=$1 pat=$2; shift 2
  set +e; "$@" > err.out 2>&1; local rc=$?; set -e
  check "$name (exit $rc)" "[ $rc -eq 1 ] && grep -q -- \"$pat\" err.out"
}
expect_err "no --weights" "--weights FILE|DIR is required" ./gen --images img0.png
expect_err "truncated PNG" "bad.png" ./gen --weights w.safetensors --images bad.png
expect_err "a missing image" "nothere.png" ./gen --weights w.safetensors --images nothere.png
"$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/gpt2.mm" --model GPT2Tiny -o gpt
./gpt --steps 0 --save-weights gpt.safetensors --eval-batches 1 --quiet > /dev/null 2>&1
expect_err "another model's weights" "gpt.safetensors: no tensor" ./gen --weights gpt.safetensors --images img0.png
head -c 1000 w.safetensors > trunc.safetensors
expect_err "truncated weights" "trunc.safetensors" ./gen --weights trunc.safetensors --images img0.png
expect_err "a bad flag" "unknown option" ./ev --weights w.safetensors --frobnicate
expect_err "a prompt word outside the vocabulary" "unknown word" \
  ./gen --weights w.safetensors --images img0.png --prompt "what is the frobnicator ?"
expect_err "a prompt too long for the text" "no room for a caption" \
  ./gen --weights w.safetensors --images img0.png --prompt "what is this ? what is this ? what is this ?"
expect_err "an IDX label file as images" "neither a PNG file nor an IDX image file" \
  ./gen --weights w.safetensors --images "$DATA/t10k-labels-idx1-ubyte.gz"
expect_err "a model without a text to decode" "input text" \
  "$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/vit_fashion.mm" --model ViTFashion --task generate -o x
exit $fail
