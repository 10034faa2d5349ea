#!/usr/bin/env bash
# The whole test suite, as CI runs it: install, build (release and
# ASan+UBSan), run every test in both, and build and briefly run the
# fuzzers. Exits non-zero on any failure.
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

echo "== libFuzzer targets (${FUZZ_SECONDS:-20} s each) =="
# The .mm frontend, the IR text parser and the file readers (safetensors,
# IDX, PNG), each from its corpus in tests/fuzz/corpus (copied: the
# repository's corpus only changes by hand); tests/fuzz/long.sh runs longer.
CC=clang-19 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMC_FUZZ=ON > /dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzz_frontend fuzz_ir fuzz_safetensors fuzz_idx fuzz_png
for t in frontend ir safetensors idx png; do
  rm -rf "build-fuzz/corpus/$t" && mkdir -p "build-fuzz/corpus/$t"
  len=()
  if [ "$t" = frontend ]; then cp stdlib_models/*.mm tests/fuzz/corpus/$t/* build-fuzz/corpus/$t/ && len=(-max_len=8192)
  else cp tests/fuzz/corpus/$t/* build-fuzz/corpus/$t/; fi
  ./build-fuzz/fuzz_$t -max_total_time="${FUZZ_SECONDS:-20}" "${len[@]}" -timeout=10 \
    -artifact_prefix=build-fuzz/crash-$t- build-fuzz/corpus/$t > build-fuzz/fuzz-$t.log 2>&1 ||
    { tail -50 build-fuzz/fuzz-$t.log; exit 1; }
  echo "fuzz_$t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' build-fuzz/fuzz-$t.log)"
done
echo "all test stages passed"
