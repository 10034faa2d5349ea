#!/usr/bin/env bash
# --profile: the trainer's table of time per op kind and per layer, split
# into forward, backward, update and communication. GPT2Tiny for 5 steps
# (4 profiled): the kinds' times add up to the phases of the header line and
# those to at most the step time; attention runs in the forward only,
# attention_grad in the backward only, adamw in the update only; every layer
# of the stack has a row; under dp=2 the gradient all-reduce is
# communication. Without the flag there is no table. The table is of the
# typical step (the steps around the median): over 40 steps its step time
# is within 25% of the trainer's measured median of the same run (a mean
# of all steps ran 20 to 100% above it on a busy machine).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail=0
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o one > /dev/null || { echo "FAIL: compile"; exit 1; }
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --dp 2 -o two > /dev/null || { echo "FAIL: compile dp"; exit 1; }
# --device: the trainer prints its measured median step
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --device a100 -o med > /dev/null || { echo "FAIL: compile --device"; exit 1; }
./med --steps $((SAN ? 12 : 40)) --eval-batches 1 --profile > med.out 2> med.err || { echo "FAIL: run med"; tail -3 med.err; exit 1; }
/usr/bin/python3 - med.out med.err <<'PY' || fail=1
import re, sys
t = float(re.search(r"profile: .*?, ([\d.]+) ms per step:", open(sys.argv[1]).read()).group(1))
m = 1e3 * float(re.search(r"measured median ([\d.e+-]+) s", open(sys.argv[2]).read()).group(1))
ok = abs(t - m) <= 0.25 * m
print("%s: the table's step %.3f ms, the measured median %.3f ms" % ("profile" if ok else "FAIL", t, m))
sys.exit(0 if ok else 1)
PY
./one --steps 5 --eval-batches 1 --quiet --profile > one.out 2>&1 || { echo "FAIL: run"; cat one.out; exit 1; }
./one --steps 5 --eval-batches 1 --quiet > plain.out 2>&1 || { echo "FAIL: plain run"; exit 1; }
if grep -q "^profile:" plain.out; then echo "FAIL: a table without --profile"; fail=1; fi
# rank 0's output alone: rank 1's lines would interleave with its table
cat > rank0.sh <<'SH'
#!/bin/sh
if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec "$@"; else exec "$@" > /dev/null; fi
SH
chmod +x rank0.sh
timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2 \
  ./rank0.sh ./two --steps 3 --eval-batches 1 --quiet --profile > two.out 2>&1 || { echo "FAIL: dp run"; cat two.out; exit 1; }
/usr/bin/python3 - one.out two.out <<'PY' || fail=1
import re, sys
def table(path):
    text = open(path).read()
    m = re.search(r"profile: (\d+) training steps .*?, ([\d.]+) ms per step: forward ([\d.]+), "
                  r"backward ([\d.]+), update ([\d.]+), communication ([\d.]+) ms", text)
    if not m:
        sys.exit("FAIL: %s: no profile header line:\n%s" % (path, text[-1500:]))
    head = [float(x) for x in m.groups()]
    kinds, layers, cur = {}, {}, None
    for line in text[m.end():].splitlines():
        f = line.split()
        if f[:2] == ["op", "kind"]: cur = kinds; continue
        if f[:1] == ["layer"]: cur = layers; continue
        if cur is not None and len(f) >= 8:
            cur[" ".join(f[:-7])] = [float(x) for x in f[-7:-2]]
    return head, kinds, layers
bad = []
head, kinds, layers = table(sys.argv[1])
steps, step_ms, phases = head[0], head[1], head[2:]
if steps != 4: bad.append("%d steps profiled, not 4 (5 minus the first)" % steps)
for name, t in (("kinds", kinds), ("layers", layers)):
    tot = sum(r[4] for r in t.values())
    if abs(tot - sum(phases)) > 0.01 * sum(phases) + 0.01:
        bad.append("the %s' totals add up to %.3f ms, the phases to %.3f" % (name, tot, sum(phases)))
    for p in range(4):
        s = sum(r[p] for r in t.values())
        if abs(s - phases[p]) > 0.01 * phases[p] + 0.01:
            bad.append("%s: phase %d adds up to %.3f, the header says %.3f" % (name, p, s, phases[p]))
if sum(phases) > step_ms * 1.001 + 0.01:
    bad.append("the ops take %.3f ms, more than the step's %.3f" % (sum(phases), step_ms))
def only(kind, p):
    r = kinds.get(kind)
    if not r: bad.append("no row for %s" % kind); return
    if r[p] <= 0 or any(r[q] != 0 for q in range(4) if q != p):
        bad.append("%s is not all in phase %d: %s" % (kind, p, r))
only("attention", 0); only("attention_grad", 1); only("adamw", 2)
stack = sorted(k for k in layers if re.fullmatch(r".*\.\d+", k))
if len(stack) < 2: bad.append("fewer than 2 stack layers among %s" % sorted(layers))
_, kinds2, _ = table(sys.argv[2])
ar = kinds2.get("all_reduce")
if not ar or ar[3] <= 0: bad.append("dp=2: all_reduce is not communication: %s" % ar)
for b in bad: print("FAIL: " + b)
if not bad: print("profile: %d kinds, %d layers (%s ...), step %.2f ms, checks hold" % (len(kinds), len(layers), stack[:2], step_ms))
sys.exit(1 if bad else 0)
PY
exit $fail
