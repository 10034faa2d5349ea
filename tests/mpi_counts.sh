#!/usr/bin/env bash
# Megatron's and ZeRO's communication counts read from the RUNTIME counters
# of real mpirun trainers of GPT2Tiny (L = 2 layers, s = T = 32, b = B = 4,
# h = 64, vocabulary 256; Psi = 120576 trainable parameters, from `mmc
# stats`): the "comm" line the trainer writes to its metrics log holds, per
# collective kind and axis, the calls, elements and bytes this rank sent in
# the training steps (all-reduce counted as 2(n-1)/n of the buffer,
# all-gather and reduce-scatter as (n-1)/n of the full tensor).
#
#  tp=2: all_reduce.tp = 2 forward + 2 backward per layer of s*b*h each
#    (4L), plus, outside the layers, the vocabulary-parallel embedding's
#    forward all-reduce and the lm head input's backward all-reduce (s*b*h
#    each), the vocabulary-parallel cross entropy's one all-reduce of its
#    (b*s rows) x (tp + 1) statistics, and the 1-element all-reduce of the
#    gradient norm's partial sums (the update).  Nothing else.  The same is
#    checked per phase: the step function tells the runtime counters where
#    the backward (autodiff's seed) and the update (gradient norm, optimizer)
#    begin, so forward and backward are counted apart: 2L + 2 forward,
#    2L + 1 backward, 1 in the update.
#  tp=2+sp: all_gather.tp and reduce_scatter.tp = 2 forward + 2 backward
#    per layer of s*b*h each (4L), and 2 all-gathers more per layer in the
#    backward: the norms' outputs gathered again for the column-parallel
#    linears' weight gradients (the forward's gathered copies are not kept;
#    passes/shard.c), plus: the embedding's reduce-scatter
#    (forward) and all-gather (backward), the lm head's all-gather (forward)
#    and reduce-scatter (backward), all s*b*h; the position embedding's
#    gradient all-gathered from the split sequence (s*h); all_reduce.tp:
#    the gradients of weights replicated over tp but used on a split
#    sequence, of h elements each -- 2 per layer norm (2L + 1 of them) and
#    the bias of each row-parallel layer (2L) -- plus the cross entropy's
#    and the gradient norm's all-reduces as under tp=2. Per phase: forward
#    2L + 1 all-gathers, 2L + 1 reduce-scatters and the cross entropy's
#    all-reduce; backward 4L + 3 all-gathers (the lm head's input gathered
#    again too), 2L + 1 reduce-scatters and the
#    replicated weights' gradient all-reduces.
#  dp=2, ZeRO-1, ZeRO-2: gradient and parameter elements sent per rank and
#    step = 2 Psi (d-1)/d; ZeRO-3: 3 Psi (d-1)/d; besides, 1-element
#    all-reduces (the loss, the label counts of the mean, and under ZeRO the
#    gradient norm's partial sums): 3 under plain dp, 4 under ZeRO.
#    ZeRO-3 per phase: every parameter gathered once in the forward and once
#    in the backward, less the first backward unit's gathers, which the
#    prefetch posts during the forward (the runtime's phase split against
#    `mmc plan --json`'s, the total against 2 x the parameter count).
#  dp=2: the gradients are all-reduced in buckets (passes/bucket.c), so the
#    all_reduce.dp calls per step are the buckets plus the 3 scalars.  The
#    bucket count is computed here from the parameter sizes (the `param`
#    lines of `mmc dump-ir --after lower`) taken in reverse order (the order
#    the backward completes them, as DDP assumes), a bucket closing once it
#    holds bucket_mb MiB or more: the default 0.25 MiB, and 0.05 MiB.
#    Under ZeRO the gradients' reduce-scatters are bucketed alike: the
#    reduce_scatter.dp calls per step are the same bucket count.
#  ZeRO-1: the optimizer state per rank is 1/dp of the serial one, in `mmc
#    plan --json` (by_role.opt) and in the trainer's allocated-bytes report.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np)
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
STEPS=2

# Psi from `mmc stats` (the total line: parameters, trainable)
PSI=$("$MMC" stats "$S/gpt2.mm" --model GPT2Tiny | awk '$1 == "total" {print $3}')
[ "$PSI" = 120576 ] && ok || bad "GPT2Tiny trainable parameters: '$PSI', expected 120576"

run() { # name np flags...
  local name=$1 np=$2; shift 2
  "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny "$@" -o "$T/$name" || { bad "$name: compile"; return 1; }
  "${MPIRUN[@]}" "$np" "$T/$name" --steps $STEPS --eval-batches 1 --quiet --log "$T/$name.jsonl" > "$T/$name.out" 2>&1 ||
    { bad "$name: mpirun"; tail -5 "$T/$name.out"; return 1; }
  grep -q '^communication of rank 0 of' "$T/$name.out" || { bad "$name: no counters printed at exit"; return 1; }
}

# the parameters' sizes in declaration order, one a line
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --after lower |
  sed -n 's/^param @[^ ]* : f32\[\([0-9, ]*\)\].*/\1/p' > "$T/param_sizes"

counts() { # name mode [bucket_mb]: compare the counters of the log with the expected ones
  /usr/bin/python3 - "$T/$1.jsonl" "$1" "$2" "$PSI" "$STEPS" "$T/param_sizes" "${3:-0.25}" <<'PY'
import json, sys
path, name, mode, psi, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sizes = []
for line in open(sys.argv[6]):
    n = 1
    for d in line.split(","):
        n *= int(d)
    sizes.append(n)
cap = int(float(sys.argv[7]) * 1048576)  # bytes
buckets, fill = 0, 0
for n in reversed(sizes):  # the backward's order
    fill += 4 * n
    if fill >= cap:
        buckets, fill = buckets + 1, 0
buckets += fill > 0
rows = [json.loads(l) for l in open(path)]
comm = [r["comm"] for r in rows if "comm" in r]
per = [r["comm_bytes"] for r in rows if "comm_bytes" in r]
assert len(comm) == 1 and comm[0]["steps"] == steps, "one comm line for %d steps" % steps
c = {k: v for k, v in comm[0]["train"].items() if k != "bytes"}
L, s, b, h, V, tp = 2, 32, 4, 64, 256, 2
sbh = s * b * h
ok = True
def expect(key, parts):
    """parts: [(what, calls, elements each)] per step; checks calls and elements."""
    global ok
    calls = sum(n for _, n, _ in parts) * steps
    elems = sum(n * e for _, n, e in parts) * steps
    got = c.pop(key, {"calls": 0, "elems": 0})
    good = got["calls"] == calls and got["elems"] == elems
    ok &= good
    print("%s %-18s %s calls %d elements %d per %d steps (%s)" % (name, key, "==" if good else "!=", got["calls"], got["elems"], steps,
          ", ".join("%s: %d x %d" % p for p in parts)))
def sent(key):
    return c[key]["bytes"] / 4 / steps  # f32 elements sent per step
if mode == "tp":
    expect("all_reduce.tp", [("Megatron per layer 2 fwd + 2 bwd", 4 * L, sbh), ("vocab-parallel embedding fwd", 1, sbh),
                             ("lm head input bwd", 1, sbh), ("vocab-parallel cross entropy", 1, b * s * (tp + 1)),
                             ("gradient norm", 1, 1)])
elif mode == "tpsp":
    expect("all_gather.tp", [("Megatron-SP per layer 2 fwd + 2 bwd", 4 * L, sbh), ("lm head input fwd", 1, sbh),
                             ("embedding bwd", 1, sbh), ("position embedding grad", 1, s * h),
                             ("norm outputs gathered again per layer bwd", 2 * L, sbh), ("lm head input again bwd", 1, sbh)])
    expect("reduce_scatter.tp", [("Megatron-SP per layer 2 fwd + 2 bwd", 4 * L, sbh), ("embedding fwd", 1, sbh),
                                 ("lm head input bwd", 1, sbh)])
    expect("all_reduce.tp", [("layer-norm weight+bias grads", 2 * (2 * L + 1), h), ("row-parallel bias grads", 2 * L, h),
                             ("vocab-parallel cross entropy", 1, b * s * (tp + 1)), ("gradient norm", 1, 1)])
else:
    d = 2
    scalars = 3 if mode == "dp" else 4
    ar = c.get("all_reduce.dp", {"calls": 0, "elems": 0, "bytes": 0})
    # the scalars' elements sent (all-reduce of 1 element: 2(d-1)/d)
    sc = scalars * 2 * (d - 1) / d
    total = sum(v["bytes"] for v in c.values()) / 4 / steps
    want = (3 if mode == "zero3" else 2) * psi * (d - 1) / d
    good = abs(total - sc - want) < 1e-9
    if mode == "dp":
        good &= ar["elems"] == (psi + scalars) * steps
        calls = ar["calls"] == (buckets + scalars) * steps
        print("%s: all_reduce.dp calls per step %g, expected %d gradient buckets of %s MiB (%d parameters, %d bytes) + %d scalars %s"
              % (name, ar["calls"] / steps, buckets, sys.argv[7], len(sizes), 4 * sum(sizes), scalars, "ok" if calls else "WRONG"))
        good &= calls and sum(sizes) == psi
    else:
        good &= ar["calls"] == scalars * steps and ar["elems"] == scalars * steps
        good &= c["reduce_scatter.dp"]["elems"] == psi * steps
        rs = c["reduce_scatter.dp"]["calls"] == buckets * steps
        print("%s: reduce_scatter.dp calls per step %g, expected %d gradient buckets of %s MiB %s"
              % (name, c["reduce_scatter.dp"]["calls"] / steps, buckets, sys.argv[7], "ok" if rs else "WRONG"))
        good &= rs
        good &= c["all_gather.dp"]["elems"] == (2 if mode == "zero3" else 1) * psi * steps
    ok &= good
    print("%s: elements sent per rank and step %.0f = %s Psi (d-1)/d = %.0f (Psi %d, d %d) + %d one-element all-reduces (%.0f) %s" %
          (name, total, "3" if mode == "zero3" else "2", want, psi, d, scalars, sc, "ok" if good else "WRONG"),
          {k: (v["calls"], v["elems"]) for k, v in c.items()})
    c = {}
# the same per phase: the generated step tells the counters when the
# backward (the loss's gradient seed) and the update (gradient norm,
# optimizer) begin
def phase(ph, want):
    """want: {key: [(what, calls, elements each)]} per step for phase ph; nothing else may be there."""
    global ok
    got = {k: v for k, v in comm[0]["train_" + ph].items() if k != "bytes"}
    for key, parts in want.items():
        calls = sum(n for _, n, _ in parts) * steps
        elems = sum(n * e for _, n, e in parts) * steps
        g = got.pop(key, {"calls": 0, "elems": 0})
        good = g["calls"] == calls and g["elems"] == elems
        ok &= good
        print("%s %-8s %-18s %s calls %d elements %d per %d steps (%s)" % (name, ph, key, "==" if good else "!=", g["calls"],
              g["elems"], steps, ", ".join("%s: %d x %d" % p for p in parts)))
    if got:
        print("%s %s: collectives not accounted for: %s" % (name, ph, got)); ok = False
gnorm = [("gradient norm's partial sums", 1, 1)]
if mode == "tp":
    phase("forward", {"all_reduce.tp": [("Megatron per layer 2 fwd", 2 * L, sbh), ("vocab-parallel embedding", 1, sbh),
                                        ("vocab-parallel cross entropy", 1, b * s * (tp + 1))]})
    phase("backward", {"all_reduce.tp": [("Megatron per layer 2 bwd", 2 * L, sbh), ("lm head input", 1, sbh)]})
    phase("update", {"all_reduce.tp": gnorm})
elif mode == "tpsp":
    phase("forward", {"all_gather.tp": [("Megatron-SP per layer 2 fwd", 2 * L, sbh), ("lm head input", 1, sbh)],
                      "reduce_scatter.tp": [("Megatron-SP per layer 2 fwd", 2 * L, sbh), ("embedding", 1, sbh)],
                      "all_reduce.tp": [("vocab-parallel cross entropy", 1, b * s * (tp + 1))]})
    phase("backward", {"all_gather.tp": [("Megatron-SP per layer 2 bwd", 2 * L, sbh), ("embedding", 1, sbh),
                                         ("position embedding grad", 1, s * h),
                                         ("norm outputs gathered again per layer", 2 * L, sbh), ("lm head input again", 1, sbh)],
                       "reduce_scatter.tp": [("Megatron-SP per layer 2 bwd", 2 * L, sbh), ("lm head input", 1, sbh)],
                       "all_reduce.tp": [("layer-norm weight+bias grads", 2 * (2 * L + 1), h),
                                         ("row-parallel bias grads", 2 * L, h)]})
    phase("update", {"all_reduce.tp": gnorm})
elif mode == "zero3":
    # ZeRO-3: every parameter gathered before its use in the forward and again in the backward;
    # the gradients' bucketed reduce-scatters in the backward; the gradient norm in the update.
    # The prefetch (passes/bucket.c) posts the first backward unit's gathers during the
    # forward's last unit: the forward has nparams + moved calls, the backward nparams - moved,
    # moved > 0 as the plan's phases say (mmc plan --json collective_totals)
    nparams = len(sizes)
    got = {ph: comm[0]["train_" + ph] for ph in ("forward", "backward", "update")}
    calls = lambda ph, key: got[ph].get(key, {"calls": 0})["calls"] // steps
    plan = next(t for t in json.load(open(path[:-len(".jsonl")] + ".plan.json"))["collective_totals"]
                if t["kind"] == "all_gather" and t["axis"] == "dp")
    moved = plan["forward_calls"] - nparams
    if not (0 < moved < nparams and plan["backward_calls"] == nparams - moved):
        print("%s: the plan's all_gather.dp phases %d/%d, expected %d each with some moved forward"
              % (name, plan["forward_calls"], plan["backward_calls"], nparams)); ok = False
    want = {("forward", "all_gather.dp"): nparams + moved, ("backward", "all_gather.dp"): nparams - moved,
            ("backward", "reduce_scatter.dp"): buckets, ("forward", "reduce_scatter.dp"): 0}
    for (ph, key), n in want.items():
        good = calls(ph, key) == n
        ok &= good
        print("%s %-8s %-18s calls per step %d %s %d" % (name, ph, key, calls(ph, key), "==" if good else "!=", n))
if c:
    print("%s: collectives not accounted for: %s" % (name, c)); ok = False
# the per-step comm_bytes add up to the training counters
if sum(per) != comm[0]["train"]["bytes"]:
    print("%s: per-step comm_bytes %s do not add up to %d" % (name, per, comm[0]["train"]["bytes"])); ok = False
sys.exit(0 if ok else 1)
PY
}

run tp2 2 --tp 2 && { counts tp2 tp && ok || bad "tp=2 counts"; }
run tp2sp 2 --tp 2 --sp && { counts tp2sp tpsp && ok || bad "tp=2+sp counts"; }
run dp2 2 --dp 2 && { counts dp2 dp && ok || bad "dp=2 counts"; }
run dp2b 2 --dp 2 --bucket-mb 0.05 && { counts dp2b dp 0.05 && ok || bad "dp=2 counts with 0.05 MiB buckets"; }
"$MMC" plan "$S/gpt2.mm" --model GPT2Tiny --dp 2 --zero 3 --json > "$T/zero3.plan.json"
for z in 1 2 3; do run zero$z 2 --dp 2 --zero $z && { counts zero$z zero$z && ok || bad "dp=2 ZeRO-$z counts"; }; done

# ZeRO-1: optimizer state per rank 1/dp of the serial one, in the plan and the trainer
opt() { "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny "$@" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["by_role"]["opt"])'; }
serial=$(opt); z1=$(opt --dp 2 --zero 1)
rt=$(sed -n 's/^allocated arena bytes per rank: .* opt=\([0-9]*\) .*$/\1/p' "$T/zero1.out" 2>/dev/null)
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o "$T/serial" && "$T/serial" --steps 1 --eval-batches 1 --quiet > "$T/serial.out" 2>&1
rs=$(sed -n 's/^allocated arena bytes: .* opt=\([0-9]*\) .*$/\1/p' "$T/serial.out")
echo "ZeRO-1 optimizer state: serial plan $serial, trainer $rs; dp=2 ZeRO-1 plan $z1 per rank, trainer $rt per rank"
if [ -n "$serial" ] && [ "$rs" = "$serial" ] && [ "$z1" = "$rt" ] && [ $((2 * z1)) = "$serial" ]; then ok; else bad "ZeRO-1 optimizer state is not 1/dp of the serial one"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
