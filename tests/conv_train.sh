#!/usr/bin/env bash
# The trainer on conversation data (data { format = conversation },
# runtime/feeders/mmrt_feed_conv.c): InternVL2TinyConv trains on the 200
# samples of tests/conv_ref/make.py (0-4 PNG/JPEG images of mixed sizes,
# 1 to 12 tiles a sample) from --data, --images and --tokenizer:
#  - the first batch's text and labels (--dump-inputs) equal
#    tests/conv_ref/ref.py's ids and label mask of the same samples (the
#    labels the next token's id on assistant replies, -100 elsewhere), and
#    its pixels hold as many non-zero tiles as the reference's tile counts;
#  - serial and dp=2 (mpirun) give the same losses (1e-5);
#  - 10 steps, then a resume to 20, give the losses of 20 straight;
#  - mmc plan reports the maximum of tiles the plan is of;
#  - bad data: a missing image, a corrupt one, a wrong placeholder count,
#    more tokens than T, more tiles than the model's K: exit 1 with a
#    message naming the file, line and sample; a chat family whose image
#    token is not the model's refused; --bad-samples skip trains
#    on, the count in the log's skipped_samples.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
hf_script tokenizers
R="$MMC_SOURCE_DIR/tests/conv_ref"
cd "$T" || exit 1
"$PY" "$R/make.py" "$T" || { echo "FAIL the fixtures"; echo "0 passed, 1 failed"; exit 1; }
M="$MMC_SOURCE_DIR/stdlib_models/internvl2.mm"
"$MMC" compile "$M" --model InternVL2TinyConv -o tr > /dev/null &&
  "$MMC" compile "$M" --model InternVL2TinyConv --dp 2 -o tr2 > /dev/null ||
  { echo "FAIL compile"; echo "0 passed, 1 failed"; exit 1; }
"$MMC" plan "$M" --model InternVL2TinyConv > plan.out 2>&1
grep -q "tiles  12 a sample, the most (pixels f32\[B, 12, 3, 28, 28\])" plan.out && ! grep -q "Fashion-MNIST" plan.out &&
  ok || no "mmc plan: no tiles line: $(head -c 300 plan.out)"
D=(--data conv.jsonl --images img --tokenizer tok.json --max-tiles 2 --quiet --eval-batches 2)
STEPS=20 DROP=0.3
[ "$SAN" = 1 ] && STEPS=6 DROP=0.1 # ASan+UBSan: fewer steps, a smaller fall

# ---- the first batch against the reference ----
./tr "${D[@]}" --steps 1 --dump-inputs dump > first.out 2>&1 || { no "first batch: $(tail -2 first.out)"; }
"$PY" "$R/ref.py" conv.jsonl tok.json img internvl2 tiles:28:2:4 > ref.out 2> ref.err ||
  no "the reference failed: $(head -2 ref.err)"
"$PY" - dump/step-000001.safetensors ref.out 160 12 > cmp.out 2>&1 <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def get(name, fmt):
    h = head[name]
    a, b = h["data_offsets"]
    buf = raw[8 + n + a:8 + n + b]
    return list(struct.unpack("<%d%s" % (len(buf) // 4, fmt), buf)), h["shape"]
text, ts = get("text", "i")
labels, _ = get("labels", "i")
px, ps = get("pixels", "f")
T, K = int(sys.argv[3]), int(sys.argv[4])
refs = [json.loads(l) for l in open(sys.argv[2])]
B, tile = ts[0], 3 * 28 * 28
bad = 0
for r in range(B):
    row, lab = text[r * T:(r + 1) * T], labels[r * T:(r + 1) * T]
    hits = [s for s in refs if row[:len(s["ids"])] == s["ids"] and all(v == 0 for v in row[len(s["ids"]):])]
    if not hits:
        print("row %d: no reference sample has these ids" % r); bad += 1; continue
    s = hits[0]
    want = [s["ids"][j + 1] if j + 1 < len(s["ids"]) and s["mask"][j + 1] == "1" else -100 for j in range(T)]
    if lab != want:
        print("row %d (sample %s): labels differ" % (r, s["sample"])); bad += 1
    tiles = sum(s["tiles"])
    nz = [any(v != 0 for v in px[(r * K + k) * tile:(r * K + k + 1) * tile]) for k in range(K)]
    if nz != [k < tiles for k in range(K)]:
        print("row %d: non-zero tiles %s, the reference's %d" % (r, nz, tiles)); bad += 1
    print("row %d = sample %s: %d ids, %d labels, %d tiles" % (r, s["sample"], len(s["ids"]), s["mask"].count("1"), tiles))
sys.exit(1 if bad or B != 4 else 0)
EOF
if [ $? -eq 0 ]; then ok; else no "first batch against the reference:"; cat cmp.out; fi

# ---- serial against dp=2, and a resume ----
losses() { "$PY" -c "
import json, sys
print(' '.join('%.7f' % json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l and 'eval' not in l))" "$1"; }
close() { "$PY" -c "
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
sys.exit(0 if len(a) == len(b) > 0 and max(abs(x - y) for x, y in zip(a, b)) <= 1e-5 else 1)" "$1" "$2"; }
./tr "${D[@]}" --steps $STEPS --log serial.jsonl > serial.out 2>&1 || no "serial: $(tail -2 serial.out)"
timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x LSAN_OPTIONS -np 2 ./tr2 "${D[@]}" --steps $STEPS \
  --log dp.jsonl > dp.out 2>&1 || no "dp=2: $(tail -3 dp.out)"
a=$(losses serial.jsonl) b=$(losses dp.jsonl)
if close "$a" "$b" && [ "$(echo "$a" | wc -w)" = $STEPS ]; then ok; else no "serial and dp=2 losses differ: $a / $b"; fi
"$PY" -c "
import sys; a = list(map(float, sys.argv[1].split())); sys.exit(0 if a[-1] < a[0] - float(sys.argv[2]) else 1)" "$a" "$DROP" && ok ||
  no "the loss does not fall: $a"
H=$((STEPS / 2))
./tr "${D[@]}" --steps $H --ckpt ck --ckpt-every $H --log r1.jsonl > r1.out 2>&1 &&
  ./tr "${D[@]}" --steps $STEPS --ckpt ck --resume --log r2.jsonl > r2.out 2>&1 || no "resume: $(tail -2 r2.out)"
r="$(losses r1.jsonl) $(losses r2.jsonl)"
close "$a" "$r" && ok || no "10 steps and a resume differ from 20 straight: $r / $a"

# ---- bad data through the trainer ----
G='{"id": "g", "image": "i01.png", "conversations": [{"from": "human", "value": "<image> ok"}, {"from": "gpt", "value": "yes"}]}'
mk() { { for _ in 1 2 3 4 5; do printf '%s\n' "$G"; done; printf '%s\n' "$1"; } > "$2"; }
bad() { # name file message
  ./tr --data "$2" --images img --tokenizer tok.json --max-tiles 2 --quiet --steps 2 > bad.out 2>&1
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$3" bad.out && ! grep -q "^step" bad.out; then ok; else
    no "$1: exit $rc, or '$3' not in: $(head -c 300 bad.out)"; fi
}
mk '{"id": "m", "image": "nope.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "a"}]}' missing.jsonl
bad "missing image" missing.jsonl "missing.jsonl:6: sample 5 (id \"m\"): image[0] 'nope.png': img/nope.png"
head -c 200 img/i01.png > img/cut.png
mk '{"id": "c", "image": ["i01.png", "cut.png"], "conversations": [{"from": "human", "value": "<image><image>"}, {"from": "gpt", "value": "a"}]}' corrupt.jsonl
bad "corrupt image" corrupt.jsonl "corrupt.jsonl:6: sample 5 (id \"c\"): image[1] 'cut.png': "
mk '{"id": 7, "image": "i01.png", "conversations": [{"from": "human", "value": "<image> <image>"}, {"from": "gpt", "value": "a"}]}' holders.jsonl
bad "placeholders" holders.jsonl "holders.jsonl:6: sample 5 (id \"7\"): conversations: 2 <image> placeholders for 1 image"
W=$(printf 'cat dog %.0s' $(seq 100))
mk "{\"id\": \"long\", \"image\": \"i01.png\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image> $W\"}, {\"from\": \"gpt\", \"value\": \"a\"}]}" long.jsonl
bad "longer than T" long.jsonl "long.jsonl:6: sample 5 (id \"long\"): "
grep -q "image tokens) exceed the sequence length 160" bad.out && ok || no "longer than T: $(head -c 300 bad.out)"
I5=$(for _ in 1 2 3 4 5; do printf '"i14.png", '; done)
mk "{\"id\": \"wide\", \"image\": [${I5%, }], \"conversations\": [{\"from\": \"human\", \"value\": \"<image><image><image><image><image> x\"}, {\"from\": \"gpt\", \"value\": \"a\"}]}" tiles.jsonl
bad "more tiles than K" tiles.jsonl "tiles.jsonl:6: sample 5 (id \"wide\"): 15 tiles (60 image tokens) exceed the model's 12 tiles per sample"
cat missing.jsonl corrupt.jsonl holders.jsonl long.jsonl tiles.jsonl > mixed.jsonl
./tr --data mixed.jsonl --images img --tokenizer tok.json --max-tiles 2 --quiet --steps 2 \
  --bad-samples skip --log skip.jsonl > skip.out 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '"skipped_samples": 5' skip.jsonl && [ "$(grep -c '(skipped)' skip.out)" = 5 ]; then ok
else no "--bad-samples skip: exit $rc, $(grep -o '"skipped_samples": [0-9]*' skip.jsonl | head -1)"; head -3 skip.out; fi
# a chat family whose image token is not the model's place token
./tr --data conv.jsonl --images img --tokenizer tok.json --chat chatml --quiet --steps 1 > chat.out 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "conv.jsonl: the tokenizer's image context token is id 7, but model InternVL2TinyConv places its image features at token 6" chat.out &&
  ok || no "--chat chatml on a model of <IMG_CONTEXT>: exit $rc, $(head -c 300 chat.out)"
# without --images the names are relative to the current folder: not found, by name
./tr --data conv.jsonl --tokenizer tok.json --quiet --steps 1 > noimg.out 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "conv.jsonl:1: sample 0 (id \"0\"): image\[0\] 'i[0-9]*.png': ./i" noimg.out && ok ||
  no "no --images: exit $rc, $(head -c 200 noimg.out)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
