#!/usr/bin/env bash
# mmc data preprocess against what Megatron-LM's tools/preprocess_data.py does
# with one worker (that script needs a Megatron-LM checkout's megatron.training;
# tests/data_ref/ref.py preprocess runs its loop: json.loads, `tokenizers`'
# encode, IndexedDatasetBuilder.add_document), on the generated corpus of
# tests/indexed_data.sh (LINES lines, default 200000) with a byte-level BPE of
# 8000 ids trained on it. Prints tokens/s; never fails on speed. Needs the
# venv of tests/indexed_data.sh (run that test once).
#   bench/preprocess.sh [build dir] [LINES]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
N=${2:-200000}
PY=${MMC_MCORE_VENV:-/var/cache/mmc-venv-mcore}/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
lscpu | grep -E "^Model name|^CPU\(s\)" | sed 's/  */ /g'
"$PY" "$HERE/../tests/data_ref/ref.py" corpus "$T" "$N" 8000
echo "corpus: $N lines, $(du -h "$T/corpus.jsonl" | cut -f1)"
# wall time from each tool's own clock (after loading), CPU time of the whole
# process from time(1) (python's includes ~1 s of importing torch and numpy)
for w in 1 2; do
  /usr/bin/time -f "  CPU %U s user + %S s sys (whole process)" "$B/mmc" data preprocess --input "$T/corpus.jsonl" \
    --tokenizer "$T/tok.json" --output-prefix "$T/m$w" --append-eod --workers $w 2>&1 >/dev/null |
    tail -2 | sed "s/^mmc: data:/mmc --workers $w:/"
done
/usr/bin/time -f "  CPU %U s user + %S s sys (whole process)" \
  "$PY" "$HERE/../tests/data_ref/ref.py" preprocess "$T/tok.json" "$T/corpus.jsonl" "$T/py" 2>&1
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
cmp -s "$T/m1_text_document.bin" "$T/py.bin" && cmp -s "$T/m1_text_document.idx" "$T/py.idx" &&
  echo "the outputs are byte for byte the same" || echo "the outputs differ"
