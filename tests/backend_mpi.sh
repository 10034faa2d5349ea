#!/usr/bin/env bash
# Multi-rank trainers under mpirun: GPT2Tiny, ViTFashion and InternVL2Tiny
# compiled for data parallel (and ZeRO-1/2/3), tensor parallel (with and
# without sequence parallel: vocabulary-parallel embedding and cross
# entropy, split heads, RoPE on a split sequence) and both on 4 ranks train
# with the losses of the one-rank trainer (within 1e-5 relative: only the
# order of sums differs), evaluate to the same accuracy, allocate per rank
# the bytes `mmc plan` gives, and resume exactly from per-rank checkpoints.
# Data parallel all-reduces the gradients in buckets (passes/bucket.c).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
# under the sanitizers its ranks check leaks, with the slow unwinder (one of
# the two tests that do, with mpi_tests: tests/tools/san/mpirun)
export MMC_RANK_LEAKS=1

close() { # name serial.jsonl ranks.jsonl
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, pa, pb = sys.argv[1:4]
def rows(p): return [json.loads(l) for l in open(p)]
ra, rb = rows(pa), rows(pb)
a, b = [r["loss"] for r in ra if "loss" in r], [r["loss"] for r in rb if "loss" in r]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
ea, eb = ra[-1].get("eval_accuracy"), rb[-1].get("eval_accuracy")
print("%s: %d steps, largest relative difference from one rank %.2e; eval accuracy %s (one rank %s)" % (name, len(b), worst, eb, ea))
sys.exit(0 if worst <= 1e-5 and ea is not None and abs(ea - eb) <= 1e-6 else 1)
PY
}

check() { # name ranks file model steps plan-flags...
  local name=$1 np=$2 file=$3 model=$4 steps=$5; shift 5
  [ -x "$T/$model.serial" ] || "$MMC" compile "$S/$file" --model "$model" -o "$T/$model.serial" || { bad "$model: compile"; return; }
  [ -s "$T/$model.serial.jsonl" ] || "$T/$model.serial" --steps "$steps" --eval-batches 2 --quiet --log "$T/$model.serial.jsonl" > /dev/null ||
    { bad "$model: serial run"; return; }
  if ! "$MMC" compile "$S/$file" --model "$model" "$@" -o "$T/$name"; then bad "$name: compile"; return; fi
  if ! "${MPIRUN[@]}" "$np" "$T/$name" --steps "$steps" --eval-batches 2 --quiet --log "$T/$name.jsonl" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; return
  fi
  close "$name" "$T/$model.serial.jsonl" "$T/$name.jsonl" && ok || bad "$name: losses differ"
  local want got
  want=$("$MMC" plan "$S/$file" --model "$model" "$@" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])')
  got=$(sed -n 's/^allocated arena bytes per rank: .*total=\([0-9]*\)$/\1/p' "$T/$name.out")
  [ "$want" = "$got" ] && ok || bad "$name: mmc plan says $want bytes per rank, the trainer allocated '$got'"
}

# under the sanitizers (ten times slower) fewer plans
check gpt2tiny.dp2 2 gpt2.mm GPT2Tiny 6 --dp 2
for z in 1 2 3; do [ $SAN = 1 ] && [ $z != 2 ] || check gpt2tiny.dp2.zero$z 2 gpt2.mm GPT2Tiny 6 --dp 2 --zero $z; done
check gpt2tiny.tp2 2 gpt2.mm GPT2Tiny 6 --tp 2
check gpt2tiny.tp2.sp 2 gpt2.mm GPT2Tiny 6 --tp 2 --sp
check gpt2tiny.tp2.dp2.zero3 4 gpt2.mm GPT2Tiny 6 --tp 2 --dp 2 --zero 3
# gradient buckets of 20 KiB (some of one gradient, some of many), the norms'
# dp all-reduces bucketed ahead of their tp all-reduces
[ $SAN = 1 ] || check gpt2tiny.tp2.dp2.sp.buckets 4 gpt2.mm GPT2Tiny 6 --tp 2 --dp 2 --sp --bucket-mb 0.02
[ $SAN = 1 ] || check vit.dp2 2 vit_fashion.mm ViTFashion 4 --dp 2
[ $SAN = 1 ] || check vit.tp2.dp2 4 vit_fashion.mm ViTFashion 4 --tp 2 --dp 2
check internvl2tiny.dp2 2 internvl2.mm InternVL2Tiny 6 --dp 2
check internvl2tiny.tp2.sp 2 internvl2.mm InternVL2Tiny 6 --tp 2 --sp

# resume from per-rank checkpoints (ZeRO-2: every rank holds other pieces)
R=(--eval-batches 1 --quiet)
if "${MPIRUN[@]}" 2 "$T/gpt2tiny.dp2.zero2" --steps 6 "${R[@]}" --ckpt "$T/ra" --log "$T/ra.jsonl" > /dev/null 2>&1 &&
   "${MPIRUN[@]}" 2 "$T/gpt2tiny.dp2.zero2" --steps 3 "${R[@]}" --ckpt "$T/rb" --log "$T/rb.jsonl" > /dev/null 2>&1 &&
   "${MPIRUN[@]}" 2 "$T/gpt2tiny.dp2.zero2" --steps 6 "${R[@]}" --ckpt "$T/rb" --resume --log "$T/rb.jsonl" > /dev/null 2>&1; then
  if [ -f "$T/rb/step-000006/rank-00001.safetensors" ] && [ "$(cat "$T/rb/latest")" = step-000006 ] && cmp -s <(grep -o '"loss": [^,]*' "$T/ra.jsonl") <(grep -o '"loss": [^,]*' "$T/rb.jsonl") &&
     cmp -s "$T/ra/step-000006/rank-00001.safetensors" "$T/rb/step-000006/rank-00001.safetensors"; then
    ok; echo "gpt2tiny.dp2.zero2: 3 steps, resume, 3 steps = 6 steps (losses and rank files identical)"
  else bad "dp2 resume differs"; fi
else bad "dp2 resume runs failed"; fi

# a trainer started on the wrong number of ranks says how to start it
"$T/gpt2tiny.dp2" --steps 1 --quiet > "$T/one.out" 2>&1
if [ $? -ne 0 ] && grep -q "mpirun -np 2" "$T/one.out"; then ok; else bad "one rank for a dp=2 trainer: $(head -3 "$T/one.out")"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
