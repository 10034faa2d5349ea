#!/usr/bin/env bash
# Activation recompute (passes/recompute.c) against the run without it:
#  - GPT2Tiny, ViTFashion and InternVL2Tiny trained 3 steps with recompute
#    full, selective, block:1 (and InternVL2Tiny per sub-model: vision full,
#    llm selective) write the same weights, byte for byte, as without
#    recompute (any difference in any gradient would show after AdamW), and
#    log the same losses;
#  - `mmc plan`'s act bytes fall: full < block:1 < none and selective < none;
#  - `dump-ir --after recompute` shows the clones: under selective one more
#    `attention` per layer in @train (GPT2Tiny: 2 layers);
#  - under tp = 2 the runtime counters see the rerun collectives: full
#    recompute adds exactly one tp all-reduce per layer to each backward
#    (the attention block's; the MLP's output is the layer's kept output, so
#    its all-reduce is not rerun; depth 2 and 3), with sp exactly one
#    reduce-scatter per layer and no all-gather (the backward gathers the
#    norms' outputs again with or without recompute, passes/shard.c), the
#    forward's counts unchanged, and the weights still equal the run without;
#  - a bad --recompute value is a usage error.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL: $*"
  fail=$((fail + 1))
}

cat > "$T/rc.mm" <<'EOF'
import "internvl2.mm"
model InternVL2TinyRecompute extends InternVL2Tiny {
  parallel { recompute = by_module(vision = full, llm = selective) }
}
EOF

train() { # file model tag flags...: compile, 3 steps, weights in $T/<tag>.st, losses in $T/<tag>.loss
  local file=$1 model=$2 tag=$3
  shift 3
  "$MMC" compile "$file" -I "$S" --model "$model" "$@" -o "$T/$tag" || {
    bad "$tag: compile"
    return 1
  }
  (cd "$T" && "./$tag" --steps 3 --eval-batches 1 --log "$tag.jsonl" --save-weights "$tag.st" \
    > "$tag.out" 2>&1) || {
    bad "$tag: train"
    tail -5 "$T/$tag.out"
    return 1
  }
  grep -o '"loss": [^,]*' "$T/$tag.jsonl" > "$T/$tag.loss"
}

act() { "$MMC" plan "$1" -I "$S" --model "$2" "${@:3}" --json | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["by_role"]["act"])'; }

# the policies trained per model; the sanitizer build trains GPT2Tiny under
# each and one policy of the others (the suite's time budget)
for m in gpt2.mm:GPT2Tiny:full,selective,block:1 vit_fashion.mm:ViTFashion:block:1 internvl2.mm:InternVL2Tiny:selective; do
  IFS=: read -r fm model san <<< "$m"
  f="$S/$fm" all="full selective block:1"
  [ "$SAN" = 1 ] && all=${san//,/ }
  train "$f" "$model" "$model-none" --recompute none || continue
  for r in $all; do
    tag="$model-${r/:/}"
    train "$f" "$model" "$tag" --recompute "$r" || continue
    cmp -s "$T/$model-none.st" "$T/$tag.st" && ok || bad "$tag: weights differ from no recompute"
    cmp -s "$T/$model-none.loss" "$T/$tag.loss" && ok || bad "$tag: losses differ from no recompute"
  done
  a0=$(act "$f" "$model" --recompute none)
  af=$(act "$f" "$model" --recompute full)
  ab=$(act "$f" "$model" --recompute block:1)
  as=$(act "$f" "$model" --recompute selective)
  echo "$model act bytes: none $a0, block:1 $ab, full $af, selective $as"
  [ "$af" -lt "$ab" ] && [ "$ab" -lt "$a0" ] && ok || bad "$model: act bytes not full < block:1 < none"
  [ "$as" -lt "$a0" ] && ok || bad "$model: act bytes not selective < none"
done

# per sub-model policies, from the parallel section
same_tensors() { # a.safetensors b.safetensors: every tensor's bytes equal (the metadata names the model)
  /usr/bin/python3 - "$1" "$2" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
(a, _), (b, _) = mmtrain.st_load(sys.argv[1]), mmtrain.st_load(sys.argv[2])
sys.exit(0 if a and a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)
PY
}
train "$T/rc.mm" InternVL2TinyRecompute vlm-bymodule &&
  { same_tensors "$T/InternVL2Tiny-none.st" "$T/vlm-bymodule.st" && ok || bad "by_module: weights differ"; }
a0=$(act "$S/internvl2.mm" InternVL2Tiny)
a1=$(act "$T/rc.mm" InternVL2TinyRecompute)
[ "$a1" -lt "$a0" ] && ok || bad "by_module: act bytes $a1 not below $a0"

# the clones in the text: selective adds one attention per layer to @train
natt() { "$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --after recompute --recompute "$1" |
  awk '/^func @train/ {t = 1} t && / = attention\(/ {n++} END {print n + 0}'; }
n0=$(natt none)
n1=$(natt selective)
[ "$n1" -eq $((n0 + 2)) ] && ok || bad "selective: $n1 attention ops in @train, expected $n0 + 2"

# under tp = 2: the rerun collectives, from the runtime counters. Full
# recompute reruns what the backward reads: per layer the attention block's
# all-reduce (the second LayerNorm's input, x + attn, needs it) and not the
# MLP's, whose result y only feeds the layer output x' = h + y, which is
# kept (it is the next layer's input, Megatron's checkpoint too); no
# backward op reads y (the cotangent of an all-reduce and of an add is
# passed on as it is), so rerunning it, as Megatron's checkpointed function
# does, would compute a value nobody reads. Exactly +1 all-reduce per layer
# (Megatron: +2), the forward's counts unchanged, checked at depth 2 and 3;
# with sp exactly +2 all-gathers and +1 reduce-scatter per layer (Megatron:
# +2 and +2).
cat > "$T/deep3.mm" <<'EOF'
import "gpt2.mm"

model GPT2Deep3 {
  let B = 4
  let T = 32
  gpt = GPT(vocab = 256, ctx = 64, dim = 64, depth = 3, heads = 4)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
}
EOF
cp "$S/gpt2.mm" "$S/nn.mm" "$T/"
calls() { # tag phase kind: calls per step
  /usr/bin/python3 - "$T/$1.jsonl" "$2" "$3" <<'PY'
import json, sys
c = [json.loads(l)["comm"] for l in open(sys.argv[1]) if '"comm"' in l][-1]
print(c["train_" + sys.argv[2]].get(sys.argv[3] + ".tp", {"calls": 0})["calls"] // c["steps"])
PY
}
cfgs=("d2:gpt2.mm:GPT2Tiny:" "d3:deep3.mm:GPT2Deep3:" "d2sp:gpt2.mm:GPT2Tiny:--sp")
[ "$SAN" = 1 ] && cfgs=("${cfgs[@]:1}") # depth 3 and sp (the per-layer count still shows at 3)
for cfg in "${cfgs[@]}"; do
  IFS=: read -r tag file model sp <<< "$cfg"
  for r in none full; do
    # shellcheck disable=SC2086
    "$MMC" compile "$T/$file" --model "$model" --tp 2 $sp --recompute $r -o "$T/$tag-$r" || bad "$tag $r: compile"
    (cd "$T" && timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x LSAN_OPTIONS -np 2 "./$tag-$r" \
      --steps 2 --eval-batches 1 --quiet --log "$tag-$r.jsonl" --save-weights "$tag-$r.st" > "$tag-$r.out" 2>&1) ||
      bad "$tag $r: mpirun"
  done
  cmp -s "$T/$tag-none.st" "$T/$tag-full.st" && ok || bad "$tag tp=2 $sp: weights with full recompute differ"
  L=${tag:1:1}
  # kind:extra backward calls per layer
  for ke in $([ -z "$sp" ] && echo all_reduce:1 || echo all_gather:0 reduce_scatter:1 all_reduce:0); do
    IFS=: read -r kind per <<< "$ke"
    f0=$(calls "$tag-none" forward "$kind") f1=$(calls "$tag-full" forward "$kind")
    b0=$(calls "$tag-none" backward "$kind") b1=$(calls "$tag-full" backward "$kind")
    [ "$f1" -eq "$f0" ] && ok || bad "$tag full recompute: $f1 forward $kind per step, $f0 without"
    [ "$b1" -eq $((b0 + per * L)) ] && ok ||
      bad "$tag full recompute: $b1 backward $kind per step, expected $b0 + $per x $L layers"
    echo "$tag tp=2 $sp: $kind per step, forward $f0 -> $f1, backward $b0 -> $b1 with full recompute ($L layers)"
  done
done

for v in block:0 block: all; do
  "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --recompute "$v" > "$T/u.out" 2>&1
  [ $? -eq 2 ] && grep -q "recompute takes" "$T/u.out" && ok || bad "--recompute $v: not a usage error"
done

echo "recompute: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
