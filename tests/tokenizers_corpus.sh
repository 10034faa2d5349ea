#!/usr/bin/env bash
# mmc tokenize against Hugging Face `tokenizers` on a generated 10.6 MB
# corpus (tests/tok/corpus.py: Python source, English prose, Unicode names,
# Chinese/Japanese/Korean sentences, emoji sequences, U+FFFD and other odd
# characters, unusual whitespace): a byte-level BPE (Qwen2's configuration),
# a Llama 2 BPE with byte fallback and a T5 Unigram, each trained here on the
# first 3 MB, must give the same ids on every line of the other 7.6 MB and
# decode them to the same text. Under the sanitizer build (SAN=1) a
# deterministic sample of about 0.4 MB of those lines is compared instead.
# Uses the venv of tests/tokenizers.sh (made there when missing).
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
VENV=${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}
bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" tok ||
  { echo "FAIL: cannot make $VENV with tokenizers (needs python3-venv and PyPI)"; echo "0 passed, 1 failed"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
SAMPLE=()
[ "$SAN" = 1 ] && SAMPLE=(--sample 400000)
"$VENV/bin/python" "$MMC_SOURCE_DIR/tests/tok/corpus.py" "$MMC" "$T" "${SAMPLE[@]}"
