#!/usr/bin/env bash
# Vocabulary padding (passes/vocabpad.c) under real mpirun ranks: GPT2Odd,
# GPT2Tiny with a vocabulary of 257 that tp = 2 does not divide (written
# here), compiled for tp=2 and tp=2+sp, gives the serial trainer's loss at
# each of 10 steps (1e-5 relative) and, gathered by --save-weights, its
# final weights within 1e-3 of the size of their update
# (tests/torch/mmtrain.py, as tests/mpi_equiv.sh). The tied table is padded
# to 512 rows and split over tp (256 per rank, `mmc plan --json`), the plan
# moves no logits (all-reduces of [B, T, C] partial sums only, no
# all_gather), and --save-weights writes the unpadded [257, 64] table.
set -uo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
cat > "$T/odd.mm" <<'MM'
// GPT2Tiny with a vocabulary tp = 2 does not divide.
import "gpt2.mm"

model GPT2Odd {
  let B = 4
  let T = 32
  gpt = GPT(vocab = 257, ctx = 64, dim = 64, depth = 2, heads = 4)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }

  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = constant
  }
}
MM
fail=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
STEPS=10
[ "$SAN" = 1 ] && STEPS=3

# the plan: padded table split over tp, no logits gathered
"$MMC" plan "$T/odd.mm" --model GPT2Odd --tp 2 --json > "$T/plan.json" || bad "plan --json"
/usr/bin/python3 - "$T/plan.json" <<'PY' || bad "the tp=2 plan"
import json, sys
d = json.load(open(sys.argv[1]))
pad = {e["param"]: e for e in d.get("padded_vocab", [])}
w = pad.get("gpt.wte.weight")
assert w and (w["rows"], w["padded_rows"], w["local_rows"]) == (257, 512, 256), pad
kinds = sorted({c["kind"] for c in d["collectives"]})
assert kinds == ["all_reduce"], kinds
big = [c for c in d["collectives"] if c["elements"] > 4 * 32 * 64]
assert not big, big  # nothing the size of the logits (4 x 32 x 257) moves
print("plan: @gpt.wte.weight 257 -> 512 rows, 256 per rank; collectives", kinds)
PY
"$MMC" dump-ir "$T/odd.mm" --model GPT2Odd --tp 2 > "$T/ir.txt" || bad "dump-ir"
grep -q 'param @gpt.wte.weight : f32\[512, 64\].*rows(257)' "$T/ir.txt" || bad "dump-ir: no padded table"
grep -q 'cross_entropy(.*{ignore = -100, vocab = 257}' "$T/ir.txt" || bad "dump-ir: no vocab on the loss"

"$MMC" compile "$T/odd.mm" --model GPT2Odd -o "$T/serial" || { bad "compile serial"; exit 1; }
"$T/serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/init.st" > /dev/null || bad "serial init"
"$T/serial" --steps $STEPS --eval-batches 1 --quiet --log "$T/serial.jsonl" --save-weights "$T/serial.st" \
  > /dev/null || bad "serial run"
for pl in "tp2:--tp 2" "tp2.sp:--tp 2 --sp"; do
  IFS=: read -r name flags <<< "$pl"
  # shellcheck disable=SC2086
  "$MMC" compile "$T/odd.mm" --model GPT2Odd $flags -o "$T/$name" 2> "$T/$name.cc" ||
    { bad "$name: compile"; cat "$T/$name.cc"; continue; }
  if ! "${MPIRUN[@]}" "$T/$name" --steps $STEPS --eval-batches 1 --quiet --log "$T/$name.jsonl" \
       --save-weights "$T/$name.st" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; continue
  fi
  /usr/bin/python3 - "$name" "$T" <<'PY' || bad "$name differs from one rank"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
name, T = sys.argv[1:3]
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
la, lb = losses(T + "/serial.jsonl"), losses(T + "/" + name + ".jsonl")
lw = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if la and len(la) == len(lb) else float("inf")
print("%s: %d steps, loss largest relative difference %.2e" % (name, len(lb), lw))
cfg = mmtrain.train_settings(T + "/odd.mm", "GPT2Odd")
(I, _), (A, _), (B, _) = (mmtrain.st_load(T + p) for p in ("/init.st", "/serial.st", "/" + name + ".st"))
for k in ("gpt.wte.weight", "adamw.m.gpt.wte.weight"):
  shape = list(getattr(B[k], "shape", [len(B[k])]))
  assert shape[0] == 257, "%s saved with %s rows, want the unpadded 257" % (k, shape)
bad = mmtrain.compare_weights(I, A, B, cfg, [mmtrain.lr_at(cfg, s, len(la)) for s in range(1, len(la) + 1)], "ranks")
bad += sorted(A) != sorted(B)
sys.exit(0 if not bad and lw <= 1e-5 else 1)
PY
done

# checkpoints hold each rank's real rows only (rank 0 rows 0..255, rank 1 row
# 256), and a tp=2 run stopped at step 5 and resumed ends as the run of 10
H=$((STEPS / 2))
if [ -x "$T/tp2" ] && "${MPIRUN[@]}" "$T/tp2" --steps $H --eval-batches 1 --quiet --ckpt "$T/ck" > "$T/ck.out" 2>&1 &&
   "${MPIRUN[@]}" "$T/tp2" --steps $STEPS --eval-batches 1 --quiet --ckpt "$T/ck" --resume --log "$T/res.jsonl" \
     --save-weights "$T/res.st" >> "$T/ck.out" 2>&1; then
  /usr/bin/python3 - "$T" $H <<'PY' || bad "tp2 checkpoint and resume"
import glob, json, os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
import numpy as np
T, h = sys.argv[1], int(sys.argv[2])
step = sorted(glob.glob(T + "/ck/step-*"))[0]
for r, want in ((0, 256), (1, 1)):
  t, _ = mmtrain.st_load("%s/rank-%05d.safetensors" % (step, r))
  for k in ("gpt.wte.weight", "adamw.v.gpt.wte.weight"):
    assert t[k].shape == (want, 64), "%s rank %d: %s, want (%d, 64)" % (k, r, t[k].shape, want)
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b = losses(T + "/tp2.jsonl")[h:], losses(T + "/res.jsonl")[-len(losses(T + "/tp2.jsonl")) + h:]
assert a == b, (a, b)
(A, _), (B, _) = mmtrain.st_load(T + "/tp2.st"), mmtrain.st_load(T + "/res.st")
assert sorted(A) == sorted(B) and all(np.array_equal(A[k], B[k]) for k in A), "resumed weights differ"
print("tp2: checkpoint pieces unpadded; resumed at step %d: the same losses and weights" % h)
PY
else
  bad "tp2 checkpoint run"; tail -5 "$T/ck.out"
fi
[ $fail -eq 0 ] && echo "vocabulary padding: serial, tp=2 and tp=2+sp agree"
[ $fail -eq 0 ]
