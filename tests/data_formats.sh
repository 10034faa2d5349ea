#!/usr/bin/env bash
# Data formats (ir/data_formats.def, docs/data.md "Data formats"): a model
# whose data section declares format = fmnist_classify trains with the same
# losses as the same model without a data section (found by trying the
# feeders), and the start line says which; a declared format skips the trial
# (an ids/labels model declared fmnist_pixels is not taken by the text
# feeder for a .jsonl --data); the declared format's feeder refusing the
# model, its own refusals and text with a folder each stop the trainer with
# a message naming the format; every stdlib model that trains on
# Fashion-MNIST or clips declares its format.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0
ok() { pass=$((pass+1)); }
no() { echo "FAIL $*"; fail=$((fail+1)); }
expect() { # name expected-status command...
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err"; local got=$?
  if [ "$got" -eq "$want" ]; then ok; else no "$name: exit $got, expected $want"; head -5 "$T/err"; fi
}
contains() { # name file text
  if grep -qF -- "$3" "$2"; then ok; else no "$1: '$3' not in $(basename "$2")"; head -5 "$2"; fi
}
cd "$T" || exit 1
cat > c.mm <<'MM'
import "nn.mm"
model Declared {
  let B = 8
  head = Linear(784, 10)
  forward(pixels: f32[B, 1, 28, 28], labels: i32[B]) -> loss {
    return cross_entropy(head(pixels.flatten(1)), labels)
  }
  data { format = fmnist_classify }
}
model Tried {
  let B = 8
  head = Linear(784, 10)
  forward(pixels: f32[B, 1, 28, 28], labels: i32[B]) -> loss {
    return cross_entropy(head(pixels.flatten(1)), labels)
  }
}
model Pixels {
  let B = 2
  emb = Embedding(256, 8)
  forward(ids: i32[B, 8], labels: i32[B, 8]) -> loss { return mean(emb(ids)) }
  data { format = fmnist_pixels }
}
model Odd {
  let B = 2
  emb = Embedding(256, 8)
  forward(ids: i32[B, 8], labels: i32[B, 4]) -> loss { return mean(emb(ids)) }
  data { format = fmnist_pixels }
}
model Long {
  let B = 2
  emb = Embedding(256, 8)
  forward(ids: i32[B, 800], labels: i32[B, 800]) -> loss { return mean(emb(ids)) }
  data { format = fmnist_pixels }
}
model Text {
  let B = 2
  emb = Embedding(256, 8)
  forward(ids: i32[B, 8], labels: i32[B, 8]) -> loss { return mean(emb(ids)) }
  data { format = text }
}
MM
for m in Declared Tried Pixels Odd Long Text; do
  expect "compile $m" 0 "$MMC" compile c.mm --model "$m" -o "$m"
done
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
expect "train Declared" 0 ./Declared --steps 3 --eval-batches 1 --log d.jsonl
contains "declared start line" "$T/err" "model Declared, classification data (format fmnist_classify), batch 8"
expect "train Tried" 0 ./Tried --steps 3 --eval-batches 1 --log t.jsonl
contains "tried start line" "$T/err" \
  "model Tried, classification data (no data format declared: the first feeder that took the inputs), batch 8"
[ "$(losses d.jsonl | wc -l)" = 3 ] && [ "$(losses d.jsonl)" = "$(losses t.jsonl)" ] && ok ||
  no "declared and tried losses differ: $(losses d.jsonl | tr '\n' ' ') / $(losses t.jsonl | tr '\n' ' ')"
# a declared format is not found by trying: a .jsonl --data would have gone to the text feeder
printf '{"text": "a"}\n' > one.jsonl
expect "declared fmnist_pixels, --data FILE.jsonl" 1 ./Pixels --data one.jsonl --steps 1
if grep -qF "rows of text" "$T/err" || grep -qF "tokenizer" "$T/err"; then
  no "Pixels with --data one.jsonl reached the text feeder: $(head -1 "$T/err")"
else ok; fi
expect "Pixels trains on Fashion-MNIST" 0 ./Pixels --steps 1 --eval-batches 1
contains "Pixels start line" "$T/err" "next-pixel data (format fmnist_pixels)"
expect "the format's feeder refuses" 1 ./Odd --steps 1
contains "the format's feeder refuses" "$T/err" \
  "model Odd declares data format fmnist_pixels (next-pixel data), but its inputs (ids I32[2, 8], labels I32[2, 4], lr F32[], step F32[]) are not the format's: expected ids and labels I32[B, T]; B = 2"
expect "the feeder's own refusal" 1 ./Long --steps 1
contains "the feeder's own refusal" "$T/err" "model Long reads sequences of 800 tokens; an image has only 783 pixel bytes"
expect "text with a folder" 1 ./Text --data "$T" --steps 1
contains "text with a folder" "$T/err" "model Text declares data format text, but --data $T is not text"
# every stdlib model that trains on Fashion-MNIST or clips declares its format
for fm in vit_fashion:ViTFashion:fmnist_classify internvl2:InternVL2TinyLoRA:fmnist_captions \
  frame_classifier:FrameCNNBlocks:clips_frames t2v:T2VFit:t2v_diffusion \
  videodit:VideoDiTTinyFlow:t2v_diffusion wfvae:WFVAEFit:clips_video gpt2:GPT2TinyPacked:text; do
  IFS=: read -r f m want <<< "$fm"
  expect "dump-ir $m" 0 "$MMC" dump-ir "$S/$f.mm" --model "$m"
  grep -qxF "data(format = $want)" "$T/out" && ok || no "$m: no line data(format = $want)"
done
echo "data_formats: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
