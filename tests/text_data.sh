#!/usr/bin/env bash
# The trainer's text feeder (runtime/feeders/mmrt_feed_text.c, runtime/data/mmrt_loader.c) on
# GPT2Tiny: a JSONL corpus and a BPE tokenizer made by `tokenizers`
# (tests/text_data/make.py, in the tok venv); the rows one epoch feeds
# (--dump-inputs) are, as a multiset, the rows tests/text_data/check.py
# lays out from tokenizers' ids (unpacked; --too-long truncate and drop);
# chat samples label only the assistant's tokens; a blend takes its
# datasets in their weights; every bad-data case and bad flag
# exits 1 with a message naming the file (and line) or the flag;
# --bad-samples skip counts in the log.
. "$MMC_SOURCE_DIR/tests/text_data/common.sh"

# ---- the rows of one epoch (120 documents, B = 4: 30 steps; 102 when the 18 longer than 32
# tokens are dropped: 25 steps, the tail of 2 rows left out) against the reference layout ----
expect "seed 42" 0 "$G" --data corpus.jsonl --tokenizer tok.json --steps 1 --log s42.jsonl "${Q[@]}"
expect "seed 7" 0 "$G" --data corpus.jsonl --tokenizer tok.json --steps 1 --log s7.jsonl --seed 7 "${Q[@]}"
[ "$(head -1 s7.jsonl | cut -d, -f2)" != "$(head -1 s42.jsonl | cut -d, -f2)" ] && ok || no "--seed 7 fed the same first batch"
for mode in truncate:0:120 drop:1:102; do
  IFS=: read -r tl drop n <<< "$mode"
  steps=$((n / 4))
  "$PY" "$D/check.py" rows ids.txt 32 0 "$drop" | sort > "exp.$tl"
  rm -rf "di.$tl"
  expect "train --too-long $tl" 0 "$G" --data corpus.jsonl --tokenizer tok.json --too-long "$tl" \
    --steps $steps --dump-inputs "di.$tl" "${Q[@]}"
  "$PY" "$D/check.py" dumped "di.$tl" $steps | sort > "got.$tl"
  if [ "$(wc -l < "got.$tl")" = $((steps * 4)) ] && [ "$n" = "$("$PY" "$D/check.py" rows ids.txt 32 0 "$drop" | wc -l)" ] &&
     [ -z "$(comm -13 "exp.$tl" "got.$tl")" ] && [ "$(comm -23 "exp.$tl" "got.$tl" | wc -l)" = $((n - steps * 4)) ]; then ok; else no "--too-long $tl: the epoch's rows are not the reference's"; diff "exp.$tl" "got.$tl" | head -3 | cut -c1-160; fi
done
expect "the layout line" 0 "$G" --data corpus.jsonl --tokenizer tok.json --too-long drop --steps 1 --eval-batches 1
contains "packing efficiency printed" err "102 documents in 102 rows of 32 tokens (unpacked)"
contains "dropped counted" err "18 too long dropped"

# ---- chat: only the assistant's tokens are labels ----
rm -rf dc
expect "chat" 0 "$G" --data chat.jsonl --tokenizer tok.json --steps 4 --dump-inputs dc "${Q[@]}"
"$PY" "$D/check.py" dumped dc 4 > chat.rows
# ChatML: <|im_start|> is id 2, <|im_end|> 3; labels start inside the assistant's turn and end at its <|im_end|>
if awk -F' \\| ' '{ split($2, l, " "); if (l[1] != -100) bad = 1; e = 0; for (i in l) if (l[i] == 3) e++; if (e != 1) bad = 1; n++ }
     END { exit bad || n != 16 }' chat.rows; then ok; else no "chat rows: a label outside the assistant's reply"; head -2 chat.rows | cut -c1-200; fi

# ---- a blend: 3:1 from the JSONL and an indexed dataset (its documents without the EOS id 1) ----
"$MMC" data preprocess --input corpus.jsonl --tokenizer tok.json --output-prefix ix > /dev/null || no "preprocess"
rm -rf db
expect "blend" 0 "$G" --data 0.75:corpus.jsonl,0.25:ix_text_document --tokenizer tok.json --too-long drop --steps 25 --dump-inputs db "${Q[@]}"
"$PY" "$D/check.py" dumped db 25 | awk -F' \\| ' '{ n = split($1, a, " "); last = 0; for (i = n; i >= 1; i--) if (a[i] != 0) { last = a[i]; break }
  j += (last == 1) } END { f = j / NR; print f; exit !(f > 0.68 && f < 0.82) }' > blend.frac &&
  ok || no "blend: $(cat blend.frac) of the rows from the 0.75 dataset"

# ---- bad data: exit 1 naming the file and line or sample ----
bad() { # name expected-message command...
  local name=$1 msg=$2; shift 2
  expect "$name" 1 "$@"; contains "$name" err "$msg"
}
{ head -3 corpus.jsonl; echo '{"text": "a b'; head -6 corpus.jsonl | tail -3; printf '{"text": "\xff"}\n'; } > broken.jsonl
bad "malformed JSON" "broken.jsonl:4: malformed JSON" "$G" --data broken.jsonl --tokenizer tok.json --steps 1
: > empty.jsonl
bad "empty file" "empty.jsonl: an empty file" "$G" --data empty.jsonl --tokenizer tok.json --steps 1
printf '{"text": "\xff\xfe"}\n' > utf.jsonl
bad "invalid UTF-8" "utf.jsonl:1:11: invalid UTF-8" "$G" --data utf.jsonl --tokenizer tok.json --steps 1
cp ix_text_document.idx cut.idx && head -c 100 ix_text_document.bin > cut.bin
bad ".idx not matching .bin" "cut.bin" "$G" --data cut --steps 1
# an indexed dataset of another tokenizer: id 300 in every sequence (read with its row)
"$PY" -c '
import struct
seqs = [[5, 6, 7, 300, 8]] * 8
open("hi.bin", "wb").write(b"".join(struct.pack("<5H", *q) for q in seqs))
S = len(seqs)
open("hi.idx", "wb").write(b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, 8, S, S + 1) + struct.pack("<%di" % S, *[5] * S)
                           + struct.pack("<%dq" % S, *range(0, 10 * S, 10)) + struct.pack("<%dq" % (S + 1), *range(S + 1)))'
bad "id past the classes" "hi.bin: sequence" "$G" --data hi --steps 1
contains "id past the classes" err "token 3: id 300 outside the model's 256 classes"
printf '{"messages": [{"role": "user"}]}\n' > badchat.jsonl
bad "chat without content" "badchat.jsonl:1: message 1" "$G" --data badchat.jsonl --tokenizer tok.json --steps 1
expect "--bad-samples skip" 0 "$G" --data broken.jsonl --tokenizer tok.json --bad-samples skip --steps 1 --log skip.jsonl "${Q[@]}"
contains "skipped in the log" skip.jsonl '"skipped_samples": 2'
head -2 corpus.jsonl > two.jsonl
bad "too few rows" "fewer than the batch" "$G" --data two.jsonl --tokenizer tok.json --steps 1
# ---- bad flags ----
bad "JSONL without tokenizer" "needs --tokenizer" "$G" --data corpus.jsonl --steps 1
bad "tokenizer with ids" "holds token ids already" "$G" --data ix_text_document --tokenizer tok.json --steps 1
bad "--seq-len" "--seq-len 64: model GPT2Tiny reads rows of T = 32" "$G" --data corpus.jsonl --tokenizer tok.json --seq-len 64
bad "--pack without seg" "takes no seg input" "$G" --data corpus.jsonl --tokenizer tok.json --pack
bad "text flag on Fashion-MNIST" "--no-pack: a text flag" "$G" --no-pack --steps 1
# the flag named is the first text flag given, --bad-samples only when it is the one
bad "first text flag named" "--too-long: a text flag" "$G" --steps 1 --too-long drop --no-pack
bad "--bad-samples named last" "--seq-len: a text flag" "$G" --bad-samples skip --seq-len 32 --steps 1
bad "--bad-samples alone" "--bad-samples: a text flag" "$G" --bad-samples skip --steps 1
bad "--too-long" "--too-long takes truncate or drop" "$G" --too-long cut
bad "--bad-samples" "--bad-samples takes fail or skip" "$G" --bad-samples ignore
bad "blend weight" "is not WEIGHT:PATH" "$G" --data 0.5:corpus.jsonl,ix_text_document --tokenizer tok.json
bad "no such data" "no such file, and no indexed dataset" "$G" --data nothing.jsonl --tokenizer tok.json

# ---- docs/data.md's five lines, as written there (steps shortened) ----
mkdir five && cp corpus.jsonl five/my.jsonl && cd five || exit 1
FIVE=$(sed -n '/^```sh five-lines/,/^```$/p' "$MMC_SOURCE_DIR/docs/data.md" | sed '1d;$d')
[ "$(printf '%s\n' "$FIVE" | wc -l)" = 5 ] && ok || no "docs/data.md: the five lines are $(printf '%s\n' "$FIVE" | wc -l)"
FIVE=${FIVE//bash tools\//bash $MMC_SOURCE_DIR\/tools\/}
FIVE=${FIVE//tests\/text_data\//$MMC_SOURCE_DIR\/tests\/text_data\/}
FIVE=${FIVE//stdlib_models\//$MMC_SOURCE_DIR\/stdlib_models\/}
FIVE=${FIVE//--steps 300/--steps 6}
FIVE=${FIVE//--steps 600/--steps 9}
expect "the five lines" 0 env PATH="$(dirname "$MMC"):$PATH" bash -euc "$FIVE"
[ "$(grep -c '"loss"' log.jsonl)" = 9 ] && ok || no "the five lines: not 9 steps in log.jsonl"
cd "$T" || exit 1

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
