#!/usr/bin/env bash
# The text loader against GPT2Tiny's step, on two JSONL corpora: 20,000
# short documents of tests/text_data/make.py's words (and the indexed
# dataset `mmc data preprocess` makes of it), and about 50 MB of varied
# text (tests/tok/corpus.py's English and CJK prose, source code, emoji,
# odd whitespace; 12 lines a document) with a 256-id BPE trained on it.
# For each: the loader opening the raw JSONL (reading, tokenizing on 0, 1
# and 2 loader threads, laying out) in tokens/s (bench/loader_bench.c;
# the rows are the same for any count), the loader's rows/s alone (the
# trainer's fill without the step), GPT2Tiny's consumption (T = 32, B = 4,
# unpacked rows: its log's samples/s over the steps after the first, and
# the tokens/s that is), and the trainer's time to its first step
# (start-up with the opening, one step) with the default and with 0
# loader threads. Prints the CPU and the load; never fails on speed. Needs
# the tok venv (bash tools/test_venvs.sh tok).
#   bench/loader.sh [build dir]    (STEPS=200, MB=50 by default)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
STEPS=${STEPS:-200}
MB=${MB:-50}
PY=/var/cache/mmc-venv-tok/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
lscpu | grep -E "^Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" -c "import sys; sys.path.insert(0, '$HERE/../tests/text_data'); import make; make.main('$T', 20000)" || exit 1
# the varied corpus: corpus.py's lines, 12 a document, cycled to MB megabytes, and its tokenizer
"$PY" "$HERE/../tests/tok/corpus.py" "$B/mmc" "$T/w" --write "$T/lines.txt" > /dev/null || exit 1
"$PY" - "$T" "$MB" << 'EOF' || exit 1
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
d, mb = sys.argv[1], int(sys.argv[2])
lines = open(d + "/lines.txt", encoding="utf-8", errors="replace").read().split("\n")
docs, size, i, start = [], 0, 0, 0
while size < mb * 1000000:
    t = "\n".join(lines[i:i + 12])
    i += 12
    if i >= len(lines):
        start += 1
        i = start
    s = json.dumps({"text": t}, ensure_ascii=False) + "\n"
    docs.append(s)
    size += len(s.encode("utf-8"))
open(d + "/varied.jsonl", "w", encoding="utf-8").write("".join(docs))
tok = Tokenizer(models.BPE(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.train_from_iterator((json.loads(s)["text"] for s in docs[:20000]),
                        trainers.BpeTrainer(vocab_size=256, limit_alphabet=120, show_progress=False,
                                            special_tokens=["[UNK]", "<|endoftext|>"]))
eot = tok.token_to_id("<|endoftext|>")
tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>",
                                                   special_tokens=[("<|endoftext|>", eot)])
tok.save(d + "/vtok.json")
EOF
echo "corpora: corpus.jsonl $(du -h "$T/corpus.jsonl" | cut -f1), varied.jsonl $(du -h "$T/varied.jsonl" | cut -f1)"
INC=(); for r in "$HERE"/../runtime/*/; do INC+=(-I "$r"); done # the runtime's rooms
cc -O2 "${INC[@]}" "$HERE/loader_bench.c" "$B/libmmrt.a" -o "$T/lb" -ldnnl -lmpi -lpng -lgif -ljpeg -lwebp -lz -ljson-c -lpcre2-8 -lunistring -lm -fopenmp -lpthread || exit 1
"$B/mmc" data preprocess --input "$T/corpus.jsonl" --tokenizer "$T/tok.json" --output-prefix "$T/ix" > /dev/null || exit 1
"$B/mmc" compile "$HERE/../stdlib_models/gpt2.mm" --model GPT2Tiny -o "$T/gpt" || exit 1
now() { date +%s.%N; }
for data in "corpus.jsonl tok.json" "ix_text_document -" "varied.jsonl vtok.json"; do
  set -- $data
  echo "== $1"
  tok=(); [ "$2" = - ] || tok=(--tokenizer "$T/$2")
  if [ "$2" != - ]; then
    for n in 0 1 2; do "$T/lb" "$T/$1" "$T/$2" 32 4 256 0 $n | tail -1 || exit 1; done
  fi
  "$T/lb" "$T/$1" "$([ "$2" = - ] && echo - || echo "$T/$2")" 32 4 256 2 | tail -1 || exit 1
  ( cd "$T" && ./gpt --data "$1" "${tok[@]}" --steps "$STEPS" --eval-batches 1 --quiet --log "l$1.jsonl" > /dev/null 2> err ) || { cat "$T/err"; exit 1; }
  "$PY" -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"samples_per_s\"" in l]
s = r[-1]["samples_per_s"]
print("GPT2Tiny steps consume: %.0f samples/s = %.0f tokens/s (rows of 32; mean rate of steps 2..%d)" % (s, 32 * s, len(r)))' "$T/l$1.jsonl"
  [ "$2" = - ] && continue
  for n in default 0; do
    thr=(); [ $n = default ] || thr=(--loader-threads $n)
    t0=$(now)
    ( cd "$T" && ./gpt --data "$1" "${tok[@]}" "${thr[@]}" --steps 1 --eval-batches 1 --quiet > /dev/null 2>&1 ) || exit 1
    echo "time to the first step (start-up, opening, one step, one evaluation batch), loader threads $n: $(echo "$(now) - $t0" | bc | cut -c1-5) s"
  done
done
