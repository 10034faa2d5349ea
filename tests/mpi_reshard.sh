#!/usr/bin/env bash
# Checkpoints across plans (runtime/io/mmrt_ckpt.h, Megatron's distributed
# checkpoints): each rank file records where each of its pieces sits in the
# logical tensor, the fingerprint is of the model and not of the plan, and a
# run under another plan assembles its pieces from whatever rank files there
# are. Under real mpirun ranks, GPT2Tiny trained 5 steps and checkpointed
#   under tp=2 + sp           resumes under dp=2 + ZeRO-2 and serially,
#   under tp=2 x dp=2 + ZeRO-1 resumes serially,
#   under dp=2 + ZeRO-3        resumes under tp=2 + sp,
#   under pp=2 x tp=2          resumes under dp=2 + ZeRO-2 and serially,
# and each resumed run's losses of steps 6..10 equal the uninterrupted
# serial run's (1e-5 relative), its final weights (--save-weights, gathered)
# within 1e-3 of the size of their update and its AdamW m and v within 1e-3
# of their size (tests/torch/mmtrain.py; the key biases' state, whose
# gradient is rounding noise, left out as mmtrain does). A vocabulary tp = 2 pads (GPT2Odd,
# 257 rows, 512 under tp = 2) goes both ways: tp=2 -> serial and serial ->
# tp=2. `--init-from` the tp=2+sp checkpoint directory gives a serial
# trainer the weights of step 5. The one-rank generator reads InternVL2Tiny's tp=2 checkpoint
# directory as it reads the gathered --save-weights file (the same tokens).
# A checkpoint of another model is refused naming its manifest, and a
# flipped byte in another plan's rank file names that file and the tensor.
# Under the sanitizers pp=2 x tp=2 resumes serially only (dp=2 + ZeRO-2
# reads tp=2 + sp's pieces).
set -uo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPI=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS)
GPT="$MMC_SOURCE_DIR/stdlib_models/gpt2.mm"
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
cp "$GPT" "$T/gpt2.mm"
fail=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
N=10 H=5
[ "$SAN" = 1 ] && N=4 H=2
RUN=(--eval-batches 1 --quiet)

# compile NAME MODEL FILE FLAGS...
compile() {
  local name=$1 model=$2 file=$3; shift 3
  "$MMC" compile "$file" --model "$model" "$@" -o "$T/$name" 2> "$T/$name.cc" ||
    { bad "$name: compile"; cat "$T/$name.cc"; return 1; }
}
# run NP NAME ARGS...: the trainer on NP ranks (1: no mpirun)
run() {
  local np=$1 name=$2; shift 2
  if [ "$np" = 1 ]; then "$T/$name" "${RUN[@]}" "$@"; else "${MPI[@]}" -np "$np" "$T/$name" "${RUN[@]}" "$@"; fi
}
# compare MODEL FILE STRAIGHT RESUMED: losses of steps H+1..N and the final weights
compare() {
  /usr/bin/python3 - "$T" "$@" $H <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
import numpy as np
T, model, src, straight, resumed, h = sys.argv[1:7]
h = int(h)
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b = losses("%s/%s.jsonl" % (T, straight))[h:], losses("%s/%s.jsonl" % (T, resumed))
ok = len(a) == len(b) and len(b) > 0
lw = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if ok else float("inf")
cfg = mmtrain.train_settings(src, model)
(I, _), (A, _), (B, _) = (mmtrain.st_load("%s/%s" % (T, p)) for p in
                          ("%s.init.st" % model, straight + ".st", resumed + ".st"))
nb = mmtrain.compare_weights(I, A, B, cfg, [mmtrain.lr_at(cfg, s, len(a) + h) for s in range(1, len(a) + h + 1)],
                             resumed)
nb += sorted(A) != sorted(B)
worst = 0.0
for k in sorted(A):  # the optimizer state, which compare_weights leaves out
  # the state of a tensor whose gradient is rounding noise (the key biases) is noise too
  if not k.startswith("adamw.") or any(k.endswith(r) for r in mmtrain.ROUNDING_LEVEL): continue
  x, y = np.asarray(A[k], np.float64), np.asarray(B[k], np.float64)
  rel = np.linalg.norm(y - x) / (np.linalg.norm(x) + 1e-30) if x.shape == y.shape else np.inf
  worst = max(worst, rel)
  if rel > 1e-3:
    print("%s: |s_%s - s_serial| = %.3g of |s_serial|" % (k, resumed, rel)); nb += 1
print("%s: losses of steps %d..%d, largest relative difference %.2e; AdamW state within %.2e of its size"
      % (resumed, h + 1, h + len(b), lw, worst))
sys.exit(0 if not nb and lw <= 1e-5 else 1)
PY
}

# the uninterrupted serial runs
compile serial GPT2Tiny "$GPT" && compile odd.serial GPT2Odd "$T/odd.mm" || exit 1
run 1 serial --steps 0 --save-weights "$T/GPT2Tiny.init.st" > /dev/null || bad "serial init"
run 1 serial --steps $N --log "$T/serial.jsonl" --save-weights "$T/serial.st" > /dev/null || bad "serial run"
run 1 serial --steps $H --save-weights "$T/serial.h.st" > /dev/null || bad "serial run of $H steps"
run 1 odd.serial --steps 0 --save-weights "$T/GPT2Odd.init.st" > /dev/null || bad "odd init"
run 1 odd.serial --steps $N --log "$T/odd.serial.jsonl" --save-weights "$T/odd.serial.st" > /dev/null ||
  bad "odd serial run"

compile tp2sp GPT2Tiny "$GPT" --tp 2 --sp
compile dp2z2 GPT2Tiny "$GPT" --dp 2 --zero 2
compile tp2dp2z1 GPT2Tiny "$GPT" --tp 2 --dp 2 --zero 1
compile odd.tp2 GPT2Odd "$T/odd.mm" --tp 2

# resume FROM-CKPT NP NAME: resume a copy of checkpoint FROM under NAME to step N
resume() {
  local from=$1 np=$2 name=$3 tag=$4
  rm -rf "$T/ck.$tag" && cp -r "$T/$from" "$T/ck.$tag"
  run "$np" "$name" --steps $N --ckpt "$T/ck.$tag" --resume --log "$T/$tag.jsonl" \
    --save-weights "$T/$tag.st" > "$T/$tag.out" 2>&1 || { bad "$tag: resume"; tail -5 "$T/$tag.out"; return 1; }
}

# tp=2 + sp -> dp=2 + ZeRO-2, -> serial
if run 2 tp2sp --steps $H --ckpt "$T/ck.tp2sp" > "$T/tp2sp.out" 2>&1; then
  resume ck.tp2sp 2 dp2z2 tp2sp-dp2z2 && compare GPT2Tiny "$GPT" serial tp2sp-dp2z2 || bad "tp2+sp -> dp2+ZeRO-2"
  resume ck.tp2sp 1 serial tp2sp-serial && compare GPT2Tiny "$GPT" serial tp2sp-serial || bad "tp2+sp -> serial"
  # --init-from a checkpoint directory of another plan: the weights of step H, whole
  run 1 serial --steps 0 --init-from "$T/ck.tp2sp" --save-weights "$T/initfrom.st" > "$T/initfrom.out" 2>&1 ||
    { bad "serial --init-from the tp2+sp checkpoint"; tail -3 "$T/initfrom.out"; }
  /usr/bin/python3 - "$T" $H <<'PY' || bad "--init-from the tp2+sp checkpoint: other weights than the serial run's at step $H"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
T, h = sys.argv[1], int(sys.argv[2])
(I, _), (A, _), (B, _) = (mmtrain.st_load(T + p) for p in ("/GPT2Tiny.init.st", "/serial.h.st", "/initfrom.st"))
cfg = mmtrain.train_settings(os.path.join(os.environ["MMC_SOURCE_DIR"], "stdlib_models", "gpt2.mm"), "GPT2Tiny")
sys.exit(1 if mmtrain.compare_weights(I, A, B, cfg, [mmtrain.lr_at(cfg, s, h) for s in range(1, h + 1)], "init-from") else 0)
PY
else
  bad "tp2+sp: the run of $H steps"; tail -5 "$T/tp2sp.out"
fi

# tp=2 x dp=2 + ZeRO-1 (its --save-weights gathered too) -> serial
if run 4 tp2dp2z1 --steps $H --ckpt "$T/ck.tp2dp2z1" --save-weights "$T/tp2dp2z1.h.st" > "$T/tp2dp2z1.out" 2>&1; then
  resume ck.tp2dp2z1 1 serial tp2dp2z1-serial && compare GPT2Tiny "$GPT" serial tp2dp2z1-serial ||
    bad "tp2 x dp2 + ZeRO-1 -> serial"
  /usr/bin/python3 - "$T" $H $N <<'PY' || bad "tp2 x dp2 + ZeRO-1: --save-weights differs from the serial run's"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
T, h, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
(I, _), (A, _), (B, _) = (mmtrain.st_load(T + p) for p in ("/GPT2Tiny.init.st", "/serial.h.st", "/tp2dp2z1.h.st"))
cfg = mmtrain.train_settings(os.path.join(os.environ["MMC_SOURCE_DIR"], "stdlib_models", "gpt2.mm"), "GPT2Tiny")
nb = mmtrain.compare_weights(I, A, B, cfg, [mmtrain.lr_at(cfg, s, h) for s in range(1, h + 1)], "tp2dp2z1")
sys.exit(1 if nb or sorted(A) != sorted(B) else 0)
PY
else
  bad "tp2 x dp2 + ZeRO-1: the run of $H steps"; tail -5 "$T/tp2dp2z1.out"
fi

# pp=2 x tp=2 (each stage's rank files hold its tp pieces; 2 micro-batches)
# -> dp=2 + ZeRO-2, -> serial
compile pp2tp2 GPT2Tiny "$GPT" --pp 2 --tp 2 --micro-batches 2
if run 4 pp2tp2 --steps $H --ckpt "$T/ck.pp2tp2" > "$T/pp2tp2.out" 2>&1; then
  # (the sanitizers: its reader is tp2+sp -> dp2+ZeRO-2's, its rank files serial's below)
  [ "$SAN" = 1 ] || { resume ck.pp2tp2 2 dp2z2 pp2tp2-dp2z2 && compare GPT2Tiny "$GPT" serial pp2tp2-dp2z2; } ||
    bad "pp2 x tp2 -> dp2+ZeRO-2"
  resume ck.pp2tp2 1 serial pp2tp2-serial && compare GPT2Tiny "$GPT" serial pp2tp2-serial || bad "pp2 x tp2 -> serial"
else
  bad "pp2 x tp2: the run of $H steps"; tail -5 "$T/pp2tp2.out"
fi

# dp=2 + ZeRO-3 (parameters stored split over dp too) -> tp=2 + sp
compile dp2z3 GPT2Tiny "$GPT" --dp 2 --zero 3
if run 2 dp2z3 --steps $H --ckpt "$T/ck.dp2z3" > "$T/dp2z3.out" 2>&1; then
  resume ck.dp2z3 2 tp2sp dp2z3-tp2sp && compare GPT2Tiny "$GPT" serial dp2z3-tp2sp || bad "dp2+ZeRO-3 -> tp2+sp"
else
  bad "dp2+ZeRO-3: the run of $H steps"; tail -5 "$T/dp2z3.out"
fi

# a padded vocabulary: tp=2 pieces (rank 0 rows 0..255, rank 1 row 256) -> serial, serial -> tp=2
if run 2 odd.tp2 --steps $H --ckpt "$T/ck.odd.tp2" > "$T/odd.tp2.out" 2>&1; then
  /usr/bin/python3 - "$T" <<'PY' || bad "odd tp2: the pieces' slices"
import glob, json, struct, sys
T = sys.argv[1]
step = sorted(glob.glob(T + "/ck.odd.tp2/step-*"))[0]
for r, want in ((0, "global=[257,64] first=[0,0] len=[256,64]"), (1, "global=[257,64] first=[256,0] len=[1,64]")):
  with open("%s/rank-%05d.safetensors" % (step, r), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; meta = json.loads(f.read(n))["__metadata__"]
  got = meta.get("slice:gpt.wte.weight")
  assert got == want, "rank %d: slice:gpt.wte.weight is %r, want %r" % (r, got, want)
print("odd tp2: the table's pieces are rows 0..255 and 256 of [257, 64]")
PY
  resume ck.odd.tp2 1 odd.serial odd.tp2-serial && compare GPT2Odd "$T/odd.mm" odd.serial odd.tp2-serial ||
    bad "odd vocabulary: tp2 -> serial"
else
  bad "odd tp2: the run of $H steps"; tail -5 "$T/odd.tp2.out"
fi
if run 1 odd.serial --steps $H --ckpt "$T/ck.odd.serial" > "$T/odd.s.out" 2>&1; then
  resume ck.odd.serial 2 odd.tp2 odd.serial-tp2 && compare GPT2Odd "$T/odd.mm" odd.serial odd.serial-tp2 ||
    bad "odd vocabulary: serial -> tp2"
else
  bad "odd serial: the run of $H steps"
fi

# the generator (one rank) reads a tp=2 checkpoint directory as it reads the
# gathered --save-weights file: the same tokens for the same images
VLM="$MMC_SOURCE_DIR/stdlib_models/internvl2.mm"
if compile vlm.tp2 InternVL2Tiny "$VLM" --tp 2 && compile vlm.ev InternVL2Tiny "$VLM" --task eval; then
  if run 2 vlm.tp2 --steps 2 --ckpt "$T/ck.vlm" --save-weights "$T/vlm.st" > "$T/vlm.out" 2>&1 &&
     "$T/vlm.ev" --weights "$T/ck.vlm" --limit 8 --ids "$T/dir.ids" --quiet > "$T/dir.out" 2>&1 &&
     "$T/vlm.ev" --weights "$T/vlm.st" --limit 8 --ids "$T/file.ids" --quiet > "$T/file.out" 2>&1; then
    cmp -s "$T/dir.ids" "$T/file.ids" && cmp -s "$T/dir.out" "$T/file.out" && [ -s "$T/dir.ids" ] ||
      bad "the generator: a tp=2 checkpoint directory gives other tokens than the gathered weights"
  else
    bad "InternVL2Tiny tp=2 checkpoint into the generator"; tail -3 "$T/vlm.out" "$T/dir.out" "$T/file.out"
  fi
fi

# another model's checkpoint is refused, naming its manifest
if [ -d "$T/ck.tp2sp" ]; then
  rm -rf "$T/ck.other" && cp -r "$T/ck.tp2sp" "$T/ck.other"
  if run 1 odd.serial --steps $N --ckpt "$T/ck.other" --resume > "$T/other.out" 2>&1; then
    bad "GPT2Odd resumed from a GPT2Tiny checkpoint"
  elif ! grep -q "is not of this model: .*/ck.other/step-00000$H/manifest.json: model fingerprint is 'GPT2Tiny-" "$T/other.out"; then
    bad "another model: unexpected message"; cat "$T/other.out"
  fi
  # a flipped byte in the tp=2 rank 1 file, resumed serially: that file and a tensor named
  rm -rf "$T/ck.flip" && cp -r "$T/ck.tp2sp" "$T/ck.flip"
  f="$T/ck.flip/step-00000$H/rank-00001.safetensors"
  /usr/bin/python3 - "$f" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 100] ^= 0x20  # in the first tensor's data
open(p, "wb").write(bytes(b))
PY
  if run 1 serial --steps $N --ckpt "$T/ck.flip" --resume > "$T/flip.out" 2>&1; then
    bad "a damaged rank file of another plan loaded"
  elif ! grep -q "rank-00001.safetensors: tensor '.*': the data's CRC32 is" "$T/flip.out"; then
    bad "damaged file: unexpected message"; cat "$T/flip.out"
  fi
fi
[ $fail -eq 0 ] && echo "checkpoints across plans: tp2+sp -> dp2+ZeRO-2 and serial, tp2 x dp2+ZeRO-1 -> serial, pp2 x tp2 -> dp2+ZeRO-2 and serial, padded vocabulary both ways"
[ $fail -eq 0 ]
