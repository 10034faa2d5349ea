#!/usr/bin/env bash
# The compiler's layering (tests/tools/compiler_layers.py): support <- ir <-
# frontend | passes <- codegen; no folder includes the frontend or a later
# stage, and only codegen includes the runtime (its ABI).
set -uo pipefail
if /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/compiler_layers.py" "$MMC_SOURCE_DIR"; then
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
