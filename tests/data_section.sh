#!/usr/bin/env bash
# The model's data { } section (frontend/plan.c's read_data, ir/settings.def's
# SET_DATA rows, docs/data.md): a GPT2Tiny with a data section trains on a
# JSONL corpus with no data flags and logs the losses of GPT2Tiny given the
# same data by flags; the trainer's flags override the section; the paths are
# the .mm file's folder's (compiled and run from elsewhere); mmc
# --list-settings shows the rows; dump-ir prints the data(...) line and
# reads it back; each compile-time check refuses with its file:line:col.
. "$MMC_SOURCE_DIR/tests/text_data/common.sh"

mkdir -p m run
cat > m/d.mm <<'MM'
import "gpt2.mm"
model D extends GPT2Tiny {
  data { source = "../corpus.jsonl"; tokenizer = "../tok.json"; seq_len = 32; pack = false; too_long = drop; bad_samples = fail }
}
MM
cd run || exit 1
expect "compile with a data section" 0 "$MMC" compile ../m/d.mm --model D -o d
# the section's data, no data flags, against the same data by flags
expect "train: the section" 0 ./d --steps 4 --log sec.jsonl "${Q[@]}"
expect "train: the flags" 0 "$G" --data ../corpus.jsonl --tokenizer ../tok.json --seq-len 32 --no-pack \
  --too-long drop --bad-samples fail --steps 4 --log flags.jsonl "${Q[@]}"
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
[ "$(losses sec.jsonl | wc -l)" = 4 ] && [ "$(losses sec.jsonl)" = "$(losses flags.jsonl)" ] && ok ||
  no "the section's losses differ from the flags': $(losses sec.jsonl | tr '\n' ' ') / $(losses flags.jsonl | tr '\n' ' ')"
# a flag overrides the section: --too-long truncate feeds other rows than the section's drop
expect "flag over the section" 0 ./d --too-long truncate --steps 4 --log over.jsonl "${Q[@]}"
expect "the same by flags" 0 "$G" --data ../corpus.jsonl --tokenizer ../tok.json --too-long truncate \
  --steps 4 --log over_flags.jsonl "${Q[@]}"
[ "$(losses over.jsonl)" = "$(losses over_flags.jsonl)" ] && [ "$(losses over.jsonl)" != "$(losses sec.jsonl)" ] && ok ||
  no "--too-long truncate over the section: $(losses over.jsonl | tr '\n' ' ')"
head -3 ../corpus.jsonl > ../three.jsonl
expect "--data over the section" 1 ./d --data ../three.jsonl --steps 1
contains "--data over the section" "$T/err" "three.jsonl: 2 rows of text, fewer than the batch of 4"
expect "--seq-len over the section" 1 ./d --seq-len 64 --steps 1
contains "--seq-len over the section" "$T/err" "--seq-len 64"
expect "--bad-samples over the section" 1 ./d --bad-samples ignore
contains "--bad-samples over the section" "$T/err" "--bad-samples takes fail or skip"

# ---- the table: --list-settings, dump-ir and back ----
"$MMC" --list-settings > ls.txt
for k in source tokenizer seq_len pack too_long bad_samples; do
  grep -qE "^$k +data +$k " ls.txt && ok || no "--list-settings: no data row $k"
done
expect "dump-ir" 0 "$MMC" dump-ir ../m/d.mm --model D
cp "$T/out" d.mmir
want="data(source = \"$T/corpus.jsonl\", tokenizer = \"$T/tok.json\", seq_len = 32, too_long = drop)"
grep -qxF "$want" d.mmir && ok || no "dump-ir: no line $want"; grep '^data' d.mmir
expect "dump-ir read back" 0 "$MMC" opt d.mmir --passes verify
grep -qxF "$want" "$T/out" && ok || no "opt: the data line not read back"
sed 's/seq_len = 32/seq_len = "x"/' d.mmir > bad.mmir
expect "a bad data line" 1 "$MMC" opt bad.mmir --passes verify
contains "a bad data line" "$T/err" "bad.mmir:"

# a model extending D inherits its data section
printf 'import "d.mm"\nmodel D2 extends D {\n  train { clip = 0.5 }\n}\n' > ../m/d2.mm
expect "extends" 0 "$MMC" dump-ir ../m/d2.mm --model D2
grep -qxF "$want" "$T/out" && ok || no "D2 extends D: no data line"

# ---- compile-time checks: file:line:col ----
refuse() { # name section-body expected-message [model]
  local name=$1 body=$2 msg=$3 model=${4:-}
  if [ -z "$model" ]; then
    printf 'import "gpt2.mm"\nmodel E extends GPT2Tiny {\n  data { %s }\n}\n' "$body" > ../m/e.mm
  else
    printf 'import "gpt2.mm"\n%s\n  data { %s }\n}\n' "$model" "$body" > ../m/e.mm
  fi
  expect "$name" 1 "$MMC" check ../m/e.mm --model E
  contains "$name" "$T/err" "$msg"
}
refuse "seq_len against T" 'source = "../corpus.jsonl"; seq_len = 16' \
  "e.mm:3:38: error: seq_len = 16, but the forward's ids hold 32 tokens a row"
refuse "no such source" 'source = "nothing.jsonl"' \
  "e.mm:3:10: error: data source '$T/m/nothing.jsonl' not found"
refuse "a folder as the source" 'source = "."' "e.mm:3:10: error: data source '$T/m' not found"
refuse "a tokenizer larger than the vocabulary" 'source = "../corpus.jsonl"; tokenizer = "../tok.json"' \
  "e.mm:7:38: error: the tokenizer '$T/tok.json' has 91 tokens, but the model's embedding has 64 rows" \
  "model E {
  let B = 4
  let T = 32
  gpt = GPT(vocab = 64, ctx = 64, dim = 32, depth = 1, heads = 2)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }"
refuse "a bad tokenizer" 'source = "../corpus.jsonl"; tokenizer = "../corpus.jsonl"' "e.mm:3:38: error: tokenizer: "
refuse "an input no source fills" 'source = "../corpus.jsonl"' \
  "e.mm:4:3: error: the forward's input 'x' is filled by no source" \
  "model E {
  forward(x: f32[4, 8]) -> loss { return mean(x) }"
refuse "pack without seg" 'source = "../corpus.jsonl"; pack = true' "e.mm:3:38: error: pack = true needs a seg input"
refuse "unknown key" 'source = "../corpus.jsonl"; shuffle = true' "e.mm:3:38: error: unknown data setting 'shuffle'"
refuse "no source" 'seq_len = 32' "e.mm:3:3: error: the data section names no source"
refuse "twice" 'source = "../corpus.jsonl"; source = "../corpus.jsonl"' "e.mm:3:38: error: 'source' is set twice"
printf 'import "gpt2.mm"\nmodel E extends GPT2Tiny {\n  dat { seq_len = 32 }\n}\n' > ../m/e.mm
expect "a misspelt section" 1 "$MMC" check ../m/e.mm --model E
contains "a misspelt section" "$T/err" "e.mm:3:7: error: unexpected '{', expected '='"
# `data` stays a name elsewhere
printf 'import "gpt2.mm"\nmodel E {\n  forward(data: f32[4, 8]) -> loss { return mean(data) }\n}\n' > ../m/e.mm
expect "data as a name" 0 "$MMC" check ../m/e.mm --model E

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
