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
ROWS=(
  "1.7 24 2304 24 1 1 32 512" "3.6 32 3072 30 2 1 64 512" "7.5 32 4096 36 4 1 128 512"
  "18.4 48 6144 40 8 1 256 1024" "39.1 64 8192 48 8 2 512 1536" "76.1 80 10240 60 8 4 1024 1792"
  "145.6 96 12288 80 8 8 1536 2304" "310.1 128 16384 96 8 16 1920 2160"
  "529.6 128 20480 105 8 35 2520 2520" "1008.0 160 25600 128 8 64 3072 3072")
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(1 2 3 4 5 6 7 8 9 10)
for i in "${want[@]}"; do
  read -r P a h l t p n B <<< "${ROWS[$((i - 1))]}"
  d=$((n / (t * p)))
  cat > "$T/row.mm" <<MM
import "gpt2.mm"
model Row {
  let B = $B
  let T = 2048
  gpt = GPT(vocab = 51200, ctx = 2048, dim = $h, depth = $l, heads = $a)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  train {
    precision = bf16
    optimizer = adamw(lr = 1e-4, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
  }
  parallel { tp = $t; pp = $p; dp = $d; micro_batches = $((B / d)); recompute = full }
}
MM
  echo "== row $i: ${P} B, $n GPUs, batch $B (published tp = $t, pp = $p, dp = $d)"
  /usr/bin/time -f "   search time: %e s wall, %U s CPU" "$MMC" plan "$T/row.mm" -I "$ROOT/stdlib_models" \
    --device a100 --devices "$n" --search 2>&1 | grep -E "^search on|^  stage splits|^  per-sub-model|^#1 |^why|^  #1:|^  the file|^  parallel|^nothing fits|time:" |
    awk '/^#1 |^nothing fits/{top=1} /^  parallel/{if (top==1 || why==1) print; top=0; next} /^why/{why=1} {print}' || true # a row where nothing fits exits 1: go on
done
