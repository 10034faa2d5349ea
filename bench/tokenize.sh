#!/usr/bin/env bash
# mmc tokenize against Hugging Face `tokenizers` on the same corpus (the
# generator of tests/tok/compare.py, 20,000 lines): GPT-2, Qwen2, Llama 2 and
# T5 configurations trained on the fly, plus any tokenizer.json given. One
# thread each (TOKENIZERS_PARALLELISM=false; mmc tokenize is serial); mmc's
# time is a whole run less a run on an empty file (start-up and loading the
# JSON, printed apart); best of 3. Prints figures and the CPU; never fails on
# speed. Needs the venv of tests/tokenizers.sh (run that test once).
#   bench/tokenize.sh [build dir] [TOKENIZER.json...]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
shift || true
VENV=${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
lscpu | grep -E "^Model name|^CPU\(s\)" | sed 's/  */ /g'
"$VENV/bin/python" -c "import tokenizers; print('tokenizers', tokenizers.__version__)"
"$VENV/bin/python" "$HERE/../tests/tok/compare.py" "$B/mmc" "$T" --bench
if [ $# -gt 0 ]; then "$VENV/bin/python" "$HERE/../tests/tok/compare.py" "$B/mmc" "$T" --bench --file "$@"; fi
