#!/usr/bin/env bash
# A long fuzzing run outside the test command:
#   tests/fuzz/long.sh TARGET [CPU_SECONDS=600] [BUILD=build-fuzz]
# runs BUILD/fuzz_TARGET at nice 19 on a working copy of
# tests/fuzz/corpus/TARGET (BUILD/work/TARGET) until it has used CPU_SECONDS
# of CPU time (not wall time: the machine is shared), then stops it with
# SIGINT so libFuzzer prints its totals.  Crashing inputs land in
# BUILD/artifacts/TARGET/; the log is BUILD/long-TARGET.log and its last
# line says how many inputs ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
t=$1 cpu=${2:-600} b=${3:-build-fuzz}
mkdir -p "$b/work/$t" "$b/artifacts/$t"
cp -n tests/fuzz/corpus/"$t"/* "$b/work/$t/" 2>/dev/null || true
extra=()
[ "$t" = frontend ] && extra=(-max_len=8192) && cp -n stdlib_models/*.mm "$b/work/$t/"
nice -n 19 "$b/fuzz_$t" -max_total_time=100000 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$b/artifacts/$t/" "${extra[@]}" "$b/work/$t" > "$b/long-$t.log" 2>&1 &
pid=$!
tick=$(getconf CLK_TCK)
while kill -0 "$pid" 2> /dev/null; do
  read -r -a st < "/proc/$pid/stat" || break
  used=$(((st[13] + st[14]) / tick)) # utime + stime
  if [ "$used" -ge "$cpu" ]; then kill -INT "$pid"; break; fi
  sleep 5
done
rc=0
wait "$pid" || rc=$?
echo "fuzz_$t: $used CPU-seconds, exit $rc, $(grep -c . < <(ls "$b/artifacts/$t")) artifact(s)" \
  | tee -a "$b/long-$t.log"
grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$b/long-$t.log" | tail -2
