#!/usr/bin/env bash
# The whole test suite, as CI runs it: install, build (release and
# ASan+UBSan), run every test in both, and build and briefly run the
# fuzzers. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOBS=${JOBS:-2}
# Each stage's wall time, printed as it ends and summed at the end (the
# budget: 30 minutes on a 2-core Zen 3; tests/README.md has the figures).
t0=$SECONDS; ts=$SECONDS; times=()
slowest() { # the ten slowest tests of a build folder, from CTest's own timings
  # (the last stage reads all of sort's output: `head` exiting early can kill
  # sort with SIGPIPE, and under pipefail that failed a passing run, exit 141)
  echo "slowest tests in $1:"; awk 'NF == 3 { printf "  %-24s %7.1f s\n", $1, $3 }' "$1/Testing/Temporary/CTestCostData.txt" | sort -k2 -rn | awk 'NR <= 10'
}
stage_done() { times+=("$(printf '%-28s %5d s' "$1" $((SECONDS - ts)))"); echo "-- $1: $((SECONDS - ts)) s"; ts=$SECONDS; }

echo "== the tests' Python references (venvs under /var/cache) =="
bash tools/test_venvs.sh all
stage_done "reference venvs"

echo "== format (clang-format-19, .clang-format) =="
git ls-files '*.c' '*.h' | xargs clang-format-19 --dry-run -Werror
stage_done format

echo "== release build =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$JOBS"
stage_done "release build"
(cd build && ctest --output-on-failure -j"$JOBS" --timeout 1200)
slowest build; stage_done "release tests"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMMC_SANITIZE=ON > /dev/null
cmake --build build-asan -j"$JOBS"
stage_done "asan build"
(cd build-asan && MMC_MUTATIONS=1000 ctest --output-on-failure -j"$JOBS" --timeout 1800)
slowest build-asan; stage_done "asan tests"

echo "== libFuzzer targets (${FUZZ_SECONDS:-6} s each) =="
# The .mm frontend, the IR text parser, the file readers (safetensors,
# IDX, PNG, Megatron .bin/.idx and JSONL, the text loader on JSONL, JPEG/PNG/WebP images) and the programs' argument parsers with the trainer's data
# directories (trainer_args), each from its corpus in tests/fuzz/corpus (copied: the
# repository's corpus only changes by hand); tests/fuzz/long.sh runs longer.
CC=clang-19 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMC_FUZZ=ON > /dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzz_frontend fuzz_ir fuzz_safetensors fuzz_idx fuzz_png \
  fuzz_trainer_args fuzz_indexed fuzz_jsonl fuzz_image fuzz_video fuzz_video_list
fuzz_one() {
  local t=$1 len=()
  rm -rf "build-fuzz/corpus/$t" && mkdir -p "build-fuzz/corpus/$t"
  if [ "$t" = frontend ]; then cp stdlib_models/*.mm tests/fuzz/corpus/$t/* build-fuzz/corpus/$t/ && len=(-max_len=8192)
  else cp tests/fuzz/corpus/$t/* build-fuzz/corpus/$t/; fi
  ./build-fuzz/fuzz_$t -max_total_time="${FUZZ_SECONDS:-6}" "${len[@]}" -timeout=10 \
    -artifact_prefix=build-fuzz/crash-$t- build-fuzz/corpus/$t > build-fuzz/fuzz-$t.log 2>&1 ||
    { tail -50 build-fuzz/fuzz-$t.log; echo "fuzz_$t FAILED"; return 1; }
  echo "fuzz_$t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' build-fuzz/fuzz-$t.log)"
}
# each fuzzer is one single-threaded process: $JOBS of them at a time
fuzz_pids=() fuzz_failed=0
for t in frontend ir safetensors idx png trainer_args indexed jsonl image video video_list; do
  fuzz_one "$t" &
  fuzz_pids+=($!)
  if [ ${#fuzz_pids[@]} -ge "$JOBS" ]; then
    wait "${fuzz_pids[0]}" || fuzz_failed=1
    fuzz_pids=("${fuzz_pids[@]:1}")
  fi
done
for p in "${fuzz_pids[@]}"; do wait "$p" || fuzz_failed=1; done
[ "$fuzz_failed" = 0 ] || exit 1
stage_done "fuzz build and runs"
printf '%s\n' "${times[@]}"
echo "all test stages passed in $((SECONDS - t0)) s ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs)"
