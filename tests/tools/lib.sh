# The set-up the test scripts share; each sources it first:
#   . "$MMC_SOURCE_DIR/tests/tools/lib.sh"
# SAN is 1 when the build under test is the ASan+UBSan one (its CMake cache
# says MMC_SANITIZE=ON), else 0: scripts shorten or skip their slow cells.
SAN=0
grep -qs 'MMC_SANITIZE:BOOL=ON' "${MMC_BINARY_DIR:-.}/CMakeCache.txt" && SAN=1
# mpirun as root (CI runs as root), and OpenMPI's own start-up allocations
# not counted as leaks under ASan (tests/lsan.supp; the scripts pass
# LSAN_OPTIONS on with mpirun -x)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$MMC_SOURCE_DIR/tests/lsan.supp}:fast_unwind_on_malloc=0"
