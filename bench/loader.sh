#!/usr/bin/env bash
# The text loader against GPT2Tiny's step: samples/s of the loader alone
# (bench/loader_bench.c: mmrt_loader_row over shuffled batches, the
# trainer's fill without the step, one thread) beside the samples/s the
# trainer consumes (GPT2Tiny, T = 32, B = 4, unpacked rows, its log's rate
# over the steps after the first), on a JSONL corpus of 20,000 documents
# (tests/text_data/make.py's words) and on the indexed dataset
# `mmc data preprocess` makes of it. Also how long opening takes (reading,
# tokenizing, laying out: before the first step). Prints the CPU; never
# fails on speed. Needs the tok venv (bash tools/test_venvs.sh tok).
#   bench/loader.sh [build dir]    (STEPS=200 by default)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
STEPS=${STEPS:-200}
PY=/var/cache/mmc-venv-tok/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
lscpu | grep -E "^Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" -c "import sys; sys.path.insert(0, '$HERE/../tests/text_data'); import make; make.main('$T', 20000)" || exit 1
INC=(); for r in "$HERE"/../runtime/*/; do INC+=(-I "$r"); done # the runtime's rooms
cc -O2 "${INC[@]}" "$HERE/loader_bench.c" "$B/libmmrt.a" -o "$T/lb" -ldnnl -lmpi -lpng -lgif -ljpeg -lwebp -lz -ljson-c -lpcre2-8 -lunistring -lm -fopenmp -lpthread || exit 1
"$B/mmc" data preprocess --input "$T/corpus.jsonl" --tokenizer "$T/tok.json" --output-prefix "$T/ix" > /dev/null || exit 1
"$B/mmc" compile "$HERE/../stdlib_models/gpt2.mm" --model GPT2Tiny -o "$T/gpt" || exit 1
for data in "corpus.jsonl tok.json" "ix_text_document -"; do
  set -- $data
  echo "== $1"
  "$T/lb" "$T/$1" "$([ "$2" = - ] && echo - || echo "$T/$2")" 32 4 256 2 || exit 1
  tok=(); [ "$2" = - ] || tok=(--tokenizer "$T/$2")
  ( cd "$T" && ./gpt --data "$1" "${tok[@]}" --steps "$STEPS" --eval-batches 1 --quiet --log "l$1.jsonl" > /dev/null 2> err ) || { cat "$T/err"; exit 1; }
  "$PY" -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"samples_per_s\"" in l]
print("GPT2Tiny steps consume: %.0f samples/s (mean rate of steps 2..%d)" % (r[-1]["samples_per_s"], len(r)))' "$T/l$1.jsonl"
done
