#!/usr/bin/env bash
# The backend end to end: `mmc compile` trainers for GPT2Tiny (next-pixel
# bytes), ViTFashion (classification) and InternVL2Tiny (captions), a few
# dozen steps each whose loss falls, and `mmc plan`'s peak equal to the
# bytes the trainer allocates.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

# mean of the first and of the last k losses of a JSON-lines log
falls() { # name log k
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, path, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
loss = [json.loads(l)["loss"] for l in open(path) if '"loss"' in l]
a, b = sum(loss[:k]) / k, sum(loss[-k:]) / k
print("%s: %d steps, mean loss of the first %d %.4f, of the last %d %.4f" % (name, len(loss), k, a, k, b))
sys.exit(0 if b < a - 0.1 else 1)
PY
}

run_model() { # name file model steps lr
  local name=$1 file=$2 model=$3 steps=$4 lr=$5
  if ! "$MMC" compile "$S/$file" --model "$model" -o "$T/$name" 2> "$T/$name.cerr"; then
    bad "$name: mmc compile"; cat "$T/$name.cerr"; return
  fi
  ok
  local want
  want=$("$MMC" plan "$S/$file" --model "$model" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])')
  local t0=$SECONDS
  if ! "$T/$name" --steps "$steps" --lr "$lr" --eval-batches 4 --log "$T/$name.jsonl" > "$T/$name.out" 2> "$T/$name.err"; then
    bad "$name: trainer failed"; tail -5 "$T/$name.err"; return
  fi
  ok
  local got
  got=$(sed -n 's/^allocated arena bytes: .*total=\([0-9]*\)$/\1/p' "$T/$name.out")
  if [ "$got" = "$want" ]; then ok; echo "$name: mmc plan peak $want bytes = trainer arenas $got bytes"
  else bad "$name: mmc plan says $want bytes, the trainer allocated '$got'"; fi
  if falls "$name" "$T/$name.jsonl" 5; then ok; else bad "$name: the loss does not fall"; fi
  grep -E '^(eval|peak RSS)' "$T/$name.out"
  echo "$name: $steps steps in $((SECONDS - t0)) s"
  if grep -q '"eval_accuracy"' "$T/$name.jsonl"; then ok; else bad "$name: no eval_accuracy in the log"; fi
}

run_model gpt2tiny gpt2.mm GPT2Tiny 40 2e-3
run_model vit vit_fashion.mm ViTFashion 30 5e-3
run_model internvl2tiny internvl2.mm InternVL2Tiny 60 1e-3
if grep -q '"eval_caption_exact_match"' "$T/internvl2tiny.jsonl"; then ok; else bad "InternVL2Tiny: no caption exact match"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
