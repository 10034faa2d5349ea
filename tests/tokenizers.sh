#!/usr/bin/env bash
# mmc tokenize against Hugging Face `tokenizers` (tests/tok/compare.py):
# tokenizers in the configurations of GPT-2, Qwen2, Llama 3, Llama 2, T5 (its
# Precompiled normalizer from a `sentencepiece` model) and
# two mixes of the other stages, and four of them with truncation and padding
# set in the file (also run with --no-truncation --no-padding), trained here on a generated corpus, must
# give the same ids on every line of a multilingual corpus (with and without
# --add-special) and decode them to the same text. `tokenizers` comes from
# PyPI into a virtual environment outside the clone, made once
# (MMC_TOK_VENV, default /var/cache/mmc-venv-tok).
set -uo pipefail
VENV=${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}
# the versions checked (tools/test_venvs.sh tok); sentencepiece only makes T5's Precompiled rules (nmt_nfkc)
bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" tok ||
  { echo "FAIL: cannot make $VENV with tokenizers (needs python3-venv and PyPI)"; echo "0 passed, 1 failed"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$VENV/bin/python" "$MMC_SOURCE_DIR/tests/tok/compare.py" "$MMC" "$T"
rc=$?
# chat formats: ids against tokenizers on the rendered templates, masks against its offsets
"$VENV/bin/python" "$MMC_SOURCE_DIR/tests/tok/chat.py" "$MMC" "$T/chat" || rc=1
exit $rc
