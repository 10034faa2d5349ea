#!/usr/bin/env bash
# One gradient sum under dp with micro-batches (issue 32; docs/accumulation.md
# "Memory", docs/pp-memory.md): the deferred dp reductions' sums of the local
# gradients live in the grad arena for the whole step (each root's home,
# passes/memplan.c sums_of), the weight-gradient matmuls accumulate into
# them in place, an all-reduce reduces them in place, and neither the
# trainer nor a pipeline keeps a second sum of the reduced gradients.
# GPT2Tiny (B = 16, 2 micro-batches) at dp = 2: plain, ZeRO-1, -2, -3 on 2
# ranks, and pp = 2 x dp = 2 plain and ZeRO-1 on 4 ranks (stages [wte, wpe,
# h.0], [h.1, ln_f]); and dp = 1 on 1 rank and pp = 2 on 2, where each
# linear weight's gradient is its own sum (no pp or ZeRO-2 or dp = 1 cell
# under the sanitizers). Counted here from the
# parameter shapes (`mmc dump-ir --after lower`), n a parameter's elements,
# al(b) b rounded up to 64 bytes, "linear" the 2-D weights but the
# embeddings (their gradient is a matmul's), for the parameters a rank's
# stages make the gradient of:
#   - the sums in the grad arena (`grad_home_bytes`): sum al(4 n) over every
#     parameter under plain dp, over the linear weights under ZeRO and at
#     dp = 1;
#   - the sums beside the arenas (`grad_sum_bytes`): 0 under plain dp,
#     sum 4 (n + 1) over the other parameters under ZeRO (their
#     reduce-scatter's operand is a separate op's: a sum of its own) and at
#     dp = 1;
#   - pp = 1: the grad arena (`by_role.grad`) is those homes and, under
#     ZeRO, the reduce-scatters' shards (sum al(4 n / 2)), under ZeRO-1 and
#     -2 also the parameters gathered once a step (sum al(4 n), each whole:
#     docs/accumulation.md "Gathered once"), at dp = 1 the other gradients
#     (sum al(4 n)), nothing more;
#   - pp = 2: a rank's working set less its homes (and ZeRO's shards and
#     gathered parameters) holds
#     at most one layer's gradients (sum al(4 n) over h.0) beyond the dp = 1
#     plan's working set less all its stages' gradients (before, it held
#     every gradient of the stage: 281,856 bytes more on rank 0);
#   - the trainer: each rank's `gradient memory` line (the grad arena and
#     the sums it allocated) equals the plan's figures for its pp rank, and
#     its memory line's plan figure the plan's trainer_bytes;
#   - the losses of 3 steps within 1e-6 of the serial one-batch trainer's.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script
N=3
cat > "$T/g.mm" <<'MM'
import "gpt2.mm"
model S extends GPT2Tiny {
  let B = 16
  parallel { micro_batches = 2 }
}
model P extends S {
  parallel { pp = 2; micro_batches = 2; stages = [gpt.wte + gpt.wpe + gpt.h[0:1], gpt.h[1:2] + gpt.ln_f] }
}
MM
G=(-I "$S" "$T/g.mm")
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --after lower |
  sed -n 's/^param @\([^ ]*\) : f32\[\([0-9, ]*\)\].*/\1 \2/p' > "$T/params"
[ -s "$T/params" ] && ok || bad "no parameters in GPT2Tiny's IR"
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --set B=16 -o "$T/serial" || bad "serial: compile"
"$T/serial" --steps $N --eval-batches 1 --quiet --log "$T/serial.jsonl" > /dev/null 2>&1 || bad "serial: run"
"$MMC" plan "${G[@]}" --model P --dp 1 --json > "$T/ref1.json" || bad "plan pp = 2, dp = 1"

cell() { # name model ranks flags...
  local name=$1 model=$2 mpi=("${MPIRUN[@]}" $3); shift 3
  "$MMC" compile "${G[@]}" --model $model "$@" -o "$T/$name" || { bad "$name: compile"; return; }
  "$MMC" plan "${G[@]}" --model $model "$@" --json > "$T/$name.json" || { bad "$name: plan"; return; }
  "${mpi[@]}" "$T/$name" --steps $N --eval-batches 1 --log "$T/$name.jsonl" > "$T/$name.out" 2>&1 ||
    { bad "$name: mpirun"; tail -5 "$T/$name.out"; return; }
  /usr/bin/python3 - "$T" "$name" "$model" "$@" <<'PY' && ok || bad "$name"
import json, re, sys
T, name, model, flags = sys.argv[1], sys.argv[2], sys.argv[3], " ".join(sys.argv[4:])
zero = "--zero" in flags
# ZeRO-1/2 gather each parameter once a step into the grad arena (f32,
# whole), ZeRO-3 per region in the act arena
once = "--zero 1" in flags or "--zero 2" in flags
dp1 = "--dp 1" in flags  # no reduction: the linear weights' gradients are their own sums
pp = 2 if model == "P" else 1
al = lambda b: (b + 63) // 64 * 64
params = []
for line in open(T + "/params"):
    p, dims = line.split(" ", 1)
    n = 1
    for d in dims.split(","):
        n *= int(d)
    lin = dims.count(",") == 1 and "wte" not in p and "wpe" not in p
    # the stage that makes its gradient (the tied head's share: below)
    r = 1 if pp == 2 and (p.startswith("gpt.h.1.") or p.startswith("gpt.ln_f.")) else 0
    params.append((p, n, lin, r))
plan = json.load(open("%s/%s.json" % (T, name)))
ok = True
def want(r):
    mine = [(n, lin) for p, n, lin, q in params if q == r]
    home = sum(al(4 * n) for n, lin in mine if lin or not (zero or dp1))
    beside = sum(4 * (n + 1) for n, lin in mine if (zero or dp1) and not lin)
    # ZeRO's reduce-scatter shards; at dp = 1 the other gradients, to the update
    shards = sum(al(4 * (n // 2)) for n, lin in mine) if zero else 0
    if dp1:
        shards = sum(al(4 * n) for n, lin in mine if not lin)
    if once:  # and the parameters gathered once a step, whole
        shards += sum(al(4 * n) for n, lin in mine)
    return home, beside, shards
layer = sum(al(4 * n) for p, n, lin, q in params if p.startswith("gpt.h.0."))
if pp == 1:
    home, beside, shards = want(0)
    got = (plan.get("grad_home_bytes"), plan.get("grad_sum_bytes"), plan["by_role"]["grad"])
    good = got == (home, beside, home + shards)
    print("%s: sums in the grad arena %s, beside it %s, grad arena %s; counted %d, %d, %d (+ shards %d) %s"
          % (name, got[0], got[1], got[2], home, beside, home + shards, shards, "ok" if good else "WRONG"))
    ok &= good
    ranks = [(plan["by_role"]["grad"], plan["grad_sum_bytes"], plan["trainer_bytes"])]
else:
    ref1 = json.load(open(T + "/ref1.json"))["pp_ranks"]
    ranks = []
    for x in plan["pp_ranks"]:
        r = x["rank"]
        home, beside, shards = want(r)
        # the last stage sums the tied head's share of wte's gradient over the
        # micro-batches and sends it to stage 0 once a step (docs/pp-memory.md;
        # not under ZeRO, whose reduce-scatter of wte's gradient it cannot join)
        if r == 1 and not zero: beside += sum(4 * (n + 1) for p, n, lin, q in params if p == "gpt.wte.weight")
        got = (x["grad_home_bytes"], x["grad_sum_bytes"])
        good = got == (home, beside)
        ws = x["grad_bytes"] - home - shards
        bound = ref1[r]["grad_bytes"] - sum(al(4 * n) for p, n, lin, q in params if q == r) + layer
        g2 = 0 <= ws <= bound
        print("%s rank %d: sums in the grad arena %d, beside it %d, counted %d, %d %s; working set less them %d, at most %d %s"
              % (name, r, got[0], got[1], home, beside, "ok" if good else "WRONG", ws, bound, "ok" if g2 else "WRONG"))
        ok &= good and g2
        ranks.append((x["grad_bytes"], x["grad_sum_bytes"], x["trainer_bytes"]))
out = open("%s/%s.out" % (T, name)).read()
told = re.findall(r"^gradient memory(?: of rank (\d+) of (\d+))?: grad arena (\d+) bytes, sums beside it (\d+) bytes", out, re.M)
figs = re.findall(r"^memory(?: of rank (\d+) of \d+)?: .*?, plan (\d+) bytes", out, re.M)
world = int(told[0][1] or 1) if told else 0
seen = sorted((int(g), int(s)) for _, _, g, s in told)
expect = sorted((g, s) for g, s, _ in ranks for _ in range(world // len(ranks))) if world else [None]
good = len(told) == world > 0 and seen == expect and sorted(int(f) for _, f in figs) == sorted(
    t for _, _, t in ranks for _ in range(world // len(ranks)))
print("%s: allocated (grad arena, sums) per rank %s, planned %s; plan figures %s %s"
      % (name, seen, expect, sorted(int(f) for _, f in figs), "ok" if good else "WRONG"))
ok &= good
loss = lambda p: [json.loads(l)["loss"] for l in open(p) if '"samples_per_s"' in l]
a, b = loss(T + "/serial.jsonl"), loss("%s/%s.jsonl" % (T, name))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) and a else 1
print("%s: %d steps, losses within %.2e of serial's %s" % (name, len(b), worst, "ok" if worst <= 1e-6 else "WRONG (1e-6)"))
ok &= worst <= 1e-6
sys.exit(0 if ok else 1)
PY
}

cell dp2 S 2 --dp 2
cell dp2.zero1 S 2 --dp 2 --zero 1
[ "$SAN" = 1 ] || cell dp2.zero2 S 2 --dp 2 --zero 2
cell dp2.zero3 S 2 --dp 2 --zero 3
[ "$SAN" = 1 ] || cell dp1 S 1 --dp 1
[ "$SAN" = 1 ] || cell pp2.dp1 P 2 --dp 1
[ "$SAN" = 1 ] || cell pp2.dp2 P 4 --dp 2
[ "$SAN" = 1 ] || cell pp2.dp2.zero1 P 4 --dp 2 --zero 1
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
