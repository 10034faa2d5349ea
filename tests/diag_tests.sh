#!/usr/bin/env bash
# Bad-input tests: every tests/diag/**/*.mm with its expected diagnostics inline.
set -euo pipefail
exec /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/diagcheck.py" "$MMC"
