"""Compares `mmc tokenize` with Hugging Face `tokenizers` (tests/tokenizers.sh).

Builds tokenizers in the configurations of GPT-2, Qwen2, Llama 3 (byte-level
BPE with their regexes), Llama 2 (SentencePiece BPE with byte fallback), T5
(Unigram with Metaspace and the Precompiled normalizer: SentencePiece's
nmt_nfkc rules, taken from a model the `sentencepiece` package trains here)
and two mixes of the other stages, each trained on a generated corpus, writes their
tokenizer.json, and checks on a varied multilingual corpus that mmc gives
the same ids on every line (with and without --add-special) and decodes the
ids to the same text (with and without --skip-special).

usage: compare.py MMC WORKDIR [--bench] [--file TOKENIZER.json...]
(--file: compare those tokenizer.json files instead of the built ones)"""
import json
import os
import random
import subprocess
import sys
import time

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

GPT2_PAT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the quick brown fox jumps over lazy dog tokenizer training model data set compiler "
         "runtime kernel attention layer norm gradient batch step loss token vocabulary merge "
         "byte level piece unigram sentence word number value").split()
PIECES = [
    "don't", "I'm", "we've", "they're", "she'll", "he'd", "it's", "DON'T", "You'RE",
    "café", "naïve", "résumé", "Ångström", "coöperate", "façade", "São Paulo", "Zürich",
    "cafe\u0301", "n\u0303", "a\u0308\u0304", "\u0915\u094d\u0937",  # combining marks
    "日本語のテキスト", "中文分词测试", "한국어 문장", "東京タワー",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🚀🚀🚀",
    "ﬁnance", "ﬂow", "ＡＢＣ１２３", "ｶﾀｶﾅ", "①②③", "x²", "½", "™", "Ⅻ", "㎏",
    "Ελληνικά ΟΔΟΣ", "Σίσυφος", "Русский текст", "العربية", "हिन्दी", "עברית", "ไทย",
    "İstanbul", "ß", "ǅ", "ΣΑΣ",
    "1234567890", "3.14159", "2026-12-05", "42", "١٢٣", "٣.٥", "۴۵",
    "hello_world", "foo-bar", "a+b=c", "(x)", "[y]", "{z}", "100%", "$5", "#tag", "@user",
    "\u00a0nbsp", "\u3000ideo", "tab\there", "zero\u200bwidth", "\u2028",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "[MASK]", "<0x41>",
    "\ufffd", "\u00ad", "\x7f", "\x01",
]


def line(rng):
    parts = []
    for _ in range(rng.randint(1, 14)):
        r = rng.random()
        if r < 0.45:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.2 else w)
        elif r < 0.9:
            parts.append(rng.choice(PIECES))
        elif r < 0.95:
            parts.append("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 30))))
        else:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
    seps = [" ", " ", " ", "  ", "   ", "\t", "", ", ", ". ", " - "]
    s = parts[0]
    for p in parts[1:]:
        s += rng.choice(seps) + p
    r = rng.random()
    if r < 0.05:
        s = "  " + s
    elif r < 0.1:
        s = s + "   "
    return s


def corpus(seed, n):
    rng = random.Random(seed)
    lines = [line(rng) for _ in range(n)]
    lines += ["", " ", "   ", "\t", "a", "\u0301", "x" * 3000,
              "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5000)),
              "the" * 700, "日本" * 800, "ab " * 500,
              "<|endoftext|><|endoftext|>", " <s> x </s> ", "[MASK] [MASK]x x[MASK]"]
    return lines


def train_bpe(tok, train, vocab, specials, **kw):
    t = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False, **kw)
    tok.train_from_iterator(train, trainer=t)
    return tok


def gpt2(train):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return train_bpe(tok, train, 1500, ["<|endoftext|>"],
                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def byte_level_split(train, pattern, specials, post, vocab=1500):
    tok = Tokenizer(models.BPE(ignore_merges=pattern == LLAMA3_PAT))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = post
    return train_bpe(tok, train, vocab, specials,
                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def qwen2(train, vocab=1500):
    return byte_level_split(train, QWEN2_PAT, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                            processors.ByteLevel(trim_offsets=False), vocab)


def llama3(train):
    tok = byte_level_split(train, LLAMA3_PAT, ["<|begin_of_text|>", "<|end_of_text|>"],
                           processors.Sequence([
                               processors.ByteLevel(trim_offsets=False),
                               processors.TemplateProcessing(
                                   single="<|begin_of_text|> $A",
                                   special_tokens=[("<|begin_of_text|>", 0)])]))
    return tok


def llama2(train, workdir, vocab_size=900):
    """SentencePiece BPE: ▁ for spaces, byte fallback, Llama 2's decoder."""
    base = Tokenizer(models.BPE())
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                            normalizers.Replace(" ", "▁")])
    # trained on pieces split before each ▁ (SentencePiece's split_by_whitespace;
    # also fast), used without a pre-tokenizer as Llama 2's file is
    base.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    train_bpe(base, train, vocab_size, [], limit_alphabet=120)
    d = json.loads(base.to_str())
    d["pre_tokenizer"] = None
    old = d["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for t, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    d["model"].update(vocab=vocab, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    d["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    d["decoder"] = json.loads(decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0)]).__getstate__())
    d["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]).__getstate__())
    return Tokenizer.from_str(json.dumps(d))


def proto_fields(b):
    """(field, value) pairs of a protobuf message (wire types 0, 1, 2, 5)."""
    def varint(i):
        x = sh = 0
        while True:
            c = b[i]
            i += 1
            x |= (c & 0x7F) << sh
            sh += 7
            if c < 128:
                return x, i
    i = 0
    while i < len(b):
        key, i = varint(i)
        kind = key & 7
        if kind == 0:
            v, i = varint(i)
        elif kind == 2:
            n, i = varint(i)
            v, i = b[i:i + n], i + n
        else:
            n = 8 if kind == 1 else 4
            v, i = b[i:i + n], i + n
        yield key >> 3, v


def nmt_nfkc_charsmap(train):
    """SentencePiece's nmt_nfkc rules as T5's tokenizer.json holds them: the
    precompiled_charsmap of a model's normalizer_spec (field 3, field 2)."""
    import io
    import sentencepiece as spm
    m = io.BytesIO()
    ascii_lines = [s for s in train if s.isascii() and s.strip()][:400]  # few characters
    spm.SentencePieceTrainer.train(sentence_iterator=iter(ascii_lines), model_writer=m,
                                   vocab_size=200, model_type="unigram", minloglevel=3,
                                   normalization_rule_name="nmt_nfkc")
    spec = [v for f, v in proto_fields(m.getvalue()) if f == 3][0]
    return [v for f, v in proto_fields(spec) if f == 2][0]


def t5(train, byte_fallback=False, scheme="always", vocab=800, **trainer_args):
    tok = Tokenizer(models.Unigram())
    first = normalizers.NFKC() if byte_fallback else normalizers.Precompiled(
        nmt_nfkc_charsmap(train))
    tok.normalizer = normalizers.Sequence([first, normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    specials = ["<pad>", "</s>", "<unk>"]
    if byte_fallback:
        specials += ["<0x%02X>" % b for b in range(256)]
    t = trainers.UnigramTrainer(vocab_size=vocab, special_tokens=specials, unk_token="<unk>",
                                show_progress=False, max_piece_length=12, **trainer_args)
    tok.train_from_iterator(train, trainer=t)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                       special_tokens=[("</s>", 1)])
    if byte_fallback:  # the byte pieces as model pieces, not added tokens
        d = json.loads(tok.to_str())
        d["model"]["byte_fallback"] = True
        d["added_tokens"] = d["added_tokens"][:3]
        tok = Tokenizer.from_str(json.dumps(d))
    return tok


def mixed(train):
    """The other stages: NFD, StripAccents, Lowercase, Strip, Whitespace, Digits,
    Punctuation, a continuing-subword prefix, BPEDecoder, added tokens with
    lstrip/rstrip/single_word/normalized, RobertaProcessing."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                           normalizers.Lowercase(), normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation()])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    train_bpe(tok, train, 1200, ["[UNK]", "[CLS]", "[SEP]"], end_of_word_suffix="</w>",
              limit_alphabet=150)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=True, special=True)])
    tok.add_tokens([AddedToken("Fox", single_word=True, normalized=True),
                    AddedToken("naïve", normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("[SEP]", 2), ("[CLS]", 1))
    return tok


def mixed2(train):
    """WhitespaceSplit, Digits (runs), Metaspace without split, ##-prefix BPE."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Punctuation(behavior="merged_with_previous")])
    tok.decoder = decoders.WordPiece(prefix="##")
    train_bpe(tok, train, 1000, ["[UNK]"], continuing_subword_prefix="##", limit_alphabet=200)
    return tok


def limits(tok, trunc, pad):
    """tok with truncation and padding set (tokenizers' enable_truncation /
    enable_padding, saved in the file's "truncation" and "padding")."""
    tok.enable_truncation(**trunc)
    tok.enable_padding(**pad)
    return tok


def run_mmc(mmc, path, args, text):
    p = subprocess.run([mmc, "tokenize", path] + args, input=text.encode(), capture_output=True)
    if p.returncode != 0:
        raise SystemExit("FAIL mmc tokenize %s %s: exit %d: %s" %
                         (path, " ".join(args), p.returncode, p.stderr.decode()[:500]))
    return p.stdout.decode().split("\n")[:-1]


def bench_one(mmc, name, path, tok, lines, work, reps=3):
    """Tokens per second of one thread each: tokenizers' encode_batch_fast
    (TOKENIZERS_PARALLELISM=false) against mmc tokenize on a file, less
    mmc's start-up and loading (a run on an empty file)."""
    src = os.path.join(work, "bench.txt")
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    best = {}
    for _ in range(reps):
        t0 = time.perf_counter()
        ref = tok.encode_batch_fast(lines, add_special_tokens=False)
        t1 = time.perf_counter()
        with open(os.devnull, "w") as out:
            subprocess.run([mmc, "tokenize", path, os.devnull], stdout=out, check=True)
            t2 = time.perf_counter()
            subprocess.run([mmc, "tokenize", path, src], stdout=out, check=True)
            t3 = time.perf_counter()
        for k, v in (("hf", t1 - t0), ("load", t2 - t1), ("mmc", t3 - t2)):
            best[k] = min(best.get(k, v), v)
    n = sum(len(e.ids) for e in ref)
    mmc_s = max(best["mmc"] - best["load"], 1e-9)
    print("%-10s %6d lines %8d tokens  tokenizers %6.3f s (%5.2f M tok/s)  mmc %6.3f s "
          "(%5.2f M tok/s; + %.3f s load)  mmc/tokenizers time %.2f" %
          (name, len(lines), n, best["hf"], n / best["hf"] / 1e6, mmc_s, n / mmc_s / 1e6,
           best["load"], mmc_s / best["hf"]))


def main():
    mmc, work = sys.argv[1], sys.argv[2]
    bench = "--bench" in sys.argv
    if bench:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read when first used: one thread
    os.makedirs(work, exist_ok=True)
    train = corpus(1, 1500)
    test = corpus(2, 600 if not bench else 20000)
    files = sys.argv[sys.argv.index("--file") + 1:] if "--file" in sys.argv else []
    builders = {"gpt2": gpt2, "qwen2": qwen2, "llama3": llama3,
                "llama2": lambda tr: llama2(tr, work), "t5": t5,
                "t5_bytes_first": lambda tr: t5(tr, byte_fallback=True, scheme="first"),
                "mixed": mixed, "mixed2": mixed2,
                # truncation and padding: each strategy, direction and padding kind
                "gpt2_trunc_pad": lambda tr: limits(gpt2(tr), dict(
                    max_length=12, stride=3, strategy="longest_first", direction="right"),
                    dict(length=16, pad_id=0, pad_token="<|endoftext|>")),
                "llama2_trunc_pad": lambda tr: limits(llama2(tr, work), dict(
                    max_length=10, strategy="only_first", direction="left"),
                    dict(direction="left", pad_id=2, pad_token="</s>", pad_to_multiple_of=8)),
                "t5_trunc_pad": lambda tr: limits(t5(tr), dict(max_length=7, stride=2),
                                                  dict(length=9, pad_to_multiple_of=4,
                                                       pad_id=0, pad_token="<pad>")),
                "qwen2_trunc": lambda tr: limits(qwen2(tr), dict(
                    max_length=20, direction="left"), dict(length=None, pad_id=0))}
    text = "\n".join(test) + "\n"
    fails = 0
    checked = 0
    if files:
        builders = {os.path.basename(f): f for f in files}
    for name, build in builders.items():
        if bench and not files and name not in ("gpt2", "qwen2", "llama2", "t5"):
            continue
        if files:
            path = build
        else:
            tok = build(train)
            path = os.path.join(work, name + ".json")
            tok.save(path)
        tok = Tokenizer.from_file(path)  # what mmc reads
        if bench:
            bench_one(mmc, name, path, tok, test, work)
            continue
        limited = tok.truncation is not None or tok.padding is not None
        runs = [(False, []), (True, ["--add-special"])]
        if limited:  # the same file with its truncation and padding turned off
            runs.append((False, ["--no-truncation", "--no-padding"]))
        for special, args in runs:
            if "--no-padding" in args:
                tok.no_truncation()
                tok.no_padding()
            ref = [tok.encode(s, add_special_tokens=special).ids for s in test]
            got = run_mmc(mmc, path, args, text)
            bad = [i for i, (r, g) in enumerate(zip(ref, got))
                   if " ".join(map(str, r)) != g]
            if len(got) != len(ref):
                bad.append(-1)
            for i in bad[:3]:
                print("  %s line %d: %r\n    tokenizers %s\n    mmc        %s" %
                      (name, i, test[i][:120], ref[i][:40], got[i][:200] if i >= 0 else "?"))
            ntok = sum(len(r) for r in ref)
            print("%s %s encode%s: %d/%d lines identical (%d tokens)" %
                  ("FAIL" if bad else "PASS", name, "".join(" " + a for a in args),
                   len(ref) - len(bad), len(ref), ntok))
            fails += bool(bad)
            checked += 1
            if special or args:
                continue
            ids_text = "\n".join(" ".join(map(str, r)) for r in ref) + "\n"
            for skip in (False, True):
                dref = [tok.decode(r, skip_special_tokens=skip) for r in ref]
                dgot = run_mmc(mmc, path, ["--decode"] + (["--skip-special"] if skip else []),
                               ids_text)
                bad = [i for i, (r, g) in enumerate(zip(dref, dgot)) if r != g]
                if len(dgot) != len(dref):
                    bad.append(-1)
                for i in bad[:3]:
                    print("  %s decode line %d:\n    tokenizers %r\n    mmc        %r" %
                          (name, i, dref[i][:120], dgot[i][:120] if i >= 0 else "?"))
                same = sum(r == s for r, s in zip(dref, test))
                print("%s %s decode%s: %d/%d lines identical (%d give back the input line)" %
                      ("FAIL" if bad else "PASS", name, " --skip-special" if skip else "",
                       len(dref) - len(bad), len(dref), same))
                fails += bool(bad)
                checked += 1
    if not bench:
        print("%d passed, %d failed" % (checked - fails, fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
