"""PyTorch reference of stdlib_models/t5.mm, written from Hugging Face's
T5 (modeling_t5.py: T5LayerNorm, T5Attention._relative_position_bucket,
T5DenseGatedActDense with gelu_new) and keyed by mmc's parameter names.
Also counts a T5 encoder's parameters from torch modules built on the meta
device (no memory), independently of mmc's `stats`."""
import math

import torch
import torch.nn.functional as F


def rms(x, w, eps=1e-6):
    # T5LayerNorm: no mean subtraction, no bias
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def relative_position_bucket(rel, num_buckets=32, max_distance=128):
    # T5Attention._relative_position_bucket, bidirectional (the encoder)
    num_buckets //= 2
    buckets = (rel > 0).to(torch.long) * num_buckets
    rel = torch.abs(rel)
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact) *
                         (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


def position_bias(table, T, num_buckets, max_distance):
    ctx = torch.arange(T)[:, None]
    mem = torch.arange(T)[None, :]
    b = relative_position_bucket(mem - ctx, num_buckets, max_distance)
    return F.embedding(b, table).permute(2, 0, 1).unsqueeze(0)  # [1, H, T, T]


def t5_encoder(P, name, ids, depth, heads, head_dim, buckets=32, max_distance=128, eps=1e-6, pad=0):
    """Hidden states [B, T, dim]; with pad (T5's 0), the attention mask of
    Hugging Face's T5EncoderModel (ids != pad): its extended mask, (1 - mask)
    times float32's min, added to the position bias, and the padded rows of
    the output zeroed as stdlib_models/t5.mm does."""
    x = F.embedding(ids.long(), P[name + ".shared.weight"])
    B, T, _ = x.shape
    bias = position_bias(P[name + ".encoder.rel_bias"], T, buckets, max_distance)
    keep = torch.ones(B, T) if pad is None else (ids != pad).float()
    bias = bias + (1.0 - keep[:, None, None, :]) * torch.finfo(torch.float32).min
    for i in range(depth):
        b = "%s.encoder.block.%d" % (name, i)
        h = rms(x, P[b + ".attn_norm.weight"], eps)
        q = F.linear(h, P[b + ".attn.q.weight"]).view(B, T, heads, head_dim).transpose(1, 2)
        k = F.linear(h, P[b + ".attn.k.weight"]).view(B, T, heads, head_dim).transpose(1, 2)
        v = F.linear(h, P[b + ".attn.v.weight"]).view(B, T, heads, head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(3, 2)) + bias  # T5: no 1/sqrt(d)
        o = torch.matmul(F.softmax(scores.float(), dim=-1), v).transpose(1, 2).reshape(B, T, heads * head_dim)
        x = x + F.linear(o, P[b + ".attn.o.weight"])
        h = rms(x, P[b + ".ff_norm.weight"], eps)
        g = F.gelu(F.linear(h, P[b + ".ff.wi_0.weight"]), approximate="tanh") * F.linear(h, P[b + ".ff.wi_1.weight"])
        x = x + F.linear(g, P[b + ".ff.wo.weight"])
    return rms(x, P[name + ".encoder.final_norm.weight"], eps) * keep[:, :, None]


def t5_tiny(P, ids, labels):
    """stdlib_models/t5.mm, model T5Tiny."""
    h = t5_encoder(P, "text", ids, depth=2, heads=4, head_dim=16, buckets=32, max_distance=20, pad=None)
    logits = F.linear(h, P["head.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), ignore_index=-100)


def count_t5_encoder(vocab, d_model, d_kv, heads, d_ff, layers, buckets):
    """Parameters of a T5 v1.1 encoder (T5EncoderModel's layout: shared
    embedding, per block q/k/v/o, two layer norms, wi_0/wi_1/wo, the first
    block's relative_attention_bias, the final layer norm), counted from
    torch modules on the meta device."""
    inner = heads * d_kv
    mods = [torch.nn.Embedding(vocab, d_model, device="meta"), torch.nn.Embedding(buckets, heads, device="meta"),
            torch.nn.LayerNorm(d_model, device="meta")]  # final_layer_norm: weight only in T5 (bias removed below)
    n = 0
    for m in mods:
        n += sum(p.numel() for p in m.parameters())
    n -= d_model  # T5LayerNorm has no bias
    for _ in range(layers):
        blk = torch.nn.ModuleList([torch.nn.Linear(d_model, inner, bias=False, device="meta") for _ in range(3)] +
                                  [torch.nn.Linear(inner, d_model, bias=False, device="meta"),
                                   torch.nn.Linear(d_model, d_ff, bias=False, device="meta"),
                                   torch.nn.Linear(d_model, d_ff, bias=False, device="meta"),
                                   torch.nn.Linear(d_ff, d_model, bias=False, device="meta")])
        n += sum(p.numel() for p in blk.parameters()) + 2 * d_model  # two T5LayerNorm weights
    return n
