"""Fashion-MNIST as a conversation dataset, the main job's (tools/main.sh):
  python3 make_data.py FMNIST_DIR OUT_DIR [N_TRAIN N_TEST]
writes OUT_DIR/img/{train,test}-NNNNN.png (8-bit grey PNG, written here with
zlib: no imaging library needed), OUT_DIR/train.jsonl and OUT_DIR/test.jsonl
in the LLaVA/InternVL format (docs/conversations.md): one image a sample,
the question one of several phrasings (chosen by a seeded generator, the
same files every run), the answer the item's class name. The test split
asks the first phrasing. Python 3's standard library only."""
import gzip
import json
import os
import random
import struct
import sys
import zlib

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
           "ankle boot"]
QUESTIONS = ["what is this?", "what is in the picture?", "name this item.",
             "which piece of clothing is shown?", "what do you see?", "describe the item."]


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return [data[16 + i * rows * cols:16 + (i + 1) * rows * cols] for i in range(n)], rows, cols
    return list(data[8:8 + n]), 0, 0


def png(path, px, w, h):
    raw = b"".join(b"\0" + px[y * w:(y + 1) * w] for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def split(src, out, name, images, labels, limit, rng):
    imgs, h, w = idx(os.path.join(src, images))
    labs, _, _ = idx(os.path.join(src, labels))
    n = min(limit, len(imgs)) if limit else len(imgs)
    with open(os.path.join(out, name + ".jsonl"), "w") as f:
        for i in range(n):
            file = "%s-%05d.png" % (name, i)
            png(os.path.join(out, "img", file), imgs[i], w, h)
            q = QUESTIONS[0] if name == "test" else rng.choice(QUESTIONS)
            f.write(json.dumps({"id": "%s-%d" % (name, i), "image": file, "conversations": [
                {"from": "human", "value": "<image>\n" + q},
                {"from": "gpt", "value": CLASSES[labs[i]]}]}) + "\n")


def main():
    src, out = sys.argv[1], sys.argv[2]
    ntrain = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ntest = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    os.makedirs(os.path.join(out, "img"), exist_ok=True)
    rng = random.Random(30)
    split(src, out, "train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", ntrain, rng)
    split(src, out, "test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", ntest, rng)


if __name__ == "__main__":
    main()
