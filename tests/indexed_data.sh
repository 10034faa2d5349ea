#!/usr/bin/env bash
# mmc data against megatron-core (tests/data_ref/ref.py): a dataset written by
# `mmc data preprocess` reads back in megatron-core's IndexedDataset as the
# same sequences and document indices, and is byte for byte what
# preprocess_data.py's loop over IndexedDatasetBuilder writes; datasets written by megatron-core's
# IndexedDatasetBuilder (several dtypes, empty documents, a multimodal one)
# read in `mmc data inspect` the same; mmc's ids of the JSONL equal
# `tokenizers`'. Then each bad-data case exits 1 naming the file and the
# line or sequence; --bad-samples skip counts; SIGTERM/SIGINT leave no files.
# megatron-core and tokenizers come from PyPI into a venv outside the clone
# (MMC_MCORE_VENV, default /var/cache/mmc-venv-mcore) that also sees Debian's
# python3-torch and numpy (tests/data_ref/mcore.py says why the module is
# loaded from the wheel's file).
set -uo pipefail
VENV=${MMC_MCORE_VENV:-/var/cache/mmc-venv-mcore}
PY="$VENV/bin/python"
REF="$MMC_SOURCE_DIR/tests/data_ref/ref.py"
bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" mcore ||
  { echo "FAIL: cannot make $VENV (needs python3-venv, python3-torch, python3-numpy and PyPI)"; echo "0 passed, 1 failed"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
no() { echo "FAIL $*"; fail=$((fail+1)); }
expect() { # name expected-status command...
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err"; local got=$?
  if [ "$got" -eq "$want" ]; then ok; else no "$name: exit $got, expected $want"; head -5 "$T/err"; fi
}
contains() { # name file text
  if grep -qF -- "$3" "$2"; then ok; else no "$1: '$3' not in output"; head -5 "$2"; fi
}
same() { # name file1 file2
  if cmp -s "$2" "$3"; then ok; else no "$1: differ"; diff "$2" "$3" | head -6; fi
}
# inspect's listing without its header lines (dataset, dtype, multimodal)
listing() { grep -v -e '^dataset ' -e '^dtype ' -e '^multimodal ' "$1"; }

"$PY" "$REF" corpus "$T" || { no "making the corpus and tokenizer"; exit 1; }

# ---- mmc writes, megatron-core reads ----
expect "preprocess" 0 "$MMC" data preprocess --input "$T/corpus.jsonl" --tokenizer "$T/tok.json" \
  --output-prefix "$T/m" --append-eod --workers 2
contains "preprocess summary" "$T/out" "400 documents, 399 sequences"
[ -f "$T/m_text_document.bin" ] && [ -f "$T/m_text_document.idx" ] && ok || no "Megatron's file names (PREFIX_text_document.bin/.idx)"
ls "$T" | grep -q tmp && no "temporary files left: $(ls "$T")" || ok
expect "mmc inspect" 0 "$MMC" data inspect "$T/m_text_document" --show all
contains "dtype uint16 below 65500 ids" "$T/out" "dtype       uint16 (code 8)"
listing "$T/out" > "$T/mmc.txt"
expect "preprocess, 1 worker, no eod, other key" 0 "$MMC" data preprocess --input <(sed 's/"text"/"body"/' "$T/corpus.jsonl") \
  --tokenizer "$T/tok.json" --output-prefix "$T/one" --json-key body
# the references in one python process (torch loads once): megatron-core
# reads mmc's dataset, tokenizers' ids, megatron-core writes datasets
SPECS="uint16:0 int32:0 int64:0 uint8:0 int16:0 float32:0 int32:1"
args=("$T/ref.txt" read "$T/m_text_document"
  :: "$T/tokref.txt" tokenize "$T/tok.json" "$T/corpus.jsonl" text "<|endoftext|>"
  :: "$T/tokref1.txt" tokenize "$T/tok.json" "$T/corpus.jsonl" text ""
  :: "$T/pyprep.txt" preprocess "$T/tok.json" "$T/corpus.jsonl" "$T/py")
for spec in $SPECS; do args+=(:: "$T/wref_$spec.txt" write "$T/w_${spec/:/}" "${spec%:*}" "${spec#*:}"); done
"$PY" "$REF" each "${args[@]}" 2> "$T/referr" || { no "the references (megatron-core, tokenizers)"; cat "$T/referr"; }
same "megatron-core reads mmc's dataset as mmc wrote it" "$T/mmc.txt" "$T/ref.txt"
contains "the empty document is a repeated document index" "$T/ref.txt" "document_indices 0 1 2 3 4 5 6 7 7 8"
# the ids are tokenizers' (+ <|endoftext|>), one worker or two
grep '^sequence ' "$T/mmc.txt" > "$T/mmcseq.txt"
same "mmc's ids are tokenizers' ids" "$T/mmcseq.txt" "$T/tokref.txt"
[ "$(wc -l < "$T/tokref.txt")" -eq 399 ] && ok || no "reference sequence count"
# preprocess_data.py's loop (json.loads, tokenizers, IndexedDatasetBuilder.add_document) writes the same bytes
cmp -s "$T/m_text_document.bin" "$T/py.bin" && cmp -s "$T/m_text_document.idx" "$T/py.idx" && ok ||
  no "mmc's .bin/.idx differ from megatron-core's builder's on the same corpus"
"$MMC" data inspect "$T/one_body_document" --show all | grep '^sequence ' > "$T/one.txt"
same "--json-key body, no --append-eod" "$T/one.txt" "$T/tokref1.txt"

# ---- megatron-core writes, mmc reads ----
for spec in $SPECS; do
  dt=${spec%:*}; mm=${spec#*:}
  cp "$T/wref_$spec.txt" "$T/wref.txt"
  "$MMC" data inspect "$T/w_$dt$mm.idx" --show all > "$T/out" 2> "$T/err" || { no "mmc reads megatron-core's $dt (mm=$mm)"; cat "$T/err"; continue; }
  listing "$T/out" > "$T/wmmc.txt"
  same "mmc reads megatron-core's $dt dataset (multimodal=$mm)" "$T/wmmc.txt" "$T/wref.txt"
  contains "inspect names the dtype $dt" "$T/out" "dtype       $dt"
done
contains "multimodal modes read" "$T/out" "multimodal  yes"

# ---- bad data: exit 1, the file and the line or sequence named ----
J="$T/bad.jsonl"
pre() { "$MMC" data preprocess --tokenizer "$T/tok.json" --output-prefix "$T/b" --force "$@"; }
head -3 "$T/corpus.jsonl" > "$J"; printf '{"text": "unterminated\n' >> "$J"; head -2 "$T/corpus.jsonl" >> "$J"
expect "malformed line" 1 pre --input "$J"
contains "malformed line named" "$T/err" "bad.jsonl:4: malformed JSON"
[ ! -e "$T/b_text_document.bin" ] && [ ! -e "$T/b_text_document.idx" ] && ok || no "a failed run leaves files"
ls "$T" | grep -q tmp && no "temporary files left after a failure" || ok
expect "malformed skipped" 0 pre --input "$J" --bad-samples skip
contains "skipped count" "$T/out" "5 documents, 5 sequences"
contains "skipped count reported" "$T/out" "1 bad samples skipped"
contains "skip names the line" "$T/err" "bad.jsonl:4: malformed JSON"
head -1 "$T/corpus.jsonl" > "$J"; printf '{"text": "caf\xe9 latin-1"}\n' >> "$J"
expect "invalid UTF-8" 1 pre --input "$J"
contains "invalid UTF-8 named" "$T/err" "bad.jsonl:2:14: invalid UTF-8 (byte 0xe9)"
head -1 "$T/corpus.jsonl" > "$J"; printf '{"text": "lone \\ud800 surrogate"}\n' >> "$J"
expect "escaped surrogate" 1 pre --input "$J"
contains "escaped surrogate named" "$T/err" "bad.jsonl:2:16: a lone surrogate escape"
printf '\xef\xbb\xbf{"text": "a"}\n' > "$J"
expect "byte order mark" 1 pre --input "$J"
contains "byte order mark named" "$T/err" "bad.jsonl:1:1: a UTF-8 byte order mark"
: > "$J"
expect "empty file" 1 pre --input "$J"
contains "empty file named" "$T/err" "bad.jsonl: empty file"
printf '{"id": 1}\n' > "$J"
expect "missing key" 1 pre --input "$J"
contains "missing key named" "$T/err" "bad.jsonl:1: no \"text\" field"
printf '{"text": 3}\n' > "$J"
expect "key not a string" 1 pre --input "$J"
contains "key type named" "$T/err" "bad.jsonl:1: \"text\" is a int, expected a string"
printf '{"text": "a"} {"text": "b"}\n' > "$J"
expect "two objects a line" 1 pre --input "$J"
contains "two objects named" "$T/err" "bad.jsonl:1:15: malformed JSON: text after the object"
printf '{"text": "a"}\n{"messages": [{"role": "user", "content": "hi"}]}\n' > "$J"
expect "chat refused" 1 pre --input "$J" --bad-samples skip
contains "chat not yet, line named" "$T/err" "bad.jsonl:2: chat samples (\"messages\") are not supported yet"
printf '\n\n' > "$J"
expect "only blank lines, skipped" 1 pre --input "$J" --bad-samples skip
contains "nothing usable" "$T/err" "no usable sample"
expect "eod token not in the vocabulary" 1 pre --input "$T/corpus.jsonl" --append-eod --eod-token "<|nope|>"
contains "eod token named" "$T/err" "--eod-token '<|nope|>' is not one token"
expect "existing output refused" 1 "$MMC" data preprocess --input "$T/corpus.jsonl" --tokenizer "$T/tok.json" --output-prefix "$T/m"
contains "existing output named" "$T/err" "m_text_document.bin: exists"
expect "missing output folder" 1 pre --input "$T/corpus.jsonl" --output-prefix "$T/nodir/x"
contains "missing folder named" "$T/err" "does not exist"
expect "bad --bad-samples" 2 pre --input "$T/corpus.jsonl" --bad-samples maybe
expect "bad --workers" 2 pre --input "$T/corpus.jsonl" --workers 0
expect "inspect option on preprocess" 2 pre --input "$T/corpus.jsonl" --show 3

# broken datasets, made from mmc's good one
D="$T/m_text_document"
cp "$D.bin" "$T/t.bin"; cp "$D.idx" "$T/t.idx"
truncate -s -3 "$T/t.bin"
expect "truncated bin" 1 "$MMC" data inspect "$T/t"
contains "truncated bin: sequence named" "$T/err" "t.idx: sequence 398 ("
contains "truncated bin: file named" "$T/err" "runs past the end of $T/t.bin"
cp "$D.bin" "$T/t.bin"; truncate -s -5 "$T/t.idx"
expect "truncated idx" 1 "$MMC" data inspect "$T/t"
contains "truncated idx named" "$T/err" "t.idx: "
cp "$T/w_uint160.idx" "$T/t.idx"
expect "idx of another bin" 1 "$MMC" data inspect "$T/t"
contains "idx not matching bin named" "$T/err" "does not match"
cp "$D.idx" "$T/t.idx"; printf '\x09' | dd of="$T/t.idx" bs=1 seek=17 conv=notrunc status=none
expect "bad dtype code" 1 "$MMC" data inspect "$T/t"
contains "bad dtype code named" "$T/err" "t.idx: dtype code 9, expected 1-8"
cp "$D.idx" "$T/t.idx"; printf 'MMIDIDY' | dd of="$T/t.idx" bs=1 conv=notrunc status=none
expect "bad magic" 1 "$MMC" data inspect "$T/t"
contains "bad magic named" "$T/err" "not a Megatron index"
# document index 5 (8 bytes at 34 + 12 * 399 + 8 * 5) set to 1: it decreases
cp "$D.idx" "$T/t.idx"; printf '\x01\0\0\0\0\0\0\0' | dd of="$T/t.idx" bs=1 seek=$((34 + 12 * 399 + 40)) conv=notrunc status=none
expect "decreasing document index" 1 "$MMC" data inspect "$T/t"
contains "document index named" "$T/err" "t.idx: document index 5 is 1, expected 4 to 399"
# sequence 2's pointer off by 2 bytes
cp "$D.idx" "$T/t.idx"; printf '\x07' | dd of="$T/t.idx" bs=1 seek=$((34 + 4 * 399 + 16)) conv=notrunc status=none
expect "bad pointer" 1 "$MMC" data inspect "$T/t"
contains "pointer named" "$T/err" "t.idx: sequence 2 starts at byte 7"
# sequence 1's length 2^31-1 (overflows the .bin)
cp "$D.idx" "$T/t.idx"; printf '\xff\xff\xff\x7f' | dd of="$T/t.idx" bs=1 seek=$((34 + 4)) conv=notrunc status=none
expect "huge length" 1 "$MMC" data inspect "$T/t"
contains "huge length named" "$T/err" "t.idx: sequence 1 (2147483647 elements"
expect "missing dataset" 1 "$MMC" data inspect "$T/nope"
contains "missing dataset named" "$T/err" "nope.idx: cannot open"

# ---- signals: exit 130/143 and no files (input from a FIFO that stays open) ----
for sig in TERM:143 INT:130; do
  s=${sig%:*}; want=${sig#*:}
  rm -f "$T/fifo"; mkfifo "$T/fifo"
  (head -50 "$T/corpus.jsonl"; sleep 20) > "$T/fifo" &
  feeder=$!
  "$MMC" data preprocess --input "$T/fifo" --tokenizer "$T/tok.json" --output-prefix "$T/sig" > "$T/out" 2> "$T/err" &
  pid=$!
  # its temporary files appear once the handlers are in place (ASan starts slower)
  for _ in $(seq 100); do ls "$T" | grep -q '^sig_text_document.idx.tmp' && break; sleep 0.1; done
  ls "$T" | grep -q '^sig_text_document.bin.tmp' && ok || no "SIG$s: no temporary .bin while running"
  kill -$s $pid
  wait $pid; got=$?
  kill $feeder 2>/dev/null; wait $feeder 2>/dev/null
  [ "$got" -eq "$want" ] && ok || { no "SIG$s: exit $got, expected $want"; cat "$T/err"; }
  contains "SIG$s said" "$T/err" "stopped by SIG$s"
  ls "$T" | grep -q -e '^sig' && no "SIG$s left files: $(ls "$T" | grep sig)" || ok
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
