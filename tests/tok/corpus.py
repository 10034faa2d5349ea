"""The big-corpus check of mmc tokenize (tests/tokenizers_corpus.sh).

Generates a deterministic corpus of >= 10 MB of varied text without the
network: Python source (the standard library's own .py files), English
prose (pydoc's topics and sentences made from their words), the Unicode
character names of `unicodedata`, generated Chinese, Japanese and Korean
sentences (characters drawn by a Zipf law from frequency-ordered lists),
emoji sequences (ZWJ families, skin tones, flags, keycaps, VS16), text from
invalid UTF-8 bytes decoded with U+FFFD, noncharacters, private-use and
unassigned code points, controls, and unusual whitespace (U+00A0 U+2003
U+3000 U+2028 U+0085 U+FEFF, tabs, CR). Lines are split on '\\n' only, as
mmc tokenize reads them. Trains three tokenizers with `tokenizers` on the
first ~3 MB of lines -- byte-level BPE (Qwen2's configuration), Llama-style
BPE with byte fallback (Llama 2's) and Unigram (T5's, with SentencePiece's
Precompiled rules) -- and checks on every line of the rest that mmc gives the
same ids as tokenizers' encode and decodes them to the same text as
tokenizers' decode.

usage: corpus.py MMC WORKDIR [--sample BYTES] [--write FILE] [--bench]
(--sample: compare a deterministic sample of about BYTES of the rest, for
sanitizer builds; --write: only write the corpus to FILE; --bench: time
tokenizers and mmc on one thread each instead of comparing, bench/tokenize.sh)"""
import glob
import os
import random
import subprocess
import sys
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TOTAL = 10_600_000  # bytes of UTF-8
TRAIN = 3_000_000

# Frequency-ordered characters (most frequent first): common simplified
# Chinese characters, hiragana/katakana with common kanji, and Hangul.
ZH = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后"
      "能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此"
      "心前面又定见只主没公从知现长把机开问它因意正新动实力相情意理体全明间两本点高已物手外关样"
      "等平最变然各重提数并合政解系次战第度文通被结期她门应题路工气加量任表常反指回水已业思件车"
      "设书记电计认资光少区做比色入元器产山制路许金数活己东品西南北级社论真身术教求特直完程性立"
      "场口信号边使总今利区报望接界部位美管议美革世改海队化代形感受育争专石况观志确究保传基强院")
JA_KANA = ("のにはをたがでてとしれさあいうえおかきくけこすせそなねまみむめもやゆよらりるろわん"
           "アイウエオカキクケコサシスセソタチツテトナニヌネノマミムメモラリルレロワンーッャュョ")
JA_KANJI = "日本人年大出中上時行見生分事前東京新語学会社国語電車話手気見私来今自入言"
KO_LEAD = [0, 2, 3, 5, 6, 7, 9, 11, 12, 14, 15, 16, 17, 18]  # Hangul syllables from jamo
KO_VOWEL = [0, 4, 8, 13, 18, 20, 1, 5, 6, 12]
KO_TAIL = [4, 8, 16, 17, 19, 21, 1]
ZH_PUNCT = "，，，。。、！？；：“”《》（）"
EMOJI = ("😀😂🥲😍🤔🙏👍👎👏🎉🔥✨💯🚀🌍🌸🍕☕⚽🎵📚💻🐍🦀❤🧡💛💚💙💜🖤🤍")
PEOPLE = "👩👨🧑👧👦👶🧒"
TONES = [chr(c) for c in range(0x1F3FB, 0x1F400)]
WS = ["\u00a0", "\u2003", "\u3000", "\t", "\u2028", "\u0085", "\u2009", "\u202f", "\u000b",
      "\u000c", "\u200b", "\ufeff", "\u1680", "  ", " \t "]


def zipf(rng, s, a=1.1):
    """A character of s drawn by a Zipf law on its position."""
    n = len(s)
    while True:
        k = int(rng.paretovariate(a)) - 1
        if k < n:
            return s[k]


def zh_sentence(rng):
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append("".join(zipf(rng, ZH) for _ in range(rng.randint(3, 18))))
        out.append(rng.choice(ZH_PUNCT))
    if rng.random() < 0.2:
        out.insert(rng.randrange(len(out)), str(rng.randint(1, 2100)) + "年")
    return "".join(out)


def ja_sentence(rng):
    out = []
    for _ in range(rng.randint(4, 25)):
        out.append(zipf(rng, JA_KANJI) if rng.random() < 0.35 else zipf(rng, JA_KANA))
    return "".join(out) + rng.choice("。、！？")


def ko_word(rng):
    return "".join(chr(0xAC00 + (rng.choice(KO_LEAD) * 21 + rng.choice(KO_VOWEL)) * 28 +
                       (rng.choice(KO_TAIL) if rng.random() < 0.4 else 0))
                   for _ in range(rng.randint(1, 4)))


def ko_sentence(rng):
    return " ".join(ko_word(rng) for _ in range(rng.randint(2, 10))) + rng.choice(".?!")


def emoji_seq(rng):
    r = rng.random()
    if r < 0.25:  # ZWJ family, maybe with skin tones
        n = rng.randint(2, 4)
        return "\u200d".join(rng.choice(PEOPLE) + (rng.choice(TONES) if rng.random() < 0.3 else "")
                             for _ in range(n))
    if r < 0.45:
        return rng.choice("👍👋✋🙌💪🤝") + rng.choice(TONES)
    if r < 0.6:  # a flag: two regional indicators
        return "".join(chr(0x1F1E6 + rng.randrange(26)) for _ in range(2))
    if r < 0.7:  # keycap
        return rng.choice("0123456789#*") + "\ufe0f\u20e3"
    if r < 0.8:
        return rng.choice("❤☺✌☀⭐") + "\ufe0f"
    return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))


def odd_chars(rng):
    """Replacement characters from invalid bytes, noncharacters, private use,
    unassigned code points, controls, combining marks."""
    r = rng.random()
    if r < 0.3:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))).decode(
            "utf-8", errors="replace")
    if r < 0.45:
        return rng.choice(["\ufffe", "\uffff", "\ufdd0", "\U0001fffe", "\U0010ffff"])
    if r < 0.6:
        return chr(rng.choice([0xE000 + rng.randrange(64), 0xF0000 + rng.randrange(16)]))
    if r < 0.7:
        return chr(rng.choice([0x0378, 0x0530, 0x1C89, 0x2FFC, 0xD7FC, 0x1FAFF, 0x2FFFF]))
    if r < 0.85:
        return chr(rng.choice([1, 2, 7, 8, 27, 127, 0x80, 0x9F]))
    return "a" + "".join(chr(0x300 + rng.randrange(0x70)) for _ in range(rng.randint(1, 5)))


def generate():
    rng = random.Random(2026)
    from pydoc_data.topics import topics
    prose = [topics[k] for k in sorted(topics)]
    words = [w for t in prose for w in t.split() if w.isalpha()]
    code_files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
    code = []
    for f in code_files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            code.append(fh.read())
    names = []
    for cp in list(range(0x20, 0x600)) + list(range(0x1E00, 0x2200)) + list(
            range(0x3000, 0x3100)) + list(range(0xFF00, 0xFFF0)) + list(range(0x1F600, 0x1F680)):
        try:
            names.append("U+%04X %s %s" % (cp, unicodedata.name(chr(cp)), chr(cp)))
        except ValueError:
            pass
    rng.shuffle(names)

    def english():
        out = []
        for _ in range(rng.randint(1, 5)):
            s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 25)))
            out.append(s[:1].upper() + s[1:] + rng.choice(".,;?!:"))
        return " ".join(out)

    def mixed():
        parts = []
        for _ in range(rng.randint(2, 10)):
            r = rng.random()
            parts.append(rng.choice(words) if r < 0.4 else emoji_seq(rng) if r < 0.55 else
                         odd_chars(rng) if r < 0.75 else zh_sentence(rng) if r < 0.85 else
                         str(rng.randint(0, 10 ** 9)))
        s = ""
        for p in parts:
            s += p + (rng.choice(WS) if rng.random() < 0.7 else " ")
        return s + ("\r" if rng.random() < 0.3 else "")

    blocks, size = [], 0
    ci = pi = ni = 0
    while size < TOTAL:
        r = rng.random()
        if r < 0.30 and ci < len(code):  # a slice of source, as is (tabs, CR kept)
            lines = code[ci].split("\n")
            a = rng.randrange(max(1, len(lines)))
            b = a + rng.randint(10, 80)
            blk = "\n".join(lines[a:b])
            if rng.random() < 0.1:
                blk = blk.replace("\n", "\r\n")
            ci = (ci + 1) % len(code)
        elif r < 0.38:
            blk = prose[pi % len(prose)][rng.randrange(1000):][:rng.randint(500, 4000)]
            pi += 1
        elif r < 0.52:
            blk = "\n".join(english() for _ in range(rng.randint(1, 8)))
        elif r < 0.62:
            blk = "\n".join(names[(ni + i) % len(names)] for i in range(rng.randint(5, 40)))
            ni += 40
        elif r < 0.72:
            blk = "\n".join(zh_sentence(rng) for _ in range(rng.randint(1, 6)))
        elif r < 0.77:
            blk = "\n".join(ja_sentence(rng) for _ in range(rng.randint(1, 6)))
        elif r < 0.82:
            blk = "\n".join(ko_sentence(rng) for _ in range(rng.randint(1, 6)))
        elif r < 0.87:
            blk = "\n".join(" ".join(emoji_seq(rng) for _ in range(rng.randint(1, 12)))
                            for _ in range(rng.randint(1, 4)))
        else:
            blk = "\n".join(mixed() for _ in range(rng.randint(1, 6)))
        blocks.append(blk)
        size += len(blk.encode()) + 1
    return "\n".join(blocks).split("\n")


def run(mmc, path, args, infile, outfile):
    with open(infile, "rb") as fi, open(outfile, "wb") as fo:
        p = subprocess.run([mmc, "tokenize", path] + args, stdin=fi, stdout=fo,
                           stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise SystemExit("FAIL mmc tokenize %s %s: exit %d: %s" %
                         (path, " ".join(args), p.returncode, p.stderr.decode()[:500]))
    with open(outfile, encoding="utf-8", newline="\n") as f:
        return f.read().split("\n")[:-1]


def main():
    mmc, work = sys.argv[1], sys.argv[2]
    bench = "--bench" in sys.argv
    if bench:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read when first used: one thread
    os.makedirs(work, exist_ok=True)
    t0 = time.perf_counter()
    lines = generate()
    if "--write" in sys.argv:
        with open(sys.argv[sys.argv.index("--write") + 1], "w", encoding="utf-8",
                  newline="\n") as f:
            f.write("\n".join(lines) + "\n")
        return
    nbytes = sum(len(s.encode()) + 1 for s in lines)
    acc, cut = 0, 0
    while acc < TRAIN:
        acc += len(lines[cut].encode()) + 1
        cut += 1
    train, test = lines[:cut], lines[cut:]
    test_bytes = nbytes - acc
    if "--sample" in sys.argv:  # every k-th line, k from the wanted size
        want = int(sys.argv[sys.argv.index("--sample") + 1])
        k = max(1, test_bytes // want)
        test = test[::k]
        test_bytes = sum(len(s.encode()) + 1 for s in test)
    print("corpus: %d lines, %.2f MB (made in %.1f s); training on %d lines (%.2f MB), "
          "comparing %d lines (%.2f MB)" % (len(lines), nbytes / 1e6, time.perf_counter() - t0,
                                            cut, acc / 1e6, len(test), test_bytes / 1e6))
    import compare
    from tokenizers import Tokenizer
    src = os.path.join(work, "test.txt")
    with open(src, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(test) + "\n")
    fails = checked = 0
    for name, build in (("byte-level BPE (Qwen2)", lambda: compare.qwen2(train, 8000)),
                        ("BPE byte fallback (Llama 2)", lambda: compare.llama2(train, work, 8000)),
                        ("Unigram (T5)", lambda: compare.t5(  # a lighter EM (time)
                            train, vocab=8000, seed_size=50_000, n_sub_iterations=1,
                            shrinking_factor=0.5))):
        t1 = time.perf_counter()
        tok = build()
        path = os.path.join(work, "tok.json")
        tok.save(path)
        tok = Tokenizer.from_file(path)
        if bench:
            print("%s: trained in %.1f s" % (name, time.perf_counter() - t1))
            compare.bench_one(mmc, name.split()[0], path, tok, test, work, reps=2)
            continue
        t2 = time.perf_counter()
        ref = [e.ids for e in tok.encode_batch_fast(test, add_special_tokens=False)]
        t3 = time.perf_counter()
        got = run(mmc, path, [], src, os.path.join(work, "ids.txt"))
        t4 = time.perf_counter()
        ntok = sum(len(r) for r in ref)
        ref_s = [" ".join(map(str, r)) for r in ref]
        bad = [i for i, (r, g) in enumerate(zip(ref_s, got)) if r != g]
        if len(got) != len(ref):
            bad.append(-1)
        for i in bad[:3]:
            print("  line %d: %r\n    tokenizers %s\n    mmc        %s" %
                  (i, test[i][:100], ref_s[i][:200], got[i][:200] if i >= 0 else "?"))
        print("%s %s encode: %d/%d lines identical, %d tokens (train %.1f s; tokenizers %.1f s "
              "on 2 threads; mmc %.1f s)" % ("FAIL" if bad else "PASS", name, len(ref) - len(bad),
                                            len(ref), ntok, t2 - t1, t3 - t2, t4 - t3))
        fails += bool(bad)
        checked += 1
        ids_file = os.path.join(work, "ref_ids.txt")
        with open(ids_file, "w") as f:
            f.write("\n".join(ref_s) + "\n")
        dref = tok.decode_batch(ref, skip_special_tokens=False)
        t5_ = time.perf_counter()
        dgot = run(mmc, path, ["--decode"], ids_file, os.path.join(work, "text.txt"))
        t6 = time.perf_counter()
        bad = [i for i, (r, g) in enumerate(zip(dref, dgot)) if r != g]
        if len(dgot) != len(dref):
            bad.append(-1)
        for i in bad[:3]:
            print("  decode line %d:\n    tokenizers %r\n    mmc        %r" %
                  (i, dref[i][:120], dgot[i][:120] if i >= 0 else "?"))
        same = sum(r == s for r, s in zip(dref, test))
        print("%s %s decode(encode(x)): %d/%d lines identical (%d give back the line; mmc %.1f s)"
              % ("FAIL" if bad else "PASS", name, len(dref) - len(bad), len(dref), same, t6 - t5_))
        fails += bool(bad)
        checked += 1
    if bench:
        return
    print("%d passed, %d failed (%.1f s)" % (checked - fails, fails, time.perf_counter() - t0))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
