#!/usr/bin/env bash
# Context parallel under real mpirun ranks: GPT2Tiny (causal) and ViTFashion
# (non-causal) compiled for cp = 2 Ulysses, cp = 2 and 4 ring (GPT2Tiny;
# ViTFashion's 50 tokens split 2 ways only), InternVL2Tiny cp = 2 ring and
# GPT2Tiny tp = 2 x cp = 2 (Ulysses and ring, with and without sp: sp cuts
# each rank's cp chunk of the sequence over tp) and cp = 4 USP (a ring of
# 2 Ulysses groups of 2: 4 all-to-alls per layer forward, 8 backward, of
# (N/P)(2h_q + 2h_kv) d (U-1)/U and (N/P)(4h_q + 4h_kv) d (U-1)/U elements,
# and the ring's shifts over R = P/U groups), VideoDiTTiny (80 tokens:
# 5 frames of 4 x 4 patches; 2 heads) cp = 2 Ulysses, cp = 2 and 4 ring,
# cp = 4 USP and tp = 2 x cp = 2 ring (Ulysses would need 4 heads), and
# GPT2Tiny pp = 2 x cp = 2 ring (losses and weights only) give the serial
# trainer's loss at each of 5 steps (1e-5 relative) and, gathered on rank
# 0 by --save-weights, its final weights (each trained tensor within 1e-3
# of the size of its update, tests/torch/mmtrain.py, as in
# tests/mpi_equiv.sh).
#
# Counts, from the runtime counters of the metrics log (per training step,
# rank 0; the same on every rank): Ulysses makes per layer 4 all-to-alls
# forward (q, k, v to the head split, the output back) and 4 backward (the
# output's gradient to the head split, dq, dk, dv back), each rank sending
# forward (N/P)(h_q + 2 h_kv + h_q) d (P-1)/P elements per layer (N = B*T
# tokens, P = cp), the backward the same. The ring makes per layer P - 1
# shifts of the K/V block forward, each of 2 (N/P) h_kv d elements per
# rank, and P - 1 K/V and P dK/dV shifts backward; its --trace holds one
# ring_shift event per shift on every rank, each wait (ring_wait) inside
# its shift. Nothing else on cp but all-reduces (the gradients, the loss)
# and all-gathers (gradients of position tables and of the embedding's
# input). `mmc plan --json` gives the same ring shifts and elements per
# step, and per rank and attention scores 1/P of those of the same plan
# with cp = 1 (a ring's K/V block 1/R of those; an attention not split,
# InternVL2Tiny's vision encoder, the same as with cp = 1) and the ring's
# workspace in the activation arena (support/ring_ws.h) from the
# rank's N/P rows: forward 4 (N/P) h_kv d + (N/P) h_q d + (N/P) h_q floats,
# backward 8 (N/P) h_kv d + (N/P) h_q (USP adds its head-split copies).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
o0_compiles
STEPS=5 # AdamW's moments and the counts per step need no more (10 took twice the time)
[ $SAN = 1 ] && STEPS=3

close() { # name serial.jsonl ranks.jsonl init.st serial.st ranks.st file.mm model
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/close_runs.py" "$@"
}

counts() { # name jsonl kind P L N hq hkv d trace
  local trace=${10}
  /usr/bin/python3 - "${@:1:9}" "$STEPS" "$trace" <<'PY'
import json, sys
name, path, kind = sys.argv[1:4]
P, L, N, hq, hkv, d, steps = (int(x) for x in sys.argv[4:11])
trace = sys.argv[11]
comm = [json.loads(l)["comm"] for l in open(path) if '"comm"' in l]
assert len(comm) == 1 and comm[0]["steps"] == steps
ok = True
def get(phase, key):
    return comm[0][phase].get(key, {"calls": 0, "elems": 0, "bytes": 0})
if kind == "ulysses":
    want_elems = L * (N // P) * (hq + 2 * hkv + hq) * d * (P - 1) / P  # sent per step, forward
    for phase in ("train_forward", "train_backward"):
        a = get(phase, "all_to_all.cp")
        calls, sent = a["calls"] / steps, a["bytes"] / 4 / steps
        good = calls == 4 * L and sent == want_elems
        ok &= good
        print("%s %s all_to_all.cp: %g calls, %g elements sent per step %s %d calls (4 per layer), %g"
              % (name, phase, calls, sent, "==" if good else "!=", 4 * L, want_elems))
    allowed = ("all_to_all.cp", "all_reduce.cp", "all_gather.cp")
else:  # ring: forward R-1 K/V shifts, backward R-1 K/V and R dK/dV shifts per layer
    U = int(kind[3:]) if kind.startswith("usp") else 1  # USP: a ring of R = P/U Ulysses groups
    R = P // U
    blk = 2 * (N // P) * hkv * d
    if U > 1:  # per layer 4 all-to-alls forward (q, k, v, out), 8 backward (+ dout, out; dq, dk, dv back)
        for phase, n, e in (("train_forward", 4, 2 * hq + 2 * hkv), ("train_backward", 8, 4 * hq + 4 * hkv)):
            a = get(phase, "all_to_all.cp")
            calls, sent = a["calls"] / steps, a["bytes"] / 4 / steps
            want = L * (N // P) * e * d * (U - 1) / U
            good = calls == L * n and sent == want
            ok &= good
            print("%s %s all_to_all.cp (USP groups of %d): %g calls, %g elements sent per step %s %d, %g"
                  % (name, phase, U, calls, sent, "==" if good else "!=", L * n, want))
    for phase, n in (("train_forward", R - 1), ("train_backward", 2 * R - 1)):
        a = get(phase, "ring.cp")
        calls, sent = a["calls"] / steps, a["bytes"] / 4 / steps
        good = calls == L * n and sent == L * n * blk
        ok &= good
        print("%s %s ring.cp: %g shifts, %g elements sent per step %s %d shifts (%d per layer) of 2(N/P)h_kv d = %d"
              % (name, phase, calls, sent, "==" if good else "!=", L * n, n, blk))
    allowed = ("ring.cp", "all_reduce.cp", "all_gather.cp") + (("all_to_all.cp",) if U > 1 else ())
    # --trace: one "ring_shift" event per shift of the training steps on every rank, each
    # holding its "ring_wait" (the time blocked); hidden = 1 - waits / shifts
    ev = json.load(open(trace))["traceEvents"]
    calls = get("train", "ring.cp")["calls"]
    for tid in sorted({e["tid"] for e in ev}):
        sh = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] == tid and e["name"] == "ring_shift")
        wt = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] == tid and e["name"] == "ring_wait"]
        inside = all(any(a <= w0 + 1e-3 and w1 <= b + 1e-3 for a, b in sh) for w0, w1 in wt)
        good = len(sh) == calls and len(wt) == calls and inside
        ok &= good
        tot = sum(b - a for a, b in sh)
        print("%s --trace rank %d: %d ring_shift and %d ring_wait events %s %d shifts counted%s; hidden %.2f"
              % (name, tid, len(sh), len(wt), "==" if good else "!=", calls,
                 "" if inside else " (a wait outside its shift)",
                 1 - sum(b - a for a, b in wt) / tot if tot else 0))
if True:
    other = sorted(k for k in comm[0]["train"] if k.endswith(".cp") and k not in allowed)
    if other:
        ok = False
        print("%s: unexpected cp collectives %s" % (name, other))
sys.exit(0 if ok else 1)
PY
}

plan_check() { # name jsonl kind "P L N hq hkv d" file model flags...: mmc plan --json against the counters
  local name=$1 log=$2 kind=$3 dims=$4 file=$5 model=$6; shift 6
  "$MMC" plan "$S/$file" --model "$model" "$@" --json > "$T/$name.plan.json" 2> /dev/null || { bad "$name: plan"; return; }
  /usr/bin/python3 - "$T/$name.plan.json" "$log" "$kind" "$dims" "$STEPS" "$name" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["context_parallel"]
kind, steps, name = sys.argv[3], int(sys.argv[5]), sys.argv[6]
P, L, N, hq, hkv, d = (int(x) for x in sys.argv[4].split())
comm = [json.loads(l)["comm"] for l in open(sys.argv[2]) if '"comm"' in l][0]
ok = plan["kind"] == kind or kind.startswith("usp")
for a in plan["attention"]:  # the scores per rank are 1/P of cp = 1's (an attention not split: the same)
    ok &= a["score_bytes"] * (P if a["ring"] or kind == "ulysses" else 1) == a["serial_score_bytes"]
if kind.startswith("usp"):
    ok &= plan["kind"] == "ring" and plan["ulysses_groups"] == int(kind[3:])
    for phase, key in (("train_forward", "usp_all_to_all_forward"), ("train_backward", "usp_all_to_all_backward")):
        ok &= comm[phase].get("all_to_all.cp", {"calls": 0})["calls"] / steps == plan[key]
    kind = "ring"
if kind == "ring":
    for phase, key in (("train_forward", "ring_shifts_forward"), ("train_backward", "ring_shifts_backward")):
        got = comm[phase].get("ring.cp", {"calls": 0})["calls"] / steps
        ok &= got == plan[key]
    sent = sum(v["bytes"] for k, v in comm["train"].items() if k == "ring.cp") / 4 / steps
    ok &= sent == plan["ring_shift_elements_sent"]
    for a in plan["attention"]:  # a K/V block's scores are 1/R of the rank's
        ok &= not a["ring"] or a["score_block_bytes"] * P == a["score_bytes"] * plan["ulysses_groups"]
    ok &= any(a["ring"] for a in plan["attention"])
    # the ring's workspace in the activation arena, per rank 1/P of the whole sequence's:
    # forward two K/V blocks (4 nk) and a block's output and lse (nq + nl), backward the K/V
    # blocks and their dK/dV (8 nk) and an lse (nl); USP also its head-split copies and
    # all-to-all buffers (forward 4 nq + 2 nk, backward 6 nq + 4 nk)
    U = plan["ulysses_groups"]
    nq, nk, nl = N // P * hq * d, N // P * hkv * d, N // P * hq
    want = {"forward": 4 * nk + nq + nl + (4 * nq + 2 * nk if U > 1 else 0),
            "backward": 8 * nk + nl + (6 * nq + 4 * nk if U > 1 else 0)}
    for a in plan["attention"]:
        if a["ring"] and a["ring_workspace_bytes"] != 4 * want[a["phase"]]:
            ok = False
            print("%s: %s %s ring workspace %d bytes, expected %d" % (name, a["scope"], a["phase"],
                  a["ring_workspace_bytes"], 4 * want[a["phase"]]))
    print("%s: ring workspace per rank and layer %d bytes forward, %d backward (N/P = %d rows)"
          % (name, 4 * want["forward"], 4 * want["backward"], N // P))
print("%s: mmc plan: %s; scores per rank 1/%d of serial; ring shifts forward %s, backward %s per step %s the runtime counters"
      % (name, kind, P, plan["ring_shifts_forward"], plan["ring_shifts_backward"], "==" if ok else "!="))
sys.exit(0 if ok else 1)
PY
}

check() { # name np file model kind P L N hq hkv d -- plan flags...
  local name=$1 np=$2 file=$3 model=$4 kind=$5; shift 5
  local dims=("$1" "$2" "$3" "$4" "$5" "$6"); shift 6
  [ -x "$T/$model.serial" ] || "$MMC" compile "$S/$file" --model "$model" -o "$T/$model.serial" || { bad "$model: compile"; return; }
  [ -s "$T/$model.init.st" ] || "$T/$model.serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/$model.init.st" > /dev/null ||
    { bad "$model: serial init"; return; }
  [ -s "$T/$model.serial.st" ] || "$T/$model.serial" --steps $STEPS --eval-batches 1 --quiet --log "$T/$model.serial.jsonl" \
    --save-weights "$T/$model.serial.st" > /dev/null || { bad "$model: serial run"; return; }
  "$MMC" compile "$S/$file" --model "$model" "$@" -o "$T/$name" || { bad "$name: compile"; return; }
  local trace=()
  case $kind in ring | usp*) trace=(--trace "$T/$name.trace.json") ;; esac
  if ! "${MPIRUN[@]}" "$np" "$T/$name" --steps $STEPS --eval-batches 1 --quiet --log "$T/$name.jsonl" \
       --save-weights "$T/$name.st" "${trace[@]}" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; return
  fi
  close "$name" "$T/$model.serial.jsonl" "$T/$name.jsonl" "$T/$model.init.st" "$T/$model.serial.st" "$T/$name.st" \
    "$S/$file" "$model" && ok || bad "$name: differs from one rank"
  [ "$kind" = equiv ] && return # VideoDiT's 3D RoPE moves its sequence by other collectives too
  counts "$name" "$T/$name.jsonl" "$kind" "${dims[@]}" "$T/$name.trace.json" && ok || bad "$name: communication counts"
  plan_check "$name" "$T/$name.jsonl" "$kind" "${dims[*]}" "$file" "$model" "$@" && ok || bad "$name: mmc plan"
}

# name np file model kind  P L N=B*T h_q h_kv d  flags
check gpt2tiny.cp2.ulysses 2 gpt2.mm GPT2Tiny ulysses 2 2 128 4 4 16 --cp 2
[ $SAN = 1 ] || check vit.cp2.ulysses 2 vit_fashion.mm ViTFashion ulysses 2 4 3200 4 4 16 --cp 2 --cp-kind ulysses
check gpt2tiny.cp2.ring 2 gpt2.mm GPT2Tiny ring 2 2 128 4 4 16 --cp 2 --cp-kind ring
if [ $SAN = 0 ]; then
  check gpt2tiny.cp4.ring 4 gpt2.mm GPT2Tiny ring 4 2 128 4 4 16 --cp 4 --cp-kind ring
  check vit.cp2.ring 2 vit_fashion.mm ViTFashion ring 2 4 3200 4 4 16 --cp 2 --cp-kind ring
  # the LLM's 2 layers (GQA: 2 KV heads) ring; the vision encoder's 17 tokens stay whole
  check internvl2tiny.cp2.ring 2 internvl2.mm InternVL2Tiny ring 2 2 128 4 2 16 --cp 2 --cp-kind ring
  # tp = 2 x cp = 2: each rank's heads are half of them (column-parallel q, k, v)
  check gpt2tiny.tp2.cp2.ulysses 4 gpt2.mm GPT2Tiny ulysses 2 2 128 2 2 16 --tp 2 --cp 2
  check gpt2tiny.tp2.cp2.ring 4 gpt2.mm GPT2Tiny ring 2 2 128 2 2 16 --tp 2 --cp 2 --cp-kind ring
  # with sp: the sequence's cp chunk is cut over tp in the norms and residuals (cp outermost)
  check gpt2tiny.tp2.sp.cp2.ulysses 4 gpt2.mm GPT2Tiny ulysses 2 2 128 2 2 16 --tp 2 --sp --cp 2
  check gpt2tiny.tp2.sp.cp2.ring 4 gpt2.mm GPT2Tiny ring 2 2 128 2 2 16 --tp 2 --sp --cp 2 --cp-kind ring
fi
# USP: cp = 4 as a ring of 2 Ulysses groups of 2
check gpt2tiny.cp4.usp2x2 4 gpt2.mm GPT2Tiny usp2 4 2 128 4 4 16 --cp 4 --cp-ulysses 2
if [ $SAN = 0 ]; then
  # VideoDiTTiny (non-causal, 3D RoPE; its cross-attention to the text stays whole): equivalence only
  check videodit.cp2.ulysses 2 videodit.mm VideoDiTTiny equiv 2 0 0 0 0 0 --cp 2
  check videodit.cp4.usp2x2 4 videodit.mm VideoDiTTiny equiv 4 0 0 0 0 0 --cp 4 --cp-ulysses 2
  check videodit.cp2.ring 2 videodit.mm VideoDiTTiny equiv 2 0 0 0 0 0 --cp 2 --cp-kind ring
  check videodit.cp4.ring 4 videodit.mm VideoDiTTiny equiv 4 0 0 0 0 0 --cp 4 --cp-kind ring
  # (2 heads: tp = 2 x Ulysses cp = 2 does not divide them; the ring has no head constraint)
  check videodit.tp2.cp2.ring 4 videodit.mm VideoDiTTiny equiv 2 0 0 0 0 0 --tp 2 --cp 2 --cp-kind ring
  # with the pipeline: pp = 2 (2 micro-batches) x cp = 2 ring
  check gpt2tiny.pp2.cp2.ring 4 gpt2.mm GPT2Tiny equiv 2 0 0 0 0 0 --pp 2 --micro-batches 2 --cp 2 --cp-kind ring
  # with dp and ZeRO: dp = 2 x cp = 2, gradients reduced over both axes
  check gpt2tiny.dp2.cp2.ring.zero2 4 gpt2.mm GPT2Tiny equiv 2 0 0 0 0 0 --dp 2 --cp 2 --cp-kind ring --zero 2
  check gpt2tiny.dp2.cp2.ulysses.zero3 4 gpt2.mm GPT2Tiny equiv 2 0 0 0 0 0 --dp 2 --cp 2 --zero 3
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
