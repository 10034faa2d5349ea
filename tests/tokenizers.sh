#!/usr/bin/env bash
# mmc tokenize against Hugging Face `tokenizers` (tests/tok/compare.py):
# tokenizers in the configurations of GPT-2, Qwen2, Llama 3, Llama 2, T5 and
# two mixes of the other stages, trained here on a generated corpus, must
# give the same ids on every line of a multilingual corpus (with and without
# --add-special) and decode them to the same text. `tokenizers` comes from
# PyPI into a virtual environment outside the clone, made once
# (MMC_TOK_VENV, default /var/cache/mmc-venv-tok).
set -uo pipefail
VENV=${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}
TOKENIZERS_VERSION=0.23.3 # the version the expected behaviour was checked against
if ! "$VENV/bin/python" -c "import tokenizers, sys; sys.exit(tokenizers.__version__ != '$TOKENIZERS_VERSION')" 2>/dev/null; then
  echo "making $VENV with tokenizers==$TOKENIZERS_VERSION"
  /usr/bin/python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "tokenizers==$TOKENIZERS_VERSION" ||
    { echo "FAIL: cannot make $VENV with tokenizers (needs python3-venv and PyPI)"; echo "0 passed, 1 failed"; exit 1; }
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$VENV/bin/python" "$MMC_SOURCE_DIR/tests/tok/compare.py" "$MMC" "$T"
