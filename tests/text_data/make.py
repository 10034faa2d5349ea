"""tests/text_data.sh's fixtures: a small JSONL corpus (text and chat
samples) and a BPE tokenizer trained on it by the `tokenizers` library
(bpe.py: 120 ids, below GPT2Tiny's 256 classes; ChatML's tokens added)."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402


def main(d, ndocs=120):
    rnd = random.Random(29)
    words = ("the quick brown fox jumps over a lazy dog while data flows into the model "
             "and every token counts once per document").split()
    docs = []
    for i in range(ndocs):
        n = rnd.choice([1, 2, 3, 5, 8, 12, 20]) if i % 7 else 40
        docs.append(" ".join(rnd.choice(words) for _ in range(n)))
    with open(os.path.join(d, "corpus.jsonl"), "w") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    with open(os.path.join(d, "chat.jsonl"), "w") as f:
        for i in range(16):
            q = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 5)))
            a = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 5)))
            f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                             {"role": "assistant", "content": a}]}) + "\n")
    tok = bpe.train(docs, 120, os.path.join(d, "tok.json"))
    # the documents' ids, one line each (the packing reference reads them)
    with open(os.path.join(d, "ids.txt"), "w") as f:
        for t in docs:
            f.write(" ".join(map(str, tok.encode(t).ids)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
