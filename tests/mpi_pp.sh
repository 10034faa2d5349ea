#!/usr/bin/env bash
# Micro-batches and pipeline plans against the one-rank trainer under real
# mpirun ranks (issue 11): each plan's trainer gives the serial trainer's
# loss at each step (1e-5 relative) and, gathered by --save-weights, its
# final weights within 1e-3 of the size of their update
# (tests/torch/mmtrain.py, as tests/mpi_equiv.sh compares). The serial
# trainer takes the whole batch in one step; micro_batches = M splits it
# into M micro-batches whose gradients are summed before one update.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
o0_compiles

close() { # name serial.jsonl ranks.jsonl init.st serial.st ranks.st file.mm model
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/close_runs.py" "$@" plan
}

# check name ranks ref.mm RefModel plan.mm PlanModel steps plan-flags...: the
# serial trainer of RefModel (compiled with $SER) against PlanModel (with
# $SER and the flags) on that many ranks; the train sections are RefModel's
check() {
  local name=$1 np=$2 rfile=$3 rmodel=$4 pfile=$5 pmodel=$6 steps=$7; shift 7
  local key="$rmodel${SER// /}"
  # shellcheck disable=SC2086
  [ -x "$T/$key.serial" ] || "$MMC" compile "$rfile" --model "$rmodel" $SER -o "$T/$key.serial" || { bad "$key: compile"; return; }
  [ -s "$T/$key.init.st" ] || "$T/$key.serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/$key.init.st" > /dev/null ||
    { bad "$key: serial init"; return; }
  [ -s "$T/$key.serial.st" ] || "$T/$key.serial" --steps "$steps" --eval-batches 1 --quiet --log "$T/$key.serial.jsonl" \
    --save-weights "$T/$key.serial.st" > /dev/null || { bad "$key: serial run"; return; }
  # shellcheck disable=SC2086
  "$MMC" compile "$pfile" --model "$pmodel" $SER "$@" -o "$T/$name" 2> "$T/$name.cc" || { bad "$name: compile"; head -3 "$T/$name.cc"; return; }
  # the evaluation takes test batches of a micro-batch's rows: M of them are
  # the serial trainer's one batch
  local mb=1 prev=""
  for a in "$@"; do [ "$prev" = --micro-batches ] && mb=$a; prev=$a; done
  if ! "${MPIRUN[@]}" "$np" "$T/$name" --steps "$steps" --eval-batches "$mb" --quiet --log "$T/$name.jsonl" \
       --save-weights "$T/$name.st" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; return
  fi
  close "$name" "$T/$key.serial.jsonl" "$T/$name.jsonl" "$T/$key.init.st" "$T/$key.serial.st" "$T/$name.st" \
    "$rfile" "$rmodel" && ok || bad "$name: differs from one rank"
  evalsame "$name" "$T/$key.serial.jsonl" "$T/$name.jsonl" && ok || bad "$name: its evaluation differs from one rank's"
}

# evalsame name serial.jsonl ranks.jsonl: the end of training's evaluation
# (under a pipeline: stage by stage, on each rank's own parameters) gives
# the serial trainer's eval loss (1e-5 relative) and accuracy
evalsame() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"eval_loss"' in l][-1] for p in sys.argv[2:4])
d = abs(a["eval_loss"] - b["eval_loss"]) / abs(a["eval_loss"])
same = d <= 1e-5 and abs(a["eval_accuracy"] - b["eval_accuracy"]) <= 1e-5
# captions: greedy decoding, the last stage's logits broadcast to every pp rank each token
k = "eval_caption_exact_match"
cap = " (exact match %.4f, serial %.4f)" % (b.get(k, -1), a[k]) if k in a else ""
same = same and (k not in a or abs(a[k] - b.get(k, -1)) <= 1e-5)
print("%s: eval loss %.7f (serial %.7f, relative %.1e), accuracy %.4f (serial %.4f)%s%s" % (
    sys.argv[1], b["eval_loss"], a["eval_loss"], d, b["eval_accuracy"], a["eval_accuracy"], cap, "" if same else ": DIFFERS"))
sys.exit(not same)
PY
}

G="$S/gpt2.mm"; V="$S/internvl2.mm"
# steps of the cells without a B = 8 GPT2Tiny reference (whose 10-step serial
# log the resume checks below read): 10, or 4 under the sanitizers
N=10; [ "$SAN" = 1 ] && N=4
# micro-batches: serial, with dp (+ ZeRO-1) and with tp; InternVL2Tiny's
# captions ignore the prompt's labels, so its micro-batches weigh unequally
SER=""
# REL: a cell the sanitizer build leaves to the release build (it runs each
# schedule, model and axis at least once: tp+sp, dp+ZeRO, 1F1B, ZB-H1,
# interleaved, pp = 2, 3, 4 across sub-models; the suite's time budget)
REL=""; [ "$SAN" = 1 ] && REL=":"
$REL check gpt2tiny.mb2 1 "$G" GPT2Tiny "$G" GPT2Tiny "$N" --micro-batches 2
check gpt2tiny.tp2.sp.mb2 2 "$G" GPT2Tiny "$G" GPT2Tiny "$N" --tp 2 --sp --micro-batches 2
$REL check internvl2tiny.mb2 1 "$V" InternVL2Tiny "$V" InternVL2Tiny "$N" --micro-batches 2
check internvl2tiny.dp2.mb2.zero1 2 "$V" InternVL2Tiny "$V" InternVL2Tiny "$N" --dp 2 --zero 1 --micro-batches 2

# the pipeline: stage lists written in a model file (GPT2Tiny has two stack
# layers: four stages take the embeddings and the final norm apart)
P="$T/pp.mm"
cat > "$P" <<'MM'
import "gpt2.mm"
import "internvl2.mm"
model G4 extends GPT2Tiny { parallel { stages = [gpt.wte + gpt.wpe, gpt.h[0:1], gpt.h[1:2], gpt.ln_f] } }
// interleaved: two virtual stages per rank (rank 0 holds stages 0 and 2)
model G4i extends GPT2Tiny {
  parallel { pp = 2; vpp = 2; schedule = interleaved; stages = [gpt.wte + gpt.wpe, gpt.h[0:1], gpt.h[1:2], gpt.ln_f] }
}
// stage 0: the vision encoder and the projector, no LLM layer
model V2 extends InternVL2Tiny { parallel { stages = [vision + projector, llm] } }
// uneven, across the sub-models: stage 1 = the projector and the first LLM layer
model V2x extends InternVL2Tiny { parallel { stages = [vision, projector + llm.embed + llm.blocks[0:1], llm.blocks[1:2] + llm.norm + llm.head] } }
// layer counts per sub-model (MindSpeed-MM's pipeline_num_layers): one layer
// a stage, the LLM's on the last two (pp = 4, or pp = 2 with vpp = 2)
model V4 extends InternVL2Tiny { parallel { stages = by_module(vision = [1, 1, 0, 0], llm = [0, 0, 1, 1]) } }
model V4i extends V4 { parallel { pp = 2; vpp = 2; schedule = interleaved; stages = by_module(vision = [1, 1, 0, 0], llm = [0, 0, 1, 1]) } }
// eight stages for pp = 4 x vpp = 2: every unit of the model its own stage
model V8i extends InternVL2Tiny {
  parallel {
    pp = 4; vpp = 2; schedule = interleaved
    stages = [vision.embed + vision.cls + vision.pos, vision.blocks[0:1], vision.blocks[1:2], projector,
              llm.embed, llm.blocks[0:1], llm.blocks[1:2], llm.norm + llm.head]
  }
}
MM
SER="--set B=8"
$REL check gpt2tiny.pp2.gpipe 2 "$G" GPT2Tiny "$G" GPT2Tiny 10 --pp 2 --micro-batches 2 --schedule gpipe
$REL check gpt2tiny.pp2.1f1b 2 "$G" GPT2Tiny "$G" GPT2Tiny 10 --pp 2 --micro-batches 4 --schedule 1f1b
check gpt2tiny.pp2.zbh1 2 "$G" GPT2Tiny "$G" GPT2Tiny 10 --pp 2 --micro-batches 4 --schedule zbh1
check gpt2tiny.pp4.1f1b 4 "$G" GPT2Tiny "$P" G4 10 --pp 4 --micro-batches 4 --schedule 1f1b
$REL check gpt2tiny.pp2.interleaved 2 "$G" GPT2Tiny "$P" G4i 10 --pp 2 --micro-batches 4
check gpt2tiny.tp2.pp2 4 "$G" GPT2Tiny "$G" GPT2Tiny 10 --tp 2 --pp 2 --micro-batches 2
# tp x pp: the transfers of tp-replicated values in tp chunks, all-gathered (pp_scatter)
$REL check internvl2tiny.tp2.pp2 4 "$V" InternVL2Tiny "$V" InternVL2Tiny "$N" --tp 2 --pp 2 --micro-batches 2
$REL check gpt2tiny.pp2.dp2.zero1 4 "$G" GPT2Tiny "$G" GPT2Tiny 10 --pp 2 --dp 2 --zero 1 --micro-batches 2
$REL check internvl2tiny.pp2.novision 2 "$V" InternVL2Tiny "$P" V2 "$N" --pp 2 --micro-batches 2
check internvl2tiny.pp3.cross.zbh1 3 "$V" InternVL2Tiny "$P" V2x "$N" --pp 3 --micro-batches 4 --schedule zbh1
$REL check internvl2tiny.pp4.gpipe.counts 4 "$V" InternVL2Tiny "$P" V4 "$N" --pp 4 --micro-batches 2 --schedule gpipe
$REL check internvl2tiny.pp2.interleaved.counts 2 "$V" InternVL2Tiny "$P" V4i "$N" --micro-batches 2
check internvl2tiny.pp4.interleaved 4 "$V" InternVL2Tiny "$P" V8i "$N" --micro-batches 4
$REL check internvl2tiny.pp4.zbh1.counts 4 "$V" InternVL2Tiny "$P" V4 "$N" --pp 4 --micro-batches 4 --schedule zbh1
# the rest of the issue's matrix (models x pp 2, 4 x the four schedules;
# GPT2Tiny has too few units for pp = 4 x vpp = 2): release build only, the
# sanitizer build runs the cells above not marked $REL
if [ "$SAN" -eq 0 ]; then
  check gpt2tiny.pp4.gpipe 4 "$G" GPT2Tiny "$P" G4 10 --pp 4 --micro-batches 4 --schedule gpipe
  check gpt2tiny.pp4.zbh1 4 "$G" GPT2Tiny "$P" G4 10 --pp 4 --micro-batches 4 --schedule zbh1
  check internvl2tiny.pp2.gpipe 2 "$V" InternVL2Tiny "$P" V2 10 --pp 2 --micro-batches 2 --schedule gpipe
  check internvl2tiny.pp2.zbh1 2 "$V" InternVL2Tiny "$P" V2 10 --pp 2 --micro-batches 4 --schedule zbh1
  check internvl2tiny.pp4.1f1b 4 "$V" InternVL2Tiny "$P" V4 10 --pp 4 --micro-batches 4 --schedule 1f1b
  # pp with ZeRO-2 and -3 over dp, and with a frozen sub-model and LoRA
  # (only the adapters train; a frozen stage has no weight-gradient work)
  check gpt2tiny.pp2.dp2.zero2 4 "$G" GPT2Tiny "$G" GPT2Tiny 10 --pp 2 --dp 2 --zero 2 --micro-batches 2
  check gpt2tiny.pp2.dp2.zero3 4 "$G" GPT2Tiny "$G" GPT2Tiny 10 --pp 2 --dp 2 --zero 3 --micro-batches 2
  check internvl2tiny.frozen.pp2 2 "$V" InternVL2TinyFrozenVision "$V" InternVL2TinyFrozenVision 6 --pp 2 --micro-batches 2
  check internvl2tiny.lora.pp2 2 "$V" InternVL2TinyLoRA "$V" InternVL2TinyLoRA 6 --pp 2 --micro-batches 2
fi

# checkpoints: a pp=2 run's resumes serially and a serial run's under pp=2,
# and the losses go on as the straight serial run's (GPT2Tiny B = 8)
lossdiff() { # straight.jsonl resumed.jsonl: steps 6.. of the first against the second
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
d = max(abs(x - y) / abs(x) for x, y in zip(a[5:], b)) if len(b) == 5 else float("inf")
print("resumed: %d steps, loss largest relative difference %.2e" % (len(b), d))
sys.exit(d > 1e-5)
PY
}
SERIAL8="$T/GPT2Tiny--setB=8.serial"
"$MMC" compile "$G" --model GPT2Tiny --set B=8 --pp 2 --micro-batches 2 -o "$T/ppck" &&
  "${MPIRUN[@]}" 2 "$T/ppck" --steps 5 --eval-batches 1 --quiet --ckpt "$T/ck1" > /dev/null 2>&1 &&
  cp -r "$T/ck1" "$T/ck3" &&
  "$SERIAL8" --steps 10 --eval-batches 1 --quiet --ckpt "$T/ck1" --resume --log "$T/ck1.jsonl" --dump-logits "$T/ck1.logits" > /dev/null 2>&1 &&
  lossdiff "$T/GPT2Tiny--setB=8.serial.jsonl" "$T/ck1.jsonl" && ok || bad "pp=2 checkpoint resumed serially"
"$SERIAL8" --steps 5 --eval-batches 1 --quiet --ckpt "$T/ck2" > /dev/null 2>&1 &&
  "${MPIRUN[@]}" 2 "$T/ppck" --steps 10 --eval-batches 1 --quiet --ckpt "$T/ck2" --resume --log "$T/ck2.jsonl" > /dev/null 2>&1 &&
  lossdiff "$T/GPT2Tiny--setB=8.serial.jsonl" "$T/ck2.jsonl" && ok || bad "serial checkpoint resumed under pp=2"
# the pp = 2 checkpoint under pp = 4 (G4: GPT2Tiny with a four-stage list, 1F1B over 4
# micro-batches): the plan is not part of the fingerprint, only the model's parameters;
# its --dump-logits (the last stage's logits of the first test batch, B / 4 samples,
# broadcast to rank 0) against the serially resumed run's first B / 4 samples
"${MPIRUN[@]}" 4 "$T/gpt2tiny.pp4.1f1b" --steps 10 --eval-batches 4 --quiet --ckpt "$T/ck3" --resume --log "$T/ck3.jsonl" \
    --dump-logits "$T/ck3.logits" > "$T/ck3.out" 2>&1 &&
  lossdiff "$T/GPT2Tiny--setB=8.serial.jsonl" "$T/ck3.jsonl" && ok || { bad "pp=2 checkpoint resumed under pp=4"; tail -3 "$T/ck3.out"; }
/usr/bin/python3 - "$T/ck1.logits" "$T/ck3.logits" <<'PY' && ok || bad "pp=4 --dump-logits against the serial run's"
import array, sys
a, b = (array.array("f", open(p, "rb").read()) for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b)) / max(abs(x) for x in a) if b and len(b) * 4 == len(a) else float("inf")
print("pp=4 --dump-logits: %d of the serial's %d logits, largest difference %.1e of the largest" % (len(b), len(a), d))
sys.exit(d > 1e-5)
PY

# --trace: one track per rank, every action of the schedule as an event (the
# trainer of cell gpt2tiny.pp2.zbh1 above: GPT2Tiny B = 8, pp = 2, ZB-H1 over 4
# micro-batches; compiled here if that cell failed to)
TR="$T/gpt2tiny.pp2.zbh1"
{ [ -x "$TR" ] || { TR="$T/tr" && "$MMC" compile "$G" --model GPT2Tiny --set B=8 --pp 2 --micro-batches 4 --schedule zbh1 -o "$TR"; }; } &&
  "${MPIRUN[@]}" 2 "$TR" --steps 3 --eval-batches 1 --quiet --trace "$T/tr.json" --log "$T/tr.jsonl" > "$T/tr.out" 2>&1 &&
  /usr/bin/python3 - "$T/tr.json" <<'PY' && ok || bad "pp2.zbh1 --trace"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
count = lambda tid, name: sum(1 for e in ev if e["tid"] == tid and e["name"] == name)
want = {(0, "F"): 12, (0, "I"): 12, (0, "W"): 12, (1, "F"): 12, (1, "I"): 12, (1, "W"): 12,
        (0, "SEND_F"): 12, (1, "RECV_F"): 12, (1, "SEND_B"): 12, (0, "RECV_B"): 12,
        (0, "update"): 3, (1, "update"): 3}
got = {k: count(*k) for k in want}
print("trace: %d events; %s" % (len(ev), "ok" if got == want else "expected %s, got %s" % (want, got)))
sys.exit(got != want or any(e["dur"] < 0 or e["ts"] < 0 for e in ev))
PY

# the same run's transfers in the runtime's communication counters (rank 0's
# "comm" line): per step and micro-batch, stage 0 sends the boundary's one
# activation [B/M, T, h] forward and receives its gradient backward; the
# head's share of the tied embedding's gradient [V, h] is summed over the
# micro-batches on rank 1 and received once a step, in the update
# (docs/pp-memory.md), where stage 0 also sends the embedding's summed
# gradient [V, h] to rank 1, which holds the tied head's copy of it
# (stage-local parameters: no other gradient crosses); nothing else crosses
# the pp axis (B = 8, T = 32, h = 64, V = 256, M = 4, 3 steps)
/usr/bin/python3 - "$T/tr.jsonl" <<'PY' && ok || bad "pp2.zbh1: the transfers' counters"
import json, sys
c = [json.loads(l)["comm"] for l in open(sys.argv[1]) if '"comm"' in l][-1]
steps, B, T, h, V, M = 3, 8, 32, 64, 256, 4
want = {"forward": {"send.pp": {"n": 2, "calls": steps * M, "elems": steps * B * T * h, "bytes": 4 * steps * B * T * h}},
        "backward": {"recv.pp": {"n": 2, "calls": steps * M, "elems": steps * B * T * h, "bytes": 0}},
        "update": {"send.pp": {"n": 2, "calls": steps, "elems": steps * V * h, "bytes": 4 * steps * V * h},
                   "recv.pp": {"n": 2, "calls": steps, "elems": steps * V * h, "bytes": 0}}}
got = {ph: {k: v for k, v in c["train_" + ph].items() if k != "bytes"} for ph in want}
print("pp transfers counted: %s" % ("as the schedule says" if got == want else "expected %s, got %s" % (want, got)))
sys.exit(got != want or c["steps"] != steps)
PY

# a hung stage: pp rank 1 stops communicating at step 2 (MMRT_TEST_PP_STALL,
# runtime/comm/mmrt_pp.c); rank 0's --comm-timeout watchdog names the call it
# waits in (the wait for its first send to pp rank 1, which must be received
# before the slot's next part reuses its room), and world rank 1 as the one that did
# not arrive, and the job ends
"${MPIRUN[@]}" 2 -x MMRT_TEST_PP_STALL=1 "$TR" --steps 5 --eval-batches 1 --quiet --comm-timeout 2 > "$T/hang.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "(rank 0): error: send to pp rank 1 (stage 0's output, micro-batch 0) on axis pp (2 ranks; pp rank 0, world rank 0): did not finish within 2.0 s: world rank 1 did not arrive" "$T/hang.out"; then
  ok; grep -m1 "rank 0): error" "$T/hang.out"
else bad "a hung pp stage: exit $rc, expected the watchdog's message naming world rank 1"; grep "error" "$T/hang.out"; fi

# a pp = 2 trainer at another world size is refused on every rank
"${MPIRUN[@]}" 3 "$TR" --steps 1 --eval-batches 1 --quiet > "$T/ws.out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "the trainer was compiled for pp=2 = 2 ranks, but mpirun started 3 (start it with mpirun -np 2)" "$T/ws.out" &&
  ok || { bad "pp = 2 at -np 3: exit $rc"; tail -3 "$T/ws.out"; }

echo "mpi_pp: $pass passed, $fail failed"
[ $fail -eq 0 ]
