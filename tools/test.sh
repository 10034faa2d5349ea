#!/usr/bin/env bash
# The whole test suite, as CI runs it: install, build (release and
# ASan+UBSan), run every test in both, and build and briefly run the
# frontend fuzzer. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOBS=${JOBS:-2}

echo "== format (clang-format-19, .clang-format) =="
git ls-files '*.c' '*.h' | xargs clang-format-19 --dry-run -Werror

echo "== release build =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$JOBS"
(cd build && ctest --output-on-failure -j"$JOBS" --timeout 1200)

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMMC_SANITIZE=ON > /dev/null
cmake --build build-asan -j"$JOBS"
(cd build-asan && MMC_MUTATIONS=1000 ctest --output-on-failure -j"$JOBS" --timeout 1800)

echo "== libFuzzer target =="
CC=clang-19 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMC_FUZZ=ON > /dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzz_frontend
mkdir -p build-fuzz/corpus
cp stdlib_models/*.mm build-fuzz/corpus/
./build-fuzz/fuzz_frontend -max_total_time="${FUZZ_SECONDS:-60}" -max_len=8192 -timeout=10 \
  build-fuzz/corpus > build-fuzz/fuzz.log 2>&1 || { tail -50 build-fuzz/fuzz.log; exit 1; }
tail -2 build-fuzz/fuzz.log
echo "all test stages passed"
