# Sourced (POSIX sh) by tests/tools/san/mpirun and tests/tools/lib.sh: the
# one definition of the LeakSanitizer options for processes that start
# OpenMPI. They unwind every allocation's stack the slow way
# (fast_unwind_on_malloc=0), so that OpenMPI's start-up allocations made in
# components it later unloads still show a frame in libmpi and the like and
# match tests/lsan.supp. Everything else (mmc itself above all) keeps the
# fast unwinder: the slow one made `mmc compile` 4 to 5 times slower under
# ASan.
slow_unwind_lsan() { printf '%s' "${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0"; }
