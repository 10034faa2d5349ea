#!/usr/bin/env bash
# mmc data conv (runtime/data/mmrt_conv.c) against a Python reference
# (tests/conv_ref/ref.py: PIL's image sizes, InternVL's tiling rule, the
# chat templates and `tokenizers`' ids and offsets): 200 LLaVA/InternVL
# conversation samples with 0-4 images of mixed sizes (tests/conv_ref/make.py,
# PIL) and a BPE tokenizer trained by `tokenizers` in the test. Every
# sample's ids, label mask and tile counts equal the reference's for
# internvl2 with tiles (two tile sizes), chatml with a fixed count per image
# under --too-long truncate and drop, from JSONL and from a JSON list.
# Then each bad-data case exits 1 with its message naming the file, the
# sample and the field, and prints no sample; --bad-samples skip counts
# them; bad flags exit 2.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
hf_script tokenizers
R="$MMC_SOURCE_DIR/tests/conv_ref"
cd "$T" || exit 1
"$PY" "$R/make.py" "$T" || { echo "FAIL the fixtures"; echo "0 passed, 1 failed"; exit 1; }

# ---- every sample against the reference ----
same() { # name file family mode [T policy] -- mmc flags...
  local name=$1 file=$2 fam=$3 mode=$4 len=${5:-} pol=${6:-}
  shift 7
  "$PY" "$R/ref.py" "$file" tok.json img "$fam" "$mode" $len $pol > ref.out 2> ref.err ||
    { no "$name: the reference failed"; head -3 ref.err; return; }
  "$MMC" data conv "$file" --tokenizer tok.json --chat "$fam" --images img "$@" > got.out 2> got.err
  local rc=$? n
  n=$(wc -l < ref.out)
  if [ "$rc" -eq 0 ] && [ "$n" -gt 50 ] && cmp -s ref.out got.out; then ok; else
    no "$name: exit $rc, $(wc -l < got.out) samples against the reference's $n"
    head -2 got.err
    diff <(cut -c1-200 ref.out) <(cut -c1-200 got.out) | head -4
  fi
}
same "internvl2 tiles 32" conv.jsonl internvl2 tiles:32:6:4 "" "" -- \
  --tiles-from-images --tile 32 --max-tiles 6 --tokens-per-tile 4
same "internvl2 tiles 64, a JSON list" conv.json internvl2 tiles:64:6:4 "" "" -- \
  --tiles-from-images --tile 64 --max-tiles 6 --tokens-per-tile 4
same "chatml fixed, truncate" conv.jsonl chatml fixed:5 48 truncate -- \
  --image-tokens 5 --seq-len 48 --too-long truncate
grep -q '"truncated": true' got.out && ok || no "truncate: no sample truncated"
grep -q "cutting them would cut the image tokens" got.err && ok || no "truncate: no drop for an image cut"
same "chatml fixed, drop" conv.json chatml fixed:5 48 drop -- \
  --image-tokens 5 --seq-len 48 --too-long drop
grep -q "too long dropped" got.err && ok || no "drop: not counted"
# the data cover what they should: 1 to 7 tiles, multi-image samples, text-only ones, labels
"$MMC" data conv conv.jsonl --tokenizer tok.json --chat internvl2 --images img --tiles-from-images \
  --tile 64 --max-tiles 6 --tokens-per-tile 4 > t.out 2> /dev/null
if grep -q '"tiles": \[1\b' t.out && grep -q '"tiles": \[7, ' t.out && grep -q '"tiles": \[\]' t.out &&
   grep -qE '"tiles": \[[0-9]+, [0-9]+, [0-9]+, [0-9]+\]' t.out && ! grep -q '"mask": "0*"' t.out; then ok
else no "the data do not cover 1 and 7 tiles, 4 images, text-only samples, labels in every sample"; fi

# ---- bad data: exit 1, the file, the sample and the field named, nothing printed ----
bad() { # name file message [flags]
  local name=$1 file=$2 msg=$3
  shift 3
  "$MMC" data conv "$file" --tokenizer tok.json --chat internvl2 --images img --image-tokens 3 "$@" \
    > bad.out 2> bad.err
  local rc=$?
  if [ "$rc" -eq 1 ] && grep -qF -- "$msg" bad.err && [ ! -s bad.out ]; then ok; else
    no "$name: exit $rc, or '$msg' not in: $(head -c 300 bad.err)"; fi
}
G='{"id": "g", "image": "i01.png", "conversations": [{"from": "human", "value": "<image> ok"}, {"from": "gpt", "value": "yes"}]}'
line() { printf '%s\n%s\n' "$G" "$1" > "$2"; }
line '{"id": "m", "image": "nope.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "a"}]}' missing.jsonl
bad "missing image" missing.jsonl "missing.jsonl:2: sample 1 (id \"m\"): image[0] 'nope.png': "
grep -q "img/nope.png" bad.err && ok || no "missing image: the path not named"
head -c 200 img/i01.png > img/cut.png
line '{"id": "c", "image": ["i01.png", "cut.png"], "conversations": [{"from": "human", "value": "<image><image>"}, {"from": "gpt", "value": "a"}]}' corrupt.jsonl
bad "corrupt image" corrupt.jsonl "corrupt.jsonl:2: sample 1 (id \"c\"): image[1] 'cut.png': "
line '{"id": 7, "image": "i01.png", "conversations": [{"from": "human", "value": "<image> <image>"}, {"from": "gpt", "value": "a"}]}' holders.jsonl
bad "placeholders" holders.jsonl "holders.jsonl:2: sample 1 (id \"7\"): conversations: 2 <image> placeholders for 1 image"
line '{"id": "z", "conversations": [{"from": "human", "value": "<image> hi"}, {"from": "gpt", "value": "a"}]}' holders0.jsonl
bad "placeholder, no image" holders0.jsonl "sample 1 (id \"z\"): conversations: 1 <image> placeholder for 0 images"
line '{"id": "o", "conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "b"}]}' order.jsonl
bad "roles out of order" order.jsonl "order.jsonl:2: sample 1 (id \"o\"): conversations[0].from: 'gpt' where a human turn is expected"
line '{"id": "o2", "conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}, {"from": "human", "value": "c"}]}' order2.jsonl
bad "ends with human" order2.jsonl "conversations[2].from: 'human' ends the conversation"
line '{"id": "r", "conversations": [{"from": "robot", "value": "a"}, {"from": "gpt", "value": "b"}]}' role.jsonl
bad "unknown role" role.jsonl "conversations[0].from: 'robot' is not a role"
line '{"id": "v", "conversations": [{"from": "human"}, {"from": "gpt", "value": "b"}]}' value.jsonl
bad "no value" value.jsonl "conversations[0]: not an object with a \"from\" and a \"value\" string"
line '{"id": "j", "conversations": [' json.jsonl
bad "bad JSON line" json.jsonl "json.jsonl:2: sample 1: not one JSON object"
printf '[%s,\n{"id": ]\n' "$G" > list.json
bad "bad JSON list" list.json "list.json:2: not a JSON list of samples"
line '{"id": "long", "image": "i01.png", "conversations": [{"from": "human", "value": "<image> cat dog red blue small large shirt shoe bag coat"}, {"from": "gpt", "value": "a"}]}' long.jsonl
bad "too long" long.jsonl "long.jsonl:2: sample 1 (id \"long\"): " --seq-len 40
grep -q "image tokens) exceed the sequence length 40" bad.err && ok || no "too long: no length message"
# a tokenizer without the image tokens: refused naming the token
"$PY" -c "
import json; t = json.load(open('tok.json'))
t['added_tokens'] = [a for a in t['added_tokens'] if a['content'] != '<IMG_CONTEXT>']
del t['model']['vocab']['<IMG_CONTEXT>']
json.dump(t, open('tok_noimg.json', 'w'))"
"$MMC" data conv conv.jsonl --tokenizer tok_noimg.json --chat internvl2 --images img --image-tokens 3 > bad.out 2> bad.err
[ $? -eq 1 ] && grep -q "image context token '<IMG_CONTEXT>' is not one token" bad.err && ok ||
  no "a tokenizer without <IMG_CONTEXT>: $(head -c 200 bad.err)"
# --bad-samples skip: the good ones printed, the bad counted
cat missing.jsonl corrupt.jsonl holders.jsonl order.jsonl > mixed.jsonl
"$MMC" data conv mixed.jsonl --tokenizer tok.json --chat internvl2 --images img --image-tokens 3 \
  --bad-samples skip > skip.out 2> skip.err
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l < skip.out)" = 4 ] && grep -q "4 bad skipped" skip.err &&
   [ "$(grep -c '(skipped)' skip.err)" = 4 ]; then ok; else no "--bad-samples skip: exit $rc"; head -3 skip.err; fi

# ---- bad flags: exit 2 with the usage ----
A=(conv.jsonl --tokenizer tok.json --chat internvl2 --images img)
for args in "--image-tokens 0" "--image-tokens x" "--tiles-from-images --image-tokens 3" "" \
            "--tile 32" "--image-tokens 3 --too-long maybe" "--image-tokens 3 --bad-samples no" \
            "--tiles-from-images --max-tiles 0" "--image-tokens 3 --seq-len 0" "--image-tokens 3 --bogus"; do
  # shellcheck disable=SC2086
  "$MMC" data conv "${A[@]}" $args > /dev/null 2> err; rc=$?
  if [ "$rc" -eq 2 ] && grep -q '^usage: mmc data' err; then ok; else no "flags '$args': exit $rc"; fi
done
"$MMC" data conv conv.jsonl --tokenizer tok.json --chat nochat --images img --image-tokens 3 > /dev/null 2> err
[ $? -eq 1 ] && grep -q "chat format 'nochat' is not known" err && ok || no "unknown chat family"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
