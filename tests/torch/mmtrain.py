"""The training settings of an .mm model read by the test references
themselves, the weight comparison the parity tests share, and safetensors
read and written with numpy only.

train_settings(path, model): the model's `train { }` section (or, for a
model that `extends` another and has none, the base's), read from the .mm
text with the defaults of lang/REFERENCE.md: adamw(lr = 1e-3, betas =
[0.9, 0.999], eps = 1e-8, weight_decay = 0, clip = 0), schedule constant,
cosine and linear(warmup = 0, min_lr = 0), lora(rank, alpha = rank). Only literal
values are understood; anything else is an error naming the file.

lr_at(cfg, step, total): the learning rate of a step (1-based) of a run of
`total` steps, written from the schedule's definition (linear warm-up to
lr over `warmup` steps, then constant, half a cosine from lr down to min_lr
at the last step, or a straight line to it), independently of
runtime/programs/mmrt_main.c.

compare_weights(...): every trained tensor of the run under test against
the reference, relative to the size of its update:
    ||w_run - w_ref|| <= 1e-3 * ||w_ref - w_init|| + 1e-7   (norms per tensor)
so a tensor that did not move, moved a third, or moved the wrong way fails
however small its update is next to its values. Tensors whose update is at
rounding level by construction (ROUNDING_LEVEL: their gradient is zero in
exact arithmetic, so AdamW turns each side's rounding noise into lr-sized
steps of arbitrary sign) are named and checked element by element on their
step sizes; frozen tensors must keep their initial bits on both sides."""
import json, math, os, re, struct

import numpy as np

W_RTOL, W_ATOL = 1e-3, 1e-7

# name suffix -> why its update is at rounding level
ROUNDING_LEVEL = {
    ".k_proj.bias": "a key bias adds q.b to a whole row of scores, which softmax ignores: its gradient is 0 "
                    "in exact arithmetic",
    "_attn.k.bias": "WF-VAE's mid-block attention key bias (a 1x1x1 conv bias): the same reason as .k_proj.bias",
    ".attn2.to_k.bias": "VideoDiT's cross-attention key bias, the same (self-attention's, rotated by RoPE, is not)",
}


# ---------------------------------------------------------------- safetensors
_DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8}
_DT_BACK = {np.dtype(v): k for k, v in _DT.items()}


def st_load(path):
    """Returns ({name: np.ndarray}, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        if t["dtype"] == "BF16":
            raw = np.frombuffer(data[base + b:base + e], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[base + b:base + e], dtype=_DT[t["dtype"]])
        out[name] = arr.reshape(t["shape"]).copy()
    return out, meta


def st_save(path, tensors, meta=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.tobytes()
        header[name] = {"dtype": _DT_BACK[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class SettingsError(Exception):
    pass


# ---------------------------------------------------------------- the .mm train section
def _strip_comments(text):
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _match(text, i, open_c, close_c):
    """Index just past the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SettingsError("unbalanced %s" % open_c)


def _model_body(path, model, search=(), seen=None):
    """(body text, base model name or None, file) of `model` in path or a file it imports
    (found in the importing file's folder, then in the folders of `search`, as mmc -I)."""
    seen = set() if seen is None else seen
    if path in seen:
        return None
    seen.add(path)
    text = _strip_comments(open(path).read())
    m = re.search(r"\bmodel\s+%s\b" % re.escape(model), text)
    if m:
        i = m.end()
        while text[i].isspace():
            i += 1
        if text[i] == "(":
            i = _match(text, i, "(", ")")
        rest = re.match(r"\s*(?:extends\s+(\w+))?\s*\{", text[i:])
        if not rest:
            raise SettingsError("%s: model %s: expected '{' after its name" % (path, model))
        start = i + rest.end() - 1
        return text[start + 1:_match(text, start, "{", "}") - 1], rest.group(1), path
    for imp in re.findall(r'\bimport\s+"([^"]+)"', text):
        where = [os.path.join(d, imp) for d in (os.path.dirname(path),) + tuple(search)]
        where = [f for f in where if os.path.isfile(f)]
        if not where:
            raise SettingsError("%s: import \"%s\" not found" % (path, imp))
        r = _model_body(where[0], model, search, seen)
        if r:
            return r
    return None


def _section(body, name):
    """The text inside `name { ... }` at the top level of a model body, or None."""
    depth, i = 0, 0
    while i < len(body):
        c = body[i]
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif depth == 0:
            m = re.match(r"\b%s\s*\{" % name, body[i:])
            if m and (i == 0 or not (body[i - 1].isalnum() or body[i - 1] == "_")):
                start = i + m.end() - 1
                return body[start + 1:_match(body, start, "{", "}") - 1]
        i += 1
    return None


_TOKEN = re.compile(r'\s*(?:(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_]\w*)|'
                    r'(?P<str>"[^"]*")|(?P<op>[\[\](),=]))')


class _Parser:
    def __init__(self, text, where):
        self.toks, self.where, i = [], where, 0
        while i < len(text):
            m = _TOKEN.match(text, i)
            if not m or m.end() == i:
                if text[i:].strip() == "":
                    break
                raise SettingsError("%s: cannot read '%s' (the reference understands literal settings only)" %
                                    (where, text[i:].strip()[:40]))
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind)))
            i = m.end()
        self.k = 0

    def peek(self):
        return self.toks[self.k] if self.k < len(self.toks) else (None, None)

    def take(self, want=None):
        t = self.peek()
        if want and t[1] != want:
            raise SettingsError("%s: expected '%s', found '%s'" % (self.where, want, t[1]))
        self.k += 1
        return t

    def value(self):
        kind, v = self.take()
        if kind == "num":
            return float(v)
        if kind == "str":
            return v[1:-1]
        if v == "[":
            items = []
            while self.peek()[1] != "]":
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.take()
            self.take("]")
            return items
        if kind == "name":
            if v in ("true", "false"):
                return v == "true"
            if self.peek()[1] != "(":
                return ("sym", v)
            self.take("(")
            args = {}
            while self.peek()[1] != ")":
                key = self.take()[1]
                self.take("=")
                args[key] = self.value()
                if self.peek()[1] == ",":
                    self.take()
            self.take(")")
            return ("call", v, args)
        raise SettingsError("%s: unexpected '%s'" % (self.where, v))


def _settings(text, where):
    """name -> value of the `name = value` lines (newline or ';' separated) of a section."""
    out, depth, cur = {}, 0, []
    parts = []
    for c in text + "\n":
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        if depth == 0 and c in "\n;":
            if "".join(cur).strip():
                parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    for part in parts:
        name, eq, value = part.partition("=")
        if not eq:
            raise SettingsError("%s: expected 'name = value', found '%s'" % (where, part.strip()))
        p = _Parser(value, "%s: %s" % (where, name.strip()))
        out[name.strip()] = p.value()
        if p.peek()[0] is not None:
            raise SettingsError("%s: %s: unexpected '%s'" % (where, name.strip(), p.peek()[1]))
    return out


def _num(v, where):
    if not isinstance(v, float):
        raise SettingsError("%s: expected a number, found %r" % (where, v))
    return v


def train_settings(path, model, search=()):
    """The optimizer, schedule, clip, freeze and LoRA settings of model's train section
    (imports also searched in the folders of `search`, as mmc -I)."""
    found = _model_body(path, model, search)
    if not found:
        raise SettingsError("%s: no model %s" % (path, model))
    body, base, where = found
    sec = _section(body, "train")
    while sec is None and base:
        found = _model_body(path, base, search)
        if not found:
            raise SettingsError("%s: no model %s (the base of %s)" % (path, base, model))
        body, base, where = found
        sec = _section(body, "train")
    cfg = {"optimizer": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
           "clip": 0.0, "schedule": "constant", "warmup": 0, "min_lr": 0.0, "freeze": [], "lora_scale": None,
           "precision": "fp32", "gan": None}
    s = _settings(sec or "", "%s: model %s: train" % (where, model))
    for key, v in s.items():
        at = "%s: model %s: train: %s" % (where, model, key)
        if key == "optimizer":
            if not (isinstance(v, tuple) and v[0] == "call" and v[1] == "adamw"):
                raise SettingsError("%s: the reference implements adamw(...) only, not %r" % (at, v))
            for k, a in v[2].items():
                if k == "betas":
                    cfg["beta1"], cfg["beta2"] = (_num(x, at) for x in a)
                elif k in ("lr", "eps", "weight_decay", "clip"):
                    cfg[k] = _num(a, at)
                else:
                    raise SettingsError("%s: unknown adamw setting '%s'" % (at, k))
        elif key == "schedule":
            kinds = ("constant", "cosine", "linear")
            if isinstance(v, tuple) and v[0] == "sym" and v[1] in kinds:
                cfg["schedule"] = v[1]
            elif isinstance(v, tuple) and v[0] == "call" and v[1] in kinds:
                cfg["schedule"] = v[1]
                for k, a in v[2].items():
                    if k == "warmup":
                        cfg["warmup"] = int(_num(a, at))
                    elif k == "min_lr" and v[1] != "constant":
                        cfg["min_lr"] = _num(a, at)
                    else:
                        raise SettingsError("%s: unknown %s setting '%s'" % (at, v[1], k))
            else:
                raise SettingsError("%s: expected constant, cosine(...) or linear(...), found %r" % (at, v))
        elif key == "clip":
            cfg["clip"] = _num(v, at)
        elif key == "freeze":
            cfg["freeze"] = [x[1] for x in v]
        elif key == "lora":
            rank = _num(v[2]["rank"], at)
            cfg["lora_scale"] = _num(v[2].get("alpha", rank), at) / rank
        elif key == "precision":
            if v not in (("sym", "fp32"), ("sym", "bf16")):
                raise SettingsError("%s: expected fp32 or bf16, found %r" % (at, v))
            cfg["precision"] = v[1]
        elif key == "gan":  # gan(discriminator = disc, weight = X, start = N)
            cfg["gan"] = {"discriminator": v[2]["discriminator"][1], "weight": _num(v[2]["weight"], at),
                          "start": int(_num(v[2].get("start", 0), at))}
        elif key not in ("steps", "batch"):
            raise SettingsError("%s: unknown train setting" % at)
    return cfg


def lr_at(cfg, step, total):
    """The learning rate of 1-based step `step` of `total` steps."""
    lr = cfg["lr"]
    w = cfg["warmup"]
    if w > 0 and step <= w:
        return lr * step / w  # linear warm-up: lr/w at step 1, lr at step w
    if cfg["schedule"] == "constant" or total <= w:
        return lr
    progress = min(1.0, (step - w) / (total - w))  # 0 right after warm-up, 1 at the last step
    if cfg["schedule"] == "linear":
        return lr - (lr - cfg["min_lr"]) * progress
    return cfg["min_lr"] + (lr - cfg["min_lr"]) * (1 + math.cos(math.pi * progress)) / 2


def trained(cfg, name):
    """Whether the optimizer updates parameter `name` under these settings."""
    if name.startswith(("adamw.", "sgd.")):
        return False
    if cfg["lora_scale"] is not None:
        return ".lora_" in name
    return not any(name == f or name.startswith(f + ".") for f in cfg["freeze"])


# ---------------------------------------------------------------- weights against the update
def compare_weights(init, ref, run, cfg, lrs, label="run", names=None):
    """Prints one line per failing tensor and a summary; returns the number of failures.
    init, ref, run: {name: np.ndarray}; lrs: the learning rate of every step taken."""
    bad, worst, worst_name, n_round, n_frozen = 0, 0.0, "", 0, 0
    names = sorted(init) if names is None else names
    names = [k for k in names if not k.startswith(("adamw.", "sgd."))]
    lr_sum = float(sum(lrs))
    for k in names:
        if k not in ref or k not in run:
            print("%s: missing from the %s" % (k, "reference" if k not in ref else label))
            bad += 1
            continue
        w0, a, b = (np.asarray(x[k], dtype=np.float64) for x in (init, ref, run))
        if a.shape != w0.shape or b.shape != w0.shape:
            print("%s: shapes %s (init), %s (reference), %s (%s)" % (k, w0.shape, a.shape, b.shape, label))
            bad += 1
            continue
        if not trained(cfg, k):
            n_frozen += 1
            if not (np.array_equal(a, w0) and np.array_equal(b, w0)):
                print("%s: frozen, but moved by %g (reference) / %g (%s)" %
                      (k, np.max(np.abs(a - w0)), np.max(np.abs(b - w0)), label))
                bad += 1
            continue
        why = next((r for s, r in ROUNDING_LEVEL.items() if k.endswith(s)), None)
        if why:
            # each element moves by at most lr per step (Adam's |m/sqrt(v)| <= 1 up to rounding) plus decay
            n_round += 1
            limit = lr_sum * (1.001 + cfg["weight_decay"] * float(np.max(np.abs(w0))))
            dev = float(np.max(np.abs(a - w0))), float(np.max(np.abs(b - w0)))
            if max(dev) > limit:
                print("%s (update at rounding level: %s) moved by %g (reference) / %g (%s), more than "
                      "sum(lr) = %g per element" % (k, why, dev[0], dev[1], label, limit))
                bad += 1
            continue
        upd = float(np.linalg.norm(a - w0))
        diff = float(np.linalg.norm(b - a))
        tol = W_RTOL * upd + W_ATOL
        if diff > tol:
            print("%s: |w_%s - w_ref| = %.3e, more than %g x |w_ref - w_init| + %g = %.3e: %.3g of the update "
                  "(|w_ref - w_init| = %.3e, |w_%s - w_init| = %.3e)" %
                  (k, label, diff, W_RTOL, W_ATOL, tol, diff / max(upd, 1e-300), upd, label,
                   float(np.linalg.norm(b - w0))))
            bad += 1
        r = diff / max(upd, 1e-300)
        if r > worst:
            worst, worst_name = r, k
    print("final weights: %d tensors; worst |w_%s - w_ref| / |w_ref - w_init| = %.2e (%s); %d at rounding level "
          "checked by step size (%s); %d frozen, compared bit for bit; %s" %
          (len(names), label, worst, worst_name, n_round, ", ".join(ROUNDING_LEVEL), n_frozen,
           "ok" if not bad else "%d MISMATCHES" % bad))
    return bad
