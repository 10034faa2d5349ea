#!/usr/bin/python3
# tools/frame_cnn_check.py WEIGHTS: FrameCNN (stdlib_models/frame_classifier.mm)
# reimplemented in PyTorch on a FrameCNNFit weights file, run on 3,000
# Fashion-MNIST test items, each pasted at a random place on a black 64x64
# canvas, as they are and as 4x4 block means: its accuracy per class and the
# block means' confusion rows (README "Sampling": which classes the
# classifier itself cannot tell apart at the stand-in latents' resolution).
# Debian's torch: run with /usr/bin/python3.
import glob, gzip, json, struct, sys

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head, base, out = json.loads(b[8:8 + n]), 8 + n, {}
    for k, v in head.items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            a = np.frombuffer(b[base + s:base + e], dtype=np.float32).reshape(v["shape"])
            out[k] = torch.from_numpy(a.copy())
    return out


def load_idx(pattern):
    path = glob.glob(pattern)[0]
    b = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b[4 + 4 * nd:], dtype=np.uint8).reshape(dims)


def frame_cnn(w, x):
    g = lambda k: w["classifier." + k]
    h = x * 2 - 1
    for c in ("c1", "c2", "c3", "c4"):
        h = F.relu(F.conv2d(h, g(c + ".weight"), g(c + ".bias"), stride=1 if c == "c4" else 2,
                            padding=1))
    p = h.mean((2, 3))
    p = F.layer_norm(p, (p.shape[1],), g("norm.weight"), g("norm.bias"), 1e-5)
    return p @ g("head.weight").T + g("head.bias")


def main():
    w = load_safetensors(sys.argv[1])
    d = "/usr/share/datasets/fashion-mnist/"
    items, labels = load_idx(d + "t10k-images*"), load_idx(d + "t10k-labels*")
    n, rng = 3000, np.random.default_rng(0)
    frames = np.zeros((n, 1, 64, 64), np.float32)
    for i in range(n):
        y, x = rng.integers(0, 37, 2)
        frames[i, 0, y:y + 28, x:x + 28] = items[i] / 255.0
    real = torch.from_numpy(frames)
    blocks = real.reshape(n, 1, 16, 4, 16, 4).mean((3, 5))
    blocks = blocks.repeat_interleave(4, 2).repeat_interleave(4, 3)
    truth = labels[:n].astype(np.int64)
    with torch.no_grad():
        for name, x in (("real", real), ("blocks", blocks)):
            pred = frame_cnn(w, x).argmax(1).numpy()
            cm = np.zeros((10, 10), int)
            np.add.at(cm, (truth, pred), 1)
            print(name, "accuracy %.4f" % (pred == truth).mean(), "per class",
                  " ".join("%d:%.2f" % (c, cm[c, c] / cm[c].sum()) for c in range(10)))
        print("block means, rows the true class, columns the named one:")
        print(cm)


if __name__ == "__main__":
    main()
