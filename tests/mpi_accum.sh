#!/usr/bin/env bash
# Gradient accumulation without a dp collective per micro-batch
# (docs/accumulation.md, passes/accum.c): GPT2Tiny (B = 16) under dp = 2
# with micro_batches = M = 4 on 2 mpirun ranks, plain, ZeRO-1 and ZeRO-3,
# against the serial one-batch trainer (M = 1, 1 rank):
#  - the loss of every step within 1e-6 relative of the serial one;
#  - the runtime's counters: the dp reductions of the gradients run once a
#    step, so a step's gradient collectives are the buckets (computed from
#    the parameter sizes as tests/mpi_counts.sh does), not buckets x M:
#    plain dp, all_reduce.dp calls = buckets + s and elements = Psi + s
#    (s one-element all-reduces: losses, label counts); ZeRO,
#    reduce_scatter.dp calls = buckets and elements = Psi; ZeRO-1 gathers
#    each parameter once a step (Psi elements: the first micro-batch's
#    copies in the grad arena serve the others); ZeRO-3 still gathers
#    every parameter twice a micro-batch (2 M Psi elements);
#  - a control compiled with the deferral off (MMC_TEST_NO_DEFER=1) makes
#    buckets x M gradient calls, so the count tells the two apart;
#  - `mmc plan --json`: one sum of each local gradient, counted from the
#    parameter shapes: grad_home_bytes (the sums the plan keeps in the grad
#    arena, each 64-byte aligned) = every gradient under plain dp (the
#    all-reduce's result holds it), the linear weights' under ZeRO (the
#    matmul accumulates into it), and deferred_sum_bytes (beside the
#    arenas, elements + 1 floats each) = the other gradients under ZeRO, 0
#    under plain dp; the trainer's plan figure on its memory line equals
#    the plan's trainer_bytes;
#  - the weight-gradient matmuls accumulate into the sums themselves:
#    `mmc plan --json`'s sum_matmul_elems = the linear layers' weights (the
#    2-D parameters but the embeddings, from the IR's parameter list) and
#    sum_add_elems (what a separate add sums each micro-batch) = Psi minus
#    them; a control compiled with MMC_TEST_NO_FUSED_ACCUM=1 (every sum by
#    the separate add) gives losses equal to the fused program's within
#    1e-6 (the same sums in the same order, but for rounding);
#  - pp = 2 x dp = 2 (ZeRO-1, 4 ranks, not under the sanitizers): the
#    reductions on each stage's last W part, losses 1e-6 of the serial
#    ones, rank 0's reduce-scatter elements 1/M of the control's;
#  - ZeRO-1, 5 steps, a checkpoint, --resume to 10: the losses and the final
#    weights equal the straight 10-step run's bit for bit (a checkpoint is
#    at a step's end, where no micro-batch sum is pending).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
MPIRUN4=("${MPIRUN[@]:0:$((${#MPIRUN[@]} - 1))}" 4)
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
N=10; [ "$SAN" = 1 ] && N=4
M=4
G=(--model GPT2Tiny --set B=16)

PSI=$("$MMC" stats "$S/gpt2.mm" --model GPT2Tiny | awk '$1 == "total" {print $3}')
[ "$PSI" = 120576 ] && ok || bad "GPT2Tiny trainable parameters: '$PSI', expected 120576"
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --after lower |
  sed -n 's/^param @\([^ ]*\) : f32\[\([0-9, ]*\)\].*/\1 \2/p' > "$T/param_sizes"
# the linear layers' weights: the 2-D parameters but the embeddings
LIN=$("$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --after lower |
  sed -n 's/^param @\([^ ]*\) : f32\[\([0-9]*\), \([0-9]*\)\].*/\1 \2 \3/p' |
  awk '$1 !~ /wte|wpe/ {s += $2 * $3} END {print s}')
[ "${LIN:-0}" -gt 0 ] && ok || bad "no linear weights in GPT2Tiny's parameter list"

"$MMC" compile "$S/gpt2.mm" "${G[@]}" -o "$T/serial" || bad "serial: compile"
"$T/serial" --steps $N --eval-batches 1 --quiet --log "$T/serial.jsonl" > "$T/serial.out" 2>&1 || bad "serial: run"

check() { # name mode log out plan.json: losses against serial, counts, plan bytes
  /usr/bin/python3 - "$T/serial.jsonl" "$@" "$PSI" "$T/param_sizes" "$M" "$LIN" <<'PY'
import json, re, sys
ser, name, mode, log, out, pj, psi, sizes_file, M, lin = sys.argv[1:11]
psi, M, lin = int(psi), int(M), int(lin)
sizes, lins = [], []
for line in open(sizes_file):
    pname, dims = line.split(" ", 1)
    n = 1
    for d in dims.split(","):
        n *= int(d)
    sizes.append(n)
    lins.append(dims.count(",") == 1 and "wte" not in pname and "wpe" not in pname)
cap, buckets, fill = 262144, 0, 0  # bytes: bucket_mb = 0.25
for n in reversed(sizes):
    fill += 4 * n
    if fill >= cap:
        buckets, fill = buckets + 1, 0
buckets += fill > 0
ok = True
def loss(p):
    return [json.loads(l)["loss"] for l in open(p) if '"step"' in l and '"loss"' in l]
a, b = loss(ser), loss(log)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) and a else 1
good = len(a) == len(b) and worst <= 1e-6
ok &= good
print("%s: %d steps, losses within %.2e of the serial ones %s" % (name, len(b), worst, "ok" if good else "WRONG (1e-6)"))
rows = [json.loads(l) for l in open(log) if '"comm"' in l]
c = rows[-1]["comm"]["train"]
steps = rows[-1]["comm"]["steps"]
get = lambda k: (c.get(k, {"calls": 0})["calls"] / steps, c.get(k, {"elems": 0})["elems"] / steps)
per = M if mode == "control" else 1  # the gradient reductions a step
if mode in ("dp", "control"):
    calls, elems = get("all_reduce.dp")
    s = elems - per * psi
    good = s > 0 and calls == per * buckets + s
    print("%s: all_reduce.dp per step %g calls, %g elements = %d x Psi + %g scalars: %d x %d gradient buckets %s"
          % (name, calls, elems, per, s, per, buckets, "ok" if good else "WRONG"))
else:
    calls, elems = get("reduce_scatter.dp")
    good = calls == buckets and elems == psi
    print("%s: reduce_scatter.dp per step %g calls (%d buckets), %g elements (Psi %d) %s"
          % (name, calls, buckets, elems, psi, "ok" if good else "WRONG"))
    ag = get("all_gather.dp")[1]
    # ZeRO-3 gathers in the forward and the backward of every micro-batch,
    # ZeRO-1 once a step (passes/accum.h MbDefer.once)
    want = (2 * M if mode == "zero3" else 1) * psi
    g2 = ag == want
    print("%s: all_gather.dp per step %g elements, expected %d %s" % (name, ag, want, "ok" if g2 else "WRONG"))
    good &= g2
ok &= good
if mode != "control":
    plan = json.load(open(pj))
    # one sum of each local gradient: in the grad arena (its home, 64-byte
    # aligned) for a linear weight (the matmul accumulates into it) and,
    # under plain dp, for every gradient (the all-reduce's result); beside
    # the arenas (elements + 1 floats) for a ZeRO reduce-scatter's other roots
    al = lambda b: (b + 63) // 64 * 64
    home = sum(al(4 * n) for n, w in zip(sizes, lins) if mode == "dp" or w)
    want = sum(4 * (n + 1) for n, w in zip(sizes, lins) if mode != "dp" and not w)
    g = plan.get("deferred_sum_bytes") == want and plan.get("grad_sum_bytes") == want and plan.get("grad_home_bytes") == home
    print("%s: plan's deferred sums %s bytes beside the arenas, %s in the grad arena, expected %d and %d %s"
          % (name, plan.get("deferred_sum_bytes"), plan.get("grad_home_bytes"), want, home, "ok" if g else "WRONG"))
    told = [int(m.group(1)) for m in re.finditer(r"^memory of rank \d+ of \d+: .*?, plan (\d+) bytes", open(out).read(), re.M)]
    g2 = len(told) == 2 and all(t == plan["trainer_bytes"] for t in told)
    print("%s: trainer's plan figures %s, mmc plan's trainer_bytes %d %s" % (name, told, plan["trainer_bytes"], "ok" if g2 else "WRONG"))
    ok &= g and g2
    fm, fa = plan.get("sum_matmul_elems"), plan.get("sum_add_elems")
    g3 = fm == lin and fa == psi - lin
    print("%s: summed by the weight-gradient matmuls %s elements (linear weights %d), by a separate add %s (Psi - them %d) %s"
          % (name, fm, lin, fa, psi - lin, "ok" if g3 else "WRONG"))
    ok &= g3
sys.exit(0 if ok else 1)
PY
}

cell() { # name mode flags...
  local name=$1 mode=$2; shift 2
  local env=()
  [ "$mode" = control ] && env=(MMC_TEST_NO_DEFER=1)
  env "${env[@]}" "$MMC" compile "$S/gpt2.mm" "${G[@]}" --micro-batches $M "$@" -o "$T/$name" || { bad "$name: compile"; return; }
  "$MMC" plan "$S/gpt2.mm" "${G[@]}" --micro-batches $M "$@" --json > "$T/$name.plan.json" || { bad "$name: plan"; return; }
  "${MPIRUN[@]}" "$T/$name" --steps $N --eval-batches 1 --log "$T/$name.jsonl" --save-weights "$T/$name.st" > "$T/$name.out" 2>&1 ||
    { bad "$name: mpirun"; tail -5 "$T/$name.out"; return; }
  check "$name" "$mode" "$T/$name.jsonl" "$T/$name.out" "$T/$name.plan.json" && ok || bad "$name"
}

cell dp2.mb4 dp --dp 2
cell dp2.mb4.zero1 zero1 --dp 2 --zero 1
cell dp2.mb4.zero3 zero3 --dp 2 --zero 3
[ "$SAN" = 1 ] || cell dp2.mb4.control control --dp 2

# the separate add for every sum (MMC_TEST_NO_FUSED_ACCUM=1) against the
# fused program: the same losses within 1e-6
nofuse() {
  MMC_TEST_NO_FUSED_ACCUM=1 "$MMC" compile "$S/gpt2.mm" "${G[@]}" --micro-batches $M --dp 2 -o "$T/nofuse" ||
    { bad "nofuse: compile"; return; }
  "${MPIRUN[@]}" "$T/nofuse" --steps $N --eval-batches 1 --quiet --log "$T/nofuse.jsonl" > "$T/nofuse.out" 2>&1 ||
    { bad "nofuse: mpirun"; tail -5 "$T/nofuse.out"; return; }
  /usr/bin/python3 - "$T/dp2.mb4.jsonl" "$T/nofuse.jsonl" <<'PY' && ok || bad "nofuse: losses differ from the fused program's"
import json, sys
loss = lambda p: [json.loads(l)["loss"] for l in open(p) if '"step"' in l and '"loss"' in l]
a, b = loss(sys.argv[1]), loss(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) and a else 1
print("nofuse: the separate add's losses within %.2e of the fused program's (1e-6)" % worst)
sys.exit(0 if worst <= 1e-6 else 1)
PY
}
[ "$SAN" = 1 ] || nofuse

# a pipeline: pp = 2 x dp = 2 (ZeRO-1) on 4 ranks, the reductions on each
# stage's last W part: losses 1e-6 of the serial ones, and rank 0's
# reduce_scatter.dp elements (its stage's gradients) and all_gather.dp
# elements (its stage's parameters, gathered once a step) 1/M of the
# control's (MMC_TEST_NO_DEFER=1 MMC_TEST_GATHER_EVERY=1)
pipe() {
  local name
  for name in pp2.dp2.mb4.zero1 pp2.dp2.mb4.zero1.control; do
    local env=()
    [ "${name%.control}" != "$name" ] && env=(MMC_TEST_NO_DEFER=1 MMC_TEST_GATHER_EVERY=1)
    env "${env[@]}" "$MMC" compile "$S/gpt2.mm" "${G[@]}" --micro-batches $M --pp 2 --dp 2 --zero 1 -o "$T/$name" ||
      { bad "$name: compile"; return; }
    "${MPIRUN4[@]}" "$T/$name" --steps $N --eval-batches 1 --quiet --log "$T/$name.jsonl" > "$T/$name.out" 2>&1 ||
      { bad "$name: mpirun"; tail -5 "$T/$name.out"; return; }
  done
  /usr/bin/python3 - "$T/serial.jsonl" "$T/pp2.dp2.mb4.zero1.jsonl" "$T/pp2.dp2.mb4.zero1.control.jsonl" "$M" <<'PY' && ok || bad "pp2.dp2.mb4.zero1"
import json, sys
loss = lambda p: [json.loads(l)["loss"] for l in open(p) if '"samples_per_s"' in l]
rs = lambda p: [json.loads(l)["comm"] for l in open(p) if '"comm"' in l][-1]["train"]["reduce_scatter.dp"]["elems"]
a, b = loss(sys.argv[1]), loss(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) else 1
ag = lambda p: [json.loads(l)["comm"] for l in open(p) if '"comm"' in l][-1]["train"]["all_gather.dp"]["elems"]
d, c, M = rs(sys.argv[2]), rs(sys.argv[3]), int(sys.argv[4])
g, gc = ag(sys.argv[2]), ag(sys.argv[3])
good = worst <= 1e-6 and d > 0 and d * M == c and g > 0 and g * M == gc
print("pp2.dp2.mb4.zero1: losses within %.2e of the serial ones; rank 0 reduce-scatters %d gradient elements, the control %d = %d x %d; gathers %d parameter elements (once a step), the control %d = %d x %d: %s"
      % (worst, d, c, M, d, g, gc, M, g, "ok" if good else "WRONG"))
sys.exit(0 if good else 1)
PY
}
[ "$SAN" = 1 ] || pipe

# resume: a checkpoint at step N/2, then --resume to N, against the straight run
resume() { # name
  local name=$1 h=$((N / 2))
  "${MPIRUN[@]}" "$T/$name" --steps $h --eval-batches 1 --quiet --ckpt "$T/$name.ck" > /dev/null 2>&1 &&
    "${MPIRUN[@]}" "$T/$name" --steps $N --eval-batches 1 --quiet --ckpt "$T/$name.ck" --resume \
      --log "$T/$name.r.jsonl" --save-weights "$T/$name.r.st" > "$T/$name.r.out" 2>&1 ||
    { bad "$name: resume run"; tail -5 "$T/$name.r.out"; return; }
  /usr/bin/python3 - "$T/$name.jsonl" "$T/$name.r.jsonl" "$name" "$h" <<'PY' && cmp -s "$T/$name.st" "$T/$name.r.st" && ok ||
import json, sys
loss = lambda p: {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p) if '"step"' in l and '"loss"' in l}
a, b = loss(sys.argv[1]), loss(sys.argv[2])
h = int(sys.argv[4])
same = sorted(b) == [s for s in sorted(a) if s > h] and all(a[s] == b[s] for s in b)
print("%s: resumed at step %d, steps %s equal the straight run's bit for bit: %s" % (sys.argv[3], h, sorted(b), same))
sys.exit(0 if same else 1)
PY
    bad "$name: resumed run differs from the straight one (losses or --save-weights)"
}
resume dp2.mb4.zero1

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
