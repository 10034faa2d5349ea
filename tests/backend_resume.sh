#!/usr/bin/env bash
# Resume and the learning-rate schedule.
# 1. Extending a run is exact: 20 steps straight give the same losses and
#    final weights and optimizer state, bit for bit, as 10 steps, a
#    checkpoint, and --resume up to 20 (GPT2Tiny, constant schedule, and
#    ViTFashion, whose 20 steps stay inside its 100-step warm-up).
# 2. Interrupted runs are exact: a cosine model (GPT2Tiny with warm-up 10 and
#    min_lr, written below) trained for N = 32 steps with --ckpt-every 3 is
#    killed (SIGKILL) inside the warm-up, killed again in the cosine decay,
#    stopped by SIGINT (the trainer writes a checkpoint and exits 130: resumed
#    right after a checkpoint), each time resumed with the same --steps 32:
#    every logged loss (the steps redone after a kill too) and the final
#    weights, optimizer state and checkpoint equal the straight run's bit
#    for bit.
# 3. The schedule: every step's logged lr (the trainer's f32) equals, to f32
#    rounding, warm-up + cosine or constant computed in Python from the
#    train section (tests/torch/mmtrain.py), over all the steps of 1 and 2,
#    and of two short runs of a linear decay (warm-up 4, to min_lr) and a
#    constant schedule with a warm-up of 5.
# 4. SIGINT on an endless run: the step in flight finishes, a checkpoint is
#    written, exit 130; the run then resumes from that step.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0
py() { /usr/bin/python3 - "$@"; }

same() { # name steps a.jsonl b.jsonl a.st b.st: identical losses (every occurrence of a step) and tensors
  py "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
name, steps, la, lb, wa, wb = sys.argv[1:7]
steps = int(steps)
def losses(p):
    out = {}
    for l in open(p):
        r = json.loads(l)
        if "loss" in r:
            out.setdefault(r["step"], []).append(r["loss"])
    return out
a, b = losses(la), losses(lb)
if sorted(a) != list(range(1, steps + 1)) or sorted(b) != list(range(1, steps + 1)) or any(len(v) != 1 for v in a.values()):
    print("%s: steps logged: %s and %s" % (name, sorted(a), sorted(b))); sys.exit(1)
diff = [s for s in b if any(x != a[s][0] for x in b[s])]
if diff:
    print("%s: losses differ at steps %s (e.g. %r vs %r)" % (name, diff, a[diff[0]], b[diff[0]])); sys.exit(1)
def raw(p):  # name -> the tensor's bytes
    w, _ = mmtrain.st_load(p)
    return {k: v.tobytes() for k, v in w.items()}
ta, tb = raw(wa), raw(wb)
bad = sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))
if bad:
    print("%s: tensors differ: %s" % (name, bad[:5])); sys.exit(1)
redone = sum(len(v) - 1 for v in b.values())
print("%s: %d losses (%d steps logged twice, redone after a kill) and %d tensors identical (step %d loss %r)" %
      (name, steps, redone, len(ta), steps, a[steps][0]))
PY
}

schedule() { # name file.mm model steps log [lr override]: every logged lr against the formula
  py "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
name, mm, model, steps, log = sys.argv[1:6]
cfg = mmtrain.train_settings(mm, model, [os.path.join(os.environ["MMC_SOURCE_DIR"], "stdlib_models")])
if len(sys.argv) > 6:
    cfg["lr"] = float(sys.argv[6])  # the trainer's --lr
steps = int(steps)
bad, seen, phases = 0, set(), set()
for l in open(log):
    r = json.loads(l)
    if "lr" not in r:
        continue
    s, want = r["step"], mmtrain.lr_at(cfg, r["step"], steps)
    seen.add(s)
    phases.add("warm-up" if s <= cfg["warmup"] else cfg["schedule"])
    if abs(r["lr"] - want) > 1e-6 * want:
        print("%s: step %d: the trainer's lr %r, the train section's schedule gives %r" % (name, s, r["lr"], want))
        bad += 1
if seen != set(range(1, steps + 1)):
    print("%s: steps with an lr: %s" % (name, sorted(seen))); bad += 1
print("%s: lr of %d steps (%s) as %s(warmup = %d, min_lr = %g) from lr %g gives: %s" %
      (name, len(seen), ", ".join(sorted(phases)), cfg["schedule"], cfg["warmup"], cfg["min_lr"], cfg["lr"],
       "ok" if not bad else "%d MISMATCHES" % bad))
sys.exit(1 if bad else 0)
PY
}

verdict() { if [ "$1" -eq 0 ]; then pass=$((pass+1)); else echo "FAIL: $2"; fail=$((fail+1)); fi; }

extend() { # name file model lr
  local name=$1
  if ! "$MMC" compile "$S/$2" --model "$3" -o "$T/$name"; then echo "FAIL: $name: mmc compile"; fail=$((fail+1)); return; fi
  local args=(--lr "$4" --eval-batches 1 --quiet)
  "$T/$name" --steps 20 "${args[@]}" --ckpt "$T/$name.a" --log "$T/$name.a.jsonl" --save-weights "$T/$name.a.st" > /dev/null &&
  "$T/$name" --steps 10 "${args[@]}" --ckpt "$T/$name.b" --log "$T/$name.b.jsonl" > /dev/null &&
  "$T/$name" --steps 20 "${args[@]}" --ckpt "$T/$name.b" --resume --log "$T/$name.b.jsonl" --save-weights "$T/$name.b.st" \
    > /dev/null 2> "$T/$name.err"
  if [ $? -ne 0 ]; then echo "FAIL: $name: a trainer run failed"; cat "$T/$name.err"; fail=$((fail+1)); return; fi
  same "$name" 20 "$T/$name.a.jsonl" "$T/$name.b.jsonl" "$T/$name.a.st" "$T/$name.b.st"; verdict $? "$name: resume"
  schedule "$name" "$S/$2" "$3" 20 "$T/$name.a.jsonl" "$4"; verdict $? "$name: schedule"
}

extend gpt2tiny gpt2.mm GPT2Tiny 2e-3
# under the sanitizers (ten times slower) the small model is enough
[ "$SAN" = 1 ] || extend vit vit_fashion.mm ViTFashion 5e-3

# ---- 2 and 3: a cosine schedule, interrupted three times
cat > "$T/cosine.mm" <<'MM'
import "gpt2.mm"
model GPT2TinyCosine extends GPT2Tiny {
  train {
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = cosine(warmup = 10, min_lr = 1e-4)
  }
}
MM
N=32
EVERY=3
C=(--steps $N --ckpt-every $EVERY --eval-batches 1 --quiet)
if "$MMC" compile -I "$S" "$T/cosine.mm" --model GPT2TinyCosine -o "$T/cos" &&
   "$T/cos" "${C[@]}" --ckpt "$T/cos.a" --log "$T/cos.a.jsonl" --save-weights "$T/cos.a.st" > /dev/null; then
  schedule cosine "$T/cosine.mm" GPT2TinyCosine $N "$T/cos.a.jsonl"; verdict $? "cosine: schedule"
  # run, watch the log, signal the trainer once it has logged step >= AT, resume; then run to the end
  py "$T/cos" "$T/cos.b" "$T/cos.b.jsonl" "$T/cos.b.st" "$N" 10 "$EVERY" "KILL:4:warm-up" "KILL:17:cosine decay" \
     "INT:22:cosine decay, resumed right after the checkpoint the signal writes" -- "${C[@]}" <<'PY'
import json, re, signal, subprocess, sys, time
exe, ckpt, log, final, n, warmup, every = sys.argv[1:8]
n, warmup, every = int(n), int(warmup), int(every)
cut = sys.argv.index("--")
plan, common = sys.argv[8:cut], [a for a in sys.argv[cut + 1:] if a != "--quiet"]
def last_step():
    try:
        return max((json.loads(l)["step"] for l in open(log) if '"loss"' in l), default=0)
    except (OSError, ValueError):
        return 0
bad, prev = 0, None
for i, p in enumerate(plan + [None]):
    args = [exe] + common + ["--ckpt", ckpt, "--log", log] + (["--resume"] if i else []) + ([] if p else ["--save-weights", final])
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p is not None:
        sig, at, where = p.split(":", 2)
        t0 = time.time()
        while proc.poll() is None and last_step() < int(at) and time.time() - t0 < 120:
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL if sig == "KILL" else signal.SIGINT)
    err = proc.communicate()[1]
    m = re.search(r"resumed from .* at step (\d+)", err)
    resumed = int(m.group(1)) if m else 0
    if prev:  # where the previous interruption should have let this run resume
        psig, pgot = prev
        ok = resumed == pgot if psig == "INT" else resumed % every == 0 and 0 <= pgot - resumed <= every
        print("  resumed at step %d (%s)" % (resumed, "ok" if ok else "FAIL: expected %s" %
              ("the SIGINT step %d" % pgot if psig == "INT" else "the last --ckpt-every %d checkpoint before %d" % (every, pgot))))
        bad += not ok
    if p is None:
        print("ran to step %d: exit %d" % (n, proc.returncode))
        bad += proc.returncode != 0
        break
    got = last_step()
    want_rc = -signal.SIGKILL if sig == "KILL" else 128 + signal.SIGINT
    in_region = got <= warmup if where == "warm-up" else warmup < got < n
    print("SIG%s after step %d of %d (%s%s): exit %d" %
          (sig, got, n, where, "" if in_region else ": FAIL, not there (a slow poll?)", proc.returncode))
    bad += not in_region
    if proc.returncode != want_rc:
        print("FAIL: expected exit %d; stderr: %s" % (want_rc, err.strip()[-300:])); bad += 1
    if sig == "INT" and "after step %d (checkpoint written)" % got not in err:
        print("FAIL: SIGINT: no checkpoint after step %d: %s" % (got, err.strip()[-300:])); bad += 1
    prev = (sig, got)
sys.exit(1 if bad else 0)
PY
  verdict $? "cosine: interrupted runs"
  same "cosine interrupted" $N "$T/cos.a.jsonl" "$T/cos.b.jsonl" "$T/cos.a.st" "$T/cos.b.st"; verdict $? "cosine: interrupted != straight"
  py "$T/cos.a" "$T/cos.b" $N <<'PY'
import glob, json, os, sys
a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def final(d):  # (step, folder) of the checkpoint `latest` names, else of the newest manifest under d
    if os.path.isfile(os.path.join(d, "latest")):
        sub = os.path.join(d, open(os.path.join(d, "latest")).read().strip())
        return json.load(open(os.path.join(sub, "manifest.json"))).get("step"), sub
    best = None
    for m in glob.glob(os.path.join(d, "**", "manifest.json"), recursive=True):
        s = json.load(open(m)).get("step")
        if best is None or s > best[0]:
            best = (s, os.path.dirname(m))
    return best
fa, fb = final(a), final(b)
if not fa or not fb or fa[0] != n or fb[0] != n:
    print("final checkpoints: %s and %s, not step %d" % (fa, fb, n)); sys.exit(1)
files = sorted(f for f in os.listdir(fa[1]) if f.endswith(".safetensors"))
diff = [f for f in files if open(os.path.join(fa[1], f), "rb").read() != open(os.path.join(fb[1], f), "rb").read()]
if not files or diff or files != sorted(f for f in os.listdir(fb[1]) if f.endswith(".safetensors")):
    print("final checkpoints differ: %s" % (diff or files)); sys.exit(1)
print("final checkpoint (step %d): %s identical byte for byte" % (n, ", ".join(files)))
PY
  verdict $? "cosine: final checkpoints"
else echo "FAIL: cosine: compile or straight run"; fail=$((fail+1)); fi

# ---- 3: the other schedules, each after a warm-up
for sch in "linear(warmup = 4, min_lr = 1e-4)" "constant(warmup = 5)"; do
  name=${sch%%(*}
  printf 'import "gpt2.mm"\nmodel G extends GPT2Tiny {\n  train {\n    optimizer = adamw(lr = 2e-3)\n    schedule = %s\n  }\n}\n' \
    "$sch" > "$T/$name.mm"
  if "$MMC" compile -I "$S" "$T/$name.mm" --model G -o "$T/$name" &&
     "$T/$name" --steps 12 --eval-batches 1 --quiet --log "$T/$name.jsonl" > /dev/null; then
    schedule "$name" "$T/$name.mm" G 12 "$T/$name.jsonl"; verdict $? "$name: schedule"
  else echo "FAIL: $name: compile or run"; fail=$((fail+1)); fi
done

# ---- 4: SIGINT on an endless run: the step in flight finishes, a checkpoint
# is written, exit 130; the run then resumes from that step
"$T/gpt2tiny" --steps 1000000 --quiet --ckpt "$T/int" --log "$T/int.jsonl" > /dev/null 2> "$T/int.err" &
pid=$!
for _ in $(seq 200); do [ -s "$T/int.jsonl" ] && break; sleep 0.1; done
kill -INT $pid; wait $pid; st=$?
n=$(sed -n 's/.*stopped by SIGINT after step \([0-9]*\) (checkpoint written).*/\1/p' "$T/int.err")
if [ $st -eq 130 ] && [ -n "$n" ]; then
  pass=$((pass+1)); echo "SIGINT: stopped after step $n with a checkpoint"
  if "$T/gpt2tiny" --steps $((n + 3)) --eval-batches 1 --ckpt "$T/int" --resume --log "$T/int.jsonl" 2> "$T/int.err" > /dev/null &&
     grep -q "resumed from .* at step $n\$" "$T/int.err" &&
     [ "$(grep -o '"step": [0-9]*, "loss"' "$T/int.jsonl" | tail -4 | tr -dc '0-9\n' | tr '\n' ' ')" = "$n $((n+1)) $((n+2)) $((n+3)) " ]; then
    pass=$((pass+1)); echo "SIGINT: resumed at step $n, ran steps $((n+1))..$((n+3))"
  else echo "FAIL: resume after SIGINT: $(cat "$T/int.err")"; fail=$((fail+1)); fi
else echo "FAIL: SIGINT: exit $st, $(cat "$T/int.err")"; fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
