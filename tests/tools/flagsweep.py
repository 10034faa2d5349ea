#!/usr/bin/python3
"""Nothing accepted and ignored: every flag of `mmc --help` and of each
`mmc CMD --help`, every setting of lang/REFERENCE.md's train and parallel
tables (with the arguments of optimizer, schedule and lora, and the named
values), and every flag of a trainer's `--help` either changes what the tool
prints or writes, compared with the same run without it, or is refused with a
message (exit 1 or 2, naming the flag or, for a setting, `file:line:col:
error:` in the model's file).

The flag and setting lists are parsed from the help texts and the reference,
so a new flag or setting without a probe below fails this test ("no probe").
A probe is (base arguments, arguments with the flag, expectation):
"effect" (the output differs), "refused" (an error that names it) or, for
`mmc check`, which prints nothing for a good plan, "verdict" (the flag
changes what check reports, e.g. --tp 3 on a model of 4 heads)."""
import hashlib, json, os, re, shutil, subprocess, sys, tempfile

MMC = os.environ.get("MMC") or sys.argv[1]
SRC = os.environ["MMC_SOURCE_DIR"]
T = tempfile.mkdtemp(prefix="flagsweep.")
failures, passes = [], 0


ran = {}  # run()'s results by command line and input files: a probe's base is often another's


def run(argv, cwd=None, env=None):
    """(exit status, stdout, stderr, {file: sha1} of what the run wrote in cwd).
    An mmc run in a fresh folder with the same arguments, reading the same
    files, is not repeated: its result is the earlier one's (the trainer's
    runs are: two equal ones must agree, below)."""
    key = None
    if cwd is None and env is None and argv[0] == MMC:
        key = tuple(argv) + tuple(hashlib.sha1(open(a, "rb").read()).hexdigest()
                                  for a in argv if os.path.isfile(a))
        key += tuple((d, f, os.stat(os.path.join(d, f)).st_mtime_ns) for a in argv
                     if os.path.isdir(a) for d, _, fs in os.walk(a) for f in fs)  # and folders
        if key in ran:
            return ran[key]
    cwd = cwd or tempfile.mkdtemp(dir=T)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd,
                           errors="replace", env=env)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = -999, "", "timed out"
    files = {}
    for d, _, fs in os.walk(cwd):
        for f in fs:
            p = os.path.join(d, f)
            files[os.path.relpath(p, cwd)] = hashlib.sha1(open(p, "rb").read()).hexdigest()
    if key is not None:
        ran[key] = rc, out, err, files
    return rc, out, err, files


def judge(what, base, with_, expect, words, located=None):
    """Compares the run with the flag to the run without it."""
    global passes
    if base[0] < 0 or base[0] > 2 or with_[0] < 0 or with_[0] > 2:
        failures.append("%s: crashed (exit %d / %d)\n%s" % (what, base[0], with_[0], with_[2][-800:]))
        return
    if expect == "verdict":  # `mmc check`: the flag changes what it reports
        ok, why = with_[:4] != base[:4], "the same report as without it"
    elif expect == "effect":
        ok = with_[0] == 0 and with_[:4] != base[:4]
        why = "accepted but the output is the same as without it" if with_[0] == 0 else \
              "refused, but it should take effect: " + with_[2][-400:]
    else:
        text = with_[2] + with_[1]
        named = any(w in text for w in words)
        loc_ok = located is None or re.search(r"%s:\d+:\d+: error: " % re.escape(located), text)
        ok = with_[0] in (1, 2) and named and bool(loc_ok)
        why = ("accepted (exit 0)" if with_[0] == 0 else
               "refused without naming it (%s) or without file:line:col" % "/".join(words)) + \
              "\n" + text[-600:]
    if ok:
        passes += 1
    else:
        failures.append("%s: %s" % (what, why))


# ---------------------------------------------------------------- mmc flags

def flags_of(text):
    return set(re.findall(r"(?<![\w.$-])(--?[A-Za-z][A-Za-z0-9-]*)", text))


top = subprocess.run([MMC, "--help"], capture_output=True, text=True).stdout
commands = re.findall(r"^  mmc (\S+) ", top, re.M)
assert commands, "no commands in mmc --help:\n" + top
help_of = {c: subprocess.run([MMC, c, "--help"], capture_output=True, text=True).stdout
           for c in commands}
every = flags_of(top)
for c in commands:
    every |= flags_of(help_of[c])

# fixtures: a tiny GPT (4 heads), one with sp in its parallel section, two
# models of which one has a bad plan, an import found through -I only
G = os.path.join(T, "g.mm")
open(G, "w").write('''import "gpt2.mm"
model G {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 2, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
}
model H extends G { parallel { tp = 2; sp = true } }
model Bad extends G { parallel { tp = 3 } }
model Pp extends G { parallel { pp = 2 } }
model R extends G { parallel { recompute = full } }
model Bf extends G { train { precision = bf16 } }
model Rb extends G { parallel { recompute = by_module(nope = full) } }
''')
os.makedirs(os.path.join(T, "inc"))
open(os.path.join(T, "inc", "extra.mm"), "w").write('''module Extra(n: int = 2) {
  w = param f32[n, n] = zeros
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
''')
INC = os.path.join(T, "uses_inc.mm")
open(INC, "w").write('import "extra.mm"\nmodel U { e = Extra(n = 2)\n'
                     '  forward(x: f32[2, 2]) -> loss { return e(x) } }\n')
VLM = os.path.join(SRC, "stdlib_models", "internvl2.mm")
VAE = [os.path.join(SRC, "tests", "video", "clipvae.mm"), "--task", "reconstruct"]
SMP = [os.path.join(SRC, "tests", "dit", "sample.mm"), "--model", "T2VSampleTest", "--task", "sample"]
T2V = os.path.join(SRC, "stdlib_models", "t2v.mm")

# G and its IR text after 2 MiB of comments: --max-source-mb 1 refuses them
BIG = os.path.join(T, "big.mm")
open(BIG, "w").write("// padding\n" * 200000 + open(G).read())
BIGMMIR = os.path.join(T, "big.mmir")
with open(BIGMMIR, "w") as f:
    f.write("// padding\n" * 200000)
    f.flush()
    subprocess.run([MMC, "dump-ir", G, "--model", "G", "--after", "lower"], stdout=f, check=True)
MAXSRC = ([BIG, "--model", "G"], [BIG, "--model", "G", "--max-source-mb", "1"], "refused")

# Per flag: (base, with, expectation) where base/with are the arguments after
# the command; "check" gets its own probes (it prints nothing when a plan is
# good, so a flag shows there by changing the verdict).
GM = [G, "--model", "G"]
probes = {
    "-h": (GM, GM + ["-h"], "effect"),
    "--help": (GM, GM + ["--help"], "effect"),
    "--detail": (GM, GM + ["--detail"], "effect"),  # plan: the per-layer table
    "--list-settings": (GM, GM + ["--list-settings"], "effect"),
    "-I": ([INC], [INC, "-I", os.path.join(T, "inc")], "effect"),
    "--model": ([G], [G, "--model", "H"], "effect"),
    "--set": (GM, GM + ["--set", "B=2"], "effect"),
    "--tp": (GM, GM + ["--tp", "2"], "effect"),
    "--dp": (GM, GM + ["--dp", "2"], "effect"),
    "--zero": (GM + ["--dp", "2"], GM + ["--dp", "2", "--zero", "1"], "effect"),
    # hierarchical ZeRO: each of the pair is refused without the other
    "--zero-across": (GM + ["--dp", "4", "--zero", "3", "--ranks-per-node", "2"],
                      GM + ["--dp", "4", "--zero", "3", "--ranks-per-node", "2", "--zero-across", "1"], "effect"),
    "--ranks-per-node": (GM + ["--dp", "4", "--zero", "3", "--zero-across", "1"],
                         GM + ["--dp", "4", "--zero", "3", "--zero-across", "1", "--ranks-per-node", "2"], "effect"),
    "--sp": (GM + ["--tp", "2"], GM + ["--tp", "2", "--sp"], "effect"),
    "--no-sp": ([G, "--model", "H"], [G, "--model", "H", "--no-sp"], "effect"),
    "--bucket-mb": (GM + ["--dp", "2"], GM + ["--dp", "2", "--bucket-mb", "0"], "effect"),
    "--no-overlap": (GM + ["--dp", "2"], GM + ["--dp", "2", "--no-overlap"], "effect"),
    "--pp": (GM + ["--micro-batches", "2"], GM + ["--micro-batches", "2", "--pp", "2"], "effect"),
    "--cp": (GM, GM + ["--cp", "2"], "effect"),
    "--cp-kind": (GM + ["--cp", "2"], GM + ["--cp", "2", "--cp-kind", "ring"], "effect"),
    "--cp-ulysses": (GM + ["--cp", "4", "--cp-kind", "ring"],
                     GM + ["--cp", "4", "--cp-kind", "ring", "--cp-ulysses", "2"], "effect"),
    "--micro-batches": (GM, GM + ["--micro-batches", "2"], "effect"),
    "--schedule": (GM + ["--pp", "2", "--micro-batches", "2"],
                   GM + ["--pp", "2", "--micro-batches", "2", "--schedule", "gpipe"], "effect"),
    "--recompute": (GM, GM + ["--recompute", "full"], "effect"),
    "--precision": (GM, GM + ["--precision", "bf16"], "effect"),
    "--task": ([VLM, "--model", "InternVL2Tiny"],
               [VLM, "--model", "InternVL2Tiny", "--task", "generate"], "effect"),
    "--chunk-frames": (VAE, VAE + ["--chunk-frames", "8"], "effect"),
    "--json": (GM, GM + ["--json"], "effect"),
    "--no-fuse": (GM, GM + ["--no-fuse"], "effect"),
    "--after": (GM, GM + ["--after", "autodiff"], "effect"),
    "--format": (GM, GM + ["--format", "dot"], "effect"),
    "--rank": ([G, "--model", "H"], [G, "--model", "H", "--rank", "1"], "effect"),
    "--max-source-mb": MAXSRC,
    "--device": (GM, GM + ["--device", "a100"], "effect"),  # plan: the predicted step
    "--devices": (GM + ["--device", "a100"], GM + ["--device", "a100", "--devices", "2"], "effect"),
    "--search": (GM + ["--device", "a100", "--devices", "2"],
                 GM + ["--device", "a100", "--devices", "2", "--search"], "effect"),
    "--timeline": (GM + ["--pp", "2", "--micro-batches", "2"],
                   GM + ["--pp", "2", "--micro-batches", "2", "--timeline", os.path.join(T, "t.svg")],
                   "effect"),
}
check_probes = {
    "--model": ([G], [G, "--model", "G"], "verdict"),  # Bad is no longer checked
    "--set": (GM + ["--dp", "2"], GM + ["--dp", "2", "--set", "B=3"], "verdict"),
    "--tp": (GM, GM + ["--tp", "3"], "verdict"),
    "--cp": (GM, GM + ["--cp", "3"], "verdict"),  # 4 heads: Ulysses cannot split them 3 ways
    "--cp-kind": (GM + ["--cp", "3"], GM + ["--cp", "3", "--cp-kind", "ring"], "verdict"),  # 8 tokens
    "--cp-ulysses": (GM + ["--cp", "2"], GM + ["--cp", "2", "--cp-ulysses", "3"], "verdict"),
    "--dp": (GM, GM + ["--dp", "3"], "verdict"),
    "--zero": (GM, GM + ["--zero", "1"], "verdict"),
    "--sp": (GM, GM + ["--sp"], "verdict"),
    "--no-sp": ([G, "--model", "H", "--tp", "1"], [G, "--model", "H", "--tp", "1", "--no-sp"],
                "verdict"),
    "--bucket-mb": (GM, GM + ["--bucket-mb", "1"], "verdict"),
    # the flag replaces the section's per-sub-model policies, here a bad one
    "--recompute": ([G, "--model", "Rb"], [G, "--model", "Rb", "--recompute", "full"], "verdict"),
    "--no-overlap": (GM, GM + ["--no-overlap"], "verdict"),
    "--micro-batches": (GM, GM + ["--micro-batches", "3"], "verdict"),  # 3 does not divide B = 4
    "--precision": (GM, GM + ["--precision", "fp16"], "verdict"),  # only fp32 and bf16
    "--pp": (GM, GM + ["--pp", "2"], "verdict"),  # 1F1B needs micro_batches >= pp
    "--schedule": (GM + ["--pp", "2", "--schedule", "gpipe"], GM + ["--pp", "2", "--schedule", "zbh1"],
                   "verdict"),
}
# a Hugging Face directory (tests/hf_import.sh has real ones): GPT-2 of width 8, zeros
HF = os.path.join(T, "hf")
os.makedirs(HF)
open(os.path.join(HF, "config.json"), "w").write(
    '{"architectures": ["GPT2LMHeadModel"], "vocab_size": 16, "n_positions": 8, "n_embd": 8, '
    '"n_layer": 1, "n_head": 2}')
_shapes = {"transformer.wte.weight": [16, 8], "transformer.wpe.weight": [8, 8],
           "transformer.h.0.attn.c_attn.weight": [8, 24], "transformer.h.0.attn.c_attn.bias": [24],
           "transformer.h.0.attn.c_proj.weight": [8, 8], "transformer.h.0.mlp.c_fc.weight": [8, 32],
           "transformer.h.0.mlp.c_fc.bias": [32], "transformer.h.0.mlp.c_proj.weight": [32, 8]}
for _k in ("h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.ln_2.weight", "h.0.ln_2.bias",
           "h.0.attn.c_proj.bias", "h.0.mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"):
    _shapes["transformer." + _k] = [8]
_hdr, _at = {}, 0
for _k, _s in _shapes.items():
    _n = 4 * (_s[0] * (_s[1] if len(_s) > 1 else 1))
    _hdr[_k] = {"dtype": "F32", "shape": _s, "data_offsets": [_at, _at + _n]}
    _at += _n
_h = __import__("json").dumps(_hdr).encode()
_h += b" " * (-len(_h) % 8)
open(os.path.join(HF, "model.safetensors"), "wb").write(
    __import__("struct").pack("<Q", len(_h)) + _h + bytes(_at))
check_probes["--init-from"] = (GM, GM + ["--init-from", HF], "verdict")  # another size: refused
import_probes = {
    "-h": ([HF], [HF, "-h"], "effect"),
    "--help": ([HF], [HF, "--help"], "effect"),
    "-o": ([HF], [HF, "-o", "imported.mm"], "effect"),
}
# compile: text outputs so that no trainer is linked, except for -v
OUT = ["-o", "out"]
compile_probes = {
    "-o": (GM + ["--emit", "ir"], GM + ["--emit", "ir", "-o", "other.mmir"], "effect"),
    "--emit": (GM + ["--emit", "ir"] + OUT, GM + ["--emit", "llvm"] + OUT, "effect"),
    "-v": (GM + OUT, GM + OUT + ["-v"], "effect"),
    # the predicted step, a constant of the descriptor
    "--device": (GM + ["--emit", "llvm"] + OUT, GM + ["--emit", "llvm", "--device", "a100"] + OUT,
                 "effect"),
    # the model again at K = 4 beside its own (tests/conv_buckets.sh: what the buckets do)
    "--tile-buckets": ([VLM, "--model", "InternVL2TinyConvPool", "--emit", "llvm"] + OUT,
                       [VLM, "--model", "InternVL2TinyConvPool", "--emit", "llvm",
                        "--tile-buckets", "4"] + OUT, "effect"),
}
# calibrate: -o writes the description to a file instead of stdout; --quick measures smaller
# problems (its figures differ; so do two runs': the probe holds only that it is taken)
calibrate_probes = {
    "-o": (["--quick"], ["--quick", "-o", os.path.join(T, "c.dev")], "effect"),
    "--quick": ([], ["--quick"], "effect"),
}
# the ASan+UBSan build (tests/tools/lib.sh's SAN): --quick's base, the full
# calibration (the same code on larger problems, 8 times the repetitions),
# takes 20 s there and 2.5 s in release; the release build's sweep judges it
CACHE = os.path.join(os.environ.get("MMC_BINARY_DIR", "."), "CMakeCache.txt")
SAN = os.path.isfile(CACHE) and "MMC_SANITIZE:BOOL=ON" in open(CACHE).read()
release_only = {("calibrate", "--quick")} if SAN else set()
for lvl in range(4):  # -O3 is the default: each level against another
    other = "-O1" if lvl != 1 else "-O3"
    compile_probes["-O%d" % lvl] = (GM + ["--emit", "llvm", other] + OUT,
                                    GM + ["--emit", "llvm", "-O%d" % lvl] + OUT, "effect")
# opt: IR text (the lowered G)
MMIR = os.path.join(T, "g.mmir")
with open(MMIR, "w") as f:
    subprocess.run([MMC, "dump-ir", G, "--model", "G", "--after", "lower"], stdout=f, check=True)
opt_probes = {
    "-h": ([MMIR, "--passes", "verify"], [MMIR, "--passes", "verify", "-h"], "effect"),
    "--help": ([MMIR, "--passes", "verify"], [MMIR, "--passes", "verify", "--help"], "effect"),
    "--passes": ([MMIR, "--passes", "verify"], [MMIR, "--passes", "autodiff"], "effect"),
    "--max-source-mb": ([BIGMMIR, "--passes", "verify"],
                        [BIGMMIR, "--passes", "verify", "--max-source-mb", "1"], "refused"),
}
# data: a tiny tokenizer.json (the one of cli_tests, with <|endoftext|>), JSONL
# with a "text" and a "body" field, one with a bad line, a dataset to inspect
DTOK = os.path.join(T, "tok.json")
open(DTOK, "w").write(json.dumps({
    "version": "1.0", "truncation": None, "padding": None, "normalizer": None,
    "pre_tokenizer": None, "decoder": None,
    "added_tokens": [{"id": 3, "content": "<s>", "special": True, "normalized": False},
                     {"id": 4, "content": "<|endoftext|>", "special": True, "normalized": False}],
    "post_processor": {"type": "TemplateProcessing", "pair": [],
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}))
DJ, DJBAD = os.path.join(T, "d.jsonl"), os.path.join(T, "dbad.jsonl")
open(DJ, "w").write('{"text": "ab", "body": "ba"}\n{"text": "aab", "body": "b"}\n')
open(DJBAD, "w").write('{"text": "ab"}\n{"text": \n')
FORCED = os.path.join(T, "forced")
for ext in (".bin", ".idx"):
    open(FORCED + "_text_document" + ext, "w").close()
subprocess.run([MMC, "data", "preprocess", "--input", DJ, "--tokenizer", DTOK,
                "--output-prefix", os.path.join(T, "ds")], capture_output=True, check=True)
DS = os.path.join(T, "ds_text_document")
# tokenize: the same tokenizer, one with truncation and padding, one with
# ChatML's special tokens; text, ids and a chat JSONL
_tj = json.load(open(DTOK))
_tj["truncation"] = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}
_tj["padding"] = {"strategy": {"Fixed": 4}, "direction": "Right", "pad_to_multiple_of": None,
                  "pad_id": 0, "pad_type_id": 0, "pad_token": "a"}
TTP = os.path.join(T, "tok_tp.json")
open(TTP, "w").write(json.dumps(dict(_tj, padding=None)))
TPAD = os.path.join(T, "tok_pad.json")
open(TPAD, "w").write(json.dumps(dict(_tj, truncation=None)))
_cv = {c: i for i, c in enumerate("abuserintym\n")}
_tj = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
       "pre_tokenizer": None, "post_processor": None, "decoder": None,
       "added_tokens": [{"id": len(_cv) + i, "content": c, "special": True, "normalized": False}
                        for i, c in enumerate(["<|im_start|>", "<|im_end|>"])],
       "model": {"type": "BPE", "vocab": _cv, "merges": []}}
TCHAT = os.path.join(T, "tok_chat.json")
open(TCHAT, "w").write(json.dumps(_tj))
TTXT, TIDS, TCJ = (os.path.join(T, n) for n in ("t.txt", "t.ids", "c.jsonl"))
open(TTXT, "w").write("ab\naab\n")
open(TIDS, "w").write("3 0 1\n2\n")
open(TCJ, "w").write(json.dumps({"messages": [{"role": "user", "content": "ab"},
                                              {"role": "assistant", "content": "ba"}]}) + "\n")
tokenize_probes = {
    "-h": ([DTOK, TTXT], [DTOK, TTXT, "-h"], "effect"),
    "--help": ([DTOK, TTXT], [DTOK, TTXT, "--help"], "effect"),
    "--decode": ([DTOK, TIDS], [DTOK, TIDS, "--decode"], "effect"),
    "--add-special": ([DTOK, TTXT], [DTOK, TTXT, "--add-special"], "effect"),
    "--skip-special": ([DTOK, TIDS, "--decode"], [DTOK, TIDS, "--decode", "--skip-special"],
                       "effect"),
    "--no-truncation": ([TTP, TTXT], [TTP, TTXT, "--no-truncation"], "effect"),
    "--no-padding": ([TPAD, TTXT], [TPAD, TTXT, "--no-padding"], "effect"),
    "--chat": ([TCHAT, TCJ], [TCHAT, TCJ, "--chat", "chatml"], "effect"),
}
PRE = ["preprocess", "--input", DJ, "--tokenizer", DTOK, "--output-prefix", "o"]
data_probes = {
    "-h": (PRE, PRE + ["-h"], "effect"),
    "--help": (PRE, PRE + ["--help"], "effect"),
    "--input": (PRE[:1] + PRE[3:], PRE, "effect"),
    "--tokenizer": (PRE[:3] + PRE[5:], PRE, "effect"),
    "--output-prefix": (PRE[:5], PRE, "effect"),
    "--json-key": (PRE, PRE + ["--json-key", "body"], "effect"),
    "--append-eod": (PRE, PRE + ["--append-eod"], "effect"),
    "--eod-token": (PRE + ["--append-eod"], PRE + ["--append-eod", "--eod-token", "<s>"], "effect"),
    "--add-special": (PRE, PRE + ["--add-special"], "effect"),
    "--workers": (PRE, PRE + ["--workers", "2"], "effect"),
    "--bad-samples": (["preprocess", "--input", DJBAD] + PRE[3:],
                      ["preprocess", "--input", DJBAD] + PRE[3:] + ["--bad-samples", "skip"], "effect"),
    "--force": (PRE[:6] + [FORCED], PRE[:6] + [FORCED, "--force"], "effect"),
    "--show": (["inspect", DS], ["inspect", DS, "--show", "2"], "effect"),
}
# image: a 40 x 10 RGB PNG written with zlib (a 4x1 InternVL grid)
import struct, zlib  # noqa: E402


def _chunk(k, d):
    return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))


IMG = os.path.join(T, "i.png")
open(IMG, "wb").write(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 40, 10, 8, 2, 0, 0, 0))
                      + _chunk(b"IDAT", zlib.compress(b"".join(b"\0" + bytes((x * 6 + y * 20 + c * 50) % 256
                                                                         for x in range(40) for c in range(3))
                                                              for y in range(10))))
                      + _chunk(b"IEND", b""))
# data conv: a 30 x 20 PNG (aspect 1.5: a tie of 1x1 and 2x1 at --max-tiles 2, decided by
# --tile), a conversation JSONL naming it, ChatML's tokenizer with an <image> token
IMG2 = os.path.join(T, "c.png")
open(IMG2, "wb").write(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 30, 20, 8, 2, 0, 0, 0))
                       + _chunk(b"IDAT", zlib.compress(b"\0" * 20 + b"\1" * (30 * 3 * 20)))
                       + _chunk(b"IEND", b""))
_tj = json.load(open(TCHAT))
_tj["added_tokens"].append({"id": len(_cv) + 2, "content": "<image>", "special": True, "normalized": False})
TCONV = os.path.join(T, "tok_conv.json")
open(TCONV, "w").write(json.dumps(_tj))
CJ = os.path.join(T, "conv.jsonl")
open(CJ, "w").write(json.dumps({"image": "c.png", "conversations": [
    {"from": "human", "value": "<image>ab"}, {"from": "gpt", "value": "ba"}]}) + "\n")
CB = ["conv", CJ, "--tokenizer", TCONV, "--chat", "chatml", "--images", T, "--image-tokens", "2"]
CBT = CB[:8] + ["--tiles-from-images", "--max-tiles", "2"]
data_probes.update({
    "--chat": (CB[:4] + CB[6:], CB, "effect"),
    "--images": (CB[:6] + CB[8:], CB, "effect"),
    "--image-tokens": (CB, CB[:9] + ["3"], "effect"),
    "--tiles-from-images": (CB, CBT, "effect"),
    "--tile": (CBT, CBT + ["--tile", "4"], "effect"),
    "--max-tiles": (CBT[:-2], CBT, "effect"),
    "--tokens-per-tile": (CBT, CBT + ["--tokens-per-tile", "3"], "effect"),
    "--seq-len": (CB, CB + ["--seq-len", "3"], "refused", ["sequence length 3"]),
    "--too-long": (CB + ["--seq-len", "3"], CB + ["--seq-len", "3", "--too-long", "drop"], "effect"),
})
IO = [IMG, "--size", "4", "--out", "o.f32"]
image_probes = {
    "-h": ([IMG], [IMG, "-h"], "effect"),
    "--help": ([IMG], [IMG, "--help"], "effect"),
    "--mode": ([IMG], [IMG, "--mode", "internvl"], "effect"),
    "--size": ([IMG], [IMG, "--size", "8"], "effect"),
    "--max-tiles": ([IMG, "--mode", "internvl"], [IMG, "--mode", "internvl", "--max-tiles", "1"], "effect"),
    "--mean": (IO, IO + ["--mean", "0,0,0"], "effect"),
    "--std": (IO, IO + ["--std", "1,1,1"], "effect"),
    "--max-pixels": ([IMG], [IMG, "--max-pixels", "399"], "refused", ["at most 399 pixels"]),
    "--out": (IO[:3], IO, "effect"),
}
# video: a 32 x 24 FFV1/MKV of 12 frames at 12 fps, written with ffmpeg
VID = os.path.join(T, "v.mkv")
subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=32x24:rate=12",
                "-frames:v", "12", "-c:v", "ffv1", VID], check=True)
VO = [VID, "--frames", "4", "--out", "o.f32"]
video_probes = {
    "-h": ([VID], [VID, "-h"], "effect"),
    "--help": ([VID], [VID, "--help"], "effect"),
    "--frames": ([VID], [VID, "--frames", "5"], "effect"),
    "--fps": ([VID, "--frames", "4"], [VID, "--frames", "4", "--fps", "6"], "effect"),
    "--size": (VO, VO + ["--size", "8x8"], "effect"),
    "--buckets": (VO, VO + ["--buckets", "8x8,4x16"], "effect"),
    "--max-pixels": ([VID], [VID, "--max-pixels", "767"], "refused", ["at most 767 pixels"]),
    "--out": (VO[:3], VO, "effect"),
    "--png-strip": (VO[:3], VO[:3] + ["--png-strip", "s.png"], "effect"),
}
# overriding the model's own setting takes effect (extra probes, on plan)
extra = [
    ("plan", "--pp 1", [G, "--model", "Pp"], [G, "--model", "Pp", "--pp", "1"], "effect"),
    ("plan", "--recompute none", [G, "--model", "R"], [G, "--model", "R", "--recompute", "none"],
     "effect"),
    ("stats", "--tp", GM, GM + ["--tp", "2"], "refused", ["--tp"]),
    ("plan", "--precision fp16", GM, GM + ["--precision", "fp16"], "refused", ["--precision"]),
    ("plan", "--precision fp32", [G, "--model", "Bf"], [G, "--model", "Bf", "--precision", "fp32"],
     "effect"),
    ("compile", "-v with --emit ir", GM + ["--emit", "ir"] + OUT, GM + ["--emit", "ir", "-v"] + OUT,
     "refused", ["-v"]),
    ("compile", "-O2 with --emit ir", GM + ["--emit", "ir"] + OUT,
     GM + ["--emit", "ir", "-O2"] + OUT, "refused", ["-O"]),
    ("plan", "--detail with --json", GM + ["--json"], GM + ["--json", "--detail"], "refused",
     ["--detail"]),
    ("plan", "--detail on a dp = 2 plan (each gradient bucket)", GM + ["--dp", "2"],
     GM + ["--dp", "2", "--detail"], "effect"),
    ("plan", "--task reconstruct", VAE[:1], VAE, "effect"),
    ("plan", "--task extract", [T2V, "--model", "T2VTiny"], [T2V, "--model", "T2VTiny", "--task",
                                                              "extract"], "effect"),
    ("plan", "--task extract without forwards latents and text_features", GM,
     GM + ["--task", "extract"], "refused", ["extract"]),
    ("plan", "--chunk-frames without --task reconstruct", VAE[:1], VAE[:1] + ["--chunk-frames", "8"],
     "refused", ["--chunk-frames"]),
    ("plan", "--tp with --task reconstruct", VAE, VAE + ["--tp", "2"], "refused", ["--tp"]),
    ("plan", "--task sample", SMP[:3], SMP, "effect"),
    ("plan", "--tp with --task sample", SMP, SMP + ["--tp", "2"], "refused", ["--tp"]),
    ("plan", "--tp with --task generate", [VLM, "--model", "InternVL2Tiny", "--task", "generate"],
     [VLM, "--model", "InternVL2Tiny", "--task", "generate", "--tp", "2"], "refused", ["--tp"]),
    # bf16 products in the generator too (one rank, unlike the plan flags)
    ("plan", "--precision with --task generate",
     [VLM, "--model", "InternVL2Tiny", "--task", "generate"],
     [VLM, "--model", "InternVL2Tiny", "--task", "generate", "--precision", "bf16"], "effect"),
]

covered = set()
for c in commands:
    listed = flags_of(help_of[c])
    for flag in sorted(listed):
        table = dict(probes)
        if c == "check":
            table.update(check_probes)
        if c == "compile":
            table.update(compile_probes)
        if c == "opt":
            table = dict(opt_probes)
        if c == "import":
            table = dict(import_probes)
        if c == "data":
            table = dict(data_probes)
        if c == "tokenize":
            table = dict(tokenize_probes)
        if c == "image":
            table = dict(image_probes)
        if c == "video":
            table = dict(video_probes)
        if c == "calibrate":
            table = dict(calibrate_probes)
        p = table.get(flag)
        if p is None:
            failures.append("mmc %s %s: listed in its --help, but no probe in %s" %
                            (c, flag, __file__))
            continue
        covered.add(flag)
        if (c, flag) in release_only:
            continue
        base, with_, expect = p[0], p[1], p[2]
        if c == "compile" and flag not in compile_probes:  # IR text: no trainer linked
            base, with_ = base + ["--emit", "ir"] + OUT, with_ + ["--emit", "ir"] + OUT
        words = p[3] if len(p) > 3 else [flag]
        judge("mmc %s %s" % (c, " ".join(a for a in with_ if a not in base) or flag),
              run([MMC, c] + base), run([MMC, c] + with_), expect, words)
# `mmc FLAG` alone (mmc --help's reference lists): prints what bare `mmc`
# does not, and refuses an argument after it
top_probes = ["--list-passes", "--list-ops", "--version"]
for flag in top_probes:
    if flag in every:
        covered.add(flag)
        judge("mmc %s" % flag, run([MMC]), run([MMC, flag]), "effect", [flag])
        judge("mmc %s extra" % flag, run([MMC, flag]), run([MMC, flag, "extra"]), "refused", [flag])
for flag in sorted(every - covered):
    failures.append("%s: in mmc --help but in no command's --help" % flag)
for c, what, base, with_, expect, *w in extra:
    judge("mmc %s %s" % (c, what), run([MMC, c] + base), run([MMC, c] + with_), expect,
          w[0] if w else [])
# the environment variables the help names: each changes the link
envs = set(re.findall(r"\$(MMC_\w+)", top + "".join(help_of.values())))
env_probes = {"MMC_CC": "/bin/false", "MMC_RUNTIME_LIB": os.path.join(T, "no-libmmrt.a"),
              "MMC_RUNTIME_LIBS": "-lm"}
base_env = {k: v for k, v in os.environ.items() if k not in env_probes}
link = run([MMC, "compile"] + GM + OUT + ["-v"], env=base_env)
for name in sorted(envs):
    if name not in env_probes:
        failures.append("$%s: named in mmc's help, but no probe in %s" % (name, __file__))
        continue
    covered.add("$" + name)
    judge("mmc compile with $%s=%s" % (name, env_probes[name]), link,
          run([MMC, "compile"] + GM + OUT + ["-v"], env=dict(base_env, **{name: env_probes[name]})),
          "verdict", [])
nflags = len(covered)

# ------------------------------------------------------ settings (REFERENCE)

ref = open(os.path.join(SRC, "lang", "REFERENCE.md"), encoding="utf-8").read()


def split_args(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "([" and 1 or (ch in ")]" and -1 or 0)
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


settings = []  # "train.optimizer", "train.optimizer.adamw.lr", "parallel.sp=true", ...
for sec in ("train", "parallel", "data"):
    m = re.search(r"^\| `%s` setting \| values \|\n\|[- |]+\|\n((?:\|.*\n)+)" % sec, ref, re.M)
    assert m, "no %s settings table in lang/REFERENCE.md" % sec
    for row in m.group(1).strip().split("\n"):
        cells = [x.strip() for x in row.strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0])
        for n in names:
            settings.append("%s.%s" % (sec, n))
            for span in re.findall(r"`([^`]+)`", cells[1]):
                f = re.match(r"^(\w+)\((.*)\)$", span)
                if f:
                    settings.append("%s.%s.%s" % (sec, n, f.group(1)))
                    for a in split_args(f.group(2)):
                        settings.append("%s.%s.%s.%s" % (sec, n, f.group(1), a.split("=")[0].strip()))
                elif re.match(r"^\w+\s*=", span):
                    settings.append("%s.%s" % (sec, span.split("=")[0].strip()))
                elif re.match(r"^[\w.]+$", span) and span not in names:
                    settings.append("%s.%s=%s" % (sec, n, span))
settings = list(dict.fromkeys(settings))

# the settings table (ir/settings.def, printed by mmc --list-settings) and
# the reference's tables name the same keys of each section
table = subprocess.run([MMC, "--list-settings"], capture_output=True, text=True).stdout
for sec in ("train", "parallel", "data"):
    keys = {r.split()[2] for r in table.splitlines()[1:] if r.split()[1] == sec and r.split()[2] != "-"}
    documented = {x.split(".")[1].split("=")[0] for x in settings if x.startswith(sec + ".")}
    for k in sorted(keys - documented):
        failures.append("%s.%s: in mmc --list-settings, not in lang/REFERENCE.md's table" % (sec, k))
    for k in sorted(documented - keys):
        failures.append("%s.%s: in lang/REFERENCE.md's table, not in mmc --list-settings" % (sec, k))

TRAIN_MODEL = '''import "nn.mm"
model S {
  enc = MLP(8, 16)
  dec = MLP(8, 16)
  forward(x: f32[4, 8]) -> loss { return mean(dec(enc(x))) }
  train { %s }
}
'''
PAR_MODEL = '''import "gpt2.mm"
model S {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 2, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel { %s }
}
'''
DATA_MODEL = PAR_MODEL.replace("parallel { %s }", "data { %s }")
# the conversation and video keys (ir/data_formats.def's DATA_KEYS): a model of that format
CONV_MODEL = '''model S {
  forward(pixels: f32[2, 1, 3, 28, 28], text: i32[2, 8], labels: i32[2, 8]) -> loss { return mean(pixels) }
  data {
    format = conversation
    %s
  }
}
'''
VIDEO_MODEL = '''model S {
  forward(video: f32[2, 1, 17, 64, 64]) -> loss { return mean(video) }
  data {
    format = clips_video
    %s
  }
}
'''
DATA_TEMPLATE = {"data.images": CONV_MODEL, "data.chat": CONV_MODEL, "data.eval_data": CONV_MODEL,
                 "data.max_tiles": CONV_MODEL, "data.video_fps": VIDEO_MODEL}
SRC_ = 'source = "s.mm"'  # the model's own file: a source that exists
LORA = 'lora = lora(rank = 4, targets = [enc], layers = ["fc1"])'
GAN = "gan = gan(discriminator = dec, weight = 0.5, start = 1)"
STAGES = "stages = [gpt.wte + gpt.wpe + gpt.h[0:1], gpt.h[1:2] + gpt.ln_f]"
STAGES4 = "stages = [gpt.wte + gpt.wpe, gpt.h[0:1], gpt.h[1:2], gpt.ln_f]"
# setting: (base section, section with it, expectation[, words in the error])
set_probes = {
    "train.freeze": ("", "freeze = [enc]", "effect"),
    "train.optimizer": ("", "optimizer = sgd(lr = 0.1)", "effect"),
    "train.optimizer.adamw": ("optimizer = sgd(lr = 0.1)", "optimizer = adamw(lr = 0.1)", "effect"),
    "train.optimizer.adamw.lr": ("optimizer = adamw(lr = 0.1)", "optimizer = adamw(lr = 0.2)",
                                 "effect"),
    "train.optimizer.adamw.betas": ("optimizer = adamw(lr = 0.1)",
                                    "optimizer = adamw(lr = 0.1, betas = [0.8, 0.9])", "effect"),
    "train.optimizer.adamw.weight_decay": ("optimizer = adamw(lr = 0.1)",
                                           "optimizer = adamw(lr = 0.1, weight_decay = 0.1)",
                                           "effect"),
    "train.optimizer.adamw.eps": ("optimizer = adamw(lr = 0.1)",
                                  "optimizer = adamw(lr = 0.1, eps = 1e-6)", "effect"),
    "train.optimizer.adamw.clip": ("optimizer = adamw(lr = 0.1)",
                                   "optimizer = adamw(lr = 0.1, clip = 1.0)", "effect"),
    "train.optimizer.sgd": ("optimizer = adamw(lr = 0.1)", "optimizer = sgd(lr = 0.1)", "effect"),
    "train.optimizer.sgd.lr": ("optimizer = sgd(lr = 0.1)", "optimizer = sgd(lr = 0.2)", "effect"),
    "train.optimizer.sgd.momentum": ("optimizer = sgd(lr = 0.1)",
                                     "optimizer = sgd(lr = 0.1, momentum = 0.9)", "effect"),
    "train.optimizer.sgd.weight_decay": ("optimizer = sgd(lr = 0.1)",
                                         "optimizer = sgd(lr = 0.1, weight_decay = 0.1)", "effect"),
    "train.schedule": ("", "schedule = cosine(warmup = 2)", "effect"),
    "train.schedule=constant": ("schedule = cosine(warmup = 2)", "schedule = constant", "effect"),
    "train.schedule.cosine": ("schedule = constant", "schedule = cosine", "effect"),
    "train.schedule.cosine.warmup": ("schedule = cosine", "schedule = cosine(warmup = 3)", "effect"),
    "train.schedule.cosine.min_lr": ("schedule = cosine", "schedule = cosine(min_lr = 1e-5)",
                                     "effect"),
    "train.schedule.constant": ("schedule = cosine", "schedule = constant", "effect"),
    "train.schedule.constant.warmup": ("schedule = constant", "schedule = constant(warmup = 3)",
                                       "effect"),
    "train.schedule.linear": ("schedule = cosine", "schedule = linear", "effect"),
    "train.schedule.linear.warmup": ("schedule = linear", "schedule = linear(warmup = 3)", "effect"),
    "train.schedule.linear.min_lr": ("schedule = linear", "schedule = linear(min_lr = 1e-5)",
                                     "effect"),
    "train.clip": ("", "clip = 0.5", "effect"),
    "data.source": (SRC_, 'source = "3:s.mm,1:s.mm"', "effect"),
    "data.tokenizer": (SRC_, SRC_ + '; tokenizer = "s.mm"', "refused", ["tokenizer"]),
    "data.seq_len": (SRC_, SRC_ + "; seq_len = 8", "effect"),
    "data.pack": (SRC_, SRC_ + "; pack = true", "refused", ["seg input"]),
    "data.too_long": (SRC_, SRC_ + "; too_long = drop", "effect"),
    "data.bad_samples": (SRC_, SRC_ + "; bad_samples = skip", "effect"),
    # S takes ids and labels: format = text is printed on the data line
    "data.format": (SRC_, SRC_ + "; format = text", "effect"),
    "data.images": ("", 'images = "."', "effect"),
    "data.chat": ("", "chat = chatml", "effect"),
    "data.eval_data": ("", 'eval_data = "s.mm"', "effect"),
    "data.max_tiles": ("", "max_tiles = 2", "effect"),
    "data.video_fps": ("", "video_fps = 8", "effect"),
    "train.lora": ("", LORA, "effect"),
    "train.lora.lora": ("", LORA, "effect"),
    "train.lora.lora.rank": (LORA, LORA.replace("rank = 4", "rank = 2"), "effect"),
    "train.lora.lora.alpha": (LORA, LORA.replace("rank = 4", "rank = 4, alpha = 2"), "effect"),
    "train.lora.lora.targets": (LORA, LORA.replace("[enc]", "[dec]"), "effect"),
    "train.lora.lora.layers": (LORA, LORA.replace('"fc1"', '"fc2"'), "effect"),
    "train.steps": ("", "steps = 7", "effect"),
    "train.precision": ("", "precision = bf16", "effect"),
    "train.precision=fp32": ("precision = bf16", "precision = fp32", "effect"),
    "train.precision=bf16": ("", "precision = bf16", "effect"),
    "train.batch": ("", "batch = 3", "refused", ["batch"]),
    # gan needs a forward returning [loss, g, d] (this model returns one loss):
    # refused here; its effect is checked by tests/wfvae.sh (PyTorch parity)
    "train.gan": ("", GAN, "refused", ["generator term"]),
    "train.gan.gan": ("", GAN, "refused", ["generator term"]),
    "train.gan.gan.discriminator": ("", GAN, "refused", ["generator term"]),
    "train.gan.gan.weight": ("", GAN.replace("0.5", "0"), "refused", ["weight must be positive"]),
    "train.gan.gan.start": ("", GAN.replace("start = 1", "start = -1"), "refused", ["start"]),
    "parallel.tp": ("", "tp = 2", "effect"),
    "parallel.sp": ("tp = 2", "tp = 2; sp = true", "effect"),
    "parallel.sp=true": ("tp = 2", "tp = 2; sp = true", "effect"),
    "parallel.sp=false": ("tp = 2; sp = true", "tp = 2; sp = false", "effect"),
    "parallel.pp": ("micro_batches = 2", "micro_batches = 2; pp = 2", "effect"),
    "parallel.cp": ("", "cp = 2", "effect"),
    "parallel.cp_kind": ("cp = 2", "cp = 2; cp_kind = ring", "effect"),
    "parallel.cp_kind=ulysses": ("cp = 2; cp_kind = ring", "cp = 2; cp_kind = ulysses", "effect"),
    "parallel.cp_kind=ring": ("cp = 2", "cp = 2; cp_kind = ring", "effect"),
    "parallel.cp_ulysses": ("cp = 4; cp_kind = ring", "cp = 4; cp_ulysses = 2", "effect"),
    "parallel.dp": ("", "dp = 2", "effect"),
    "parallel.zero": ("dp = 2", "dp = 2; zero = 1", "effect"),
    "parallel.zero_across": ("dp = 4; zero = 3; ranks_per_node = 2", "dp = 4; zero = 3; ranks_per_node = 2; zero_across = 1",
                             "effect"),
    "parallel.ranks_per_node": ("dp = 4; zero = 3; zero_across = 1", "dp = 4; zero = 3; zero_across = 1; ranks_per_node = 2",
                                "effect"),
    "parallel.micro_batches": ("", "micro_batches = 2", "effect"),
    "parallel.schedule": ("", "schedule = 1f1b", "refused", ["schedule"]),
    "parallel.schedule=1f1b": ("pp = 2; micro_batches = 2; schedule = gpipe",
                               "pp = 2; micro_batches = 2; schedule = 1f1b", "effect"),
    "parallel.schedule=gpipe": ("pp = 2; micro_batches = 2", "pp = 2; micro_batches = 2; schedule = gpipe", "effect"),
    # interleaved needs vpp > 1 (with vpp = 1 it would change nothing: refused)
    "parallel.schedule=interleaved": ("pp = 2; micro_batches = 2; schedule = gpipe; " + STAGES,
                                      "pp = 2; micro_batches = 2; schedule = interleaved; vpp = 2; "
                                      + STAGES4, "effect"),
    "parallel.schedule=zbh1": ("pp = 2; micro_batches = 2", "pp = 2; micro_batches = 2; schedule = zbh1", "effect"),
    "parallel.vpp": ("pp = 2; micro_batches = 2; schedule = interleaved",
                     "pp = 2; micro_batches = 2; schedule = interleaved; vpp = 2; " + STAGES4,
                     "effect"),
    "parallel.stages": ("pp = 2; micro_batches = 2", "pp = 2; micro_batches = 2; " + STAGES, "effect"),
    # layer counts per sub-model (the REFERENCE example names vision and llm; S has gpt)
    "parallel.stages.by_module": ("pp = 2; micro_batches = 2",
                                  "pp = 2; micro_batches = 2; stages = by_module(gpt = [1, 1])", "effect"),
    "parallel.stages.by_module.vision": ("pp = 2; micro_batches = 2",
                                         "pp = 2; micro_batches = 2; stages = by_module(gpt = [1, 1])",
                                         "effect"),
    "parallel.stages.by_module.llm": ("pp = 2; micro_batches = 2",
                                      "pp = 2; micro_batches = 2; stages = by_module(nope = [1, 1])",
                                      "refused", ["not a sub-model"]),
    "parallel.recompute": ("", "recompute = full", "effect"),
    "parallel.recompute=none": ("recompute = full", "recompute = none", "effect"),
    "parallel.recompute=selective": ("", "recompute = selective", "effect"),
    "parallel.recompute=full": ("", "recompute = full", "effect"),
    "parallel.recompute.block": ("recompute = full", "recompute = block(1)", "effect"),
    "parallel.recompute.block.N": ("recompute = block(1)", "recompute = block(2)", "effect"),
    "parallel.recompute.by_module": ("", "recompute = by_module(gpt = full)", "effect"),
    "parallel.recompute.by_module.vision": ("recompute = by_module(gpt = full)",
                                            "recompute = by_module(gpt = selective)", "effect"),
    "parallel.recompute.by_module.llm": ("recompute = by_module(gpt = full)",
                                         "recompute = by_module(gpt = block(1))", "effect"),
    "parallel.pp_scatter": ("tp = 2; pp = 2; micro_batches = 2",
                            "tp = 2; pp = 2; micro_batches = 2; pp_scatter = false", "effect"),
    "parallel.pp_scatter=true": ("tp = 2; pp = 2; micro_batches = 2; pp_scatter = false",
                                 "tp = 2; pp = 2; micro_batches = 2; pp_scatter = true", "effect"),
    "parallel.pp_scatter=false": ("tp = 2; pp = 2; micro_batches = 2",
                                  "tp = 2; pp = 2; micro_batches = 2; pp_scatter = false", "effect"),
    "parallel.bucket_mb": ("dp = 2", "dp = 2; bucket_mb = 0", "effect"),
    "parallel.bucket_mb=0": ("dp = 2", "dp = 2; bucket_mb = 0", "effect"),
    # placement places sub-model blocks (tests/mpi_separate.sh runs it with them); S has one instance
    "parallel.placement": ("", "placement = separate", "refused", ["needs two sub-model blocks"]),
    "parallel.placement=colocated": ("", "placement = colocated", "refused", ["no sub-model block"]),
    "parallel.placement=separate": ("", "placement = separate", "refused", ["needs two sub-model blocks"]),
}


def observe(path, cwd):
    """dump-ir and plan --json, and the trainer's LLVM module only when both
    are the same (the train section's lr, steps and schedule live in the
    model descriptor)."""
    a = run([MMC, "dump-ir", path], cwd)
    b = run([MMC, "plan", path, "--json"], cwd)
    return a, b


nset = 0
observed = {}
for key in settings:
    p = set_probes.get(key)
    if p is None:
        failures.append("setting %s (lang/REFERENCE.md): no probe in %s" % (key, __file__))
        continue
    nset += 1
    tmpl = TRAIN_MODEL if key.startswith("train.") else \
        DATA_TEMPLATE.get(key, DATA_MODEL) if key.startswith("data.") else PAR_MODEL
    outs = []
    for i, body in enumerate(p[:2]):
        if tmpl % body not in observed:  # the same model text: observed once (the path is its own)
            d = tempfile.mkdtemp(dir=T)
            path = os.path.join(d, "s.mm")
            open(path, "w").write(tmpl % body)
            observed[tmpl % body] = (path, d, observe(path, d))
        outs.append(observed[tmpl % body])
    (pa, da, (a1, b1)), (pb, db, (a2, b2)) = outs

    def strip(r):  # the folder differs between the two runs; the columns of locations shift
        return (r[0], re.sub(r'loc\([^)]*\)', "loc()", r[1].replace(os.path.dirname(pa), "D")
                             .replace(os.path.dirname(pb), "D")),
                r[2].replace(os.path.dirname(pa), "D").replace(os.path.dirname(pb), "D"), {})
    base = (strip(a1), strip(b1))
    with_ = (strip(a2), strip(b2))
    if p[2] == "effect" and a2[0] == 0 and b2[0] == 0 and with_ == base:
        base = base + (strip(run([MMC, "compile", pa, "--emit", "llvm", "-O0"], da)),)
        with_ = with_ + (strip(run([MMC, "compile", pb, "--emit", "llvm", "-O0"], db)),)
    # fold into one run-like tuple for judge()
    fold = lambda t: (max(x[0] for x in t), repr(t), "".join(x[2] for x in t), {})
    judge("setting %s (%s)" % (key, p[1]), fold(base), fold(with_), p[2],
          p[3] if len(p) > 3 else [], located="s.mm" if p[2] == "refused" else None)

# ------------------------------------- keyword options of builtins (REFERENCE)

sec11 = ref[ref.index("## 11. Builtin functions"):ref.index("## 12.")]
kwopts = []  # "attention.causal", "x.flatten.start", ...
for row in re.findall(r"^\| (.*?) \|[^|]*\|$", sec11, re.M):
    for span in re.findall(r"`([^`]+)`", row):
        f = re.match(r"^(x\.)?(\w+)\((.*)\)$", span)
        if not f:
            continue
        for a in split_args(f.group(3)):
            if "=" in a:
                kwopts.append("%s%s.%s" % (f.group(1) or "", f.group(2), a.split("=")[0].strip()))
# and every optional argument of a builtin, documented or not: the builtins
# of ops (ir/ops.def: OP(NAME, "mnemonic", ... FE(bi_..., "x, weight, bias?",
# kind)) and the others (frontend/builtins.c: {"name", "x, *", bi_..., kind});
# kind 2 is a method
btab = open(os.path.join(SRC, "frontend", "builtins.c"), encoding="utf-8").read()
brows = re.findall(r'\{"(\w+)", "([^"]*)", bi_\w+, (\d)\}', btab)
odef = open(os.path.join(SRC, "ir", "ops.def"), encoding="utf-8").read()
brows += re.findall(r'^OP\(\w+, "(\w+)",(?:(?!^OP\().)*?FE\(bi_\w+, "([^"]*)", (\d)\)', odef,
                    re.M | re.S)
assert len(brows) > 40, "cannot read the builtins of frontend/builtins.c and ir/ops.def"
for name, args, kind in brows:
    for a in split_args(args):
        if a.endswith("?"):
            kwopts.append("%s%s.%s" % ("x." if kind == "2" else "", name, a[:-1]))
kwopts = list(dict.fromkeys(kwopts))
assert kwopts, "no keyword options in section 11 of lang/REFERENCE.md"

KW_MODEL = """model K {
  w = param f32[4] = ones
  b = param f32[4] = zeros
  cw = param f32[3, 2, 2, 2] = normal(0.1)
  cw3 = param f32[3, 2, 2, 2, 2] = normal(0.1)
  forward(%s) -> loss { return %s + mean(w) + mean(b) + mean(cw) + mean(cw3) }
}
"""
X, Q, T3 = "x: f32[2, 4]", "q: f32[1, 4, 2, 4]", "t: f32[2, 3, 4]"
# option: (forward's inputs, expression without it, expression with it)
kw_probes = {
    "layer_norm.eps": (X, "mean(layer_norm(x))", "mean(layer_norm(x, eps = 0.1))"),
    "layer_norm.axis": (T3, "mean(layer_norm(t) * t)", "mean(layer_norm(t, axis = 1) * t)"),
    "rms_norm.eps": (X, "mean(rms_norm(x, w))", "mean(rms_norm(x, w, eps = 0.1))"),
    "group_norm.eps": ("i: f32[1, 4, 3, 3]", "mean(group_norm(i, w, b, groups = 2))",
                       "mean(group_norm(i, w, b, groups = 2, eps = 0.1))"),
    "conv2d.stride": ("v: f32[1, 2, 4, 4]", "mean(conv2d(v, cw))", "mean(conv2d(v, cw, stride = 2))"),
    "conv2d.padding": ("v: f32[1, 2, 4, 4]", "mean(conv2d(v, cw))",
                       "mean(conv2d(v, cw, padding = 1))"),
    "conv3d.stride": ("u: f32[1, 2, 4, 4, 4]", "mean(conv3d(u, cw3))",
                      "mean(conv3d(u, cw3, stride = 2))"),
    "conv3d.padding": ("u: f32[1, 2, 4, 4, 4]", "mean(conv3d(u, cw3))",
                       "mean(conv3d(u, cw3, padding = 1))"),
    "rope.theta": (Q, "mean(rope(q) * q)", "mean(rope(q, theta = 100.0) * q)"),
    "attention.causal": (Q, "mean(attention(q, q, q) * q)",
                         "mean(attention(q, q, q, causal = true) * q)"),
    "attention.scale": (Q, "mean(attention(q, q, q) * q)",
                        "mean(attention(q, q, q, scale = 0.25) * q)"),
    "attention.mask": ("q: f32[1, 4, 2, 4], m: f32[1, 4]", "mean(attention(q, q, q) * q)",
                       "mean(attention(q, q, q, mask = m) * q)"),
    "place.token": ("y: f32[1, 4, 3], src: f32[1, 1, 3], ids: i32[1, 4]",
                    "mean(place(y, src, ids, token = 1))", "mean(place(y, src, ids, token = 2))"),
    "place.flat": ("y: f32[2, 2, 3], src: f32[2, 1, 3], ids: i32[2, 2]",
                   "mean(place(y, src, ids, token = 1) * y)",
                   "mean(place(y, src, ids, token = 1, flat = true) * y)"),
    "softmax.axis": (X, "mean(softmax(x) * x)", "mean(softmax(x, axis = 0) * x)"),
    "log_softmax.axis": (X, "mean(log_softmax(x) * x)", "mean(log_softmax(x, axis = 0) * x)"),
    "sum.keepdim": (X, "mean(sum(x, 1))", "mean(sum(x, 1, keepdim = true))"),
    "mean.keepdim": (X, "mean(mean(x, 1))", "mean(mean(x, 1, keepdim = true))"),
    "cross_entropy.ignore": ("x: f32[2, 4], l: i32[2]", "cross_entropy(x, l)",
                             "cross_entropy(x, l, ignore = 1)"),
    "concat.axis": (X, "mean(concat([x, x]))", "mean(concat([x, x], axis = 1))"),
    "full.value": (X, "mean(x + full(2, 4, value = 1.0))", "mean(x + full(2, 4, value = 2.0))"),
    "x.flatten.start": (T3, "mean(t.flatten())", "mean(t.flatten(start = 1))"),
    "x.flatten.end": (T3, "mean(t.flatten())", "mean(t.flatten(end = 1))"),
    "x.mean.keepdim": (X, "mean(x.mean(1))", "mean(x.mean(1, keepdim = true))"),
    "x.softmax.axis": (X, "mean(x.softmax() * x)", "mean(x.softmax(axis = 0) * x)"),
    "rope.offset": (Q, "mean(rope(q) * q)", "mean(rope(q, offset = 2) * q)"),
    "linear.bias": (X, "mean(linear(x, cw.reshape(6, 4)))",
                    "mean(linear(x, cw.reshape(6, 4), bias = b.reshape(4)[0:1].expand(6)))"),
    "layer_norm.weight": (X, "mean(layer_norm(x) * x)", "mean(layer_norm(x, weight = w) * x)"),
    "layer_norm.bias": (X, "mean(layer_norm(x, w) * x)", "mean(layer_norm(x, w, bias = b) * x)"),
    "conv2d.bias": ("v: f32[1, 2, 4, 4]", "mean(conv2d(v, cw))",
                    "mean(conv2d(v, cw, bias = w[0:3]))"),
    "conv3d.bias": ("u: f32[1, 2, 4, 4, 4]", "mean(conv3d(u, cw3))",
                    "mean(conv3d(u, cw3, bias = w[0:3]))"),
    "sum.axis": (X, "mean(sum(x) * x)", "mean(sum(x, axis = 1))"),
    "mean.axis": (X, "mean(mean(x) * x)", "mean(mean(x, axis = 1))"),
    "x.flatten.start": (T3, "mean(t.flatten())", "mean(t.flatten(start = 1))"),
    "rel_buckets.buckets": (X, "mean(embedding(rel_buckets(len = 4), cw3.reshape(48, 1)))",
                            "mean(embedding(rel_buckets(len = 4, buckets = 8), cw3.reshape(48, 1)))"),
    "rel_buckets.max_distance": (X, "mean(embedding(rel_buckets(len = 4), cw3.reshape(48, 1)))",
                                 "mean(embedding(rel_buckets(len = 4, max_distance = 16), cw3.reshape(48, 1)))"),
    "timestep_embedding.theta": (X, "mean(timestep_embedding(x[:, 0], dim = 4))",
                                 "mean(timestep_embedding(x[:, 0], dim = 4, theta = 100.0))"),
    "ddpm_table.steps": (X, "mean(ddpm_table()) + mean(x)", "mean(ddpm_table(steps = 10)) + mean(x)"),
    "ddpm_table.beta_start": (X, "mean(ddpm_table()) + mean(x)",
                              "mean(ddpm_table(beta_start = 0.001)) + mean(x)"),
    "ddpm_table.beta_end": (X, "mean(ddpm_table()) + mean(x)", "mean(ddpm_table(beta_end = 0.03)) + mean(x)"),
    "ddpm_table.zero_snr": (X, "mean(ddpm_table()) + mean(x)", "mean(ddpm_table(zero_snr = 0)) + mean(x)"),
    "ddpm_table.gamma": (X, "mean(ddpm_table()) + mean(x)", "mean(ddpm_table(gamma = 1.0)) + mean(x)"),
}
nkw = 0
for key in kwopts:
    p = kw_probes.get(key)
    if p is None:
        failures.append("option %s (lang/REFERENCE.md section 11): no probe in %s" % (key, __file__))
        continue
    nkw += 1
    d = tempfile.mkdtemp(dir=T)
    outs = []
    for i, expr in enumerate(p[1:]):
        path = os.path.join(d, "k%d.mm" % i)
        open(path, "w").write(KW_MODEL % (p[0], expr))
        rc, out, err, _ = run([MMC, "dump-ir", path, "--after", "lower"], d)
        outs.append((rc, re.sub(r'loc\([^)]*\)', "loc()", out), err))  # columns shift
    if outs[0][0] != 0:
        failures.append("option %s: the model without it fails:\n%s" % (key, outs[0][2][-600:]))
    judge("option %s (%s)" % (key, p[2]), outs[0] + ({},), outs[1] + ({},), "effect", [])

# ------------------------------------------------------------ trainer flags

env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
           OMP_WAIT_POLICY="passive")
TR = os.path.join(T, "trainer")
r = subprocess.run([MMC, "compile", os.path.join(SRC, "stdlib_models", "gpt2.mm"), "--model",
                    "GPT2Tiny", "-o", TR], capture_output=True, text=True)
ntr = 0
if r.returncode != 0:
    failures.append("mmc compile of the trainer failed:\n" + r.stderr[-800:])
else:
    trhelp = subprocess.run([TR, "--help"], capture_output=True, text=True, env=env).stdout
    trflags = flags_of(trhelp) - {"--set", "--dp", "--tp", "-np"}  # named in the text
    # a checkpoint and a weights file to start from
    prep = tempfile.mkdtemp(dir=T)
    subprocess.run([TR, "--steps", "1", "--eval-batches", "1", "--quiet", "--ckpt", "ck",
                    "--save-weights", "w.safetensors"], cwd=prep, capture_output=True, env=env)
    BASE = ["--steps", "2", "--eval-batches", "1"]
    tr_probes = {
        "-h": (BASE + ["-h"], "effect"),
        "--help": (BASE + ["--help"], "effect"),
        "--data": (BASE + ["--data", os.path.join(T, "no-data")], "refused", ["no-data"]),
        "--steps": (["--steps", "3", "--eval-batches", "1"], "effect"),
        "--batch": (BASE + ["--batch", "2"], "refused", ["--batch"]),
        "--lr": (BASE + ["--lr", "0.5"], "effect"),
        "--seed": (BASE + ["--seed", "7"], "effect"),
        "--eval-every": (BASE + ["--eval-every", "1"], "effect"),
        "--eval-batches": (["--steps", "2", "--eval-batches", "2"], "effect"),
        "--ckpt": (BASE + ["--ckpt", "c"], "effect"),
        "--ckpt-every": (BASE + ["--ckpt", "c", "--ckpt-every", "1"], "effect"),
        "--resume": (BASE + ["--resume"], "refused", ["--resume"]),
        "--keep": (BASE + ["--keep", "1"], "refused", ["--keep"]),  # needs --ckpt
        "--comm-timeout": (BASE + ["--comm-timeout", "5"], "refused", ["--comm-timeout"]),  # 1 rank
        # the start line says so (tests/ckpt_safety.sh: what it does)
        "--on-nan": (BASE + ["--on-nan", "skip-step"], "effect"),
        "--log": (BASE + ["--log", "l.jsonl"], "effect"),
        "--dump-logits": (BASE + ["--dump-logits", "x.f32"], "effect"),
        "--dump-inputs": (BASE + ["--dump-inputs", "in"], "effect"),
        "--init-from": (BASE + ["--init-from", os.path.join(prep, "w.safetensors")], "effect"),
        # GPT2Tiny takes no stored features (tests/t2v_features.sh: T2VTiny does)
        "--features": (BASE + ["--features", "feat"], "refused", ["--features"]),
        "--load-adapters": (BASE + ["--load-adapters", "a.safetensors"], "refused",
                            ["--load-adapters"]),
        "--save-adapters": (BASE + ["--save-adapters", "a.safetensors"], "refused",
                            ["--save-adapters"]),
        "--save-weights": (BASE + ["--save-weights", "w.safetensors"], "effect"),
        # GPT2Tiny from its own init: no Hugging Face directory to write back (tests/hf_import.sh)
        "--save-hf": (BASE + ["--save-hf", "hf"], "refused", ["--save-hf"]),
        "--save-hf-dtype": (BASE + ["--save-hf-dtype", "bf16"], "refused", ["--save-hf-dtype"]),
        "--shard-size": (BASE + ["--shard-size", "1000"], "refused", ["--shard-size"]),
        "--quiet": (BASE + ["--quiet"], "effect"),
        "--profile": (BASE + ["--profile"], "effect"),  # the table at the end
        "--threads": (BASE + ["--threads", "1"], "effect"),  # the start line says so
        "--omp-wait": (BASE + ["--omp-wait", "active"], "effect"),
        "--trace": (BASE + ["--trace", "t.json"], "effect"),
        # the text task's flags, on Fashion-MNIST data: refused naming the flag (tests/text_data.sh:
        # what each does on text)
        "--tokenizer": (BASE + ["--tokenizer", "tok.json"], "refused", ["--tokenizer"]),
        "--seq-len": (BASE + ["--seq-len", "32"], "refused", ["--seq-len"]),
        "--pack": (BASE + ["--pack"], "refused", ["--pack"]),
        "--no-pack": (BASE + ["--no-pack"], "refused", ["--no-pack"]),
        "--too-long": (BASE + ["--too-long", "drop"], "refused", ["--too-long"]),
        "--bad-samples": (BASE + ["--bad-samples", "skip"], "refused", ["--bad-samples"]),
        # the conversation flags, likewise (tests/conv_train.sh: what each does on conversations)
        "--images": (BASE + ["--images", "img"], "refused", ["--images"]),
        "--chat": (BASE + ["--chat", "chatml"], "refused", ["--chat"]),
        "--eval-data": (BASE + ["--eval-data", "e.jsonl"], "refused", ["--eval-data"]),
        "--max-tiles": (BASE + ["--max-tiles", "2"], "refused", ["--max-tiles"]),
        "--no-tile-balance": (BASE + ["--no-tile-balance"], "refused", ["--no-tile-balance"]),
        "--loader-threads": (BASE + ["--loader-threads", "1"], "refused", ["--loader-threads"]),
        "--eval-split": (BASE + ["--eval-split", "0.1"], "refused", ["--eval-split"]),
        # video files only (tests/video_train.sh, docs/video.md): refused on other data
        "--video-fps": (BASE + ["--video-fps", "4"], "refused", ["--video-fps"]),
    }
    # what differs from run to run: rates, times, memory
    noise = re.compile(r"[\d.]+ samples/s|elapsed \S+|eta \S+|peak rss [\d.]+ MiB|"
                       r"peak RSS: .*|^memory: measured .*|"
                       r"\"(time|elapsed|samples_per_s|rss)[a-z_]*\": [\d.e+-]+", re.M)

    def trun(args):
        rc, out, err, files = run([TR] + args)
        return rc, noise.sub("~", out), noise.sub("~", err), {
            k: (v if not k.endswith(".jsonl") else "log") for k, v in files.items()}
    b1, b2 = trun(BASE), trun(BASE)
    if b1[:3] != b2[:3]:
        failures.append("the trainer's output differs between two equal runs (noise not removed):\n"
                        "%s\n---\n%s" % (b1[1][-600:], b2[1][-600:]))
    for flag in sorted(trflags):
        p = tr_probes.get(flag)
        if p is None:
            failures.append("trainer %s: listed in its --help, but no probe in %s" % (flag, __file__))
            continue
        ntr += 1
        judge("trainer %s" % " ".join(p[0][len(BASE):] if p[0][:len(BASE)] == BASE else p[0]),
              b1, trun(p[0]), p[1], p[2] if len(p) > 2 else [flag])

shutil.rmtree(T, ignore_errors=True)
for f in failures:
    print("FAIL " + f)
print("%d flags of mmc, %d settings and %d builtin options of the reference, %d trainer flags: "
      "%d passed, %d failed" % (nflags, nset, nkw, ntr, passes, len(failures)))
sys.exit(1 if failures or not passes else 0)
