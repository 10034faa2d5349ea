"""ref.py: the references for tests/indexed_data.sh, run in a venv with
megatron-core and tokenizers (loaded as tests/data_ref/mcore.py explains).

  ref.py corpus DIR [N V]      writes DIR/corpus.jsonl (N lines of varied text,
                               default 400) and trains DIR/tok.json (byte-level
                               BPE, V ids, default 700) on it
  ref.py preprocess TOK JSONL PREFIX
                               what preprocess_data.py does with one worker
                               (json.loads, tokenizers' encode, add_document,
                               + <|endoftext|>), timed (bench/preprocess.sh)
  ref.py read PREFIX           megatron-core's IndexedDataset on PREFIX, printed
                               as `mmc data inspect PREFIX --show all` prints it
  ref.py write PREFIX DTYPE MM builds a dataset with IndexedDatasetBuilder
                               (numpy dtype name; MM 1 = multimodal) and prints
                               it the same way
  ref.py tokenize TOK JSONL KEY EOD
                               the `tokenizers` ids of each line's KEY text
                               (+ EOD id unless empty; EOD "" for none), printed
                               as inspect prints sequences (empty texts skipped)
  ref.py each OUT CMD ARGS... [:: OUT CMD ARGS...]...
                               several of these in one process (torch loads
                               once), each printing into its file OUT
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def show(ds, path_prefix):
    idx = ds.index
    print("sequences   %d" % len(ds))
    print("documents   %d" % (len(ds.document_indices) - 1))
    print("tokens      %d" % int(sum(int(x) for x in ds.sequence_lengths)))
    print("document_indices " + " ".join(str(int(x)) for x in ds.document_indices))
    for i in range(len(ds)):
        item = ds[i]
        mode = None
        if isinstance(item, tuple):
            item, mode = item
        head = "sequence %d" % i + (" mode %d" % int(mode) if mode is not None else "")
        if item.dtype.kind == "f":
            vals = " ".join("%.17g" % float(x) for x in item)
        else:
            vals = " ".join(str(int(x)) for x in item)
        print(head + ":" + (" " + vals if len(item) else ""))


def corpus(d, nlines=400, vocab=700):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rnd = random.Random(29)
    words = ("the quick brown fox jumps over lazy dog data model train token "
             "Megatron indexed dataset sequence document").split()
    cjk = "数据集的每一行是一个文档。東京は日本の首都です。한국어 문장도 있습니다。"
    code = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) { s += a[i]; }",
            "SELECT * FROM t WHERE id = 3;", "\tindented\r\n  line"]
    emoji = "😀🚀👩‍💻🇯🇵✨"
    lines = []
    for i in range(nlines):
        k = i % 5
        if k == 0:
            t = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 40)))
        elif k == 1:
            t = "".join(rnd.choice(cjk) for _ in range(rnd.randint(1, 30)))
        elif k == 2:
            t = rnd.choice(code) + " " + rnd.choice(words)
        elif k == 3:
            t = "".join(rnd.choice(emoji + " ab") for _ in range(rnd.randint(1, 12)))
        else:
            t = "  spaces\u00a0and\u2003unusual\twhitespace\n\nnew lines " + str(i)
        if i == 7:
            t = ""  # an empty document
        lines.append(json.dumps({"id": i, "text": t, "meta": {"k": [1, 2]}},
                                ensure_ascii=(i % 2 == 0)))
    with open(os.path.join(d, "corpus.jsonl"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator((json.loads(l)["text"] for l in lines), tr)
    tok.save(os.path.join(d, "tok.json"))


def main(argv):
    cmd = argv[1]
    if cmd == "each":
        rest = argv[2:]
        while rest:
            k = rest.index("::") if "::" in rest else len(rest)
            one, rest = rest[:k], rest[k + 1:]
            with open(one[0], "w") as out:
                sys.stdout = out
                try:
                    main([argv[0]] + one[1:])
                finally:
                    sys.stdout = sys.__stdout__
        return
    if cmd == "corpus":
        corpus(argv[2], *[int(a) for a in argv[3:5]])
        return
    if cmd == "tokenize":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(argv[2])
        key, eod = argv[4], argv[5]
        eod_id = tok.token_to_id(eod) if eod else None
        n = 0
        with open(argv[3], encoding="utf-8") as f:
            for line in f:
                ids = tok.encode(json.loads(line)[key], add_special_tokens=False).ids
                if not ids:
                    continue
                if eod_id is not None:
                    ids.append(eod_id)
                print("sequence %d: %s" % (n, " ".join(map(str, ids))))
                n += 1
        return
    import mcore

    m = mcore.load()
    import numpy

    if cmd == "preprocess":
        import time

        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(argv[2])
        eod = tok.token_to_id("<|endoftext|>")
        dtype = m.DType.optimal_dtype(tok.get_vocab_size())
        t0 = time.time()
        b = m.IndexedDatasetBuilder(argv[4] + ".bin", dtype=dtype)
        ntok = 0
        with open(argv[3], encoding="utf-8") as f:
            for line in f:
                ids = tok.encode(json.loads(line)["text"], add_special_tokens=False).ids
                lens = [len(ids)] if ids else []
                if ids:
                    ids.append(eod)
                    lens[-1] += 1
                ntok += len(ids)
                b.add_document(ids, lens)
        b.finalize(argv[4] + ".idx")
        dt = time.time() - t0
        print("python (tokenizers + IndexedDatasetBuilder, 1 process): %d tokens in %.2f s, %.0f tokens/s"
              % (ntok, dt, ntok / dt))
    elif cmd == "read":
        show(m.IndexedDataset(argv[2], multimodal=False), argv[2])
    elif cmd == "write":
        import torch

        prefix, dtype, mm = argv[2], getattr(numpy, argv[3]), argv[4] == "1"
        b = m.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype, multimodal=mm)
        rnd = random.Random(7)
        hi = 120 if dtype in (numpy.int8,) else 250 if dtype == numpy.uint8 else 60000
        for doc in range(12):
            for s in range(doc % 4):  # 0 to 3 sequences; doc 0, 4, 8 are empty documents
                n = rnd.randint(0, 9)
                t = torch.tensor([rnd.randint(0, hi) for _ in range(n)], dtype=torch.int64)
                if mm:
                    b.add_item(t, mode=rnd.randint(0, 3))
                else:
                    b.add_item(t)
            b.end_document()
        b.add_document(torch.tensor([5, 6, 7, 8, 9]), [2, 3], [1, 2] if mm else None)
        b.finalize(prefix + ".idx")
        show(m.IndexedDataset(prefix, multimodal=mm), prefix)


if __name__ == "__main__":
    main(sys.argv)
