#!/usr/bin/env bash
# What a trainer refuses to write, and when (GPT2Tiny, a few steps each):
#   1. divergence: --lr 1e30 stops at the first step whose loss, weights or
#      optimizer state are not finite (exit 1, a message naming the step, the
#      loss and the tensor), before it is logged; the checkpoint of the last
#      good step stays DIR/latest, --save-weights writes nothing; NaN weights
#      given to --init-from are refused before step 1; --on-nan skip-step
#      undoes a step with a NaN (a test fault, MMRT_FAULT_NAN_STEP): its
#      checkpoint holds the previous step's tensors bit for bit, the log
#      counts skipped_steps, the run goes on; 10 skipped in a row stop it;
#      under mpirun -np 2 (dp=2) both ranks stop (or skip) together;
#   2. checkpoint directories: --resume on a DIR with step directories but
#      no DIR/latest is refused (nothing removed), an empty one starts at 0,
#      a run without --resume into one with a checkpoint is refused;
#      DIR/lock keeps a second trainer out before its step 1, a dead
#      holder's lock is taken over with a message; a newer checkpoint than
#      the one resumed from survives pruning;
#   3. output paths checked before step 1: a missing directory, a read-only
#      place, a file where a directory is expected and the other way round,
#      a device (a node like /dev/null, made here: it stays one), an output
#      that is an input, two
#      outputs on one path; the reconstructor and the captioner too;
#   4. --ckpt naming a file: one clean message (no stray bytes);
#   5. --ckpt-every, --keep, --resume without --ckpt, and a bad --on-nan.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
MNT=""
cleanup() {
  [ -n "${BG:-}" ] && kill -KILL "$BG" 2> /dev/null
  [ -n "$MNT" ] && umount "$MNT" 2> /dev/null
  rm -rf "$T"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o "$T/g" || { echo "FAIL: compile"; exit 1; }
Q=(--eval-batches 1 --quiet)
cd "$T" || exit 1
steps_logged() { [ -f "$1" ] && grep -c '"loss"' "$1" || echo 0; }
py() { /usr/bin/python3 - "$@"; }

# ---- 1. divergence ----
./g --steps 6 --lr 1e30 --ckpt-every 1 --keep 2 --ckpt div --log div.jsonl --save-weights div.st "${Q[@]}" \
  > /dev/null 2> div.err; st=$?
if [ $st = 1 ] && grep -Eq "^trainer: error: step ([0-9]+): the training diverged: loss nan" div.err &&
   grep -Eq "error: step [0-9]+: tensor '[^']+' has [0-9]+ of its [0-9]+ values not finite" div.err; then
  n=$(sed -n 's/.*error: step \([0-9]*\): the training diverged.*/\1/p' div.err)
  ok "--lr 1e30: stopped at step $n: $(grep -o "tensor '[^']*' has [0-9]* of its [0-9]* values" div.err)"
else bad "--lr 1e30: exit $st, $(cat div.err)"; n=0; fi
if [ "$n" -gt 1 ] && [ "$(cat div/latest)" = "step-$(printf %06d $((n - 1)))" ] &&
   [ "$(steps_logged div.jsonl)" = $((n - 1)) ] && ! grep -q null div.jsonl && [ ! -e div.st ] &&
   got=$(/usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/ckpt_check.py" div) && py div/latest div <<'PY'
import json, math, os, struct, sys
d = os.path.join(sys.argv[2], open(sys.argv[1]).read().strip())
for f in sorted(os.listdir(d)):
    if not f.endswith(".safetensors"): continue
    b = open(os.path.join(d, f), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    for k, v in h.items():
        lo, hi = v["data_offsets"]
        x = struct.unpack("<%df" % ((hi - lo) // 4), b[8 + n + lo:8 + n + hi])
        if not all(math.isfinite(y) for y in x): print("%s: %s not finite" % (f, k)); sys.exit(1)
PY
then ok "--lr 1e30: DIR/latest still names step $((n - 1)) (finite, $got tensors checked), $((n - 1)) steps logged, no --save-weights file"
else bad "--lr 1e30: after the stop: latest $(cat div/latest 2> /dev/null), $(ls div), $(steps_logged div.jsonl) logged, $(ls div.st 2> /dev/null)"; fi

./g --steps 0 --save-weights w0.st "${Q[@]}" > /dev/null 2>&1
py <<'PY'
import json, struct
b = bytearray(open("w0.st", "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
k = sorted(k for k in h if not k.startswith(("adamw.", "sgd.")))[0]
b[8 + n + h[k]["data_offsets"][0]:8 + n + h[k]["data_offsets"][0] + 4] = struct.pack("<f", float("nan"))
open("nan.st", "wb").write(bytes(b))
open("nan.name", "w").write(k)
PY
./g --steps 3 --init-from nan.st --log nan.jsonl --ckpt nanck "${Q[@]}" > /dev/null 2> nan.err; st=$?
if [ $st = 1 ] && grep -qF "error: --init-from nan.st: tensor '$(cat nan.name)' has 1 of its" nan.err &&
   [ "$(steps_logged nan.jsonl)" = 0 ] && [ ! -e nanck/latest ]; then ok "--init-from with a NaN: refused before step 1: $(grep -o "tensor.*" nan.err)"
else bad "--init-from with a NaN: exit $st, $(cat nan.err)"; fi

MMRT_FAULT_NAN_STEP=3 ./g --steps 5 --ckpt-every 1 --keep 9 --ckpt skip --on-nan skip-step --log skip.jsonl \
  --eval-batches 1 > /dev/null 2> skip.err; st=$?
if [ $st = 0 ] && grep -q "step 3 skipped (--on-nan skip-step): loss nan" skip.err && py <<'PY'
import json, sys
r = [json.loads(l) for l in open("skip.jsonl") if '"loss"' in l]
want = [(1, True, 0), (2, True, 0), (3, False, 1), (4, True, 1), (5, True, 1)]
got = [(x["step"], x["loss"] is not None, x["skipped_steps"]) for x in r]
print("  log (step, finite loss, skipped_steps):", got)
sys.exit(got != want)
PY
then ok "skip-step: step 3 (a NaN weight) skipped, counted in skipped_steps, steps 4-5 trained, exit 0"
else bad "skip-step: exit $st, $(cat skip.err)"; fi
if py <<'PY'
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b, c = (tensors("skip/step-%06d/rank-00000.safetensors" % s) for s in (2, 3, 4))
same = a == b
print("  step 3's checkpoint: %d tensors %s step 2's; step 4's differs: %s" % (len(a), "equal to" if same else "NOT equal to", a != c))
sys.exit(not (same and a != c))
PY
then ok "skip-step: the skipped step's weights and optimizer state are step 2's, bit for bit"
else bad "skip-step: the step was not undone"; fi
./g --steps 30 --lr 1e30 --on-nan skip-step --log sk2.jsonl "${Q[@]}" > /dev/null 2> sk2.err; st=$?
if [ $st = 1 ] && grep -q "the last 10 steps in a row were not finite (--on-nan skip-step)" sk2.err &&
   [ "$(grep -o '"skipped_steps": [0-9]*' sk2.jsonl | tail -1)" = '"skipped_steps": 9' ]; then
  ok "skip-step, --lr 1e30: stopped at the 10th skipped step in a row"
else bad "skip-step, --lr 1e30: exit $st, $(cat sk2.err)"; fi

# under mpirun (dp=2): every rank stops at the same step; a NaN on rank 1 alone is skipped by both
if "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --dp 2 -o g2 2> /dev/null; then
  MPI=(timeout 120 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
  "${MPI[@]}" ./g2 --steps 6 --lr 1e30 --ckpt-every 1 --ckpt mdiv "${Q[@]}" > mdiv.out 2>&1; st=$?
  if [ $st != 0 ] && [ $st != 124 ] && grep -q "trainer (rank 0): error: step [0-9]*: the training diverged" mdiv.out &&
     ! grep -q "did not arrive" mdiv.out; then ok "dp=2, --lr 1e30: both ranks stopped (exit $st)"
  else bad "dp=2, --lr 1e30: exit $st, $(head -c 1500 mdiv.out)"; fi
  # (under the sanitizers the one-rank skip above is enough)
  [ "$SAN" = 1 ] || "${MPI[@]}" -x MMRT_FAULT_NAN_STEP=2 -x MMRT_FAULT_NAN_RANK=1 ./g2 --steps 4 --on-nan skip-step --log mskip.jsonl \
    --ckpt mskip "${Q[@]}" > mskip.out 2>&1; st=$?
  if [ "$SAN" = 1 ]; then :
  elif [ $st = 0 ] && [ "$(grep -o '"step": 4, "loss": [0-9.]*' mskip.jsonl | wc -l)" = 1 ] &&
     grep -q '"step": 2, "loss": null.*"skipped_steps": 1' mskip.jsonl && grep -q '"step": 4,.*"skipped_steps": 1' mskip.jsonl; then
    ok "dp=2, a NaN on rank 1 at step 2: skipped by both ranks, steps 3-4 trained"
  else bad "dp=2 skip-step: exit $st, $(head -c 1500 mskip.out) $(cat mskip.jsonl)"; fi
else bad "compile dp=2"; fi

# ---- 2. checkpoint directories ----
./g --steps 4 --ckpt-every 2 --ckpt r1 "${Q[@]}" > /dev/null 2>&1
rm r1/latest
./g --steps 6 --ckpt r1 --resume --log r1.jsonl "${Q[@]}" > /dev/null 2> r1.err; st=$?
if [ $st = 1 ] && grep -q "error: --resume: r1 has no checkpoint (no r1/latest) but is not empty" r1.err &&
   [ -d r1/step-000002 ] && [ -d r1/step-000004 ] && [ "$(steps_logged r1.jsonl)" = 0 ]; then ok "--resume without DIR/latest: refused, step-000002 and step-000004 kept"
else bad "--resume without latest: exit $st, $(cat r1.err), $(ls r1)"; fi
mkdir r2
if ./g --steps 1 --ckpt r2 --resume --eval-batches 1 > /dev/null 2> r2.err && grep -q "no checkpoint in r2 yet; starting at step 0" r2.err &&
   [ "$(cat r2/latest)" = step-000001 ] && [ ! -e r2/lock ]; then ok "--resume on an empty DIR starts at step 0 (the lock removed at the end)"
else bad "--resume on an empty DIR: $(cat r2.err)"; fi

# a run without --resume into a DIR holding another run's checkpoint: refused
# before step 1 (it would overwrite and prune them), every file unchanged
before=$(cd r2 && find . -type f -exec md5sum {} + | sort)
./g --steps 3 --ckpt r2 --log fr.jsonl "${Q[@]}" > /dev/null 2> fr.err; st=$?
if [ $st = 1 ] && grep -q "error: --ckpt r2 holds another run's checkpoints (r2/latest); a new run would overwrite and prune them: --resume continues that run" fr.err &&
   [ "$(cd r2 && find . -type f -exec md5sum {} + | sort)" = "$before" ] && [ "$(steps_logged fr.jsonl)" = 0 ]; then
  ok "a fresh run into a DIR with a checkpoint: refused, every file kept"
else bad "a fresh run into r2: exit $st, $(cat fr.err)"; fi

# a run killed in its first checkpoint leaves a step directory without its
# manifest (and a temporary pointer): nothing to resume, so step 0, and the
# cut-off write is pruned (tests/ckpt_faults.sh kills at random moments)
mkdir -p r3/step-000002 && echo x > r3/step-000002/rank-00000.safetensors && echo step-000002 > r3/latest.tmp.1
if ./g --steps 1 --ckpt r3 --resume --eval-batches 1 > /dev/null 2> r3.err && grep -q "no checkpoint in r3 yet; starting at step 0" r3.err &&
   [ "$(cat r3/latest)" = step-000001 ] && [ ! -e r3/step-000002 ] && [ ! -e r3/latest.tmp.1 ]; then ok "--resume after a cut-off first checkpoint starts at step 0 and prunes the partial write"
else bad "--resume after a cut-off first checkpoint: $(cat r3.err), $(ls r3)"; fi

./g --steps 100000 --ckpt lk --log lk.jsonl --quiet > /dev/null 2>&1 &
BG=$!
for _ in $(seq 300); do [ "$(steps_logged lk.jsonl)" -ge 1 ] && break; sleep 0.05; done
./g --steps 3 --ckpt lk --resume --log lk2.jsonl "${Q[@]}" > /dev/null 2> lk.err; st=$?
if [ $st = 1 ] && grep -q "error: --ckpt lk: lk/lock: held by process $BG on host $(hostname): another trainer" lk.err &&
   [ "$(steps_logged lk2.jsonl)" = 0 ]; then ok "a second trainer on one --ckpt DIR: refused before step 1, naming pid $BG"
else bad "lock: exit $st, $(cat lk.err)"; fi
kill -KILL $BG; wait $BG 2> /dev/null; BG=""
./g --steps 2 --ckpt lk --resume "${Q[@]}" > /dev/null 2> lk3.err; st=$?
if [ $st = 0 ] && grep -q "took over the lock lk/lock of process [0-9]*, which is not running" lk3.err && [ ! -e lk/lock ]; then
  ok "the killed trainer's lock: taken over with a message"
else bad "stale lock: exit $st, $(cat lk3.err)"; fi
mkdir lk4 && echo "elsewhere.example 1" > lk4/lock
./g --steps 1 --ckpt lk4 "${Q[@]}" > /dev/null 2> lk4.err; st=$?
if [ $st = 1 ] && grep -q "held by process 1 on host elsewhere.example" lk4.err; then ok "another host's lock: refused"
else bad "another host's lock: exit $st, $(cat lk4.err)"; fi

./g --steps 10 --ckpt-every 5 --ckpt pr "${Q[@]}" > /dev/null 2>&1
echo step-000005 > pr/latest
./g --steps 7 --ckpt-every 1 --keep 1 --ckpt pr --resume "${Q[@]}" > /dev/null 2> pr.err; st=$?
if [ $st = 0 ] && [ "$(cat pr/latest)" = step-000007 ] && [ -f pr/step-000010/manifest.json ] && [ ! -e pr/step-000006 ]; then
  ok "resumed from step 5 to 7 with --keep 1: the newer step-000010 kept, step-000006 pruned"
else bad "prune after resume: exit $st, $(ls pr) $(cat pr.err)"; fi

# ---- 3. output paths, before step 1 ----
touch afile
refused() { # name, expected message (grep -F), flags...: exit 1, the message, no step logged
  rm -f o.jsonl
  ./g --steps 2 --log o.jsonl "${Q[@]}" "${@:3}" > /dev/null 2> o.err; local st=$?
  if [ $st = 1 ] && grep -qF -- "$2" o.err && [ "$(steps_logged o.jsonl)" = 0 ]; then ok "$1: $(grep -m1 error o.err)"
  else bad "$1: exit $st, $(cat o.err), $(steps_logged o.jsonl) steps logged"; fi
}
refused "--save-weights into a missing directory" "error: --save-weights nodir/w.st: the directory nodir does not exist" --save-weights nodir/w.st
# a device of our own, never the system's /dev/null: a trainer that replaces
# its target would replace that (a FIFO where mknod is not allowed)
if mknod -m 666 null c 1 3 2> /dev/null; then kind="a character device"; else mkfifo null; kind="a FIFO"; fi
refused "--save-weights naming a device (a node like /dev/null)" "error: --save-weights null: is $kind, not a regular file" --save-weights null
if [ -c null ] || [ -p null ]; then ok "the node is still $kind"; else bad "the node was replaced: $(ls -l null)"; fi
refused "--ckpt naming a file" "error: --ckpt afile: is a regular file, expected a directory" --ckpt afile
refused "--save-weights naming a directory" "error: --save-weights r2: is a directory, expected a file" --save-weights r2
refused "--dump-inputs naming a file" "error: --dump-inputs afile: is a regular file, expected a directory" --dump-inputs afile
refused "--save-weights = --init-from" "error: --save-weights w0.st: is the input w0.st too" --init-from w0.st --save-weights w0.st
refused "--ckpt = --init-from" "error: --ckpt r2: is the input r2 too" --init-from r2 --ckpt r2
refused "--dump-logits = --save-weights" "error: --save-weights and --dump-logits name the same path x.bin" --save-weights x.bin --dump-logits x.bin
mkdir -p ro
if mount -t tmpfs -o ro,size=64k tmpfs ro 2> /dev/null; then MNT="$T/ro"; R=ro how="a read-only tmpfs"
else R=/proc/self how="/proc/self"; fi
refused "--ckpt on $how" "error: --ckpt $R/ck: cannot create directory $R/ck" --ckpt $R/ck
refused "--save-weights on $how" "error: --save-weights $R/w.st: cannot create a file in $R" --save-weights $R/w.st
refused "--log on $how" "error: --log $R/l.jsonl: cannot create a file in $R" --log $R/l.jsonl
refused "--trace into a missing directory" "error: --trace nodir/t.json: the directory nodir does not exist" --trace nodir/t.json
if "$MMC" compile "$MMC_SOURCE_DIR/tests/video/clipvae.mm" --task reconstruct -o rec 2> /dev/null &&
   "$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny --task generate -o gen 2> /dev/null; then
  ./rec --weights w0.st --dump null > /dev/null 2> rec1.err; a=$?
  ./rec --weights w0.st --show 1 --out afile > /dev/null 2> rec2.err; b=$?
  ./gen --weights w0.st --images afile --out nodir/c.txt > /dev/null 2> gen.err; c=$?
  if [ $a = 1 ] && grep -q "^reconstructor: error: --dump null: is $kind" rec1.err &&
     [ $b = 1 ] && grep -q "^reconstructor: error: --out afile: is a regular file, expected a directory" rec2.err &&
     [ $c = 1 ] && grep -q "^generator: error: --out nodir/c.txt: the directory nodir does not exist" gen.err; then
    ok "the reconstructor's --dump and --out, the captioner's --out: refused before loading"
  else bad "other programs: $a $b $c: $(cat rec1.err rec2.err gen.err)"; fi
else bad "compile the reconstructor or the captioner"; fi

# ---- 4. --ckpt naming a file: one clean line ----
./g --steps 2 "${Q[@]}" --ckpt afile > /dev/null 2> f.err; st=$?
if [ $st = 1 ] && [ "$(cat f.err)" = "trainer: error: --ckpt afile: is a regular file, expected a directory" ] &&
   ! LC_ALL=C grep -q '[^[:print:]]' f.err; then ok "--ckpt afile: exactly one printable line"
else bad "--ckpt afile: exit $st, $(od -c f.err | head -5)"; fi

# ---- 5. flags that need --ckpt ----
for f in "--ckpt-every 2" "--keep 2" "--resume"; do
  ./g --steps 2 $f "${Q[@]}" > /dev/null 2> n.err; st=$?
  if [ $st = 1 ] && grep -q "^trainer: error: ${f%% *} needs --ckpt DIR" n.err; then ok "$f without --ckpt: $(cat n.err)"
  else bad "$f without --ckpt: exit $st, $(cat n.err)"; fi
done
./g --steps 2 --on-nan ignore "${Q[@]}" > /dev/null 2> n.err; st=$?
if [ $st = 1 ] && grep -q "^trainer: error: --on-nan takes stop or skip-step, not 'ignore'" n.err; then ok "--on-nan ignore: refused"
else bad "--on-nan ignore: exit $st, $(cat n.err)"; fi

echo "ckpt_safety: $pass passed, $fail failed"
[ $fail -eq 0 ]
