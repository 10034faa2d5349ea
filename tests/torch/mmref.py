"""PyTorch references of the stdlib models, written independently of mmc from
the same definitions (stdlib_models/*.mm), keyed by mmc's parameter names.
Used by the parity tests and bench/. Needs Debian's python3-torch
(/usr/bin/python3) and numpy; reads and writes safetensors with numpy only."""
import math

import numpy as np
import torch
import torch.nn.functional as F

from mmtrain import st_load, st_save  # safetensors with numpy only


# ---------------------------------------------------------------- primitives (nn.mm)
LORA_SCALE = 1.0  # alpha / rank of the model's LoRA setting (passes/lora.c)


def linear(P, name, x, bias=True):
    y = F.linear(x, P[name + ".weight"], P[name + ".bias"] if bias else None)
    if name + ".lora_a" in P:  # a LoRA adapter: y + alpha/r * B(A(x)), after the bias
        y = y + LORA_SCALE * F.linear(F.linear(x, P[name + ".lora_a"]), P[name + ".lora_b"])
    return y


def layer_norm(P, name, x, eps):
    return F.layer_norm(x, x.shape[-1:], P[name + ".weight"], P[name + ".bias"], eps)


def rms_norm(P, name, x, eps):
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rstd * P[name + ".weight"]


def rope(x, theta, offset=0):
    B, T, H, D = x.shape
    inv = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    ang = (torch.arange(T, dtype=torch.float64)[:, None] + offset) * inv[None, :]
    cos = torch.cos(ang).float()[None, :, None, :].repeat(1, 1, 1, 2)
    sin = torch.sin(ang).float()[None, :, None, :].repeat(1, 1, 1, 2)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention_core(q, k, v, causal):
    B, T, H, D = q.shape
    S, KVH = k.shape[1], k.shape[2]
    if KVH != H:
        k = k.repeat_interleave(H // KVH, dim=2)
        v = v.repeat_interleave(H // KVH, dim=2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    if causal:
        mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2)


def attention(P, name, x, heads, kv_heads=None, qkv_bias=True, out_bias=True, causal=False, rope_theta=0.0):
    B, T, C = x.shape
    kv_heads = kv_heads or heads
    hd = C // heads
    q = linear(P, name + ".q_proj", x, qkv_bias).reshape(B, T, heads, hd)
    k = linear(P, name + ".k_proj", x, qkv_bias).reshape(B, T, kv_heads, hd)
    v = linear(P, name + ".v_proj", x, qkv_bias).reshape(B, T, kv_heads, hd)
    if rope_theta > 0:
        q, k = rope(q, rope_theta), rope(k, rope_theta)
    o = attention_core(q, k, v, causal).reshape(B, T, heads * hd)
    return linear(P, name + ".o_proj", o, out_bias)


ACT = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "relu": F.relu}


def mlp(P, name, x, act, bias=True):
    return linear(P, name + ".fc2", ACT[act](linear(P, name + ".fc1", x, bias)), bias)


# ---------------------------------------------------------------- models
def internvit(P, name, pixels, patch, depth, heads, eps=1e-6):
    p = F.conv2d(pixels, P[name + ".embed.weight"], P[name + ".embed.bias"], stride=patch)
    p = p.flatten(2).transpose(1, 2)
    B, _, C = p.shape
    x = torch.cat([P[name + ".cls"].expand(B, 1, C), p], 1) + P[name + ".pos"]
    for i in range(depth):
        b = "%s.blocks.%d" % (name, i)
        h = x + P[b + ".ls1"] * attention(P, b + ".attn", layer_norm(P, b + ".norm1", x, eps), heads)
        x = h + P[b + ".ls2"] * mlp(P, b + ".mlp", layer_norm(P, b + ".norm2", h, eps), "gelu")
    return x


def vit_fashion(P, pixels, labels):
    """stdlib_models/vit_fashion.mm, model ViTFashion."""
    f = internvit(P, "vit", pixels, patch=4, depth=4, heads=4)[:, 0]
    logits = linear(P, "head", layer_norm(P, "norm", f, 1e-5))
    return F.cross_entropy(logits, labels.long(), ignore_index=-100)


def gpt(P, name, ids, labels, depth, heads):
    T = ids.shape[1]
    x = F.embedding(ids.long(), P[name + ".wte.weight"]) + P[name + ".wpe"][:T]
    for i in range(depth):
        b = "%s.h.%d" % (name, i)
        h = x + attention(P, b + ".attn", layer_norm(P, b + ".ln_1", x, 1e-5), heads, causal=True)
        x = h + mlp(P, b + ".mlp", layer_norm(P, b + ".ln_2", h, 1e-5), "gelu_tanh")
    logits = F.linear(layer_norm(P, name + ".ln_f", x, 1e-5), P[name + ".wte.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), ignore_index=-100)


def gpt2_tiny(P, ids, labels):
    """stdlib_models/gpt2.mm, model GPT2Tiny."""
    return gpt(P, "gpt", ids, labels, depth=2, heads=4)


def gpt2_small(P, ids, labels):
    """stdlib_models/gpt2.mm, model GPT2."""
    return gpt(P, "gpt", ids, labels, depth=12, heads=12)


MODELS = {"ViTFashion": vit_fashion, "GPT2Tiny": gpt2_tiny, "GPT2": gpt2_small}


def llm_decode(P, name, h, depth, heads, kv_heads, theta, eps=1e-6, qkv_bias=True, tied=False):
    """stdlib_models/llm.mm, LLM.decode: DecoderBlocks (RMSNorm, GQA with RoPE, SwiGLU), RMSNorm, head."""
    for i in range(depth):
        b = "%s.blocks.%d" % (name, i)
        x = h + attention(P, b + ".attn", rms_norm(P, b + ".norm1", h, eps), heads, kv_heads, qkv_bias=qkv_bias,
                          out_bias=False, causal=True, rope_theta=theta)
        m = rms_norm(P, b + ".norm2", x, eps)
        g = F.silu(linear(P, b + ".mlp.gate_proj", m, False)) * linear(P, b + ".mlp.up_proj", m, False)
        h = x + linear(P, b + ".mlp.down_proj", g, False)
    h = rms_norm(P, name + ".norm", h, eps)
    return F.linear(h, P[name + ".embed.weight"]) if tied else linear(P, name + ".head", h, False)


def pixel_shuffle_mlp(P, name, x, grid, factor=2):
    """stdlib_models/projector.mm: [B, grid*grid, C] -> 2x2 neighbours into channels -> LN, fc1, GELU, fc2."""
    B, _, C = x.shape
    f = factor
    s = x.reshape(B, grid // f, f, grid // f, f, C).permute(0, 1, 3, 2, 4, 5).reshape(B, (grid // f) ** 2, f * f * C)
    return linear(P, name + ".fc2", F.gelu(linear(P, name + ".fc1", layer_norm(P, name + ".norm", s, 1e-5))))


IMG_TOKEN = 3  # the caption tokenizer's <img> (runtime/data/mmrt_caption.h)


def internvl2_tiny(P, pixels, text, labels):
    """stdlib_models/internvl2.mm, model InternVL2Tiny."""
    logits = internvl2_tiny_logits(P, pixels, text)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), ignore_index=-100)


def internvl2_tiny_logits(P, pixels, text):
    """InternVL2Tiny's logits [B, T, vocab] for images [B, 1, 28, 28] and text [B, T]."""
    image = pixel_shuffle_mlp(P, "projector", internvit(P, "vision", pixels, patch=7, depth=2, heads=4)[:, 1:], grid=4)
    h = F.embedding(text.long(), P["llm.embed.weight"])
    # the image features where the image-context tokens stand, as InternVL's
    # chat model does: input_embeds[selected] = vit_embeds
    mask = text == IMG_TOKEN
    h = h.masked_scatter(mask.unsqueeze(-1), image.reshape(-1, image.shape[-1]).to(h.dtype))
    return llm_decode(P, "llm", h, depth=2, heads=4, kv_heads=2, theta=10000.0)


MODELS["InternVL2Tiny"] = internvl2_tiny
MODELS["InternVL2TinyLoRA"] = internvl2_tiny  # with .lora_a/.lora_b in P (rank 4, alpha 8: LORA_SCALE = 2)
MODELS["InternVL2TinyFrozenVision"] = internvl2_tiny  # train { freeze = [vision] }: vision.* get no update
