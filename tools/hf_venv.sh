#!/usr/bin/env bash
# The Python environment of the Hugging Face tests (tests/hf_import.sh):
# transformers and accelerate from PyPI over Debian's python3-torch 1.13
# (--system-site-packages: no CUDA wheels), outside the clone. transformers
# 4.49.0 is the newest release that imports and runs on torch 1.13 (4.50 needs
# torch.distributed.tensor) and has Qwen2.
# Idempotent; about 20 s the first time.
set -euo pipefail
V=${MMC_HF_VENV:-/var/cache/mmc-venv-hf}
if ! "$V/bin/python" -c 'import transformers, accelerate, safetensors; assert transformers.__version__ == "4.49.0"' 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$V"
  "$V/bin/pip" install -q "transformers==4.49.0" "accelerate==1.0.1" safetensors
fi
