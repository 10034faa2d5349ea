#!/usr/bin/env bash
# The runtime's layering (tests/tools/runtime_layers.py): each room
# runtime/ROOM/ includes only itself and the rooms its README.md allows
# ("May include: ..."), those allowances have no cycle, no #include cycle
# among runtime/*/*.c and *.h, and no cycle among libmmrt's objects through
# the symbols they use and define (the trainer, its feeder files and the
# generator do not reach into each other).
set -uo pipefail
if /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/runtime_layers.py" "$MMC_SOURCE_DIR/runtime" \
     "$MMC_BINARY_DIR/libmmrt.a"; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; exit 1; fi
