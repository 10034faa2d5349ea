#!/usr/bin/env bash
# The driver's command line: --help, bad flags (exit 2 with the usage),
# a missing file (exit 1 naming it), dump-ir formats and stats --json keys.
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
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
