#!/usr/bin/env bash
# The vocabulary-parallel embedding and cross entropy (runtime/comm/mmrt_split.c),
# forward and backward, against naive loops over the whole vocabulary:
# tests/mpi/mpi_split under a real mpirun on 2 ranks (the vocabulary split
# over tp = 2; dp = 2 with the whole vocabulary on each rank) and alone (a
# NULL mesh and a one-rank mesh).
set -uo pipefail
B="$MMC_BINARY_DIR/tests"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
export OMP_NUM_THREADS=1
[ -x "$B/mpi_split" ] || { echo "FAIL $B/mpi_split is not built"; exit 1; }
fail=0
timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x LSAN_OPTIONS -np 2 "$B/mpi_split" || { echo "FAIL: mpi_split on 2 ranks"; fail=1; }
mpi_alone timeout 300 "$B/mpi_split" || { echo "FAIL: mpi_split alone"; fail=1; }
exit $fail
