"""The fixtures of tests/conv_data.sh (hf venv: PIL and tokenizers):
  python make.py DIR
DIR/img/: images of mixed sizes and shapes (PNG RGB/grey/RGBA, JPEG) made with
PIL; DIR/conv.jsonl: 200 samples with 1-4 images each (some text-only), 1-3
rounds, the <image> placeholders spread over the human turns, ids strings or
numbers; DIR/conv.json: the same samples as one JSON list; DIR/tok.json: a
BPE tokenizer trained by `tokenizers` on the samples' text and the InternVL2
system message, with the chat and image tokens as added tokens."""
import json
import os
import random
import sys

from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

SPECIAL = ["[UNK]", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>",
           "<IMG_CONTEXT>", "<image>"]
WORDS = ("cat dog red blue small large shirt shoe bag coat the a is of and what which colour "
         "shape picture left right top bottom it this there show me describe count many one two "
         "three four yes no maybe probably striped plain dark light").split()
SYSTEM = ("你是由上海人工智能实验室联合商汤科技开发的书生多模态大模型，英文名叫InternVL, "
          "是一个有用无害的人工智能助手。")


def sentence(rng, n):
    s = " ".join(rng.choice(WORDS) for _ in range(n))
    return s + rng.choice(["?", ".", "!", ""])


def main(d):
    rng = random.Random(30)
    os.makedirs(os.path.join(d, "img"), exist_ok=True)
    names = []
    for k in range(60):
        w, h = rng.randint(8, 260), rng.randint(8, 260)
        if k % 7 == 0:
            w, h = rng.randint(200, 400), rng.randint(10, 40)  # wide
        if k % 11 == 0:
            w, h = rng.randint(10, 40), rng.randint(200, 400)  # tall
        if k % 13 == 0:
            w = h = [20, 40, 50, 100, 200][k // 13]  # square: 1 tile below half of 2x2
        mode = ["RGB", "L", "RGBA"][k % 3]
        im = Image.new(mode, (w, h))
        px = [tuple((x * 7 + y * 3 + c * 40 + k) % 256 for c in range(len(mode))) if len(mode) > 1
              else (x * 5 + y + k) % 256 for y in range(h) for x in range(w)]
        im.putdata(px)
        if k % 4 == 3:
            name = "i%02d.jpg" % k
            im.convert("RGB").save(os.path.join(d, "img", name), quality=90)
        else:
            name = "i%02d.png" % k
            im.save(os.path.join(d, "img", name))
        names.append(name)
    samples, texts = [], [SYSTEM]
    for i in range(200):
        nimg = 0 if i % 25 == 24 else rng.randint(1, 4)
        imgs = [rng.choice(names) for _ in range(nimg)]
        rounds = rng.randint(1, 3)
        holders = [rng.randrange(rounds) for _ in range(nimg)]
        conv = []
        if i % 10 == 9:
            conv.append({"from": "system", "value": sentence(rng, 4)})
        for r in range(rounds):
            q = sentence(rng, rng.randint(2, 8))
            for _ in range(holders.count(r)):
                q = rng.choice(["<image>\n" + q, q + " <image>", "<image> " + q])
            conv.append({"from": rng.choice(["human", "user"]) if i % 5 == 4 else "human",
                         "value": q})
            conv.append({"from": "gpt", "value": sentence(rng, rng.randint(1, 10))})
        s = {"id": i if i % 3 == 0 else "s%03d" % i, "conversations": conv}
        if nimg == 1 and i % 2:
            s["image"] = imgs[0]
        elif nimg:
            s["image"] = imgs
        samples.append(s)
        texts += [t["value"] for t in conv]
    with open(os.path.join(d, "conv.jsonl"), "w") as f:
        for s in samples:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    json.dump(samples, open(os.path.join(d, "conv.json"), "w"), indent=1, ensure_ascii=False)
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                       special_tokens=SPECIAL))
    tok.save(os.path.join(d, "tok.json"))


if __name__ == "__main__":
    main(sys.argv[1])
