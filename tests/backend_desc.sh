#!/usr/bin/env bash
# The model descriptor field by field: GPT2Tiny compiled to an object
# (serial, and dp 2 x tp 2), loaded as a shared object by
# tests/tools/desc_probe.c, which reads `mm_model` through the C structs of
# runtime/model/mmrt_main.h (fields from runtime/model/mmrt_desc.def). Every value is
# checked against an independent source: the arena sizes against
# `mmc plan --json`, every parameter's name, shape, offset and
# initialisation and every input's shape and offset against `mmc dump-ir`,
# the train section against the model's source (gpt2.mm), the mesh against
# the flags. A field codegen filled at the wrong place, or of the wrong
# type, fails here.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CC=${CC:-cc}
if ! $CC -std=c11 -Wall -Wextra -Werror $(for d in "$MMC_SOURCE_DIR"/runtime/*/; do printf -- "-I%s " "$d"; done) \
    "$MMC_SOURCE_DIR/tests/tools/desc_probe.c" -o "$T/probe" -ldl; then
  echo "FAIL: desc_probe does not build"; exit 1
fi
fail=0
for cfg in serial:"" mesh:"--dp 2 --tp 2"; do
  name=${cfg%%:*} flags=${cfg#*:}
  # shellcheck disable=SC2086
  if ! "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny $flags --emit obj -o "$T/$name.o" ||
     ! $CC -shared -o "$T/$name.so" "$T/$name.o" ||
     ! "$T/probe" "$T/$name.so" > "$T/$name.desc"; then
    echo "FAIL: $name: compile, link or probe"; fail=1; continue
  fi
  # shellcheck disable=SC2086
  if ! "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny $flags --json > "$T/$name.plan" ||
     ! "$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny $flags > "$T/$name.ir"; then
    echo "FAIL: $name: plan or dump-ir"; fail=1; continue
  fi
  /usr/bin/python3 - "$name" "$T/$name.desc" "$T/$name.plan" "$T/$name.ir" "$MMC_SOURCE_DIR" <<'PY' || fail=1
import json, re, sys
name, descf, planf, irf, src = sys.argv[1:]
d = dict(l.rstrip("\n").split("=", 1) for l in open(descf))
plan = json.load(open(planf))
ir = open(irf).read()
bad = []
def want(field, value):
    if d.get(field) != str(value):
        bad.append("%s = %s, want %s" % (field, d.get(field), value))
abi = re.search(r"#define MMRT_ABI_VERSION (\d+)", open(src + "/runtime/model/mmrt_main.h").read()).group(1)
want("model.abi_version", abi)
want("model.name", "GPT2Tiny")
if not d.get("model.fingerprint", "").startswith("GPT2Tiny-"): bad.append("fingerprint")
r = plan["by_role"]
want("model.arena_bytes", ",".join(str(r[k]) for k in ("param", "grad", "opt", "act", "input")))
# the train section of GPT2Tiny in gpt2.mm: adamw(lr = 1e-3, betas = [0.9, 0.95],
# weight_decay = 0.1, clip = 1.0), schedule constant, B = 4
for f, v in (("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.95), ("weight_decay", 0.1), ("clip", 1.0),
             ("momentum", 0.0)):
    if abs(float(d.get("model." + f, "nan")) - v) > 1e-12: bad.append("%s = %s, want %g" % (f, d.get("model." + f), v))
want("model.optim", 0); want("model.lr_sched", 0); want("model.batch", 4)
want("model.mesh", "2,1,2" if name == "mesh" else "1,1,1")
want("model.task", 0); want("model.train_step", "set"); want("model.eval_step", "set")
want("model.prefill_step", "null"); want("model.decode_step", "null")
want("model.image_tokens", 0); want("model.lora_rank", 0); want("model.ignore_index", -100)
want("model.logits_classes", 256)
# every parameter as dump-ir prints it: shape (global), offset, init
INIT = {"zeros": 1, "ones": 2, "fill": 3, "normal": 4, "uniform": 5, "fan_in": 6}
params = re.findall(r"^param @(\S+) : f32\[([\d, ]*)\]\{([^}]*)\} mem\(param, (\d+)\)(?: init\((\w+)(?:, ([-\d.e]+))?)?", ir, re.M)
if len(params) < 20: bad.append("only %d params in dump-ir" % len(params))
nparams = int(d.get("model.nparams", 0))
names = [k[6:-5] for k in d if k.startswith("param.") and k.endswith(".name")]
for p, shape, pl, off, init, a in params:
    dims = [int(x) for x in shape.split(",")] if shape.strip() else []
    pre = "param.%s." % p
    want(pre + "ndim", len(dims))
    want(pre + "offset", off)
    want(pre + "arena", 0)
    want(pre + "dtype", 0)
    if init: want(pre + "init", INIT[init])
    if a:
        if abs(float(d.get(pre + "init_a", "nan")) - float(a)) > 1e-9: bad.append(pre + "init_a")
    if name == "serial": want(pre + "shape", ",".join(str(x) for x in dims + [0] * (8 - len(dims))))
    want(pre + "rows", dims[0] if dims else 1)  # no vocabulary padding: 256 divides by tp
if len(names) != nparams: bad.append("%d param lines, nparams %s" % (len(names), nparams))
# the inputs of @train, i32[4, 32] ids and labels at their input offsets
for inp, off in re.findall(r"%(ids|labels) : i32\[4, 32\]\{[^}]*\} mem\(input, (\d+)\)", ir.split("func @train")[1].split("\n")[0]):
    want("input.%s.offset" % inp, off); want("input.%s.dtype" % inp, 3); want("input.%s.arena" % inp, 4)
    want("input.%s.shape" % inp, "4,32,0,0,0,0,0,0")
want("model.ninputs", 4)
if name == "mesh":  # the vocabulary-parallel embedding table: dim 0 split by tp (bit 2)
    want("param.gpt.wte.weight.split", "4,0,0,0,0,0,0,0")
    want("param.gpt.wte.weight.shape", "256,64,0,0,0,0,0,0")
for b in bad: print("FAIL: %s: %s" % (name, b))
print("%s: %d fields, %d params checked, %d wrong" % (name, len(d), len(params), len(bad)))
sys.exit(1 if bad else 0)
PY
done
# The pipeline's records (MmrtPpRank, MmrtPpAction, MmrtPpRoute): GPT2Tiny
# under pp = 2, each rank's actions against the textbook GPipe and 1F1B
# orders (ZB-H1's: each micro-batch's F, I and W of the rank's stage once,
# in that order, and micro-batches in order within each part), its arenas
# against `mmc plan --json`'s pp_ranks, the routes and accum stages against
# the counts and stages
for cfg in gpipe:"--micro-batches 2 --schedule gpipe" 1f1b:"--micro-batches 4 --schedule 1f1b" zbh1:"--micro-batches 4 --schedule zbh1"; do
  name=${cfg%%:*} flags="--pp 2 ${cfg#*:}"
  # shellcheck disable=SC2086
  if ! "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny $flags --emit obj -o "$T/$name.o" ||
     ! $CC -shared -o "$T/$name.so" "$T/$name.o" || ! "$T/probe" "$T/$name.so" > "$T/$name.desc" ||
     ! "$MMC" plan "$S/gpt2.mm" --model GPT2Tiny $flags --json > "$T/$name.plan"; then
    echo "FAIL: $name: compile, link, probe or plan"; fail=1; continue
  fi
  /usr/bin/python3 - "$name" "$T/$name.desc" "$T/$name.plan" <<'PY' || fail=1
import json, re, sys
name, descf, planf = sys.argv[1:]
d = dict(l.rstrip("\n").split("=", 1) for l in open(descf))
plan = json.load(open(planf))
P, M = 2, 2 if name == "gpipe" else 4
bad = []
def want(field, value):
    if d.get(field) != str(value):
        bad.append("%s = %s, want %s" % (field, d.get(field), value))
def textbook(r):
    if name == "gpipe":
        return ["%dF%d" % (r, k) for k in range(M)] + ["%dB%d" % (r, k) for k in range(M)]
    w = min(P - 1 - r, M)  # 1F1B: warm-up forwards, then one forward one backward
    acts = ["%dF%d" % (r, k) for k in range(w)]
    for k in range(M - w):
        acts += ["%dF%d" % (r, w + k), "%dB%d" % (r, k)]
    return acts + ["%dB%d" % (r, k) for k in range(M - w, M)]
def zbh1_ok(r, acts):
    per = {}
    for a in acts:
        m = re.fullmatch(r"(\d+)([FIW])(\d+)", a)
        if not m or int(m.group(1)) != r: return False
        per.setdefault(m.group(2), []).append(int(m.group(3)))
    pos = {a: i for i, a in enumerate(acts)}
    return (all(per.get(q) == list(range(M)) for q in "FIW") and len(acts) == 3 * M and
            all(pos["%dF%d" % (r, k)] < pos["%dI%d" % (r, k)] < pos["%dW%d" % (r, k)] for k in range(M)))
first = 0
for r in range(P):
    if name == "zbh1":
        acts = d.get("pp.actions.%d" % r, "").split()
        if not zbh1_ok(r, acts): bad.append("pp.actions.%d = %s: not a ZB-H1 list" % (r, " ".join(acts)))
    else:
        acts = textbook(r)
        want("pp.actions.%d" % r, " ".join(acts))
    want("pp.rank.%d.first" % r, first); want("pp.rank.%d.nactions" % r, len(acts))
    first += len(acts)
    pr = plan["pp_ranks"][r]
    want("pp.rank.%d.act" % r, pr["act_bytes"]); want("pp.rank.%d.act0" % r, pr["first_act_bytes"])
    want("pp.rank.%d.grad0" % r, pr["grad_bytes"])
want("model.pp", P); want("model.pp_stages", P)
for key, n, stage in (("xfer_route", "pp_nxfer", lambda f: f // 3), ("eval_route", "pp_eval_nxfer", lambda f: f)):
    routes = [tuple(map(int, x.split(">"))) for x in d.get("pp." + key, "").split()]
    if len(routes) != int(d.get("model." + n, -1)) or not routes: bad.append("%s: %d routes" % (key, len(routes)))
    for f, t in routes:  # each from one pipeline rank to the other
        if stage(f) % P == stage(t) % P or not 0 <= stage(f) < P or not 0 <= stage(t) < P: bad.append("%s %d>%d" % (key, f, t))
acc = d.get("pp.accum_stage", "").split()
if len(acc) != int(d.get("model.naccum", -1)) or set(acc) != {"0", "1"}: bad.append("accum_stage %s" % acc)
for b in bad: print("FAIL: %s: %s" % (name, b))
print("pp %s: %d ranks, %d routes checked, %d wrong" % (name, P, len(d.get("pp.xfer_route", "").split()), len(bad)))
sys.exit(1 if bad else 0)
PY
done
exit $fail
