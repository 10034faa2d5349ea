#!/usr/bin/env bash
# ZeRO under a pipeline, as `mmc plan` plans and predicts it (issue 32;
# docs/accumulation.md "Gathered once"): a GPT (8 layers of width 128,
# stages [wte + wpe + h.0-1], [h.2-3], [h.4-5], [h.6-7 + ln_f]) at pp = 4 x
# dp = 4, 8 micro-batches, full recompute, bf16, AdamW, with zero = 0, 1,
# 2 and 3. From the parameter shapes (`mmc dump-ir --after lower`), n a
# parameter's elements, al(b) b rounded up to 64 bytes, each rank's
# parameters those of its stages:
#   - every pipeline rank's `param_bytes` and `opt_bytes` (`mmc plan
#     --json` pp_ranks) are sum al(4 n) and sum 2 al(4 n) without ZeRO,
#     sum al(4 n / dp) and sum 2 al(4 n / dp) with it (without ZeRO the last
#     rank holds the tied embedding too: the head reads its bf16 cast there): the stored shard and
#     AdamW's two moments, the state over dp; ZeRO-3 with the stages the
#     compiler cuts (no list) too, within 1 KiB (ZeRO-3 before: every parameter on rank 0, its backward gathers of
#     ln_f on stage 0 pulling the whole backward there);
#   - a micro-batch in flight holds as much with ZeRO-1/2/3 as without
#     (`act_bytes`): the parameters are gathered once a step into the grad
#     arena, not into each slot (before: the stage's parameters, f32, once
#     per micro-batch in flight: rank 0's slot 7 x larger);
#   - each rank's planned peak with ZeRO-1 and ZeRO-3 at most the plain
#     one's less half of B = sum al(4 n) (its parameters' f32 bytes): ZeRO saves
#     3 B (1 - 1/dp) of parameters and state and adds the gathered copies
#     (B) and the gradient shards (B / dp), B net at dp = 4;
#   - the predicted step on `a100` (16 devices) with ZeRO-1 and -2 within 3%
#     of the plain one's (the gathers once a step, before the schedule, the
#     reduce-scatter once on the last W part; before: a gather per
#     micro-batch in every forward, 17% slower).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
plain_script
gpt_model Z 32 64 "vocab = 512, ctx = 64, dim = 128, depth = 8, heads = 4" \
  "precision = bf16; optimizer = adamw(lr = 1e-4)" \
  "pp = 4; dp = 4; micro_batches = 8; recompute = full; stages = [gpt.wte + gpt.wpe + gpt.h[0:2], gpt.h[2:4], gpt.h[4:6], gpt.h[6:8] + gpt.ln_f]" \
  > "$T/z.mm"
"$MMC" dump-ir "$T/z.mm" -I "$S" --after lower |
  sed -n 's/^param @\([^ ]*\) : f32\[\([0-9, ]*\)\].*/\1 \2/p' > "$T/params"
[ -s "$T/params" ] && ok || bad "no parameters in the model's IR"
for z in 0 1 2 3; do
  "$MMC" plan "$T/z.mm" -I "$S" --zero $z --device a100 --devices 16 --json > "$T/z$z.json" ||
    bad "plan zero = $z"
done
# ZeRO-3 with the stages cut by the compiler (no list): the same ranks
sed 's/; stages = \[.*\]//' "$T/z.mm" > "$T/free.mm"
"$MMC" plan "$T/free.mm" -I "$S" --zero 3 --device a100 --devices 16 --json > "$T/free.json" ||
  bad "plan zero = 3 without a stage list"
$PY - "$T" <<'PY' && ok || bad "ZeRO under pp: the plan's figures"
import json, sys
T = sys.argv[1]
dp = 4
al = lambda b: (b + 63) // 64 * 64
stages = [("gpt.wte.", "gpt.wpe", "gpt.h.0.", "gpt.h.1."), ("gpt.h.2.", "gpt.h.3."),
          ("gpt.h.4.", "gpt.h.5."), ("gpt.h.6.", "gpt.h.7.", "gpt.ln_f.")]
mine = [[] for _ in stages]
for line in open(T + "/params"):
    p, dims = line.split(" ", 1)
    n = 1
    for d in dims.split(","):
        n *= int(d)
    r = [i for i, s in enumerate(stages) if p.startswith(s)]
    assert len(r) == 1, p
    mine[r[0]].append(n)
    if p.startswith("gpt.wte."):
        wte = n
plans = {z: json.load(open("%s/z%d.json" % (T, z))) for z in (0, 1, 2, 3)}
ok = True
for z, plan in plans.items():
    for x in plan["pp_ranks"]:
        r = x["rank"]
        w = dp if z else 1
        # without ZeRO the last rank holds the tied embedding too: the
        # head's bf16 cast of it, a node of parameters only, runs there
        # (passes/pp_stage.c); with ZeRO the cast reads the gathered copy
        held = mine[r] + ([wte] if z == 0 and r == len(stages) - 1 else [])
        want = (sum(al(4 * n // w) for n in held), sum(2 * al(4 * n // w) for n in held))
        got = (x["param_bytes"], x["opt_bytes"])
        good = got == want
        print("zero %d rank %d: param, opt %s, counted %s %s" % (z, r, got, want, "ok" if good else "WRONG"))
        ok &= good
        x0 = plans[0]["pp_ranks"][r]
        if z:
            good = x["act_bytes"] == x0["act_bytes"]
            print("zero %d rank %d: a micro-batch in flight %d bytes, without ZeRO %d %s"
                  % (z, r, x["act_bytes"], x0["act_bytes"], "ok" if good else "WRONG"))
            ok &= good
        if z in (1, 3):
            B = sum(al(4 * n) for n in mine[r])
            good = x["peak_bytes"] <= x0["peak_bytes"] - B // 2
            print("zero %d rank %d: peak %d, without ZeRO %d, at most %d less half its parameters' %d %s"
                  % (z, r, x["peak_bytes"], x0["peak_bytes"], x0["peak_bytes"] - B // 2, B, "ok" if good else "WRONG"))
            ok &= good
# ZeRO-3, the stages the compiler's: each rank's parameters and state
# within 1 KiB of its stages' shards (an unlayered ln_f gathered in the
# forward stays with stage 0), a micro-batch in flight as without ZeRO
for x in json.load(open(T + "/free.json"))["pp_ranks"]:
    r, x0 = x["rank"], plans[0]["pp_ranks"][x["rank"]]
    want = sum(al(4 * n // dp) for n in mine[r])
    good = want <= x["param_bytes"] <= want + 1024 and 2 * want <= x["opt_bytes"] <= 2 * want + 2048 \
        and x["act_bytes"] == x0["act_bytes"]
    print("zero 3, no stage list, rank %d: param %d, opt %d (its shards %d, 2 x), in flight %d (without ZeRO %d) %s"
          % (r, x["param_bytes"], x["opt_bytes"], want, x["act_bytes"], x0["act_bytes"], "ok" if good else "WRONG"))
    ok &= good
s0 = plans[0]["predicted"]["step_s"]
for z in (1, 2):
    s = plans[z]["predicted"]["step_s"]
    good = abs(s / s0 - 1) <= 0.03
    print("zero %d: predicted step %.6g s, without ZeRO %.6g s (%+.1f%%, within 3%%) %s"
          % (z, s, s0, 100 * (s / s0 - 1), "ok" if good else "WRONG"))
    ok &= good
sys.exit(0 if ok else 1)
PY
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
