#!/usr/bin/env bash
# Tokens per second of mmc tokenize beside Hugging Face `tokenizers`, one
# thread each (TOKENIZERS_PARALLELISM=false, encode_batch_fast, no offsets;
# mmc tokenize is serial, its time a whole run less a run on an empty file,
# i.e. without start-up and loading the JSON, printed apart); best of 2.
# Corpus: the 10.6 MB of tests/tok/corpus.py (code, English, CJK, emoji,
# odd characters and whitespace); a byte-level BPE (Qwen2), a Llama 2 BPE
# with byte fallback and a T5 Unigram trained on its first 3 MB, timed on the
# other 7.6 MB. Then the small corpus of tests/tok/compare.py (20,000 lines)
# with GPT-2, Qwen2, Llama 2 and T5 configurations, and any tokenizer.json
# given. Prints the CPU; never fails on speed. Needs the venv of
# tests/tokenizers.sh (run that test once).
#   bench/tokenize.sh [build dir] [TOKENIZER.json...]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
shift || true
VENV=${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
lscpu | grep -E "^Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$VENV/bin/python" -c "import tokenizers; print('tokenizers', tokenizers.__version__)"
"$VENV/bin/python" "$HERE/../tests/tok/corpus.py" "$B/mmc" "$T" --bench
"$VENV/bin/python" "$HERE/../tests/tok/compare.py" "$B/mmc" "$T" --bench
if [ $# -gt 0 ]; then "$VENV/bin/python" "$HERE/../tests/tok/compare.py" "$B/mmc" "$T" --bench --file "$@"; fi
