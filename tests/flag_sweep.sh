#!/usr/bin/env bash
# Nothing accepted and ignored: every flag of mmc's and the trainer's --help
# and every setting of lang/REFERENCE.md changes the output or is refused
# (tests/tools/flagsweep.py says how).
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/flagsweep.py" "$MMC"
