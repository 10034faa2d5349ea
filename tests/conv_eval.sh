#!/usr/bin/env bash
# The evaluator of a conversation model (mmc compile --task eval of a model
# with data { format = conversation }; runtime/programs/mmrt_conv_eval.c):
# an InternVL2TinyConv with a data section (source, images, tokenizer,
# max_tiles, eval_data) trains 16 steps on 48 one-image questions with three
# answers (written here; the images and tokenizer of tests/conv_ref/make.py)
# and saves its weights; the evaluator, given only --weights (the rest from
# the data section), prints the reply exact match and token accuracy the
# trainer's final evaluation printed for the same weights and file (the
# trainer: @forward a token at a time, no cache; the evaluator: @prefill
# and @decode with the KV cache), the exact match strictly between 0 and 1;
# --no-cache gives the same line; each flag changes the figures or is
# refused by name; bad input exits 1 naming the file. The generator (--task
# generate) of 60-step weights prints each sample's id and, as the reply, the
# file's answer decoded as `tokenizers` decodes it (the 60 steps: the
# 16-step run's checkpoint resumed).
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
hf_script tokenizers
cd "$T" || exit 1
"$PY" "$MMC_SOURCE_DIR/tests/conv_ref/make.py" "$T" > /dev/null ||
  { echo "FAIL the fixtures"; echo "0 passed, 1 failed"; exit 1; }
"$PY" - <<'PY'
import json, os, random
rng = random.Random(3)
imgs = sorted(os.listdir("img"))[:10]
with open("qa.jsonl", "w") as f:
    for i in range(48):
        q, a = rng.choice([("is it red ?", "yes ."), ("is it blue ?", "no ."),
                           ("what shape ?", "the shape is round .")])
        f.write(json.dumps({"id": i, "image": imgs[i % len(imgs)], "conversations": [
            {"from": "human", "value": "<image>\n" + q}, {"from": "gpt", "value": a}]}) + "\n")
PY
cat > q.mm <<'MM'
import "internvl2.mm"
model Q extends InternVL2TinyConv {
  data { format = conversation; source = "qa.jsonl"; images = "img"; tokenizer = "tok.json"; max_tiles = 2; eval_data = "qa.jsonl" }
}
MM
"$MMC" compile q.mm --model Q -o tr > c1.out 2>&1 && "$MMC" compile q.mm --model Q --task eval -o ev > c2.out 2>&1 ||
  { echo "FAIL compile: $(tail -3 c1.out c2.out)"; echo "0 passed, 1 failed"; exit 1; }
./tr --steps 16 --lr 3e-3 --quiet --eval-batches all --ckpt ck --save-weights w.safetensors > tr.out 2>&1 ||
  no "training: $(tail -2 tr.out)"
# the trainer's "accuracy A reply exact match E" against the evaluator's figures
want=$(sed -n 's/^eval: loss [^ ]* accuracy \([^ ]*\) reply exact match \([^ ]*\) .*/\2 \1/p' tr.out)
got() { sed -n 's/^eval: reply exact match \([^ ]*\) .* token accuracy \([^ ]*\) .*/\1 \2/p' "$1"; }
./ev --weights w.safetensors > ev.out 2> ev.err || no "evaluator: $(tail -2 ev.err)"
[ -n "$want" ] && [ "$(got ev.out)" = "$want" ] && ok || no "the evaluator's '$(got ev.out)', the trainer's '$want'"
grep -q "(48 of 48 label\|of 48 conversations" ev.out && ok || no "not the 48 conversations: $(cat ev.out)"
em=${want%% *}
awk -v e="$em" 'BEGIN { exit !(e > 0 && e < 1) }' && ok || no "exact match $em is not strictly between 0 and 1"
./ev --weights w.safetensors --no-cache --quiet > nc.out 2>&1 && cmp -s <(head -1 ev.out) nc.out && ok ||
  no "--no-cache: $(cat nc.out) / $(head -1 ev.out)"

# ---- the generator (--task generate): 60 steps learn the three answers ----
"$MMC" compile q.mm --model Q --task generate -o gen > c3.out 2>&1 || no "compile generate: $(tail -2 c3.out)"
# (the 16-step run's checkpoint resumed: its steps are the first 16 of 60, the
# schedule's warmup of 50 steps taking no account of the run's length)
./tr --steps 60 --lr 3e-3 --quiet --eval-batches all --ckpt ck --resume --save-weights w60.safetensors > tr60.out 2>&1 ||
  no "training 60: $(tail -2 tr60.out)"
./gen --weights w60.safetensors > gen.out 2> gen.err || no "generator: $(tail -2 gen.err)"
# each line: the sample's id, a tab, its answer as tokenizers decodes the answer's ids
r=$("$PY" - gen.out <<'PY' 2>&1
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file("tok.json")
want = [(str(s["id"]), tok.decode(tok.encode(s["conversations"][-1]["value"], add_special_tokens=False).ids))
        for s in map(json.loads, open("qa.jsonl"))]
got = [tuple(l.rstrip("\n").split("\t")) for l in open(sys.argv[1])]
bad = [(w, g) for w, g in zip(want, got) if w != g]
assert len(got) == len(want) and not bad, "%d lines, %d differ: %s" % (len(got), len(bad), bad[:3])
print("%d replies, each the file's answer" % len(got))
PY
)
[ $? = 0 ] && ok || no "generator: $r"
grep -q "eval: loss [^ ]* accuracy 1.0000 reply exact match 1.0000" tr60.out && ok ||
  no "60 steps did not learn the answers: $(grep eval: tr60.out)"
./gen --weights w.safetensors --limit 2 --quiet > g16.out 2>&1 && [ "$(wc -l < g16.out)" = 2 ] && ok ||
  no "generator --limit 2: $(cat g16.out)"
./gen --help > gh.out && grep -q "usage: generator" gh.out && ok || no "generator --help: $(head -2 gh.out)"

# ---- each flag: an effect or a refusal naming it ----
flag() { # name expected-exit pattern args...
  local name=$1 code=$2 pat=$3
  shift 3
  ./ev --weights w.safetensors "$@" > f.out 2>&1
  local rc=$?
  [ $rc = "$code" ] && grep -qE -- "$pat" f.out && ok || no "$name: exit $rc, $(tail -2 f.out)"
}
flag "--limit 5" 0 "of 5 conversations" --limit 5
head -3 qa.jsonl > three.jsonl
flag "--data" 0 "of 3 conversations" --data three.jsonl
flag "--eval-data" 0 "of 3 conversations" --eval-data three.jsonl
flag "--data over --eval-data" 0 "of 48 conversations" --eval-data three.jsonl --data qa.jsonl
flag "--images" 1 "nope" --images nope
flag "--tokenizer" 1 "--tokenizer" --tokenizer qa.jsonl
flag "--chat" 1 "image context token is id 7, but model Q places its image features at token 6" --chat chatml
flag "--max-tiles" 0 "token accuracy" --max-tiles 1
[ "$(got f.out)" != "$want" ] && ok || no "--max-tiles 1 changed nothing: $(got f.out)"
printf '{"image": "nope.png", "conversations": [{"from": "human", "value": "<image>\\nhi"}, {"from": "gpt", "value": "yes ."}]}\n' > bad.jsonl
cat three.jsonl >> bad.jsonl
flag "a missing image" 1 "bad.jsonl:1: sample 0.*nope.png" --data bad.jsonl
flag "--bad-samples skip" 0 "of 3 conversations" --data bad.jsonl --bad-samples skip
"$PY" -c 'import json; print(json.dumps({"image": "'"$(ls img | head -1)"'", "conversations": [{"from": "human", "value": "<image>\n" + "is it red ? " * 60}, {"from": "gpt", "value": "yes ."}]}))' > long.jsonl
flag "too long: a bad sample" 1 "exceed the sequence length" --data long.jsonl
flag "--too-long drop" 1 "no conversation to score" --data long.jsonl --too-long drop
flag "--too-long a word" 1 "--too-long takes truncate or drop" --too-long cut
flag "--quiet" 0 "^eval: reply" --quiet
! grep -q "^evaluator:" f.out && ok || no "--quiet: $(cat f.out)"
flag "--help" 0 "Reply exact match and token accuracy of model Q" --help
./ev > f.out 2>&1; [ $? = 1 ] && grep -q -- "--weights FILE|DIR is required" f.out && ok || no "no --weights: $(cat f.out)"
flag "missing weights" 1 "--weights nope.safetensors" --weights nope.safetensors

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
