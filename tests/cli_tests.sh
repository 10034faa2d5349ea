#!/usr/bin/env bash
# The driver's command line: --help, bad flags (exit 2 with the usage),
# a missing file (exit 1 naming it), dump-ir formats, stats --json keys, and
# mmc tokenize on a tiny tokenizer.json: ids, decoding, refusals, bad input;
# mmc data's command line.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
expect() { # name expected-status command...
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err"; local got=$?
  if [ "$got" -eq "$want" ]; then pass=$((pass+1)); else echo "FAIL $name: exit $got, expected $want"; cat "$T/err" | head -5; fail=$((fail+1)); fi
}
contains() { # name file text
  if grep -qF -- "$3" "$2"; then pass=$((pass+1)); else echo "FAIL $1: '$3' not in output"; head -5 "$2"; fail=$((fail+1)); fi
}
expect "no args" 2 "$MMC"
contains "no args usage" "$T/err" "usage: mmc <command>"
expect "help" 0 "$MMC" --help
contains "help lists stats" "$T/out" "mmc stats"
for c in check dump-ir stats; do
  expect "$c --help" 0 "$MMC" $c --help
  contains "$c --help usage" "$T/out" "usage: mmc $c"
done
# the reference lists, against the tables they are printed from
want=$(sed -n 's/^project(mmc VERSION \([0-9.]*\) .*/\1/p' "$MMC_SOURCE_DIR/CMakeLists.txt")
expect "--version" 0 "$MMC" --version
if [ -n "$want" ] && grep -Eq "^mmc $want( \(git [0-9a-z.-]+\))?$" "$T/out"; then pass=$((pass+1)); else echo "FAIL --version: '$(cat "$T/out")', CMakeLists.txt says '$want'"; fail=$((fail+1)); fi
expect "--list-passes" 0 "$MMC" --list-passes
got=$(awk '{print $1}' "$T/out" | tr '\n' ' ')
want=$(echo lower $(sed -n 's/^PASS(\([a-z_0-9]*\),.*/\1/p' "$MMC_SOURCE_DIR/passes/passes.def") | tr '\n' ' ')
if [ "$got" = "$want" ]; then pass=$((pass+1)); else echo "FAIL --list-passes: '$got', passes.def: '$want'"; fail=$((fail+1)); fi
expect "--list-ops" 0 "$MMC" --list-ops
got=$(tail -n +2 "$T/out" | awk '{print $1}' | tr '\n' ' ')
want=$(sed -n 's/^OP([A-Z_0-9]*, "\([a-z_0-9]*\)",.*/\1/p' "$MMC_SOURCE_DIR/ir/ops.def" | tr '\n' ' ')
if [ "$got" = "$want" ]; then pass=$((pass+1)); else echo "FAIL --list-ops: its mnemonics differ from ops.def's"; fail=$((fail+1)); fi
contains "--list-ops: a method builtin" "$T/out" "x.transpose(dim0, dim1)"
contains "--list-ops: a function builtin" "$T/out" "linear(x, weight, bias?)"
expect "--list-ops with an argument" 2 "$MMC" --list-ops extra
contains "--list-ops with an argument refused" "$T/err" "--list-ops takes no arguments"
expect "unknown command" 2 "$MMC" frobnicate x.mm
contains "unknown command named" "$T/err" "unknown command 'frobnicate'"
expect "bad flag" 2 "$MMC" check --frobnicate "$S/nn.mm"
contains "bad flag named" "$T/err" "unknown option '--frobnicate'"
contains "bad flag usage" "$T/err" "usage: mmc check"
expect "bad tp" 2 "$MMC" check --tp zero "$S/gpt2.mm"
contains "bad tp named" "$T/err" "--tp takes a whole number"
expect "bad format" 2 "$MMC" dump-ir --format svg "$S/gpt2.mm"
expect "bad pass" 2 "$MMC" dump-ir --after nosuchpass "$S/gpt2.mm"
expect "missing value" 2 "$MMC" stats "$S/gpt2.mm" --model
expect "two files" 2 "$MMC" check "$S/gpt2.mm" "$S/nn.mm"
expect "missing file" 1 "$MMC" check "$T/nope.mm"
contains "missing file named" "$T/err" "nope.mm"
expect "unknown model" 1 "$MMC" stats "$S/gpt2.mm" --model GPT3
contains "unknown model lists models" "$T/err" "GPT2Tiny"
expect "bad --task" 2 "$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny --task serve
contains "bad --task named" "$T/err" "--task takes train, generate, eval, reconstruct, sample or extract, not 'serve'"
expect "--task on a model without text" 1 "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --task generate
contains "--task without text says why" "$T/err" "generation needs a forward input text: i32[B, T]"
printf 'import "internvl2.mm"\nmodel P extends InternVL2Tiny { parallel { tp = 2 } }\n' > "$T/par.mm"
expect "--task generate on a parallel plan" 0 "$MMC" plan "$T/par.mm" --model P --task generate
contains "the plan is not applied to generation" "$T/err" "generation runs on one rank"
contains "the plan shows the KV cache" "$T/out" "the input arena holds the KV cache: 65536 bytes in 4 tensors"
expect "--task generate with a plan flag" 2 "$MMC" plan "$S/internvl2.mm" --model InternVL2Tiny --tp 2 --task generate
contains "a plan flag with --task generate is refused" "$T/err" "--tp does not go with --task generate"
expect "bad --set" 1 "$MMC" check "$S/gpt2.mm" --model GPT2Tiny --set Q=3
contains "bad --set named" "$T/err" "--set Q"
expect "--set B" 0 "$MMC" stats "$S/gpt2.mm" --model GPT2Tiny --set B=8 --json
if /usr/bin/python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["inputs"]["ids"] == [8, 32] else 1)' "$T/out"; then pass=$((pass+1)); else echo "FAIL --set B not applied"; fail=$((fail+1)); fi
expect "stats json" 0 "$MMC" stats "$S/vit_fashion.mm" --model ViTFashion --json
for k in '"model"' '"total_params"' '"modules"' '"forward_flops"'; do contains "stats key $k" "$T/out" "$k"; done
expect "dump dot" 0 "$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --format dot
contains "dot digraph" "$T/out" "digraph"
contains "dot cluster" "$T/out" "subgraph cluster"
expect "dump all" 0 "$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --after all
contains "dump all lower" "$T/out" "after lower"
printf 'module @Bad mesh(dp = 1, cp = 1, tp = 1)\nfunc @f() {\n  %%0 = matmull(%%1)\n}\n' > "$T/bad.mmir"
expect "bad ir" 1 "$MMC" dump-ir "$T/bad.mmir"
contains "bad ir located" "$T/err" "bad.mmir:3:"
# mmc tokenize: a tiny BPE tokenizer.json; its refusals and errors
tok() { # FILE normalizer-json extra-model-fields
  printf '{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":3,"content":"<s>","special":true,"normalized":false}],"normalizer":%s,"pre_tokenizer":null,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[3],"tokens":["<s>"]}}},"decoder":null,"model":{"type":"BPE"%s,"vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}' "$2" "$3" > "$1"
}
tok "$T/tok.json" null ""
expect "tokenize --help" 0 "$MMC" tokenize --help
contains "tokenize --help usage" "$T/out" "usage: mmc tokenize"
expect "help lists tokenize" 0 "$MMC" --help
contains "help lists tokenize" "$T/out" "mmc tokenize"
printf 'abab\nba<s>\n\n' > "$T/in.txt"
expect "tokenize" 0 "$MMC" tokenize "$T/tok.json" "$T/in.txt"
if [ "$(cat "$T/out")" = "$(printf '2 2\n1 0 3\n')" ]; then pass=$((pass+1)); else echo "FAIL tokenize ids: $(cat "$T/out")"; fail=$((fail+1)); fi
expect "tokenize --add-special" 0 "$MMC" tokenize "$T/tok.json" "$T/in.txt" --add-special
if [ "$(head -1 "$T/out")" = "3 2 2" ]; then pass=$((pass+1)); else echo "FAIL --add-special: $(head -1 "$T/out")"; fail=$((fail+1)); fi
printf '2 2\n1 0 3\n' | "$MMC" tokenize "$T/tok.json" --decode > "$T/out" 2> "$T/err"
if [ "$(cat "$T/out")" = "$(printf 'ab ab\nb a <s>\n')" ]; then pass=$((pass+1)); else echo "FAIL --decode: $(cat "$T/out")"; fail=$((fail+1)); fi
printf '1 0 3\n' | "$MMC" tokenize "$T/tok.json" --decode --skip-special > "$T/out" 2> "$T/err"
if [ "$(cat "$T/out")" = "b a" ]; then pass=$((pass+1)); else echo "FAIL --skip-special: $(cat "$T/out")"; fail=$((fail+1)); fi
expect "tokenize no tokenizer" 2 "$MMC" tokenize
expect "tokenize --add-special --decode" 2 "$MMC" tokenize "$T/tok.json" --decode --add-special
expect "tokenize --skip-special without --decode" 2 "$MMC" tokenize "$T/tok.json" --skip-special
expect "tokenize bad flag" 2 "$MMC" tokenize "$T/tok.json" --frobnicate
expect "tokenize missing tokenizer" 1 "$MMC" tokenize "$T/nope.json" "$T/in.txt"
contains "missing tokenizer named" "$T/err" "nope.json: cannot open the file"
expect "tokenize missing input" 1 "$MMC" tokenize "$T/tok.json" "$T/nope.txt"
contains "missing input named" "$T/err" "nope.txt: cannot open the file"
printf '{"version": "1.0",\n "model": {' > "$T/badjson.json"
expect "tokenize bad JSON" 1 "$MMC" tokenize "$T/badjson.json" "$T/in.txt"
contains "bad JSON named" "$T/err" "badjson.json:2: not valid JSON"
tok "$T/nmt.json" '{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Nmt"}]}' ""
expect "tokenize Nmt refused" 1 "$MMC" tokenize "$T/nmt.json" "$T/in.txt"
contains "Nmt refused by path" "$T/err" "nmt.json: normalizer.normalizers[1]: normalizer type 'Nmt' is not supported"
tok "$T/pre.json" '{"type":"Precompiled","precompiled_charsmap":"AAAA"}' ""
expect "tokenize bad Precompiled" 1 "$MMC" tokenize "$T/pre.json" "$T/in.txt"
contains "bad Precompiled named" "$T/err" "pre.json: normalizer: precompiled_charsmap: its trie size does not fit its 3 bytes"
tok "$T/field.json" null ',"frobnicate":true'
expect "tokenize unknown field refused" 1 "$MMC" tokenize "$T/field.json" "$T/in.txt"
contains "unknown field named" "$T/err" "model: field 'frobnicate' (of BPE) is not supported"
tok "$T/drop.json" null ',"dropout":0.1'
expect "tokenize dropout refused" 1 "$MMC" tokenize "$T/drop.json" "$T/in.txt"
contains "dropout named" "$T/err" "model.dropout: BPE dropout 0.1 is not supported"
sed 's/"truncation":null/"truncation":{"max_length":8}/' "$T/tok.json" > "$T/trunc.json"
expect "tokenize truncation without strategy refused" 1 "$MMC" tokenize "$T/trunc.json" "$T/in.txt"
contains "truncation named" "$T/err" "trunc.json: truncation: field 'stride' is missing"
sed 's/"truncation":null/"truncation":{"max_length":2,"stride":1,"strategy":"OnlyFirst"}/' "$T/tok.json" > "$T/trunc.json"
printf 'ab\nababab\n' > "$T/in2.txt"
expect "tokenize stride too long" 1 "$MMC" tokenize "$T/trunc.json" "$T/in2.txt" --add-special
contains "stride named" "$T/err" "in2.txt:2: truncation: stride 1 must be less than the length 1 it truncates to"
expect "tokenize truncated" 0 "$MMC" tokenize "$T/trunc.json" "$T/in2.txt"
if [ "$(cat "$T/out")" = "$(printf '2\n2 2\n')" ]; then pass=$((pass+1)); else echo "FAIL truncated: $(cat "$T/out")"; fail=$((fail+1)); fi
sed 's/"padding":null/"padding":{"strategy":{"Fixed":9999999999}}/' "$T/tok.json" > "$T/pad.json"
expect "tokenize huge padding refused" 1 "$MMC" tokenize "$T/pad.json" "$T/in.txt"
contains "huge padding named" "$T/err" "pad.json: padding.strategy: 'Fixed' is 9999999999, expected an integer in [0, 16777216]"
expect "tokenize --no-padding --decode" 2 "$MMC" tokenize "$T/tok.json" --decode --no-padding
expect "tokenize --chat unknown family" 2 "$MMC" tokenize "$T/tok.json" --chat nope
contains "unknown family named" "$T/err" "--chat: chat format 'nope' is not known (known: chatml, qwen2"
printf '{"messages": [{"role": "user", "content": "ab"}]}\n{"messages": 3}\n' > "$T/chat.jsonl"
expect "tokenize --chat without <s>" 1 "$MMC" tokenize "$T/tok.json" --chat llama2 "$T/chat.jsonl"
contains "missing </s> named" "$T/err" "chat.jsonl:1: chat format llama2 needs '</s>' as an added token"
expect "tokenize --chat bad line" 1 "$MMC" tokenize "$T/tok.json" --chat chatml "$T/chat.jsonl"
contains "chatml without <|im_start|> named" "$T/err" "chat.jsonl:1: chat format chatml needs '<|im_start|>'"
sed 's/"content":"<s>"/"content":"<|im_start|>"/; s/"id":3,"content":"<|im_start|>","special":true,"normalized":false}/&,{"id":4,"content":"<|im_end|>","special":true,"normalized":false}/' "$T/tok.json" > "$T/chatml.json"
expect "tokenize --chat malformed line" 1 "$MMC" tokenize "$T/chatml.json" --chat chatml "$T/chat.jsonl"
contains "malformed line named" "$T/err" 'chat.jsonl:2: no "messages" array'
sed 's/"ab":2/"ab":99999999/' "$T/tok.json" > "$T/bigid.json"
expect "tokenize huge vocabulary id refused" 1 "$MMC" tokenize "$T/bigid.json" "$T/in.txt"
contains "huge id named" "$T/err" 'model.vocab: the id of "ab" is 99999999, expected an integer in [0, 16777216)'
printf 'ab\na\377b\nab\n' > "$T/bad8.txt"
expect "tokenize bad UTF-8" 1 "$MMC" tokenize "$T/tok.json" "$T/bad8.txt"
contains "bad UTF-8 located" "$T/err" "bad8.txt:2: invalid UTF-8 at byte 1 (0xff)"
if [ "$(cat "$T/out")" = "2" ]; then pass=$((pass+1)); else echo "FAIL lines before bad UTF-8: $(cat "$T/out")"; fail=$((fail+1)); fi
printf '2 x\n' > "$T/ids.txt"
expect "tokenize --decode bad id" 1 "$MMC" tokenize "$T/tok.json" "$T/ids.txt" --decode
contains "bad id located" "$T/err" "ids.txt:1:3: 'x' is not a token id"
printf '2 9\n' > "$T/ids.txt"
expect "tokenize --decode unknown id" 1 "$MMC" tokenize "$T/tok.json" "$T/ids.txt" --decode
contains "unknown id named" "$T/err" "ids.txt:1: id 9 is not a token of this tokenizer (ids 0..3)"
# mmc data (tests/indexed_data.sh checks it against megatron-core)
expect "data --help" 0 "$MMC" data --help
contains "data --help usage" "$T/out" "usage: mmc data preprocess"
expect "help lists data" 0 "$MMC" --help
contains "help lists data" "$T/out" "mmc data     preprocess"
expect "data no subcommand" 2 "$MMC" data
expect "data bad subcommand" 2 "$MMC" data frobnicate
contains "data bad subcommand named" "$T/err" "unknown subcommand 'frobnicate'"
expect "data preprocess no input" 2 "$MMC" data preprocess --tokenizer "$T/tok.json" --output-prefix "$T/d"
contains "data preprocess no input said" "$T/err" "preprocess needs --input"
printf '{"text": "ab"}\n{"text": "ba"}\n' > "$T/d.jsonl"
expect "data preprocess" 0 "$MMC" data preprocess --input "$T/d.jsonl" --tokenizer "$T/tok.json" --output-prefix "$T/d"
expect "data inspect" 0 "$MMC" data inspect "$T/d_text_document" --show 2
contains "data inspect ids" "$T/out" "sequence 1: 1 0"
expect "data inspect bad --show" 2 "$MMC" data inspect "$T/d_text_document" --show -1
expect "data inspect two prefixes" 2 "$MMC" data inspect "$T/d_text_document" "$T/d"
# Fashion-MNIST: ctest points MMRT_FMNIST_DIR at an uncompressed copy
# (tests/CMakeLists.txt); unset, a trainer inflates Debian's gzip files. The
# same training samples either way (the losses byte for byte), an empty
# MMRT_FMNIST_DIR is no setting, and a directory that does not exist is
# named in the error (exit 1) with the flag's source.
if [ -n "${MMRT_FMNIST_DIR:-}" ]; then
  "$MMC" compile "$S/vit_fashion.mm" --model ViTFashion --set B=8 -O0 -o "$T/vit" 2> "$T/err" || { echo "FAIL compile ViTFashion"; head -3 "$T/err"; fail=$((fail + 1)); }
  fm() { "$T/vit" --steps 3 --eval-batches 1 --quiet --log "$T/$1.jsonl"; }
  expect "trainer: the uncompressed copy" 0 fm plain
  expect "trainer: Debian's gzip files" 0 env -u MMRT_FMNIST_DIR "$T/vit" --steps 3 --eval-batches 1 --quiet --log "$T/gz.jsonl"
  expect "trainer: empty MMRT_FMNIST_DIR" 0 env MMRT_FMNIST_DIR= "$T/vit" --steps 3 --eval-batches 1 --quiet --log "$T/empty.jsonl"
  losses() { grep -o '"loss": *[-0-9.e]*' "$1"; }
  if [ "$(losses "$T/plain.jsonl" | wc -l)" -eq 3 ] && [ "$(losses "$T/plain.jsonl")" = "$(losses "$T/gz.jsonl")" ] &&
     [ "$(losses "$T/gz.jsonl")" = "$(losses "$T/empty.jsonl")" ]; then pass=$((pass + 1)); else
    echo "FAIL trainer: the losses differ between the uncompressed copy and the gzip files"; fail=$((fail + 1)); fi
  expect "trainer: MMRT_FMNIST_DIR missing" 1 env MMRT_FMNIST_DIR="$T/none" "$T/vit" --steps 1 --quiet
  contains "trainer: MMRT_FMNIST_DIR missing named" "$T/err" "MMRT_FMNIST_DIR $T/none: $T/none: Fashion-MNIST directory does not exist"
else
  echo "FAIL: MMRT_FMNIST_DIR is not set (ctest sets it: tests/CMakeLists.txt)"; fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
