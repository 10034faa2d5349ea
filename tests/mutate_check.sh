#!/usr/bin/env bash
# Thousands of truncated and mutated stdlib files: exit 0 or 1, never a crash or a hang.
# The builds check different files of one sequence: the sanitizer build the
# first MMC_MUTATIONS (tools/test.sh: 1,000), release the next 1,000 (until
# 2026-12-07 release checked the first 2,000, the sanitizers' 1,000 among them).
set -euo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
if [ "$SAN" = 1 ]; then first=0; else first=1000; fi
exec /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/mutate.py" "$MMC" "$MMC_SOURCE_DIR/stdlib_models" "${MMC_MUTATIONS:-1000}" "$first"
