#!/usr/bin/env bash
# Thousands of truncated and mutated stdlib files: exit 0 or 1, never a crash or a hang.
set -euo pipefail
exec /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/mutate.py" "$MMC" "$MMC_SOURCE_DIR/stdlib_models" "${MMC_MUTATIONS:-2000}"
