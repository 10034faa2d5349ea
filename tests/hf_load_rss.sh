#!/usr/bin/env bash
# hf_load_rss: --init-from HF_DIR reads a rank's slice plus at most one tensor
# (runtime/io/mmrt_hf.c: one source tensor at a time, as stored and as float32).
# A random Qwen2ForCausalLM (12 layers of width 256, made with transformers in
# the venv of tools/test_venvs.sh) saved in bf16 in 3 shards is loaded under
# tp = 2; each rank's peak RSS (/usr/bin/time) with --init-from exceeds the
# same run's without it (random init) by at most the largest tensor's bf16
# and float32 bytes plus 4 MiB, which is less than the checkpoint itself;
# and the loaded model's first loss equals the serial run's (1e-6 relative).
# --save-hf (bf16, 3 shards) gathers and writes tensor by tensor: the
# writing run's peak RSS (serial, and each rank under tp = 2) exceeds the
# run without it by at most one parameter and one tensor in float32 plus
# 4 MiB; the tp = 2 export is the serial one byte for byte. Bytes read (strace) by each rank
# under tp = 2 and dp = 2 + ZeRO-3: at most half the checkpoint plus its largest tensor.
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
set -u
PY=${MMC_HF_PYTHON:-/var/cache/mmc-venv-hf/bin/python}
if [ -z "${MMC_HF_PYTHON:-}" ] && ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf; then
  echo "FAIL: cannot make the transformers venv (tools/test_venvs.sh hf)"
  exit 1
fi
if [ "$SAN" = 1 ]; then echo "SKIP: peak RSS under the sanitizers measures their shadow memory"; exit 0; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export PYTHONWARNINGS=ignore TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
"$PY" - > make.log 2>&1 << 'PYEOF' || { cat make.log; exit 1; }
import json, os, torch, transformers as tf
torch.manual_seed(0)
c = tf.Qwen2Config(vocab_size=256, hidden_size=256, intermediate_size=1024, num_hidden_layers=12,
                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                   max_position_embeddings=128)
m = tf.Qwen2ForCausalLM(c).to(torch.bfloat16)
m.save_pretrained("q", safe_serialization=True, max_shard_size="9MB")
big = max(p.numel() for p in m.parameters())
total = sum(os.path.getsize("q/" + f) for f in os.listdir("q") if f.endswith(".safetensors"))
print(big, total, file=open("sizes.txt", "w"))
PYEOF
read -r big total < sizes.txt
fail=0
ls q/model-0000?-of-00003.safetensors > /dev/null 2>&1 && echo "PASS: bf16 checkpoint in 3 shards ($total bytes)" ||
  { echo "FAIL: not 3 shards: $(ls q)"; fail=1; }
"$MMC" import q -o q.mm 2> imp.err || { echo "FAIL: import: $(cat imp.err)"; exit 1; }
"$MMC" compile q.mm --model HfQwen2 --set B=1 --set T=16 --tp 2 -o q2.tr || exit 1
"$MMC" compile q.mm --model HfQwen2 --set B=1 --set T=16 -o q1.tr || exit 1
run() { # run NAME ARGS...: under tp = 2, rss.NAME.<rank> in KiB
  local name=$1
  shift
  mpirun -np 2 --oversubscribe sh -c "exec /usr/bin/time -f %M -o rss.$name.\$OMPI_COMM_WORLD_RANK ./q2.tr --eval-batches 1 --quiet $*" > $name.out 2>&1
}
run init --steps 1 --log init.jsonl || { echo "FAIL: tp = 2 run: $(tail -3 init.out)"; exit 1; }
run hf --steps 1 --init-from q --log hf.jsonl || { echo "FAIL: tp = 2 --init-from: $(tail -3 hf.out)"; exit 1; }
/usr/bin/time -f %M -o rss.one ./q1.tr --steps 1 --eval-batches 1 --init-from q --log one.jsonl --quiet > one.out 2>&1 ||
  { echo "FAIL: serial: $(tail -3 one.out)"; exit 1; }
# --save-hf (serial, bf16, 3 shards): gathered and written tensor by tensor, so the run's peak
# exceeds the run without it by at most one parameter and one tensor in f32, plus 4 MiB
/usr/bin/time -f %M -o rss.save ./q1.tr --steps 1 --eval-batches 1 --init-from q --save-hf ex --save-hf-dtype bf16 \
  --shard-size 9000000 --quiet > save.out 2>&1 || { echo "FAIL: --save-hf: $(tail -3 save.out)"; exit 1; }
a=$(($(cat rss.one) * 1024)) b=$(($(cat rss.save) * 1024)) ns=$(ls ex/*.safetensors | wc -l)
sbound=$((big * 8 + 4 * 1024 * 1024)) # a parameter and a tensor in f32, plus 4 MiB
if [ $((b - a)) -le $sbound ] && [ $sbound -lt "$total" ] && [ "$ns" = 3 ]; then
  echo "PASS: --save-hf in $ns bf16 shards: peak RSS +$((b - a)) bytes <= $sbound (a parameter and a tensor in f32 + 4 MiB; the checkpoint: $total)"
else
  echo "FAIL: --save-hf: peak RSS $b with it, $a without: +$((b - a)) > $sbound ($ns shards)"
  fail=1
fi
# under tp = 2 (rank 0 writes, both gather tensor by tensor): the serial export's bytes (no step:
# the loaded weights), and each rank's peak within the same bound of its run without --save-hf
./q1.tr --steps 0 --eval-batches 1 --init-from q --save-hf s0 --save-hf-dtype bf16 --shard-size 9000000 --quiet > s0.out 2>&1 ||
  { echo "FAIL: serial --save-hf: $(tail -3 s0.out)"; fail=1; }
run h0 --steps 0 --init-from q || { echo "FAIL: tp = 2 --steps 0: $(tail -3 h0.out)"; fail=1; }
run t0 --steps 0 --init-from q --save-hf t0 --save-hf-dtype bf16 --shard-size 9000000 || { echo "FAIL: tp = 2 --save-hf: $(tail -3 t0.out)"; fail=1; }
same=1
for f in s0/*; do cmp -s "$f" "t0/${f#s0/}" || same=0; done
[ $same = 1 ] && [ "$(ls t0 | wc -l)" = "$(ls s0 | wc -l)" ] && echo "PASS: --save-hf under tp = 2: the serial export's files, byte for byte" ||
  { echo "FAIL: tp = 2 export differs: $(ls s0) / $(ls t0)"; fail=1; }
for r in 0 1; do
  a=$(($(cat rss.h0.$r) * 1024)) b=$(($(cat rss.t0.$r) * 1024))
  [ $((b - a)) -le $sbound ] && echo "PASS: tp = 2 rank $r: peak RSS with --save-hf +$((b - a)) <= $sbound" ||
    { echo "FAIL: tp = 2 rank $r: peak RSS $b with --save-hf, $a without: +$((b - a)) > $sbound"; fail=1; }
done
bound=$((big * 6 + 4 * 1024 * 1024)) # bf16 and float32 of the largest tensor, plus 4 MiB
for r in 0 1; do
  a=$(($(cat rss.init.$r) * 1024)) b=$(($(cat rss.hf.$r) * 1024))
  if [ $((b - a)) -le $bound ] && [ $bound -lt "$total" ]; then
    echo "PASS: rank $r: peak RSS $b bytes with --init-from, $a without: +$((b - a)) <= $bound (the largest tensor, $big elements, in bf16 and f32, + 4 MiB; the checkpoint: $total)"
  else
    echo "FAIL: rank $r: peak RSS $b with --init-from, $a without: +$((b - a)) > $bound (checkpoint $total)"
    fail=1
  fi
done
# bytes read: each rank's reads of the shards (strace: read and pread64 on q/*.safetensors, the
# headers included) under tp = 2 and dp = 2 + ZeRO-3 at most half the checkpoint plus its largest
# tensor in bf16 (a tensor tp or ZeRO keeps whole on every rank: the norms); whole before a rank
# read only its part (mmrt_hf_read)
if command -v strace > /dev/null && strace -qq -o /dev/null true 2> /dev/null; then
  "$MMC" compile q.mm --model HfQwen2 --set B=2 --set T=16 --dp 2 --zero 3 -o qz.tr || exit 1
  cp q2.tr tp.tr && cp qz.tr z3.tr
  for p in tp z3; do
    mpirun -np 2 --oversubscribe sh -c "exec strace -qq -y -e trace=pread64,read -o io.$p.\$OMPI_COMM_WORLD_RANK ./$p.tr --steps 0 --init-from q --eval-batches 1 --quiet" > io.$p.out 2>&1 ||
      { echo "FAIL: $p under strace: $(tail -3 io.$p.out)"; fail=1; continue; }
    for r in 0 1; do
      got=$(grep '/q/model-[-0-9of]*\.safetensors>' io.$p.$r | sed -n 's/.*= \([0-9]*\)$/\1/p' | awk '{s += $1} END {print s + 0}')
      bound=$((total / 2 + big * 2))
      [ "$got" -gt 0 ] && [ "$got" -le $bound ] &&
        echo "PASS: $p rank $r read $got bytes of the $total-byte checkpoint (<= half + the largest tensor in bf16: $bound)" ||
        { echo "FAIL: $p rank $r read $got bytes of the shards, more than $bound (checkpoint $total)"; fail=1; }
    done
  done
else
  echo "SKIP: no strace here (or ptrace refused): bytes read not measured"
fi
a=$(grep -o '"step": 1, "loss": [0-9.e-]*' one.jsonl | grep -o '[0-9.e-]*$')
b=$(grep -o '"step": 1, "loss": [0-9.e-]*' hf.jsonl | grep -o '[0-9.e-]*$')
/usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * a)" "$a" "$b" 2> /dev/null &&
  echo "PASS: tp = 2 loaded the serial model: first loss $b, serial $a" || { echo "FAIL: tp = 2 loss '$b', serial '$a'"; fail=1; }
exit $fail
