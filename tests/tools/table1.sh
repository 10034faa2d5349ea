# Narayanan et al. 2021, Table 1, as .mm models: sourced by
# tests/planner_table1.sh (the planner against the published figures) and
# bench/table1_search.sh (--search on every row).
#
# TABLE1: one row a line: params (B), heads, hidden, layers, tp, pp, GPUs,
# global batch, published TFLOP/s per GPU.
TABLE1='1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008.0 160 25600 128 8 64 3072 3072 163'

# table1_mm HEADS HIDDEN LAYERS TP PP GPUS BATCH [dp]: a row's model on
# stdout: stdlib GPT at sequence 2,048 and vocabulary 51,200, bf16, AdamW,
# the row's tp and pp, one sample a rank a micro-batch (micro_batches =
# batch / dp, dp = GPUs / (tp pp)), full recompute; with `dp`, the parallel
# section names dp too.
table1_mm() {
  local a=$1 h=$2 l=$3 t=$4 p=$5 n=$6 B=$7 d=$(($6 / ($4 * $5))) dp=
  [ "${8:-}" = dp ] && dp="dp = $d; "
  cat <<MM
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
  parallel { tp = $t; pp = $p; ${dp}micro_batches = $((B / d)); recompute = full }
}
MM
}
