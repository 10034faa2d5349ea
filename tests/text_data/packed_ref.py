"""tests/text_data.sh's packed references, in PyTorch (tests/torch/mmref.py's
primitives, float64), independent of mmc:

  loss INIT.safetensors INPUTS_DIR LOG.jsonl
      GPT2TinyPacked's first training step: the dumped ids, labels, seg, pos
      of step 1; pos must be each token's position within its run of equal
      seg (recomputed here); the loss with per-document causal masks
      (query t sees key s when s <= t and seg[s] == seg[t]) and wpe rows by
      position must equal the trainer's logged step-1 loss within 1e-5.
  perdoc IDS.txt T B PACKED.f32 UNPACKED.f32
      the logits of the first evaluation batch of GPT2TinyPacked (rows
      packed from the documents in file order) and of GPT2Tiny (one document
      a row), same weights: every document of the unpacked batch has the
      same loss (mean next-token cross entropy over its tokens) in both,
      within 1e-5.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
sys.path.insert(0, HERE)
import check  # noqa: E402  (the rows' layout)
from mmref import layer_norm, linear, mlp  # noqa: E402
from mmtrain import st_load  # noqa: E402


def restart_positions(seg):
    pos = np.zeros_like(seg)
    for b in range(seg.shape[0]):
        for t in range(1, seg.shape[1]):
            pos[b, t] = pos[b, t - 1] + 1 if seg[b, t] == seg[b, t - 1] else 0
    return pos


def packed_loss(P, ids, labels, seg, pos, depth=2, heads=4):
    B, T = ids.shape
    x = F.embedding(ids.long(), P["gpt.wte.weight"]) + P["gpt.wpe"][pos.long()]
    allow = (seg[:, None, :] == seg[:, :, None]) & torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(depth):
        b = "gpt.h.%d" % i
        h_in = layer_norm(P, b + ".ln_1", x, 1e-5)
        C = h_in.shape[-1]
        q, k, v = (linear(P, b + ".attn.%s_proj" % n, h_in).reshape(B, T, heads, C // heads).transpose(1, 2)
                   for n in "qkv")
        s = (q @ k.transpose(-1, -2)) / math.sqrt(C // heads)
        s = s.masked_fill(~allow[:, None], float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        h = x + linear(P, b + ".attn.o_proj", o)
        x = h + mlp(P, b + ".mlp", layer_norm(P, b + ".ln_2", h, 1e-5), "gelu_tanh")
    logits = F.linear(layer_norm(P, "gpt.ln_f", x, 1e-5), P["gpt.wte.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(),
                           ignore_index=-100)


def doc_losses(logits, rows, T, B):
    """{document ids (tuple): loss} over the first B rows of a layout."""
    out = {}
    for r, (ids, _) in enumerate(rows[:B]):
        lg = logits[r * T:(r + 1) * T]
        t = 0
        while t < T and any(ids[t:]):
            # a document: up to the next EOS (the tokenizer's post-processor ends each with id 1)
            e = t
            while e < T and ids[e] != 1:
                e += 1
            if e == T:
                break
            doc = ids[t:e + 1]
            ce = [-(lg[t + j, doc[j + 1]] - np.logaddexp.reduce(lg[t + j])) for j in range(len(doc) - 1)]
            out[tuple(doc)] = float(np.mean(ce))
            t = e + 1
    return out


def main(a):
    if a[1] == "loss":
        P = {k: torch.tensor(v).double() for k, v in st_load(a[2])[0].items()}
        batch = st_load(os.path.join(a[3], "step-000001.safetensors"))[0]
        ids, labels, seg, pos = (batch[n] for n in ("ids", "labels", "seg", "pos"))
        if not (restart_positions(seg) == pos).all():
            print("pos is not the position within each document")
            return 1
        if (seg[:, 1:] == seg[:, :-1]).all():
            print("no row holds two documents: the test packs nothing")
            return 1
        ref = packed_loss(P, *(torch.tensor(t) for t in (ids, labels, seg, pos))).item()
        got = [json.loads(l)["loss"] for l in open(a[4]) if '"loss"' in l][0]
        print("packed step 1: mmc %.8f, PyTorch %.8f" % (got, ref))
        return 0 if abs(got - ref) <= 1e-5 else 1
    T, B = int(a[3]), int(a[4])
    V = 256
    pk = np.fromfile(a[5], dtype=np.float32).reshape(-1, V).astype(np.float64)
    un = np.fromfile(a[6], dtype=np.float32).reshape(-1, V).astype(np.float64)
    lp = doc_losses(pk, check.rows(a[2], T, True, False), T, B)
    lu = doc_losses(un, check.rows(a[2], T, False, False), T, B)
    common = [d for d in lu if d in lp]
    worst = max(abs(lp[d] - lu[d]) for d in common) if common else float("inf")
    print("%d documents in both first batches; largest loss difference %.2e" % (len(common), worst))
    return 0 if len(common) >= B - 1 and worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
