#!/usr/bin/env bash
# The text loader's threads and its held-out split (runtime/data/mmrt_loader.c,
# docs/data.md "Loading", "Rows, labels, order"), on tests/text_data.sh's
# fixtures (GPT2Tiny, a `tokenizers` BPE):
#  - JSONL tokenized by a pool of loader threads: a file of 1,332 lines
#    (the corpus ten times, chat samples and two malformed lines between,
#    several chunks of 512) gives, under --bad-samples skip, the same
#    rows bit for bit with --loader-threads 0, 1 and 3 (every dumped batch
#    of 60 steps, and the losses); one epoch's rows of the corpus ten times
#    are tests/text_data/check.py's layout of tokenizers' ids (not under the
#    sanitizers);
#  - --eval-split 0.25: documents d with floor((d+1)/4) > floor(d/4) are held
#    out (the rule computed here, in Python): one epoch's training rows are, as a
#    multiset, the layout of the other documents (no held-out document in
#    any), the start line counts the held-out ones, and the evaluation loss
#    equals, bit for bit, the loss of the same weights evaluated on a file
#    of the held-out documents alone; a fraction holding out nothing, one
#    out of (0, 1) and more than 32 loader threads are refused with a
#    message; under dp = 2 with the split and 2 loader threads, a run
#    resumed mid-epoch logs the straight run's losses bit for bit; GPT2Tiny declares no data format (docs/data.md says why)
#    and is bound to the text feeder by trying.
. "$MMC_SOURCE_DIR/tests/text_data/common.sh"

# ---- the pool: same rows for any number of threads ----
"$PY" - << 'EOF'
import json
corpus = open("corpus.jsonl").read().splitlines()
chat = open("chat.jsonl").read().splitlines()
with open("mix.jsonl", "w") as f:
    for rep in range(10):
        for i, l in enumerate(corpus):
            f.write(l + "\n")
            if i % 9 == 4:
                f.write(chat[(rep + i) % len(chat)] + "\n")
        if rep in (3, 7):
            f.write('{"text": "unterminated\n')
with open("ids10.txt", "w") as f:
    f.write(open("ids.txt").read() * 10)
for l in corpus * 10:
    json.loads(l)
EOF
[ "$(wc -l < mix.jsonl)" = 1332 ] && ok || no "mix.jsonl: $(wc -l < mix.jsonl) lines, expected 1332"
for n in 0 1 3; do
  rm -rf "dm$n"
  expect "--loader-threads $n" 0 "$G" --data mix.jsonl --tokenizer tok.json --bad-samples skip --loader-threads $n \
    --steps 60 --dump-inputs "dm$n" --log "lm$n.jsonl" "${Q[@]}"
  contains "--loader-threads $n: skipped" "lm$n.jsonl" '"skipped_samples": 2'
done
same=1
for f in dm0/*; do cmp -s "$f" "dm1/$(basename "$f")" && cmp -s "$f" "dm3/$(basename "$f")" || same=0; done
[ "$(ls dm0 | wc -l)" = 60 ] && [ $same = 1 ] && ok || no "--loader-threads 0, 1, 3: the dumped batches differ"
"$PY" "$D/check.py" losses lm0.jsonl lm3.jsonl && ok || no "--loader-threads 0 and 3: the losses differ"
# one epoch of the corpus ten times (1,200 rows: 300 steps) under 2 threads, against the reference
# layout (not under the sanitizers: 300 steps)
if [ "$SAN" = 0 ]; then
  "$PY" -c 'import sys; sys.stdout.write(open("corpus.jsonl").read() * 10)' > c10.jsonl
  rm -rf dc10
  expect "c10 epoch" 0 "$G" --data c10.jsonl --tokenizer tok.json --loader-threads 2 --steps 300 --dump-inputs dc10 "${Q[@]}"
  "$PY" "$D/check.py" rows ids10.txt 32 0 0 | sort > exp.c10
  "$PY" "$D/check.py" dumped dc10 300 | sort > got.c10
  cmp -s exp.c10 got.c10 && ok || no "the epoch of the corpus ten times (2 loader threads) is not the reference layout"
fi

# ---- --eval-split 0.25: held out from training, evaluated on ----
"$PY" - << 'EOF'
import math
F = 0.25
ids = open("ids.txt").read().splitlines()
lines = open("corpus.jsonl").read().splitlines()
held = [d for d in range(len(lines)) if math.floor((d + 1) * F) > math.floor(d * F)]
open("train_ids.txt", "w").write("".join(ids[d] + "\n" for d in range(len(ids)) if d not in held))
open("held.jsonl", "w").write("".join(lines[d] + "\n" for d in held))
open("held.n", "w").write("%d %d\n" % (len(held), sum(1 for d in held if len(ids[d].split()) >= 2)))
EOF
read -r nheld nheld2 < held.n
"$PY" "$D/check.py" rows train_ids.txt 32 0 0 | sort > exp.tr
ntr=$(wc -l < exp.tr); steps=$((ntr / 4))
rm -rf dtr
expect "--eval-split 0.25" 0 "$G" --data corpus.jsonl --tokenizer tok.json --eval-split 0.25 --steps $steps \
  --dump-inputs dtr --eval-batches 1
contains "the held-out line" err "held out for evaluation (--eval-split 0.25): $nheld2 documents in $nheld2 rows"
contains "the training documents" err "$ntr documents in $ntr rows"
"$PY" "$D/check.py" dumped dtr $steps | sort > got.tr
# every training row fed is a training document's (with multiplicity), all but the epoch's tail
if [ "$nheld" = 30 ] && [ -z "$(comm -13 exp.tr got.tr)" ] && [ "$(comm -23 exp.tr got.tr | wc -l)" = $((ntr - steps * 4)) ]; then ok
else no "--eval-split: the training rows are not the other documents' ($nheld held out)"; comm -13 exp.tr got.tr | head -3 | cut -c1-120; fi
expect "evaluate the split" 0 "$G" --data corpus.jsonl --tokenizer tok.json --eval-split 0.25 --steps 0 --eval-batches all
grep '^eval: loss' out | cut -d' ' -f1-3 > ev.split
contains "evaluation on the held-out batches" err "evaluation on the whole test split ($(((nheld2 + 3) / 4)) batches)"
expect "evaluate the held-out file" 0 "$G" --data held.jsonl --tokenizer tok.json --steps 0 --eval-batches all
grep '^eval: loss' out | cut -d' ' -f1-3 > ev.held
[ -s ev.split ] && cmp -s ev.split ev.held && ok || no "--eval-split: the evaluation loss $(cat ev.split) is not the held-out file's $(cat ev.held)"
expect "--eval-split 0.001" 1 "$G" --data corpus.jsonl --tokenizer tok.json --eval-split 0.001 --steps 1
contains "--eval-split 0.001" err "--eval-split 0.001: no document of two tokens or more is held out"
expect "--eval-split 1" 1 "$G" --data corpus.jsonl --tokenizer tok.json --eval-split 1 --steps 1
contains "--eval-split 1" err "--eval-split takes a fraction in (0, 1)"
expect "--loader-threads 33" 1 "$G" --data corpus.jsonl --tokenizer tok.json --loader-threads 33 --steps 1
contains "--loader-threads 33" err "--loader-threads takes a whole number from 0 to 32, not '33'"

# ---- GPT2Tiny declares no data format on purpose (docs/data.md): bound by trying, text here ----
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny > tiny.ir 2>&1
grep -q "^data(" tiny.ir && no "GPT2Tiny declares a data format: docs/data.md says it does not" || ok
expect "GPT2Tiny on text" 0 "$G" --data corpus.jsonl --tokenizer tok.json --steps 1 --eval-batches 1
contains "GPT2Tiny bound by trying" err "text data (no data format declared: the first feeder that took the inputs)"

# ---- dp = 2 with the split and 2 loader threads a rank: resumed mid-epoch, the straight run's losses bit for bit ----
if "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --dp 2 -o gpt2 2> cerr; then
  MPI=(timeout 120 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x LSAN_OPTIONS -np 2 ./gpt2 --data corpus.jsonl
    --tokenizer tok.json --eval-split 0.25 --loader-threads 2 "${Q[@]}")
  expect "dp2 straight" 0 "${MPI[@]}" --steps 6 --log a.jsonl
  expect "dp2 first part" 0 "${MPI[@]}" --steps 3 --log b.jsonl --ckpt ck
  expect "dp2 resumed" 0 "${MPI[@]}" --steps 6 --log b.jsonl --ckpt ck --resume
  "$PY" "$D/check.py" losses a.jsonl b.jsonl && ok || no "dp2 resume with --eval-split: losses differ"
else no "compile --dp 2"; cat cerr; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
