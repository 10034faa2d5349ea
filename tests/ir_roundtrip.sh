#!/usr/bin/env bash
# print -> parse -> print of the IR of every stdlib model is byte-identical.
set -euo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
n=0; fail=0
for f in "$S"/*.mm; do
  for m in $(grep -oE '^model [A-Za-z0-9_]+' "$f" | awk '{print $2}'); do
    "$MMC" dump-ir "$f" --model "$m" > "$T/a.mmir"
    if ! "$MMC" dump-ir "$T/a.mmir" > "$T/b.mmir" || ! cmp -s "$T/a.mmir" "$T/b.mmir"; then
      echo "FAIL: $f $m does not round-trip"; diff "$T/a.mmir" "$T/b.mmir" | head -20 || true; fail=$((fail+1))
    fi
    n=$((n+1))
  done
done
# A pp-planned module: the pipeline pass's facts, pp(stage, F|I|W) or pp(U)
# on each node of @train and @forward, round-trip too (ZB-H1 on GPT2Tiny
# has every part; interleaved InternVL2Tiny, stages of pp = 2 x vpp = 2)
cat > "$T/pp.mm" <<'MM'
import "internvl2.mm"
model V4i extends InternVL2Tiny { parallel { pp = 2; vpp = 2; schedule = interleaved; micro_batches = 4; stages = by_module(vision = [1, 1, 0, 0], llm = [0, 0, 1, 1]) } }
MM
pp_cell() { # name want-facts file model flags...: facts present, round trip identical
  local name=$1 want=$2 f=$3 m=$4; shift 4
  "$MMC" dump-ir "$f" -I "$S" --model "$m" "$@" > "$T/$name.mmir"
  local got; got=$(grep -oE ' pp\(([0-9]+, [FIW]|U)\)' "$T/$name.mmir" | sed -E 's/ pp\(([0-9]+, )?//; s/\)//' | sort -u | tr -d '\n')
  if [ "$got" != "$want" ]; then
    echo "FAIL: $name: the parts of its pp facts are '$got', not '$want'"; fail=$((fail+1))
  elif ! "$MMC" dump-ir "$T/$name.mmir" > "$T/$name.2.mmir" || ! cmp -s "$T/$name.mmir" "$T/$name.2.mmir"; then
    echo "FAIL: $name: the pp facts do not round-trip"; diff "$T/$name.mmir" "$T/$name.2.mmir" | head -20 || true; fail=$((fail+1))
  fi
  n=$((n+1))
}
pp_cell gpt2.zbh1 FIUW "$S/gpt2.mm" GPT2Tiny --pp 2 --micro-batches 4 --schedule zbh1
pp_cell internvl2.interleaved FIUW "$T/pp.mm" V4i
for s in 0 1 2 3; do
  grep -qE " pp\($s, F\)" "$T/internvl2.interleaved.mmir" || { echo "FAIL: no node on stage $s of 4"; fail=$((fail+1)); }
done
# the data section's conversation and video keys (ir/settings.def's SET_DATA
# rows) are printed on the data line and round-trip
mkdir -p "$T/imgs" && : > "$T/conv.jsonl" && : > "$T/eval.jsonl"
printf 'import "internvl2.mm"\nmodel DC extends InternVL2TinyConv { data { format = conversation; source = "conv.jsonl"; images = "imgs"; chat = chatml; eval_data = "eval.jsonl"; max_tiles = 3; too_long = drop; bad_samples = skip } }\n' > "$T/dc.mm"
printf 'import "wfvae.mm"\nmodel DV extends WFVAETiny { data { format = clips_video; video_fps = 7.5 } }\n' > "$T/dv.mm"
for c in "dc DC images = \"[^\"]*/imgs\", chat = chatml, eval_data = \"[^\"]*/eval.jsonl\", max_tiles = 3" "dv DV video_fps = 7.5"; do
  set -- $c; f=$1 m=$2; shift 2; want="$*"
  "$MMC" dump-ir "$T/$f.mm" --model "$m" > "$T/$f.mmir"
  if ! grep -qE "^data\(.*$want" "$T/$f.mmir" || ! "$MMC" dump-ir "$T/$f.mmir" > "$T/$f.2.mmir" || ! cmp -s "$T/$f.mmir" "$T/$f.2.mmir"; then
    echo "FAIL: $m: the data keys ($want) not printed or not read back: $(grep '^data' "$T/$f.mmir")"; fail=$((fail+1))
  fi
  n=$((n+1))
done
# a malformed fact is refused at its file:line:col (the first stage-1
# forward node's fact rewritten); a node without one, by memplan
refuse() { # name sed-expression expected-message
  sed -E "0,/ pp\(1, F\)/s// $2/" "$T/gpt2.zbh1.mmir" > "$T/$1.mmir"
  local at; at=$(grep -n -m1 -F " $2" "$T/$1.mmir" | cut -d: -f1)
  if "$MMC" dump-ir "$T/$1.mmir" > "$T/out" 2> "$T/err" || ! grep -qE "^$T/$1.mmir:$at:[0-9]+: error: $3" "$T/err" || [ -s "$T/out" ]; then
    echo "FAIL: $1 is not refused with '$1.mmir:$at:col: error: $3'"; cat "$T/err"; fail=$((fail+1))
  fi
  n=$((n+1))
}
refuse stage_range 'pp(2, F)' 'pipeline stage 2 is out of range \[0, 1\]'
refuse bad_part 'pp(1, B)' "expected a stage's part \(F forward, I input gradient, W weight gradient\), found 'B'"
refuse no_part 'pp(1)' "expected ',' after the stage, found '\)'"
refuse update_stage 'pp(1, U)' "expected a stage's part"
sed -E 's/^plan\(pp = 2, /plan(/' "$T/gpt2.zbh1.mmir" > "$T/nopp.mmir"
if "$MMC" dump-ir "$T/nopp.mmir" > "$T/out" 2> "$T/err" || ! grep -q "error: a pipeline fact pp(...), but the plan has pp = 1" "$T/err"; then
  echo "FAIL: pp facts under pp = 1 are not refused"; cat "$T/err"; fail=$((fail+1))
fi
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --pp 2 --micro-batches 2 --after pipeline > "$T/pipe.mmir"
sed -E '/^func @train/,/^}/{0,/ pp\(1, I\)/s///}' "$T/pipe.mmir" > "$T/nofact.mmir"
if "$MMC" opt "$T/nofact.mmir" --passes memplan > "$T/out" 2> "$T/err" ||
   ! grep -q "memplan: node [0-9]* of @train ([a-z_]*) has no pipeline stage (pp(...)): run the pipeline pass" "$T/err"; then
  echo "FAIL: memplan takes a pp-planned @train whose node has no stage"; cat "$T/err"; fail=$((fail+1))
fi
n=$((n+2))
echo "$((n-fail)) passed, $fail failed"
[ $fail -eq 0 ] && [ $n -gt 0 ]
