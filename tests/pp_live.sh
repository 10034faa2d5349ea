#!/usr/bin/env bash
# Pipeline memory plans against the trainer's order of events
# (tests/tools/pp_live.py, docs/pp-memory.md "Checking the live ranges"): for
# mpi_pp's and pp_stash's pipeline plans (GPipe, 1F1B, ZB-H1, interleaved;
# GPT2Tiny and InternVL2Tiny at pp = 2, 3, 4, with tp, dp + ZeRO, recompute),
# replaying each rank's part of a step as runtime/comm/mmrt_pp.c runs it, no
# two buffers of one slot or working set are alive at once at overlapping
# bytes, a non-blocking send's buffer counted alive until the trainer waits
# for it or the rank has heard from its receiver. Deterministic where mpi_pp
# sees a race one run in a few (internvl2tiny.pp4.interleaved: stage 5's
# input gradient to stage 4's W overwritten on rank 1 by stage 2's, before
# rank 0 received it). Also: the checker finds a planted overlap (a plan
# whose transfer keeps its sender's room only to its last reader).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
plain_script
LIVE="$MMC_SOURCE_DIR/tests/tools/pp_live.py"

# live name file model flags...: the plan of @train, checked
live() {
  local name=$1 file=$2 model=$3; shift 3
  if ! MMC_TEST_MEMPLAN_DUMP=1 "$MMC" plan "$file" -I "$S" --model "$model" "$@" > /dev/null 2> "$T/$name.dump"; then
    bad "$name: mmc plan"; grep -v '^[SANBU] ' "$T/$name.dump" | head -3; return
  fi
  $PY "$LIVE" "$T/$name.dump" "$name" > "$T/$name.out" && ok || { bad "$name: overlapping buffers"; head -5 "$T/$name.out"; }
}

cat > "$T/pp.mm" <<'MM'
import "gpt2.mm"
import "internvl2.mm"
model G4 extends GPT2Tiny { parallel { stages = [gpt.wte + gpt.wpe, gpt.h[0:1], gpt.h[1:2], gpt.ln_f] } }
model G4i extends GPT2Tiny {
  parallel { pp = 2; vpp = 2; schedule = interleaved; stages = [gpt.wte + gpt.wpe, gpt.h[0:1], gpt.h[1:2], gpt.ln_f] }
}
model V2 extends InternVL2Tiny { parallel { stages = [vision + projector, llm] } }
model V2x extends InternVL2Tiny { parallel { stages = [vision, projector + llm.embed + llm.blocks[0:1], llm.blocks[1:2] + llm.norm + llm.head] } }
model V4 extends InternVL2Tiny { parallel { stages = by_module(vision = [1, 1, 0, 0], llm = [0, 0, 1, 1]) } }
model V4i extends V4 { parallel { pp = 2; vpp = 2; schedule = interleaved; stages = by_module(vision = [1, 1, 0, 0], llm = [0, 0, 1, 1]) } }
model V8i extends InternVL2Tiny {
  parallel {
    pp = 4; vpp = 2; schedule = interleaved
    stages = [vision.embed + vision.cls + vision.pos, vision.blocks[0:1], vision.blocks[1:2], projector,
              llm.embed, llm.blocks[0:1], llm.blocks[1:2], llm.norm + llm.head]
  }
}
MM
pp_gpt_models R RP RI > "$T/s.mm"
P="$T/pp.mm"; G="$S/gpt2.mm"; V="$S/internvl2.mm"
live internvl2tiny.pp4.interleaved "$P" V8i --set B=8 --micro-batches 4
live internvl2tiny.pp4.interleaved.m8 "$P" V8i --set B=8 --micro-batches 8
live internvl2tiny.pp2.interleaved "$P" V4i --set B=8 --micro-batches 2
live internvl2tiny.pp2.interleaved.m4 "$P" V4i --set B=8 --micro-batches 4
live gpt2tiny.pp2.interleaved "$P" G4i --set B=8 --micro-batches 4
for s in gpipe 1f1b zbh1; do
  live gpt2tiny.pp2.$s "$G" GPT2Tiny --set B=8 --pp 2 --micro-batches 4 --schedule $s
  live gpt2tiny.pp4.$s "$P" G4 --set B=8 --pp 4 --micro-batches 4 --schedule $s
  live internvl2tiny.pp2.$s "$P" V2 --set B=8 --pp 2 --micro-batches 4 --schedule $s
  live internvl2tiny.pp4.$s "$P" V4 --set B=8 --pp 4 --micro-batches 4 --schedule $s
  live stash.pp2.$s "$T/s.mm" RP --schedule $s
done
live stash.pp2.interleaved "$T/s.mm" RI
live internvl2tiny.pp3.cross.zbh1 "$P" V2x --set B=8 --pp 3 --micro-batches 4 --schedule zbh1
live gpt2tiny.tp2.pp2 "$G" GPT2Tiny --set B=8 --tp 2 --pp 2 --micro-batches 2
live internvl2tiny.tp2.pp2 "$V" InternVL2Tiny --set B=8 --tp 2 --pp 2 --micro-batches 2
for z in 1 2 3; do live gpt2tiny.pp2.dp2.zero$z "$G" GPT2Tiny --set B=8 --pp 2 --dp 2 --zero $z --micro-batches 2; done
live internvl2tiny.frozen.pp2 "$V" InternVL2TinyFrozenVision --set B=8 --pp 2 --micro-batches 2
live internvl2tiny.lora.pp2 "$V" InternVL2TinyLoRA --set B=8 --pp 2 --micro-batches 2

# the checker itself: the interleaved plan with stage 5's input gradient
# (rank 1's slot, read by stage 4's W on rank 0) moved onto the bytes of a
# buffer rank 1 uses after that reader in node order, as a room kept only to
# its last reader allows (pp1t's plan): rank 1's slot must show the overlap
d="$T/internvl2tiny.pp4.interleaved.dump"
$PY - "$d" "$T/planted.dump" <<'PY' || bad "planting the overlap"
import sys
lines = open(sys.argv[1]).read().splitlines()
nodes, ops, bufs = {}, {}, {}
for l in lines:
    t = l.split()
    if t[0] == "N":
        nodes[int(t[1])] = (int(t[2]), int(t[3]), int(t[4], 16))
    elif t[0] == "U":
        ops.setdefault(int(t[2]), []).append((int(t[1]), t[3]))
    elif t[0] == "B":
        bufs[int(t[1])] = t
x = next(b for b, t in bufs.items() if t[2] == "act" and b in ops and
         {nodes[i][:2] for i, rw in ops[b] if rw == "w"} == {(5, 1)} and
         {nodes[i][:2] for i, rw in ops[b] if rw == "r"} == {(4, 2)})
end = max(i for i, rw in ops[x])
y = next(b for b, t in bufs.items() if t[2] == "act" and b in ops and int(t[4]) >= int(bufs[x][4]) and
         any(nodes[i][2] == 2 for i, rw in ops[b]) and
         all(i > end for i, rw in ops[b] if nodes[i][2] == 2))
bufs[x][3] = bufs[y][3]
out = [" ".join(bufs[int(l.split()[1])]) if l.startswith("B ") else l for l in lines]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("planted: buffer %d onto buffer %d's bytes" % (x, y))
PY
if $PY "$LIVE" "$T/planted.dump" planted > "$T/planted.out"; then
  bad "the planted overlap not found"
else
  grep -q "^planted: rank 1 ('slot', 0): buffer" "$T/planted.out" && ok || { bad "the planted overlap: not rank 1's slot"; head -3 "$T/planted.out"; }
fi

echo "pp_live: $pass passed, $fail failed"
[ $fail -eq 0 ]
