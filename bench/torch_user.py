#!/usr/bin/python3
"""PyTorch as a user writes it, for bench/run.sh: the stdlib models as
nn.Modules (fused QKV, LayerNorm, GELU, tied GPT-2 head), the model's AdamW
settings on torch.optim.AdamW (its default implementation), gradient
clipping at 1.0, fp32. Prints one JSON line: ms per step (steady state,
after 3 warm-up steps), peak RSS, threads, torch version and BLAS.
Usage: torch_user.py MODEL --batch B [--seq T] [--steps N] [--threads N]"""
import argparse, json, math, os, resource, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        att = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        if self.causal:
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        y = att.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, dim, heads, ffn, causal):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, dim, depth, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.h = nn.ModuleList(Block(dim, heads, 4 * dim, True) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids, labels):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


class ViT(nn.Module):
    def __init__(self, image, patch, dim, depth, heads, ffn, classes):
        super().__init__()
        n = (image // patch) ** 2 + 1
        self.patch = nn.Conv2d(1, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn, False) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x, y):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(self.norm(x)[:, 0]), y)


# model: (constructor, AdamW settings of its .mm train section)
MODELS = {
    "ViTFashion": (lambda: ViT(28, 4, 64, 4, 4, 128, 10),
                   dict(lr=2e-3, betas=(0.9, 0.999), weight_decay=0.05)),
    "GPT2Tiny": (lambda: GPT(256, 64, 64, 2, 4), dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)),
    "GPT2": (lambda: GPT(50257, 1024, 768, 12, 12),
             dict(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)),
}


def blas():
    """The BLAS library this process loaded (after a matmul), from its maps."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    libs = set()
    for line in open("/proc/self/maps"):
        name = os.path.basename(line.split()[-1]) if "/" in line else ""
        if any(k in name for k in ("blas", "mkl", "blis", "dnnl")):
            libs.add(os.path.realpath(line.split()[-1]))
    return " ".join(sorted(libs)) or "none found"


def measure(loss_fn, params, opt, steps):
    """ms per training step (zero_grad, forward, backward, clip at 1.0, opt.step)
    over `steps` steps after 3 warm-up steps."""
    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) * 1000 / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    make, hp = MODELS[a.model]
    model = make()
    opt = torch.optim.AdamW(model.parameters(), **hp)
    if a.model == "ViTFashion":
        x, y = torch.randn(a.batch, 1, 28, 28), torch.randint(0, 10, (a.batch,))
    else:
        vocab = model.wte.weight.shape[0]
        x = torch.randint(0, vocab, (a.batch, a.seq))
        y = torch.randint(0, vocab, (a.batch, a.seq))

    ms = measure(lambda: model(x, y), list(model.parameters()), opt, a.steps)
    print(json.dumps({"model": a.model, "ms_per_step": ms, "threads": a.threads,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__, "blas": blas()}))


if __name__ == "__main__":
    main()
