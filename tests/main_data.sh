#!/usr/bin/env bash
# The main job's captioner data (tools/fmnist_conv/, tools/main.sh):
#  - make_tokenizer.py (the tok venv's `tokenizers`) remakes the committed
#    tokenizer.json byte for byte, with <image> at id 7 (InternVL2TinyFashion's
#    IMG) and 120 ids (its V);
#  - make_data.py on the first 200 + 50 Fashion-MNIST images: each PNG,
#    decoded by PIL (hf venv), equals the IDX file's pixels; each answer is
#    the class name of the IDX label; the test split asks one phrasing, the
#    train split several;
#  - mmc data conv reads them under chatml: every sample within T = 24, one
#    tile of 4 image tokens;
#  - InternVL2TinyFashion trains 20 steps from the files and the loss falls.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
PY="${MMC_HF_VENV:-/var/cache/mmc-venv-hf}/bin/python"
TOKPY="${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}/bin/python"
if ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf || ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" tok; then
  echo "FAIL: no hf or tok venv (tools/test_venvs.sh needs PyPI)"
  echo "0 passed, 1 failed"
  exit 1
fi
F="$MMC_SOURCE_DIR/tools/fmnist_conv"
FM=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
pass=0 fail=0 T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ok() { ((pass += 1)); }
no() { ((fail += 1)); echo "FAIL $*"; }
cd "$T" || exit 1

"$TOKPY" "$F/make_tokenizer.py" tok.json 2> tok.err || no "make_tokenizer.py: $(tail -2 tok.err)"
cmp -s tok.json "$F/tokenizer.json" && ok || no "make_tokenizer.py does not remake the committed tokenizer.json"
"$TOKPY" -c "
import json, sys; t = json.load(open(sys.argv[1]))
sys.exit(0 if len(t['model']['vocab']) == 120 and t['model']['vocab']['<image>'] == 7 else 1)" "$F/tokenizer.json" &&
  ok || no "the tokenizer: not 120 ids with <image> at 7"

python3 "$F/make_data.py" "$FM" d 200 50 2> mk.err || no "make_data.py: $(tail -2 mk.err)"
"$PY" - "$FM" d > chk.out 2>&1 <<'EOF'
import gzip, json, os, sys
from PIL import Image
fm, d = sys.argv[1:3]
names = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle boot"]
bad = 0
for split, img, lab in [("train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                        ("test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]:
    px = gzip.open(os.path.join(fm, img)).read()[16:]
    lb = gzip.open(os.path.join(fm, lab)).read()[8:]
    rows = [json.loads(l) for l in open(os.path.join(d, split + ".jsonl"))]
    qs = set()
    for i, r in enumerate(rows):
        im = Image.open(os.path.join(d, "img", r["image"]))
        if im.mode != "L" or im.size != (28, 28) or im.tobytes() != px[i * 784:(i + 1) * 784]:
            print("%s %d: the PNG is not the IDX image" % (split, i)); bad += 1
        c = r["conversations"]
        if c[1]["value"] != names[lb[i]] or not c[0]["value"].startswith("<image>\n"):
            print("%s %d: %s" % (split, i, c)); bad += 1
        qs.add(c[0]["value"])
    print(split, len(rows), "samples,", len(qs), "phrasings")
    if (split == "train") != (len(qs) > 3) or len(rows) != (200 if split == "train" else 50):
        bad += 1
sys.exit(1 if bad else 0)
EOF
[ $? -eq 0 ] && ok || { no "the files against the IDX data:"; head -5 chk.out; }

"$MMC" data conv d/train.jsonl --tokenizer "$F/tokenizer.json" --chat chatml --images d/img \
  --tiles-from-images --tile 28 --max-tiles 1 --tokens-per-tile 4 --seq-len 24 > conv.out 2> conv.err
if [ $? -eq 0 ] && [ "$(wc -l < conv.out)" = 200 ] && ! grep -vq '"image_tokens": \[4\]' conv.out; then ok
else no "mmc data conv: $(tail -2 conv.err)"; fi

"$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/internvl2.mm" --model InternVL2TinyFashion -o tr > /dev/null || no "compile"
./tr --data d/train.jsonl --eval-data d/test.jsonl --images d/img --tokenizer "$F/tokenizer.json" --chat chatml \
  --max-tiles 1 --steps 20 --lr 3e-3 --quiet --log m.jsonl > tr.out 2>&1 || no "training: $(tail -2 tr.out)"
"$PY" -c "
import json, sys
l = [json.loads(x) for x in open('m.jsonl')]
a = [x['loss'] for x in l if 'loss' in x]; e = [x for x in l if 'eval_reply_exact_match' in x]
print(a[0], a[-1], e)
sys.exit(0 if len(a) == 20 and a[-1] < a[0] - 1 and e else 1)" > loss.out 2>&1 && ok || no "the loss does not fall: $(cat loss.out)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
