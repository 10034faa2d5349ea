# tests/text_data.sh and tests/text_packed.sh's set-up (sourced): the
# fixtures of tests/text_data/make.py in a temporary directory (cd there),
# GPT2Tiny compiled as $G, the pass/fail counters and their helpers.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" tok ||
  { echo "FAIL: cannot make the tok venv"; echo "0 passed, 1 failed"; exit 1; }
PY=/var/cache/mmc-venv-tok/bin/python
D="$MMC_SOURCE_DIR/tests/text_data"
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
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
"$PY" "$D/make.py" "$T" || { no "the fixtures (tokenizers)"; exit 1; }
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o gpt 2> cerr || { no "compile"; cat cerr; exit 1; }
G="$T/gpt"
Q=(--quiet --eval-batches 1)
