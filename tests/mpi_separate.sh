#!/usr/bin/env bash
# Per-sub-model plans on separate ranks (placement = separate,
# docs/subplans.md "Separate placement") under real mpirun ranks:
# InternVL2Tiny with
#   (b) parallel { placement = separate; vision { dp = 1 } llm { tp = 2 } }
#       on 3 ranks: the vision encoder on rank 0, the projector and the LLM
#       tp = 2 on ranks 1-2, 2 micro-batches pipelined (1F1B);
#   (c) (b) with the vision tower frozen (InternVL2TinyFrozenVision);
#   (g) (b) in 4 micro-batches under GPipe;
#   (e) vision { dp = 2 } llm { tp = 2 } on 4 ranks (groups of equal size:
#       vision data parallel on ranks 0-1, the LLM on 2-3);
# trains with the serial trainer's losses (1e-5 relative, 10 steps; the
# evaluation's loss against one rank in 2 micro-batches), final weights (--save-weights) within 1e-3 of the
# size of their update (tests/torch/mmtrain.py), rank 0's runtime-counted
# transfers per phase equal the formulas below, `mmc plan --json` names the
# groups' ranks and its point-to-point transfers' bytes equal the counted
# ones, every rank's planned arena bytes equal its group's in `mmc plan`,
# `--timeline` labels the rows by group, every rank's measured peak is
# within 3% of its plan; (b)'s own checkpoint resumes bit for bit and a
# serial one resumes under (b); a hung LLM rank (world rank 2) is named by
# rank 0's and rank 1's --comm-timeout watchdog, which end the job; and
# (b)'s trainer under 4 ranks stops with a message naming the 3 it needs.
#
# Sizes: B = 8 samples in M = 2 micro-batches of b = 4, S = 10 steps, T = 2
# (the LLM's tp). The pipeline cuts after vision's stage: what crosses
# forward is the pixel-shuffled vision output, b x 4 x 256 elements a
# micro-batch; what comes back is the gradient of vision's output, b x 17
# x 64 (16 patches + CLS, width 64).
# (b) rank 0 (vision) plays the first stage's T logical tp ranks:
#   forward  send.pp: S * M * T calls (each micro-batch to each LLM rank),
#            b * 4 * 256 elements each;
#   backward recv.pp: S * M * T calls (each LLM rank sends its copy; rank 0
#            keeps tp rank 0's), b * 17 * 64 elements each;
#   nothing else: no collective in vision's stage (its gradients stay on
#   its one rank), the pipeline's loss and norm sums are uncounted MPI calls.
# (c) (b)'s forward; backward: nothing (no gradient goes back to a frozen
#   tower).
# (e) rank 0 (vision's dp rank 0): send.pp S * M forward, recv.pp S * M
#   backward, one rank to one rank; the all_gather.tp of the boundary (S * M
#   of b * 17 * 64) forward; vision's own tp-axis reductions as under the
#   colocated plan (not counted here: tests/mpi_subplans.sh).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
o0_compiles
STEPS=10
[ "$SAN" = 1 ] && STEPS=3

cat > "$T/sep.mm" <<'MM'
import "internvl2.mm"
// (b) the vision encoder on rank 0, the projector and the LLM (tp = 2) on ranks 1-2
model VLb extends InternVL2Tiny {
  parallel { placement = separate; vision { dp = 1 } llm { tp = 2 } }
}
// (c) (b) with the vision tower frozen
model VLc extends InternVL2TinyFrozenVision {
  parallel { placement = separate; vision { dp = 1 } llm { tp = 2 } }
}
// (g) (b) in 4 micro-batches under GPipe
model VLg extends InternVL2Tiny {
  parallel { placement = separate; vision { dp = 1 } llm { tp = 2 } micro_batches = 4; schedule = gpipe }
}
// (e) groups of equal size: vision dp = 2 on ranks 0-1, the LLM tp = 2 on 2-3
model VLe extends InternVL2Tiny {
  parallel { placement = separate; vision { dp = 2 } llm { tp = 2 } }
}
MM

"$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny -o "$T/serial" || { bad "compile serial"; exit 1; }
"$T/serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/init.st" > /dev/null || bad "serial init"
"$T/serial" --steps $STEPS --eval-batches 1 --quiet --log "$T/serial.jsonl" --save-weights "$T/serial.st" \
  > /dev/null || bad "serial run"
"$MMC" compile "$S/internvl2.mm" --model InternVL2TinyFrozenVision -o "$T/serialf" || { bad "compile serialf"; exit 1; }
"$T/serialf" --steps $STEPS --eval-batches 1 --quiet --log "$T/serialf.jsonl" --save-weights "$T/serialf.st" \
  > /dev/null || bad "serial frozen run"
# the evaluation runs @forward at a micro-batch's shape (B / M = 4 rows):
# its reference is one rank in 2 micro-batches
for ref in InternVL2Tiny:serial InternVL2TinyFrozenVision:serialf; do
  IFS=: read -r model out <<< "$ref"
  "$MMC" compile "$S/internvl2.mm" --model $model --micro-batches 2 -o "$T/${out}2" || bad "compile ${out}2"
  "$T/${out}2" --steps $STEPS --eval-batches 1 --quiet --log "$T/${out}2.jsonl" > /dev/null || bad "${out}2 run"
done

RUNS=("b:VLb:3" "c:VLc:3" "g:VLg:3" "e:VLe:4")
[ "$SAN" = 1 ] && RUNS=("b:VLb:3" "c:VLc:3")  # under the sanitizers (ten times slower) fewer plans
for run in "${RUNS[@]}"; do
  IFS=: read -r name model np <<< "$run"
  "$MMC" compile "$T/sep.mm" --model $model -o "$T/$name" 2> "$T/$name.cc" || { bad "$name: compile"; cat "$T/$name.cc"; continue; }
  "$MMC" plan "$T/sep.mm" --model $model --json > "$T/$name.plan.json" || bad "$name: plan --json"
  "$MMC" plan "$T/sep.mm" --model $model --timeline "$T/$name.svg" > "$T/$name.plan" || bad "$name: plan --timeline"
  if ! "${MPIRUN[@]}" "$np" "$T/$name" --steps $STEPS --eval-batches 1 --log "$T/$name.jsonl" \
       --save-weights "$T/$name.st" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; continue
  fi
  /usr/bin/python3 - "$name" "$T" $STEPS "$MMC_SOURCE_DIR/stdlib_models/internvl2.mm" "$SAN" <<'PY' || bad "$name"
import json, os, re, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
name, T, steps, src, san = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
ok = True
frozen = name == "c"
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l]
ref = "/serialf" if frozen else "/serial"
la, lb = losses(T + ref + ".jsonl"), losses(T + "/" + name + ".jsonl")
lw = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if la and len(la) == len(lb) == steps else float("inf")
print("%s: %d steps, loss largest relative difference from one rank %.2e" % (name, len(lb), lw))
ok &= lw <= 1e-5
def evals(p): return [json.loads(l)["eval_loss"] for l in open(p) if '"eval_loss"' in l]
ea, eb = evals(T + ref + "2.jsonl"), evals(T + "/" + name + ".jsonl")
ew = abs(ea[-1] - eb[-1]) / abs(ea[-1]) if ea and eb else float("inf")
print("%s: evaluation loss %.6f, one rank in 2 micro-batches %.6f" % (name, eb[-1] if eb else 0,
      ea[-1] if ea else 0))
ok &= ew <= 1e-5 or name == "g"  # (g) evaluates B / 4 rows: its reference would be one more run
cfg = mmtrain.train_settings(src, "InternVL2TinyFrozenVision" if frozen else "InternVL2Tiny")
(I, _), (A, _), (W, _) = (mmtrain.st_load(T + p) for p in ("/init.st", ref + ".st", "/" + name + ".st"))
nbad = mmtrain.compare_weights(I, A, W, cfg, [mmtrain.lr_at(cfg, s, len(la)) for s in range(1, len(la) + 1)], name)
ok &= nbad == 0 and sorted(A) == sorted(W)

# the formulas: rank 0's transfers per phase
M = 4 if name == "g" else 2
b, Tp, Sv = 8 // M, 2, 17
fan = Tp if name in "bcg" else 1
fwd = {"send.pp": (steps * M * fan, b * 4 * 256)}
bwd = {} if frozen else {"recv.pp": (steps * M * fan, b * Sv * 64)}
if name == "e":
    fwd["all_gather.tp"] = (steps * M, b * Sv * 64)
comm = [json.loads(l)["comm"] for l in open(T + "/" + name + ".jsonl") if '"comm"' in l]
assert comm and comm[0]["steps"] == steps
for ph, want in (("forward", fwd), ("backward", bwd), ("update", {})):
    got = {k: v for k, v in comm[0]["train_" + ph].items() if k != "bytes"}
    for key, (calls, elems) in want.items():
        g = got.pop(key, {"calls": 0, "elems": 0})
        good = g["calls"] == calls and g["elems"] == calls * elems
        ok &= good
        print("%s %-8s %-14s %s calls %d elements %d (want %d x %d)" % (name, ph, key, "==" if good else "!=",
              g["calls"], g["elems"], calls, elems))
    if name == "e":  # vision's own reductions on its dp group (the tp axis): the colocated plan's
        got = {k: v for k, v in got.items() if not k.endswith(".tp")}
    if got:
        print("%s %s: transfers not in the formula: %s" % (name, ph, got)); ok = False

# mmc plan: the groups, and the point-to-point transfers' bytes against the counted ones
plan = json.load(open(T + "/" + name + ".plan.json"))
groups = [(g["ranks"], g["nranks"]) for g in plan["separate_groups"]]
want = [("0", 1), ("1-2", 2)] if name in "bcg" else [("0-1", 2), ("2-3", 2)]
good = groups == want
p2p = {t["phase"]: t["sent_bytes"] for t in plan["boundary_transfers"] if t["kind"] == "send"}
counted = comm[0]["train_forward"]["send.pp"]["bytes"] // steps
good &= p2p.get("forward") == counted and ("backward" in p2p) != frozen
print("%s: plan groups %s, forward send %s bytes a step (counted %d), backward %s" % (name, groups,
      p2p.get("forward"), counted, p2p.get("backward")))
# every rank allocates its group's planned arenas
peaks = [g["peak_bytes"] for g in plan["separate_groups"]]
out = open(T + "/" + name + ".out").read()
arenas = {int(r): int(a) for r, a in re.findall(r"memory of rank (\d+) of \d+: .*?\(arenas (\d+) \+", out)}
first = 1 if name in "bcg" else 2
wantmem = {r: peaks[0] if r < first else peaks[1] for r in range(first + 2)}
good &= arenas == wantmem
print("%s: each rank's planned arenas %s, the plan's groups %s" % (name, arenas, peaks))
# every rank's measured peak (VmHWM, runtime/core/mmrt_mem.h) within the
# memory tests' 5% of its plan (its group's arenas + the data set); 3% here:
# --save-weights gathered every tensor whole at once before (rank 0 1.048)
# (not under the sanitizers: their shadow memory doubles the measured peak)
meas = {int(r): int(a) / int(b) for r, a, b in
        re.findall(r"memory of rank (\d+) of \d+: measured peak (\d+) bytes, plan (\d+) bytes", out)}
good &= san or sorted(meas) == list(range(first + 2)) and all(abs(v - 1) <= 0.03 for v in meas.values())
print("%s: measured/plan per rank %s" % (name, {r: round(v, 4) for r, v in sorted(meas.items())}))
svg = open(T + "/" + name + ".svg").read()
good &= ("vision: rank 0<" in svg if name in "bcg" else "vision: ranks 0-1<" in svg)
ok &= good
sys.exit(0 if ok else 1)
PY
done
# checkpoints under the one-rank layout: (b) for STEPS / 2 steps with --ckpt,
# resumed to STEPS, against (b)'s straight run (1e-7 relative: the same
# ranks, the same sums); a serial checkpoint resumed under (b) against the
# serial run (1e-5, as the losses above)
resumed() { # straight.jsonl resumed.jsonl tolerance: the straight run's last steps against the resumed run's
  /usr/bin/python3 - "$@" $STEPS <<'PY'
import json, sys
n = int(sys.argv[4])
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l] for p in sys.argv[1:3])
d = max(abs(x - y) / abs(x) for x, y in zip(a[n // 2:], b)) if len(a) == n and len(b) == n - n // 2 else float("inf")
print("%s: %d steps resumed, loss largest relative difference from %s %.2e" % (sys.argv[2].split("/")[-1], len(b),
      sys.argv[1].split("/")[-1], d))
sys.exit(d > float(sys.argv[3]))
PY
}
if [ -x "$T/b" ] && [ -s "$T/b.jsonl" ]; then
  "${MPIRUN[@]}" 3 "$T/b" --steps $((STEPS / 2)) --eval-batches 1 --quiet --ckpt "$T/ckb" > "$T/ckb.out" 2>&1 &&
    "${MPIRUN[@]}" 3 "$T/b" --steps $STEPS --eval-batches 1 --quiet --ckpt "$T/ckb" --resume --log "$T/ckb.jsonl" \
      > "$T/ckb2.out" 2>&1 &&
    resumed "$T/b.jsonl" "$T/ckb.jsonl" 1e-7 || { bad "(b): its checkpoint resumed under (b)"; tail -3 "$T/ckb.out" "$T/ckb2.out"; }
  "$T/serial" --steps $((STEPS / 2)) --eval-batches 1 --quiet --ckpt "$T/cks" > /dev/null 2>&1 &&
    "${MPIRUN[@]}" 3 "$T/b" --steps $STEPS --eval-batches 1 --quiet --ckpt "$T/cks" --resume --log "$T/cks.jsonl" \
      > "$T/cks.out" 2>&1 &&
    resumed "$T/serial.jsonl" "$T/cks.jsonl" 1e-5 || { bad "a serial checkpoint resumed under (b)"; tail -3 "$T/cks.out"; }
fi
# a hung LLM rank: world rank 2 (the LLM's tp rank 1, the fan's second
# communicator) stops before its first backward send of step 2
# (MMRT_TEST_PP_STALL=w2, runtime/comm/mmrt_pp.c). Rank 0 waits for its
# gradient alone (rank 1's came), rank 1 in a tp collective with it. Each
# cell gives one rank --comm-timeout 2 and the others 8 (mpirun's colon
# form), so that it is the one to report: its watchdog names the call and
# world rank 2, and it ends the job (non-zero) before the others' timeout
# (the stalled rank itself would exit only after 8 + 0.8 + 1.5 s).
hang() { # world rank that times out first, the message it must print
  local w=$1 want=$2 args=(--steps 5 --eval-batches 1 --quiet) to=(8 8 8) cmd=() r
  to[$w]=2
  for r in 0 1 2; do
    cmd+=(-np 1 -x MMRT_TEST_PP_STALL=w2 "$T/b" "${args[@]}" --comm-timeout ${to[$r]})
    [ $r -lt 2 ] && cmd+=(:)
  done
  "${MPIRUN[@]:0:${#MPIRUN[@]}-1}" "${cmd[@]}" > "$T/hang$w.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "trainer (rank $w): error: $want" "$T/hang$w.out" &&
     ! grep -q "within 8.0 s" "$T/hang$w.out"; then
    ok
  else bad "a hung LLM rank, world rank $w reporting: exit $rc"; grep "error" "$T/hang$w.out"; fi
}
if [ -x "$T/b" ]; then
  hang 0 "recv from pp rank 1 (stage 0's output gradient, micro-batch 0) on axis pp (2 ranks; pp rank 0, world rank 0): did not finish within 2.0 s: world rank 2 did not arrive"
  [ "$SAN" = 1 ] ||
    hang 1 "step 2: all_reduce on axis tp (2 ranks; tp rank 0, world rank 1): did not finish within 2.0 s: world rank 2 did not arrive"
fi
# the world size against the groups': (b)'s trainer under 4 ranks
if "${MPIRUN[@]}" 4 "$T/b" --steps 1 --quiet > "$T/b4.out" 2>&1; then
  bad "(b) on 4 ranks ran"
else
  grep -q "compiled for 1 + 2 = 3 ranks (placement = separate" "$T/b4.out" ||
    { bad "(b) on 4 ranks: no message naming 3 ranks"; head -5 "$T/b4.out"; }
fi
# one mesh rank's view: its two stages' world ranks, vision whole
"$MMC" dump-ir "$T/sep.mm" --model VLb --rank 1 | head -3 > "$T/rank1"
printf '%s\n' "// placement = separate: mesh rank 1 runs stage 0 on world rank 0 (which plays every tp rank of stage 0) and stage 1 on world rank 2" \
  "// sub-model vision: tp = 1, dp = 1: whole, the same on every tp rank" \
  "// sub-model llm: tp = 2, dp = 1: this rank is its tp rank 1, dp rank 0" | cmp -s - "$T/rank1" ||
  { bad "dump-ir --rank 1"; cat "$T/rank1"; }
grep -q '^    stage 0 (vision) -> stage 1 (projector + llm): send pp \[4, 4, 256\] forward, 65536 bytes sent by rank 0: 2 micro-batches x 2 receivers (ranks 1-2)$' "$T/b.plan" ||
  bad "mmc plan: no point-to-point boundary line"
[ $fail -eq 0 ] && echo "separate placement: (b) vision on rank 0 / llm tp=2 on ranks 1-2, (c) frozen, (e) equal groups agree with one rank"
[ $fail -eq 0 ]
