#!/usr/bin/env bash
# ZeRO-3 of parameters dp divides no dim of (issue 32; docs/planner.md,
# "ZeRO and indivisible parameters"): GPT2Tiny (dims 256 and 64) at dp = 3
# under mpirun -np 3, where passes/zero.c pads every parameter along dim 0
# to a multiple of 3 (258 and 66 rows, a piece of 86 or 22 rows a rank):
#  - the plan pads them all: no zero_replicated; the param arena the plan
#    gives and each rank allocates are the padded pieces' bytes counted here
#    from the shapes (ceil(n0 / 3) rows, 64-byte aligned), grad the same,
#    AdamW's state twice that;
#  - 10 steps against the serial trainer: losses within 5e-7 relative, the
#    final weights (gathered by --save-weights, the unpadded tensors) within
#    1e-3 of their update (tests/tools/close_runs.py);
#  - a checkpoint after 5 steps: the rank files hold only real rows (the
#    pieces of each tensor cover its unpadded dim 0 exactly: 86 + 86 + 84 of
#    256), the serial trainer resumes it and saves the very bytes the dp = 3
#    run saved at step 5, and its steps 6 to 10 match the serial run's
#    losses within 1e-5 relative.
#  - ZeRO-1 with 2 micro-batches a step against serial as above (release).
# Under ASan: 4 steps, the checkpoint at step 2.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
G="$S/gpt2.mm"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
PY=/usr/bin/python3
FL=(--model GPT2Tiny --set B=6)
N=10 CK=5 # steps, the checkpoint's step (the sanitizer build: 4 and 2)
[ "$SAN" = 1 ] && N=4 CK=2
"$MMC" compile "$G" "${FL[@]}" -o "$T/serial" || bad "compile serial"
"$MMC" compile "$G" "${FL[@]}" --dp 3 --zero 3 -o "$T/z3" || bad "compile dp = 3"
"$MMC" plan "$G" "${FL[@]}" --dp 3 --zero 3 --json > "$T/plan.json" || bad "plan"
"$MMC" plan "$G" "${FL[@]}" --json > "$T/plan1.json" || bad "plan serial"
$PY - "$T" <<'PY' && ok || bad "the plan does not pad every parameter"
import json, sys
p, s = (json.load(open(sys.argv[1] + f)) for f in ("/plan.json", "/plan1.json"))
a, b = p["by_role"]["param"], s["by_role"]["param"]
print(f"param arena {a} bytes a rank at dp = 3, serial {b}")
sys.exit(0 if "zero_replicated" not in p and b / 3 < a < b / 3 * 1.05 else 1)
PY
"$T/serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/init.st" > /dev/null || bad "serial init"
"$T/serial" --steps $N --eval-batches 1 --quiet --log "$T/serial.jsonl" --save-weights "$T/serial.st" > /dev/null ||
  bad "serial run"
"${MPIRUN[@]}" 3 "$T/z3" --steps $N --eval-batches 1 --log "$T/z3.jsonl" --save-weights "$T/z3.st" \
  > "$T/z3.out" 2>&1 || { bad "dp = 3: mpirun"; tail -5 "$T/z3.out"; }
# the arenas each rank allocated: the padded pieces, counted from the shapes
"$MMC" dump-ir "$G" "${FL[@]}" --after lower > "$T/lower.ir" || bad "dump-ir"
$PY - "$T/lower.ir" "$T/z3.out" "$T/plan.json" <<'PY' && ok || bad "per-rank parameter bytes"
import json, math, re, sys
al = lambda b: (b + 63) // 64 * 64  # each tensor 64-byte aligned (passes/memplan.h)
want = sum(al(4 * -(-int(m.group(1).split(",")[0]) // 3) * math.prod(int(x) for x in m.group(1).split(",")[1:]))
           for m in re.finditer(r"^param @\S+ : f32\[([0-9, ]*)\]", open(sys.argv[1]).read(), re.M))
rt = re.search(r"allocated arena bytes per rank: param=(\d+) grad=(\d+) opt=(\d+)", open(sys.argv[2]).read())
plan = json.load(open(sys.argv[3]))["by_role"]
got = [int(x) for x in rt.groups()] if rt else None
print(f"param bytes a rank: counted {want}, plan {plan['param']}, allocated {got}")
sys.exit(0 if got == [want, want, 2 * want] and plan["param"] == want and plan["opt"] == 2 * want else 1)
PY
$PY "$MMC_SOURCE_DIR/tests/tools/close_runs.py" dp3 "$T/serial.jsonl" "$T/z3.jsonl" "$T/init.st" \
  "$T/serial.st" "$T/z3.st" "$G" GPT2Tiny && ok || bad "dp = 3 differs from the serial run"
$PY - "$T/serial.jsonl" "$T/z3.jsonl" 5e-7 $N <<'PY' && ok || bad "dp = 3: losses beyond 5e-7"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"dp = 3: {len(b)} losses, largest relative difference {d:.2e}")
sys.exit(0 if len(a) == len(b) == int(sys.argv[4]) and d <= float(sys.argv[3]) else 1)
PY
# ZeRO-1 with two micro-batches a step (release): the padded gradient is
# the micro-batches' sum, reduce-scattered after the backward
if [ "$SAN" = 0 ]; then
  "$MMC" compile "$G" "${FL[@]}" --dp 3 --zero 1 --micro-batches 2 -o "$T/z1" || bad "compile zero = 1"
  "${MPIRUN[@]}" 3 "$T/z1" --steps $N --eval-batches 1 --quiet --log "$T/z1.jsonl" --save-weights "$T/z1.st" \
    > "$T/z1.out" 2>&1 || { bad "zero = 1: mpirun"; tail -5 "$T/z1.out"; }
  $PY "$MMC_SOURCE_DIR/tests/tools/close_runs.py" dp3.zero1.mb2 "$T/serial.jsonl" "$T/z1.jsonl" "$T/init.st" \
    "$T/serial.st" "$T/z1.st" "$G" GPT2Tiny && ok || bad "dp = 3 ZeRO-1, 2 micro-batches, differs from the serial run"
fi
# the checkpoint: written at dp = 3, resumed serially
"${MPIRUN[@]}" 3 "$T/z3" --steps $CK --eval-batches 1 --quiet --ckpt "$T/ck" --save-weights "$T/z5.st" \
  > "$T/z5.out" 2>&1 || { bad "dp = 3 with --ckpt"; tail -5 "$T/z5.out"; }
$PY - "$T/ck" <<'PY' && ok || bad "the rank files are not the unpadded tensors' pieces"
import glob, json, struct, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/step-*/rank-*.safetensors")):
    with open(f, "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        hd = json.loads(h.read(n))
    for k, v in hd.items():
        if k != "__metadata__": rows.setdefault(k, []).append(v["shape"][0])
bad = {k: r for k, r in rows.items() if k in ("gpt.wte.weight", "adamw.m.gpt.wte.weight") and sum(r) != 256}
bad.update({k: r for k, r in rows.items() if k == "gpt.wpe" and sum(r) != 64})
print("rows of gpt.wte.weight a rank file:", rows.get("gpt.wte.weight"), "of gpt.wpe:", rows.get("gpt.wpe"))
sys.exit(1 if bad or len(rows.get("gpt.wte.weight", [])) != 3 else 0)
PY
"$T/serial" --ckpt "$T/ck" --resume --steps $CK --eval-batches 1 --quiet --save-weights "$T/r5.st" > /dev/null 2>&1 ||
  bad "serial resume of the dp = 3 checkpoint"
cmp -s "$T/z5.st" "$T/r5.st" && ok || bad "the resumed weights differ from the dp = 3 run's at step 5"
"$T/serial" --ckpt "$T/ck" --resume --steps $N --eval-batches 1 --quiet --log "$T/r10.jsonl" > /dev/null 2>&1 ||
  bad "serial run on from the checkpoint"
$PY - "$T/serial.jsonl" "$T/r10.jsonl" $CK $N <<'PY' && ok || bad "resumed losses differ"
import json, sys
a, b = ({json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p) if '"loss"' in l} for p in sys.argv[1:3])
d = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print(f"resumed serially: steps {sorted(b)}, largest relative difference {d:.2e}")
sys.exit(0 if sorted(b) == list(range(int(sys.argv[3]) + 1, int(sys.argv[4]) + 1)) and d <= 1e-5 else 1)
PY
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
