#!/usr/bin/python3
"""PyTorch as a user writes it, for bench/run.sh: the stdlib models as
nn.Modules (fused QKV, LayerNorm, GELU, tied GPT-2 head; InternViT's layer
scale; InternVL2Tiny's LLM with RMSNorm, RoPE, GQA, fused gate/up), the model's AdamW
settings on torch.optim.AdamW (its default implementation), gradient
clipping at 1.0, fp32 (--bf16: under torch.autocast bfloat16). Prints one JSON line: ms per step (steady state,
after 3 warm-up steps), peak RSS, threads, torch version and BLAS.
Usage: torch_user.py MODEL --batch B [--seq T] [--steps N] [--threads N] [--bf16]"""
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
    def __init__(self, dim, heads, ffn, causal, layer_scale=False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))
        # InternViT's layer scale (stdlib_models/internvit.mm ls1, ls2)
        self.ls1 = nn.Parameter(torch.full((dim,), 0.1)) if layer_scale else None
        self.ls2 = nn.Parameter(torch.full((dim,), 0.1)) if layer_scale else None

    def forward(self, x):
        if self.ls1 is None:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = x + self.ls1 * self.attn(self.ln1(x))
        return x + self.ls2 * self.mlp(self.ln2(x))


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


class InternViT(nn.Module):
    def __init__(self, image, patch, dim, depth, heads, ffn):
        super().__init__()
        n = (image // patch) ** 2 + 1
        self.patch = nn.Conv2d(1, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn, False, True) for _ in range(depth))

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return x


class ViT(nn.Module):
    def __init__(self, image, patch, dim, depth, heads, ffn, classes):
        super().__init__()
        self.vit = InternViT(image, patch, dim, depth, heads, ffn)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.norm(self.vit(x))[:, 0]), y)


class RMSNorm(nn.Module):  # torch 1.13 has none
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, theta):  # x [B, H, T, D], rotate-half form
    T, D = x.shape[-2], x.shape[-1]
    f = theta ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    a = torch.arange(T, dtype=torch.float32)[:, None] * f[None]
    cos, sin = torch.cat([a.cos(), a.cos()], -1), torch.cat([a.sin(), a.sin()], -1)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class DecoderBlock(nn.Module):  # Qwen2-style: RMSNorm, GQA with RoPE, SwiGLU
    def __init__(self, dim, heads, kv_heads, ffn, theta):
        super().__init__()
        self.h, self.kvh, self.hd, self.theta = heads, kv_heads, dim // heads, theta
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.hd)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate_up = nn.Linear(dim, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.h * self.hd, self.kvh * self.hd, self.kvh * self.hd], -1)
        q = rope(q.view(B, T, self.h, self.hd).transpose(1, 2), self.theta)
        k = rope(k.view(B, T, self.kvh, self.hd).transpose(1, 2), self.theta)
        v = v.view(B, T, self.kvh, self.hd).transpose(1, 2)
        k, v = k.repeat_interleave(self.h // self.kvh, 1), v.repeat_interleave(self.h // self.kvh, 1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        x = x + self.o((att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


IMG = 3  # the image-context token (stdlib_models/internvl2.mm IMG)


class InternVL2(nn.Module):
    def __init__(self):  # InternVL2Tiny
        super().__init__()
        self.vision = InternViT(28, 7, 64, 2, 4, 128)
        self.proj = nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 64), nn.GELU(), nn.Linear(64, 64))
        self.embed = nn.Embedding(64, 64)
        self.blocks = nn.ModuleList(DecoderBlock(64, 4, 2, 128, 10000.0) for _ in range(2))
        self.norm, self.head = RMSNorm(64), nn.Linear(64, 64, bias=False)

    def forward(self, pixels, text, labels):
        x = self.vision(pixels)[:, 1:]  # [B, 16, 64]: a 4 x 4 grid, pixel-unshuffled to 2 x 2
        B = x.shape[0]
        x = x.reshape(B, 2, 2, 2, 2, 64).permute(0, 1, 3, 2, 4, 5).reshape(B, 4, 256)
        e = self.embed(text)  # under autocast the projector gives bf16, the embedding f32
        h = e.masked_scatter((text == IMG).unsqueeze(-1), self.proj(x).to(e.dtype))
        for b in self.blocks:
            h = b(h)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.view(-1, 64), labels.view(-1), ignore_index=-100)


# model: (constructor, AdamW settings of its .mm train section)
MODELS = {
    "ViTFashion": (lambda: ViT(28, 4, 64, 4, 4, 128, 10),
                   dict(lr=2e-3, betas=(0.9, 0.999), weight_decay=0.05)),
    "GPT2Tiny": (lambda: GPT(256, 64, 64, 2, 4), dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)),
    "GPT2": (lambda: GPT(50257, 1024, 768, 12, 12),
             dict(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)),
    "InternVL2Tiny": (InternVL2, dict(lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)),
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


def measure(loss_fn, params, opt, steps, bf16=False):
    """ms per training step (zero_grad, forward, backward, clip at 1.0, opt.step)
    over `steps` steps after 3 warm-up steps."""
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
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
    ap.add_argument("--threads", type=int, default=0, help="default: torch's own")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(cpu, bfloat16)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    a.threads = torch.get_num_threads()
    torch.manual_seed(0)
    make, hp = MODELS[a.model]
    model = make()
    opt = torch.optim.AdamW(model.parameters(), **hp)
    if a.model == "ViTFashion":
        x, y = torch.randn(a.batch, 1, 28, 28), torch.randint(0, 10, (a.batch,))
    elif a.model == "InternVL2Tiny":  # <bos>, 4 image tokens, prompt and answer; loss on the answer
        pix = torch.randn(a.batch, 1, 28, 28)
        text = torch.randint(4, 64, (a.batch, a.seq))
        text[:, 1:5] = IMG
        y = torch.randint(4, 64, (a.batch, a.seq))
        y[:, :8] = -100
        ms = measure(lambda: model(pix, text, y), list(model.parameters()), opt, a.steps, a.bf16)
        x = None
    else:
        vocab = model.wte.weight.shape[0]
        x = torch.randint(0, vocab, (a.batch, a.seq))
        y = torch.randint(0, vocab, (a.batch, a.seq))

    if a.model != "InternVL2Tiny":
        ms = measure(lambda: model(x, y), list(model.parameters()), opt, a.steps, a.bf16)
    print(json.dumps({"model": a.model, "ms_per_step": ms, "threads": a.threads,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__, "blas": blas()}))


if __name__ == "__main__":
    main()
