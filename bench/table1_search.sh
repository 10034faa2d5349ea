#!/usr/bin/env bash
# mmc plan --search for every row of Narayanan et al. 2021 Table 1 (the rows
# tests/planner_table1.sh holds): each row's GPT at its GPUs and global
# batch on a100, its published plan written as the file's own, so that the
# search's explanation compares its best plan with the published one. Prints
# per row the search's summary line, its stage splits and per-sub-model
# counts, its #1 (or the closest plan when nothing fits) and the "why #1"
# lines, and the wall and CPU time. A benchmark (minutes for the large rows), not a test.
# Usage: bench/table1_search.sh [ROW...]   (rows 1-10; default all)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$ROOT/tests/tools/table1.sh"
mapfile -t ROWS <<< "$TABLE1"
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(1 2 3 4 5 6 7 8 9 10)
for i in "${want[@]}"; do
  read -r P a h l t p n B _ <<< "${ROWS[$((i - 1))]}"
  d=$((n / (t * p)))
  table1_mm "$a" "$h" "$l" "$t" "$p" "$n" "$B" dp > "$T/row.mm"
  echo "== row $i: ${P} B, $n GPUs, batch $B (published tp = $t, pp = $p, dp = $d)"
  /usr/bin/time -f "   search time: %e s wall, %U s CPU" "$MMC" plan "$T/row.mm" -I "$ROOT/stdlib_models" \
    --device a100 --devices "$n" --search 2>&1 | grep -E "^search on|^  stage splits|^  per-sub-model|^#1 |^why|^  #1:|^  the file|^  parallel|^nothing fits|time:" |
    awk '/^#1 |^nothing fits/{top=1} /^  parallel/{if (top==1 || why==1) print; top=0; next} /^why/{why=1} {print}' || true # a row where nothing fits exits 1: go on
done
