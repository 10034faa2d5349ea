#!/usr/bin/env bash
# Per-sub-model plans, colocated (docs/subplans.md), under real mpirun
# ranks: InternVL2Tiny with
#   (a) parallel { vision { dp = 2 } llm { tp = 2 } } on 2 ranks, and
#   (s) (a) with sp = true in the LLM's block only, and
#   (m) (a) in micro_batches = 2 (losses and weights only),
#   (r) (a) with recompute = full in the vision block only (losses and
#       weights; after the recompute pass @train has more vision nodes
#       than (a)'s, the clones, and exactly (a)'s LLM nodes),
#   (f) (a) with the vision encoder frozen (InternVL2TinyFrozenVision):
#       the formulas of (a) without vision's gradient all-reduces, no
#       gradient coming back over the boundary, no vision gradient bytes;
#   (d) parallel { vision { dp = 4 } llm { tp = 2; dp = 2 } } on 4 ranks
# trains with the serial trainer's losses (1e-5 relative, 10 steps; the
# evaluation's loss too, @forward sharded by the same plan) and,
# gathered by --save-weights, final weights within 1e-3 of the size of
# their update (tests/torch/mmtrain.py); the runtime's collective counters
# (the metrics log's "comm" line, per phase) equal the formulas below, and
# `mmc plan` (text and --json) lists each sub-model's mesh and the boundary
# transfers, `mmc dump-ir --rank 3` the rank's place in each sub-model's mesh,
# and each trainer allocates per rank the bytes `mmc plan` gives;
# under (s) every reduce-scatter (the sequence split) is in the LLM.
#
# Sizes: B = 8 samples, T = 16 tokens, h = 64 (the LLM's width), L = 2 LLM
# layers, V = 64; vision: Sv = 17 tokens (16 patches + CLS) of width 64;
# the projector's fc1 reads B x 4 x 256; Nvis vision parameter tensors of
# Evis elements in all (from `mmc dump-ir --after lower`). "elements" is
# the runtime's message size (the full tensor on the axis' group).
# (a) mesh tp = 2, dp = 1; vision's dp = 2 runs on the tp axis:
#   forward  all_reduce.tp: 2L (Megatron's row-parallel outputs) + 1
#            (vocabulary-parallel embedding) of B*T*h, 1 of B*4*h (the
#            projector's row-parallel fc2), 1 of B*T*(tp + 1) (the
#            vocabulary-parallel cross entropy's statistics);
#            all_gather.tp: 1 of B*Sv*64 (the boundary: vision's output,
#            split along the batch, gathered for the projector and LLM);
#   backward all_reduce.tp: vision's gradients in buckets (Evis elements:
#            vision's gradient reduction over its dp group, the tp axis;
#            passes/bucket.c: one call per bucket of bucket_mb = 0.25 MiB,
#            filled greedily in the order the IR reduces them, a bucket
#            closing once it holds the cap), 2L + 1 of B*T*h (the column-parallel inputs' and
#            the LM head's input gradients), 1 of B*4*256 (the projector's
#            column-parallel fc1 input gradient); the gradient of the
#            boundary comes back as a local slice: nothing sent;
#   update   all_reduce.tp: one 1-element all-reduce per chunk of 64
#            gradients (passes/optimizer.c's grad_norm chunks) that holds a
#            tp-split gradient.
# (d) mesh tp = 2, dp = 2; vision's dp = 4 spans both axes. Under sub-model
#   blocks a batch split over tp and dp nests dp outside tp
#   (passes/collectives.c): a rank's vision rows are the tp-th piece of its
#   dp shard, so nothing crosses a boundary over dp:
#   all_gather.tp: forward 1 of B*Sv*64 / dp (vision's output into the
#            rank's dp shard);
#   all_reduce.tp: as in (a) with the LLM's and projector's messages
#            halved (B / dp samples), vision's gradients whole (their tp
#            buckets after their dp buckets' waits);
#   all_reduce.dp: the gradients' buckets (bucket_mb 0.25 MiB over every
#            trainable parameter's local bytes, reverse order; the LLM's
#            vocabulary-parallel embedding gradient reduced whole, then
#            sliced, as under the uniform tp = 2 x dp = 2 plan) + 3 one-
#            element all-reduces (as tests/mpi_counts.sh: the loss, the
#            label count, the gradient norm): 1 forward, buckets + 1
#            backward, 1 update.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np)
fail=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
STEPS=10
[ "$SAN" = 1 ] && STEPS=3

cat > "$T/sub.mm" <<'MM'
import "internvl2.mm"
// (a) the vision encoder data parallel, the LLM tensor parallel, on 2 ranks
model VLa extends InternVL2Tiny {
  parallel { vision { dp = 2 } llm { tp = 2 } }
}
// (a) with sequence parallel in the LLM only
model VLs extends InternVL2Tiny {
  parallel { vision { dp = 2 } llm { tp = 2; sp = true } }
}
// (a) in 2 micro-batches
model VLm extends InternVL2Tiny {
  parallel { vision { dp = 2 } llm { tp = 2 } micro_batches = 2 }
}
// (a) with full recompute in the vision encoder only
model VLr extends InternVL2Tiny {
  parallel { vision { dp = 2; recompute = full } llm { tp = 2 } }
}
// (a) with the vision encoder frozen: no vision gradients, no reductions for them
model VLf extends InternVL2TinyFrozenVision {
  parallel { vision { dp = 2 } llm { tp = 2 } }
}
// (d) the vision encoder dp = 4, the LLM tp = 2 x dp = 2, on 4 ranks
model VLd extends InternVL2Tiny {
  parallel {
    vision { dp = 4 }
    llm { tp = 2; dp = 2 }
  }
}
MM

"$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny -o "$T/serial" || { bad "compile serial"; exit 1; }
"$T/serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/init.st" > /dev/null || bad "serial init"
"$T/serial" --steps $STEPS --eval-batches 1 --quiet --log "$T/serial.jsonl" --save-weights "$T/serial.st" \
  > /dev/null || bad "serial run"
if [ "$SAN" = 0 ]; then
  "$MMC" compile "$S/internvl2.mm" --model InternVL2TinyFrozenVision -o "$T/serialf" || { bad "compile serialf"; exit 1; }
  "$T/serialf" --steps $STEPS --eval-batches 1 --quiet --log "$T/serialf.jsonl" --save-weights "$T/serialf.st" \
    > /dev/null || bad "serial frozen run"
fi
"$MMC" dump-ir "$S/internvl2.mm" --model InternVL2Tiny --after lower |
  sed -n 's/^param @\([^ ]*\) : f32\[\([0-9, ]*\)\].*/\1 \2/p' > "$T/params"

RUNS=("a:VLa:2" "s:VLs:2" "m:VLm:2" "r:VLr:2" "f:VLf:2" "d:VLd:4")
[ "$SAN" = 1 ] && RUNS=("a:VLa:2" "d:VLd:4")  # under the sanitizers (ten times slower) fewer plans
for run in "${RUNS[@]}"; do
  IFS=: read -r name model np <<< "$run"
  "$MMC" compile "$T/sub.mm" --model $model -o "$T/$name" 2> "$T/$name.cc" || { bad "$name: compile"; cat "$T/$name.cc"; continue; }
  "$MMC" plan "$T/sub.mm" --model $model --json > "$T/$name.plan.json" || bad "$name: plan --json"
  "$MMC" dump-ir "$T/sub.mm" --model $model > "$T/$name.ir" || bad "$name: dump-ir"
  "$MMC" dump-ir "$T/sub.mm" --model $model --after recompute > "$T/$name.rc.ir" || bad "$name: dump-ir --after recompute"
  if ! "${MPIRUN[@]}" "$np" "$T/$name" --steps $STEPS --eval-batches 1 --quiet --log "$T/$name.jsonl" \
       --save-weights "$T/$name.st" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; continue
  fi
  want=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_bytes"])' "$T/$name.plan.json")
  got=$(sed -n 's/^allocated arena bytes per rank: .*total=\([0-9]*\)$/\1/p' "$T/$name.out")
  [ "$want" = "$got" ] || bad "$name: mmc plan says $want bytes per rank, the trainer allocated '$got'"
  /usr/bin/python3 - "$name" "$T" $STEPS "$MMC_SOURCE_DIR/stdlib_models/internvl2.mm" <<'PY' || bad "$name"
import json, os, re, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
name, T, steps, src = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ok = True
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
ref = "/serialf" if name == "f" else "/serial"
la, lb = losses(T + ref + ".jsonl"), losses(T + "/" + name + ".jsonl")
lw = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if la and len(la) == len(lb) == steps else float("inf")
print("%s: %d steps, loss largest relative difference from one rank %.2e" % (name, len(lb), lw))
ok &= lw <= 1e-5
def evals(p): return [json.loads(l)["eval_loss"] for l in open(p) if '"eval_loss"' in l]
ea, eb = evals(T + ref + ".jsonl"), evals(T + "/" + name + ".jsonl")
ew = abs(ea[-1] - eb[-1]) / abs(ea[-1]) if ea and eb else float("inf")
print("%s: evaluation loss %.6f, one rank %.6f (@forward under the same plan)" % (name, eb[-1] if eb else 0, ea[-1] if ea else 0))
ok &= ew <= 1e-5 or name == "m"
cfg = mmtrain.train_settings(src, "InternVL2TinyFrozenVision" if name == "f" else "InternVL2Tiny")
(I, _), (A, _), (W, _) = (mmtrain.st_load(T + p) for p in ("/init.st", ref + ".st", "/" + name + ".st"))
nbad = mmtrain.compare_weights(I, A, W, cfg, [mmtrain.lr_at(cfg, s, len(la)) for s in range(1, len(la) + 1)], name)
ok &= nbad == 0 and sorted(A) == sorted(W)

if name == "m":  # micro-batches: the step's losses and weights (evaluated on B / 2 rows, unlike one rank's)
    sys.exit(0 if ok else 1)
if name == "r":  # recompute in the vision block: clones of vision nodes only
    def count(path):
        text = open(path).read().split("func @train", 1)[1].split("\n}", 1)[0]
        sc = re.findall(r'scope\("([a-z]+)[."]', text)
        return sc.count("vision"), sc.count("llm")
    (va, la_), (vr, lr) = count(T + "/a.rc.ir"), count(T + "/r.rc.ir")
    good = vr > va and lr == la_
    print("r: @train after recompute: vision nodes %d (without: %d), llm nodes %d (without: %d)" % (vr, va, lr, la_))
    sys.exit(0 if ok and good else 1)
if name == "s":  # sp: the sequence split (reduce-scatters) in the LLM's blocks, head and norm only
    scopes = re.findall(r"= reduce_scatter\(.*scope\(\"([^\"]*)\"\)", open(T + "/s.ir").read())
    good = len(scopes) > 0 and all(x.startswith("llm.") for x in scopes)
    print("s: %d reduce-scatters, all in the LLM: %s" % (len(scopes), good))
    sys.exit(0 if ok and good else 1)

frozen = name == "f"
if frozen:
    name = "a"  # the formulas of (a), less everything of vision's gradients

# the formulas
B, Tt, h, L, tp, Sv = 8, 16, 64, 2, 2, 17
dp = 1 if name == "a" else 2
params = []
for line in open(T + "/params"):
    p, dims = line.split(" ", 1)
    if frozen and p.startswith("vision."):
        continue  # no gradient, no reduction, no update
    n = 1
    for d in dims.split(","):
        n *= int(d)
    params.append((p, n))
vis = [n for p, n in params if p.startswith("vision.")]
Nvis, Evis = len(vis), sum(vis)
if frozen:
    vis, Nvis, Evis = [1], 0, 0
# local sizes and tp splits from the final IR's parameter placements
split = {}
for m in re.finditer(r"^param @(\S+) : f32\[[^\]]*\]\{([^}]*)\}", open(T + "/" + name + ".ir").read(), re.M):
    split[m.group(1)] = "tp:S(" in m.group(2)
order = [p for p, _ in params]
chunks = sum(any(split[p] for p in order[k:k + 64]) for k in range(0, len(order), 64))
bth = B * Tt * h // dp
fwd = {"all_reduce.tp": [("row-parallel outputs", 2 * L, bth), ("vocab-parallel embedding", 1, bth),
                         ("projector fc2", 1, B * 4 * h // dp), ("vocab-parallel cross entropy", 1, B * Tt * (tp + 1) // dp)],
       "all_gather.tp": [("boundary: vision's output", 1, B * Sv * 64 // dp)]}
# vision's tp buckets: the cap rule over its gradients in the order the IR
# all-reduces them over tp (the whole tensors: vision keeps its weights
# whole on tp)
size = dict(params)
torder = [p for p in re.findall(r"= all_reduce\(.*\{mesh = tp, bucket = \d+\}.*grad\(@(vision\.[^)]*)\)",
                                  open(T + "/" + ("f" if frozen else name) + ".ir").read())]
tpb, fill = 0, 0
for p in torder:
    fill += 4 * size[p]
    if fill >= 262144:
        tpb, fill = tpb + 1, 0
tpb += fill > 0
if sorted(torder) != sorted(p for p, _ in params if p.startswith("vision.")):
    print("%s: vision's bucketed tp all-reduces %d, its gradients %d" % (name, len(torder), Nvis)); ok = False
bwd = {"all_reduce.tp": [("vision gradient buckets (its dp group)", tpb, Evis // max(tpb, 1)), ("column-parallel inputs + head", 2 * L + 1, bth),
                         ("projector fc1 input", 1, B * 4 * 256 // dp)]}
upd = {"all_reduce.tp": [("gradient norm chunks", chunks, 1)]}
if name == "d":
    cap, fill, buckets = 262144, 0, 0
    for p, n in reversed(params):
        fill += 4 * (n // tp if split[p] and p != "llm.embed.weight" else n)
        if fill >= cap:
            buckets, fill = buckets + 1, 0
    buckets += fill > 0
    # the vocabulary-parallel embedding's gradient is dp-reduced whole, then
    # sliced over tp (as under the uniform --tp 2 --dp 2 plan)
    whole = lambda p: split[p] and p != "llm.embed.weight"
    local = sum(n // tp if whole(p) else n for p, n in params)
    fwd["all_reduce.dp"] = [("scalar", 1, 1)]
    bwd["all_reduce.dp"] = [("gradient buckets", buckets, None), ("scalar", 1, 1)]
    bwd_dp_elems = local
    upd["all_reduce.dp"] = [("scalar", 1, 1)]
run = "f" if frozen else name
comm = [json.loads(l)["comm"] for l in open(T + "/" + run + ".jsonl") if '"comm"' in l]
assert len(comm) == 1 and comm[0]["steps"] == steps
for ph, want in (("forward", fwd), ("backward", bwd), ("update", upd)):
    got = {k: v for k, v in comm[0]["train_" + ph].items() if k != "bytes"}
    for key, parts in want.items():
        calls = sum(n for _, n, _ in parts) * steps
        if any(e is None for _, _, e in parts):  # the buckets: their elements in all
            elems = (bwd_dp_elems + sum(n * e for _, n, e in parts if e is not None)) * steps
        else:
            elems = sum(n * (e if "vision gradient" not in w else 0) for w, n, e in parts) * steps
            elems += sum(Evis for w, _, _ in parts if "vision gradient" in w) * steps
        g = got.pop(key, {"calls": 0, "elems": 0})
        good = g["calls"] == calls and g["elems"] == elems
        ok &= good
        print("%s %-8s %-14s %s calls %d elements %d in %d steps (%s)" % (run, ph, key, "==" if good else "!=",
              g["calls"], g["elems"], steps, ", ".join("%s: %d" % (w, n) for w, n, _ in parts)))
    if got:
        print("%s %s: collectives not in the formula: %s" % (run, ph, got)); ok = False

plan = json.load(open(T + "/" + run + ".plan.json"))
subs = {s["name"]: (s["tp"], s["dp"]) for s in plan["subplans"]}
want = {"vision": (1, 2 if name == "a" else 4), "llm": (2, dp), "": (2, dp)}
good = subs == want and any(t["from"] == "vision" and t["kind"] == "all_gather" and t["axis"] == "tp" and
                            t["sent_bytes"] == 4 * B * Sv * 64 // (2 * dp) for t in plan["boundary_transfers"])
vgrad = [x["grad_bytes"] for x in plan["subplans"] if x["name"] == "vision"]
good &= vgrad == [0] if frozen else vgrad[0] > 0
good &= any(t["phase"] == "backward" for t in plan["boundary_transfers"]) != frozen
# each sub-model's FLOPs of a step (the whole batch) against its Linear layers'
# forward FLOPs, 2 x rows x weights: a trained one runs them 3 times (forward,
# input and weight gradients) plus attention and elementwise work, within 3x
# to 4x; a frozen vision tower runs only its forward, within 1x to 1.5x
lin = {"vision": 2 * B * Sv * L * (4 * 64 * 64 + 2 * 64 * 128),
       "llm": 2 * B * Tt * L * (2 * h * h + 2 * h * 32 + 3 * h * 128)}
for x in plan["subplans"]:
    if x["name"] in lin:
        lo, hi = (1, 1.5) if frozen and x["name"] == "vision" else (3, 4)
        r = x["step_flops"] / lin[x["name"]]
        good &= lo <= r <= hi
        print("%s: %s step FLOPs %d = %.2f x its Linear layers' forward (want %g to %g)" %
              (run, x["name"], x["step_flops"], r, lo, hi))
print("%s: plan sub-models %s, boundary transfers %d (%d bytes per step)" % (run, subs, len(plan["boundary_transfers"]),
      plan["boundary_bytes"]))
ok &= good
sys.exit(0 if ok else 1)
PY
done
# one rank's view: its place in each sub-model's mesh (rank 3 of tp = 2 x
# dp = 2: tp 1, dp 1; vision's batch nests dp outside tp: its dp rank 1 * 2 + 1;
# and rank 2, tp 0, dp 1: 1 * 2 + 0)
"$MMC" dump-ir "$T/sub.mm" --model VLd --rank 3 | head -2 > "$T/rank3"
printf '%s\n' "// sub-model vision: tp = 1, dp = 4 over the tp and dp axes: this rank is its dp rank 3" \
  "// sub-model llm: tp = 2, dp = 2: this rank is its tp rank 1, dp rank 1" | cmp -s - "$T/rank3" ||
  { bad "dump-ir --rank 3"; cat "$T/rank3"; }
"$MMC" dump-ir "$T/sub.mm" --model VLd --rank 2 | head -2 > "$T/rank2"
printf '%s\n' "// sub-model vision: tp = 1, dp = 4 over the tp and dp axes: this rank is its dp rank 2" \
  "// sub-model llm: tp = 2, dp = 2: this rank is its tp rank 0, dp rank 1" | cmp -s - "$T/rank2" ||
  { bad "dump-ir --rank 2"; cat "$T/rank2"; }
"$MMC" plan "$T/sub.mm" --model VLa | grep '^    vision     -> the rest   all_gather  tp  \[8, 17, 64\] .* 17408 bytes sent$' > /dev/null ||
  bad "mmc plan: no boundary transfer line"
[ $fail -eq 0 ] && echo "sub-model plans: (a) vision dp=2 / llm tp=2 (with sp, with vision frozen) and (d) vision dp=4 / llm tp=2 x dp=2 agree with one rank"
[ $fail -eq 0 ]
