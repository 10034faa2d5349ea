#!/usr/bin/python3
"""Generation parity with PyTorch.
  gen_parity.py export MMC.safetensors OUT.safetensors
      PyTorch takes the mmc weights, builds its own parameters from them
      (torch tensors, in reverse name order) and exports them with its own
      safetensors writer: the file the trainer and generator must load.
  gen_parity.py check WEIGHTS.safetensors IMAGES.idx IDS.txt
      PyTorch decodes greedily (never PAD, BOS or <img>) from the prefixes
      the mmc generator used (IDS.txt: source TAB prefix ids TAB generated
      ids) on the same images, recomputing the whole text each token, and
      compares every generated token. A token may differ only where the
      two best logits are within 1e-4 (a tie within float rounding).
Exits 1 on a mismatch."""
import gzip, os, struct, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmref

PAD, BOS, EOS, IMG = 0, 1, 2, 3
MEAN, STD = 0.2860, 0.3530  # runtime/data/mmrt_data.h


def export(src, dst):
    w, _ = mmref.st_load(src)
    params = {k: torch.nn.Parameter(torch.from_numpy(w[k]).clone()) for k in sorted(w, reverse=True)}
    mmref.st_save(dst, {k: p.detach().numpy() for k, p in params.items()}, {"format": "pt", "exported_by": "torch"})
    print("exported %d tensors from PyTorch" % len(params))


def read_idx(path):
    data = open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    magic, n, r, c = struct.unpack(">IIII", data[:16])
    assert magic == 0x803, "not an IDX image file"
    return np.frombuffer(data[16:16 + n * r * c], dtype=np.uint8).reshape(n, r, c)


def check(weights, images, ids_file, T=16):
    w, _ = mmref.st_load(weights)
    P = {k: torch.from_numpy(v) for k, v in w.items()}
    px = read_idx(images)
    lines = [l.rstrip("\n").split("\t") for l in open(ids_file) if l.strip()]
    bad = ties = tokens = 0
    torch.set_num_threads(1)
    with torch.no_grad():
        for src, prefix, gen in lines:
            k = int(src.rsplit(":", 1)[1])
            x = torch.from_numpy(((px[k].astype(np.float32) / 255.0 - MEAN) / STD).reshape(1, 1, 28, 28))
            text = [int(t) for t in prefix.split()]
            mmc = [int(t) for t in gen.split()]
            ours = []
            while True:
                ids = torch.tensor([text + [PAD] * (T - len(text))], dtype=torch.int32)
                row = mmref.internvl2_tiny_logits(P, x, ids)[0, len(text) - 1].clone()
                row[[PAD, BOS, IMG]] = -float("inf")
                top2 = torch.topk(row, 2)
                tok = int(top2.indices[0])
                ours.append(tok)
                i = len(ours) - 1
                if i < len(mmc) and mmc[i] != tok:
                    if float(top2.values[0] - row[mmc[i]]) < 1e-4:
                        ties += 1
                        break  # the sequences part at a tie: stop comparing this image
                    print("%s: token %d: PyTorch %d, mmc %d (logits %.6f vs %.6f)" %
                          (src, i, tok, mmc[i], float(top2.values[0]), float(row[mmc[i]])))
                    bad += 1
                    break
                tokens += 1
                if tok == EOS or len(text) == T:
                    if len(ours) != len(mmc):
                        print("%s: PyTorch generated %d tokens, mmc %d" % (src, len(ours), len(mmc)))
                        bad += 1
                    break
                text.append(tok)
    print("%d images, %d tokens equal, %d ties, %d mismatches" % (len(lines), tokens, ties, bad))
    return 1 if bad or not lines else 0


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
