#!/usr/bin/env bash
# The conversation and video keys of a model's data { } section
# (ir/settings.def's SET_DATA rows images, chat, eval_data, max_tiles,
# video_fps; ir/data_formats.def's DATA_KEYS; docs/data.md): an
# InternVL2TinyConv extended with `data { format = conversation; source =
# "conv.jsonl"; images = "img"; tokenizer = "tok.json"; max_tiles = 2; ... }`
# trains with no data flags and logs the losses of the model given the same
# data by flags, compiled and run from another folder (the paths are the
# .mm file's folder's); --max-tiles over the section's max_tiles gives the
# flags' losses at that count and not the section's; chat = chatml is taken
# (its image token is not the model's: refused by the trainer) and --chat
# internvl2 over it trains; --list-settings shows the rows; dump-ir prints
# them on the data line and opt reads them back; bad values refused at
# their file:line:col. (tests/video_train.sh checks video_fps's rows.)
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
hf_script tokenizers
cd "$T" || exit 1
mkdir -p m/data run
"$PY" "$MMC_SOURCE_DIR/tests/conv_ref/make.py" m/data > /dev/null ||
  { echo "FAIL the fixtures"; echo "0 passed, 1 failed"; exit 1; }
head -8 m/data/conv.jsonl > m/data/eval.jsonl
M="$MMC_SOURCE_DIR/stdlib_models/internvl2.mm"
cat > m/c.mm <<'MM'
import "internvl2.mm"
model C extends InternVL2TinyConv {
  data {
    format = conversation; source = "data/conv.jsonl"; images = "data/img"; tokenizer = "data/tok.json"
    max_tiles = 2; eval_data = "data/eval.jsonl"; bad_samples = fail; too_long = truncate
  }
}
MM
sed 's/; too_long = truncate/; chat = chatml/' m/c.mm > m/chat.mm
cd run || exit 1
"$MMC" compile ../m/c.mm --model C -o c > c.out 2>&1 && "$MMC" compile ../m/chat.mm --model C -o chat > c2.out 2>&1 &&
  "$MMC" compile "$M" --model InternVL2TinyConv -o f > c3.out 2>&1 ||
  { echo "FAIL compile: $(tail -3 c.out c2.out c3.out)"; echo "0 passed, 1 failed"; exit 1; }
S=4
[ "$SAN" = 1 ] && S=2
Q=(--steps "$S" --quiet --eval-batches 1)
F=(--data ../m/data/conv.jsonl --images ../m/data/img --tokenizer ../m/data/tok.json --eval-data ../m/data/eval.jsonl
  --too-long truncate)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
# the section, no data flags, against the same data by flags
./c "${Q[@]}" --log sec.jsonl > s.out 2>&1 || no "the section: $(tail -2 s.out)"
./f "${F[@]}" --max-tiles 2 "${Q[@]}" --log flags.jsonl > f.out 2>&1 || no "the flags: $(tail -2 f.out)"
[ "$(losses sec.jsonl | wc -l)" = "$S" ] && [ "$(losses sec.jsonl)" = "$(losses flags.jsonl)" ] && ok ||
  no "the section's losses differ from the flags': $(losses sec.jsonl | tr '\n' ' ') / $(losses flags.jsonl | tr '\n' ' ')"
# a flag overrides its key: --max-tiles 1 over max_tiles = 2
./c --max-tiles 1 "${Q[@]}" --log over.jsonl > o.out 2>&1 || no "--max-tiles over the section: $(tail -2 o.out)"
./f "${F[@]}" --max-tiles 1 "${Q[@]}" --log over_flags.jsonl > of.out 2>&1 || no "--max-tiles 1 by flags: $(tail -2 of.out)"
[ "$(losses over.jsonl)" = "$(losses over_flags.jsonl)" ] && [ "$(losses over.jsonl)" != "$(losses sec.jsonl)" ] && ok ||
  no "--max-tiles 1 over the section: $(losses over.jsonl | tr '\n' ' ') / $(losses sec.jsonl | tr '\n' ' ')"
# chat = chatml is taken (its image token is <image>, not the model's <IMG_CONTEXT>), --chat over it
./chat --steps 1 --quiet > ch.out 2>&1
[ $? = 1 ] && grep -q "image context token is id 7, but model C places its image features at token 6" ch.out && ok || no "chat = chatml not taken: $(tail -2 ch.out)"
./chat --chat internvl2 "${Q[@]}" --log ch.jsonl > ch2.out 2>&1 && [ "$(losses ch.jsonl)" = "$(losses sec.jsonl)" ] && ok ||
  no "--chat internvl2 over chat = chatml: $(tail -2 ch2.out)"

# ---- the table: --list-settings, dump-ir and back ----
"$MMC" --list-settings > ls.txt
for k in images chat eval_data max_tiles video_fps; do
  grep -qE "^$k +data +$k " ls.txt && ok || no "--list-settings: no data row $k"
done
"$MMC" dump-ir ../m/chat.mm --model C > c.mmir 2> e.out || no "dump-ir: $(head -2 e.out)"
want="data(format = conversation, source = \"$T/m/data/conv.jsonl\", tokenizer = \"$T/m/data/tok.json\", images = \"$T/m/data/img\", chat = chatml, eval_data = \"$T/m/data/eval.jsonl\", max_tiles = 2)"
grep -qxF "$want" c.mmir && ok || no "dump-ir: no line $want; $(grep '^data' c.mmir)"
"$MMC" opt c.mmir --passes verify > back.mmir 2> e.out && grep -qxF "$want" back.mmir && ok ||
  no "opt: the data line not read back: $(head -2 e.out)"

# ---- refused at file:line:col ----
refuse() { # name key-and-value expected-message
  printf 'import "internvl2.mm"\nmodel E extends InternVL2TinyConv {\n  data { format = conversation; %s }\n}\n' "$2" > ../m/e.mm
  "$MMC" check ../m/e.mm --model E > r.out 2>&1
  [ $? = 1 ] && grep -qF "$3" r.out && ok || no "$1: $(head -2 r.out)"
}
refuse "no images folder" 'images = "nope"' "e.mm:3:33: error: images: folder '$T/m/nope' not found"
refuse "images a file" 'images = "c.mm"' "e.mm:3:33: error: images: folder '$T/m/c.mm' not found"
refuse "no eval_data" 'eval_data = "nope.jsonl"' "e.mm:3:33: error: eval_data: file '$T/m/nope.jsonl' not found"
refuse "a chat format" 'chat = gpt4' "e.mm:3:40: error: unknown chat format 'gpt4'"
refuse "max_tiles 0" 'max_tiles = 0' "e.mm:3:45: error: max_tiles must be between 1 and 4096, not 0"
refuse "video_fps here" 'video_fps = 8' "e.mm:3:33: error: 'video_fps' is not a setting of format = conversation"
refuse "a folder as the source" 'source = "data"' "e.mm:3:33: error: data source '$T/m/data' is not a .json or .jsonl file"
refuse "not a tokenizer" 'tokenizer = "data/conv.jsonl"' "e.mm:3:33: error: tokenizer: "

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
