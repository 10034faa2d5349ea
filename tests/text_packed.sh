#!/usr/bin/env bash
# Packed text on GPT2TinyPacked (stdlib_models/gpt2.mm: seg and pos inputs,
# attention's segment operand) and the loader under dp = 2, on
# tests/text_data.sh's fixtures: the first training step's loss equals
# PyTorch's on the same packed rows with per-document causal masks and
# positions (tests/text_data/packed_ref.py, 1e-5), the positions the task
# fills restart at each document; the documents of the first evaluation
# batch have the same losses packed (GPT2TinyPacked) and unpacked (GPT2Tiny,
# same weights) within 1e-5; the packing efficiency line; and a run resumed
# mid-epoch under dp = 2 gives the straight run's losses bit for bit.
. "$MMC_SOURCE_DIR/tests/text_data/common.sh"

# ---- packed (GPT2TinyPacked: seg and pos inputs) against PyTorch (tests/text_data/packed_ref.py) ----
HF=/var/cache/mmc-venv-hf/bin/python
if bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf && "$MMC" compile "$S/gpt2.mm" --model GPT2TinyPacked -o gptp 2> cerr; then
  expect "GPT2Tiny's initial weights" 0 "$G" --data corpus.jsonl --tokenizer tok.json --steps 0 --save-weights w0.safetensors --dump-logits un.f32 "${Q[@]}"
  rm -rf dp
  expect "packed step" 0 ./gptp --data corpus.jsonl --tokenizer tok.json --init-from w0.safetensors --steps 1 --dump-inputs dp --log p.jsonl --eval-batches 1
  contains "packing efficiency" err "120 documents in 54 rows of 32 tokens (packed), 1390 tokens of 1728 slots used (packing efficiency 80.4%)"
  "$HF" "$D/packed_ref.py" loss w0.safetensors dp p.jsonl > ref.out 2>&1 && ok || { no "packed first-step loss against PyTorch's per-document masks"; cat ref.out; }
  expect "packed logits" 0 ./gptp --data corpus.jsonl --tokenizer tok.json --init-from w0.safetensors --steps 0 --dump-logits pk.f32 "${Q[@]}"
  "$HF" "$D/packed_ref.py" perdoc ids.txt 32 4 pk.f32 un.f32 > ref.out 2>&1 && ok || { no "packed and unpacked per-document losses"; cat ref.out; }
  expect "GPT2TinyPacked --no-pack" 0 ./gptp --data corpus.jsonl --tokenizer tok.json --no-pack --steps 1 --eval-batches 1
  contains "--no-pack: one a row" err "120 documents in 120 rows of 32 tokens (unpacked)"
else no "compile GPT2TinyPacked or the hf venv"; cat cerr; fi

# ---- resume mid-epoch under dp = 2: the straight run's losses bit for bit ----
head -24 corpus.jsonl > small.jsonl # 24 rows: 6 steps an epoch
if "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --dp 2 -o gpt2 2> cerr; then
  MPI=(timeout 120 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x LSAN_OPTIONS -np 2 ./gpt2 --data small.jsonl --tokenizer tok.json "${Q[@]}")
  expect "dp2 straight" 0 "${MPI[@]}" --steps 9 --log a.jsonl
  expect "dp2 first part" 0 "${MPI[@]}" --steps 4 --log b.jsonl --ckpt ck
  expect "dp2 resumed" 0 "${MPI[@]}" --steps 9 --log b.jsonl --ckpt ck --resume
  "$PY" "$D/check.py" losses a.jsonl b.jsonl && ok || no "dp2 resume: losses differ"

else no "compile --dp 2"; cat cerr; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
