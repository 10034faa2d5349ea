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

# gpt_row_mm HEADS HIDDEN LAYERS BATCH PARALLEL: a stdlib GPT at sequence
# 2,048 and vocabulary 51,200, bf16, AdamW, global batch BATCH, with the
# parallel section's body PARALLEL, on stdout.
gpt_row_mm() {
  cat <<MM
import "gpt2.mm"
model Row {
  let B = $4
  let T = 2048
  gpt = GPT(vocab = 51200, ctx = 2048, dim = $2, depth = $3, heads = $1)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  train {
    precision = bf16
    optimizer = adamw(lr = 1e-4, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
  }
  parallel { $5 }
}
MM
}

# table1_mm HEADS HIDDEN LAYERS TP PP GPUS BATCH [dp]: a row's model on
# stdout: the row's tp and pp, one sample a rank a micro-batch
# (micro_batches = batch / dp, dp = GPUs / (tp pp)), full recompute; with
# `dp`, the parallel section names dp too.
table1_mm() {
  local d=$(($6 / ($4 * $5))) dp=
  [ "${8:-}" = dp ] && dp="dp = $d; "
  gpt_row_mm "$1" "$2" "$3" "$7" "tp = $4; pp = $5; ${dp}micro_batches = $(($7 / d)); recompute = full"
}

# Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
# Transformer Models", MLSys 2023), Tables 3 and 5: GPT models on A100
# 80 GB (Selene), sequence 2,048, vocabulary 51,200, micro-batch 1, dp 1,
# the 1F1B schedule; each row's end-to-end step with full recomputation
# (tp only) and with the paper's own method (sequence parallelism and
# selective recomputation).
# TABLE5: params (B), heads, hidden, layers, tp, pp, GPUs, global batch,
# published step s with full recompute, with sp + selective recompute.
TABLE5='22 64 6144 48 8 1 8 4 1.42 1.10
175 96 12288 96 8 8 64 64 18.13 13.75
530 128 20480 105 8 35 280 280 49.05 37.83
1000 160 25600 128 8 64 512 512 94.42 71.49'

# table5_mm HEADS HIDDEN LAYERS TP PP GPUS BATCH RECOMPUTE SP: a row's model
# on stdout (dp = GPUs / (tp pp) = 1 in every row: one micro-batch a sample).
table5_mm() {
  local d=$(($6 / ($4 * $5)))
  gpt_row_mm "$1" "$2" "$3" "$7" "tp = $4; pp = $5; micro_batches = $(($7 / d)); recompute = $8; sp = $9"
}
