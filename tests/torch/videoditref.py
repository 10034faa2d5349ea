"""PyTorch reference of stdlib_models/videodit.mm and diffusion.mm, written
from OpenSoraPlan 1.3 (opensora/models/diffusion/opensora_v1_3/modules.py
BasicTransformerBlock, modeling_opensora.py OpenSoraT2V_v1_3, common.py
PatchEmbed2D, PositionGetter3D, RoPE3D), diffusers (Timesteps,
TimestepEmbedding, PixArtAlphaTextProjection, AdaLayerNormSingle,
FeedForward gelu-approximate, DDPMScheduler with rescale_betas_zero_snr)
and OSP's train_t2v_diffusers.py (v-prediction, min-SNR weights), keyed by
mmc's parameter names. The schedule is numpy float64."""
import math

import numpy as np
import torch
import torch.nn.functional as F


def ddpm_schedule(steps=1000, beta_start=1e-4, beta_end=0.02, zero_snr=True):
    """diffusers DDPMScheduler(beta_schedule="linear", rescale_betas_zero_snr=True):
    alphas_cumprod in float64."""
    betas = np.linspace(beta_start, beta_end, steps, dtype=np.float64)
    if zero_snr:  # diffusers' rescale_zero_terminal_snr (Lin et al. 2024, Algorithm 1)
        alphas_bar_sqrt = np.sqrt(np.cumprod(1.0 - betas))
        a0, aT = alphas_bar_sqrt[0], alphas_bar_sqrt[-1]
        alphas_bar_sqrt = (alphas_bar_sqrt - aT) * a0 / (a0 - aT)
        alphas_bar = alphas_bar_sqrt ** 2
        alphas = np.concatenate([alphas_bar[0:1], alphas_bar[1:] / alphas_bar[:-1]])
        betas = 1 - alphas
    return np.cumprod(1.0 - betas)


def min_snr_weight(abar, gamma=5.0):
    """train_t2v_diffusers.py: min(snr, gamma) / (snr + 1) for v-prediction."""
    snr = abar / (1 - abar)
    return np.minimum(snr, gamma) / (snr + 1)


def timestep_embedding(t, dim=256, max_period=10000):
    """diffusers get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=0), in float64."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)
    a = t.double()[:, None] * freqs[None]
    return torch.cat([torch.cos(a), torch.sin(a)], -1).float()


def lin(P, name, x, bias=True):
    return F.linear(x, P[name + ".weight"], P[name + ".bias"] if bias else None)


def rope3d(x, t, h, w, theta=10000.0):
    """OSP RoPE3D on x [B, N, H, D] (tokens in (t, h, w) order)."""
    B, N, H, D = x.shape
    d = D // 3
    pos = torch.cartesian_prod(torch.arange(t), torch.arange(h), torch.arange(w))  # [N, 3]

    def rope1d(y, p):
        inv = 1.0 / (theta ** (torch.arange(0, d, 2).double() / d))
        f = p.double()[:, None] * inv[None]
        f = torch.cat([f, f], -1)
        cos, sin = f.cos().float()[None, :, None], f.sin().float()[None, :, None]
        y1, y2 = y[..., :d // 2], y[..., d // 2:]
        return y * cos + torch.cat([-y2, y1], -1) * sin

    parts = x.chunk(3, dim=-1)
    return torch.cat([rope1d(parts[i], pos[:, i]) for i in range(3)], -1)


def dit_attention(P, name, x, ctx, heads, grid=None, keep=None):
    B, N, _ = x.shape
    q = lin(P, name + ".to_q", x).view(B, N, heads, -1)
    k = lin(P, name + ".to_k", ctx).view(B, ctx.shape[1], heads, -1)
    v = lin(P, name + ".to_v", ctx).view(B, ctx.shape[1], heads, -1)
    if grid is not None:
        q, k = rope3d(q, *grid), rope3d(k, *grid)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if keep is not None:  # key padding: the padded text tokens are not attended
        s = s.masked_fill(keep[:, None, None, :] == 0, float("-inf"))
    o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, N, -1)
    return lin(P, name + ".to_out", o)


def videodit(P, name, x, t, text, depth, heads, patch=2, keep=None, pooled=False):
    B, C, T, H, W = x.shape
    dim = P[name + ".scale_shift_table"].shape[1]
    gh, gw = H // patch, W // patch
    # PatchEmbed2D: (b t) c h w -> conv -> b (t h w) c
    y = F.conv2d(x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W), P[name + ".pos_embed.weight"],
                 P[name + ".pos_embed.bias"], stride=patch)
    hs = y.reshape(B, T, dim, gh * gw).permute(0, 1, 3, 2).reshape(B, T * gh * gw, dim)
    te = timestep_embedding(t)
    emb = lin(P, name + ".adaln_single.emb.timestep_embedder.linear_2",
              F.silu(lin(P, name + ".adaln_single.emb.timestep_embedder.linear_1", te)))
    if pooled:  # SD3's CombinedTimestepTextProjEmbeddings: + the projected mean text feature
        m = (text * keep[:, :, None]).sum(1) / keep.sum(1, keepdim=True)
        emb = emb + lin(P, name + ".pooled_projection.linear_2",
                        F.gelu(lin(P, name + ".pooled_projection.linear_1", m), approximate="tanh"))
    temb = lin(P, name + ".adaln_single.linear", F.silu(emb))  # [B, 6 dim]
    ctx = lin(P, name + ".caption_projection.linear_2",
              F.gelu(lin(P, name + ".caption_projection.linear_1", text), approximate="tanh"))
    for i in range(depth):
        b = "%s.transformer_blocks.%d" % (name, i)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            P[b + ".scale_shift_table"][None] + temb.reshape(B, 6, -1)).chunk(6, dim=1)
        n1 = F.layer_norm(hs, (dim,), eps=1e-6) * (1 + scale_msa) + shift_msa
        hs = hs + gate_msa * dit_attention(P, b + ".attn1", n1, n1, heads, grid=(T, gh, gw))
        hs = hs + dit_attention(P, b + ".attn2", hs, ctx, heads, keep=keep)
        n2 = F.layer_norm(hs, (dim,), eps=1e-6) * (1 + scale_mlp) + shift_mlp
        ff = lin(P, b + ".ff.fc2", F.gelu(lin(P, b + ".ff.fc1", n2), approximate="tanh"))
        hs = hs + gate_mlp * ff
    shift, scale = (P[name + ".scale_shift_table"][None] + emb[:, None]).chunk(2, dim=1)
    hs = F.layer_norm(hs, (dim,), eps=1e-6) * (1 + scale) + shift
    o = lin(P, name + ".proj_out", hs)
    o = o.reshape(B, T, gh, gw, 1, patch, patch, C)
    o = torch.einsum("nthwopqc->nctohpwq", o)
    return o.reshape(B, C, T, H, W)


ABAR = ddpm_schedule()


def videodit_tiny(P, latents, text, noise, t_uniform, pooled=False):
    """stdlib_models/videodit.mm, model VideoDiTTiny (VideoDiTTinyPooled: pooled)."""
    import t5ref
    feats = t5ref.t5_encoder(P, "text_encoder", text, depth=1, heads=2, head_dim=16, buckets=8, max_distance=16)
    t = (t_uniform * 1000).long()
    ab = torch.tensor(ABAR[t.numpy()])
    a = ab.sqrt().float().view(-1, 1, 1, 1, 1)
    s = (1 - ab).sqrt().float().view(-1, 1, 1, 1, 1)
    xt = a * latents + s * noise
    pred = videodit(P, "dit", xt, t.float(), feats, depth=2, heads=2, keep=(text != 0).float(),
                    pooled=pooled)
    target = a * noise - s * latents  # v-prediction
    w = torch.tensor(min_snr_weight(ab.numpy())).float()
    return (F.mse_loss(pred, target, reduction="none").mean(dim=[1, 2, 3, 4]) * w).mean()


def videodit_tiny_flow(P, latents, text, noise, t_normal):
    """stdlib_models/videodit.mm, model VideoDiTTinyFlow."""
    import t5ref
    feats = t5ref.t5_encoder(P, "text_encoder", text, depth=1, heads=2, head_dim=16, buckets=8, max_distance=16)
    t = torch.sigmoid(t_normal)
    tt = t.view(-1, 1, 1, 1, 1)
    xt = (1 - tt) * latents + tt * noise
    pred = videodit(P, "dit", xt, t * 1000, feats, depth=2, heads=2, keep=(text != 0).float())
    return F.mse_loss(pred, noise - latents)


def videodit_tiny_pooled(P, latents, text, noise, t_uniform):
    return videodit_tiny(P, latents, text, noise, t_uniform, pooled=True)


videodit_tiny.inputs = ("latents", "text", "noise", "t_uniform")
videodit_tiny_pooled.inputs = videodit_tiny.inputs
videodit_tiny_flow.inputs = ("latents", "text", "noise", "t_normal")
# VideoDiTTinyT5: VideoDiTTiny with the T5 encoder trained (tests/dit_t5.sh)
MODELS = {"VideoDiTTiny": videodit_tiny, "VideoDiTTinyFlow": videodit_tiny_flow,
          "VideoDiTTinyT5": videodit_tiny, "VideoDiTTinyPooled": videodit_tiny_pooled}


def count_osp13(layers=32, heads=24, head_dim=96, in_channels=8, caption_channels=4096, cross_dim=2304,
                patch=2, patch_t=1):
    """Parameters of OpenSoraT2V_v1_3 (OSP modeling_opensora.py _init_patched_inputs and
    BasicTransformerBlock; diffusers Attention(bias=True, out_bias=True), FeedForward 4x,
    AdaLayerNormSingle, PixArtAlphaTextProjection; LayerNorms without affine), counted
    from torch modules on the meta device."""
    dim = heads * head_dim
    L = lambda i, o: torch.nn.Linear(i, o, device="meta")
    mods = [L(caption_channels, dim), L(dim, dim),                               # caption_projection
            torch.nn.Conv2d(in_channels, dim, patch, stride=patch, device="meta"),  # pos_embed.proj
            L(dim, patch_t * patch * patch * in_channels),                      # proj_out
            L(256, dim), L(dim, dim), L(dim, 6 * dim)]                          # adaln_single
    n = sum(p.numel() for m in mods for p in m.parameters()) + 2 * dim          # scale_shift_table (2, dim)
    for _ in range(layers):
        blk = [L(dim, dim), L(dim, dim), L(dim, dim), L(dim, dim),              # attn1 to_q/k/v, to_out.0
               L(dim, dim), L(cross_dim, dim), L(cross_dim, dim), L(dim, dim),  # attn2
               L(dim, 4 * dim), L(4 * dim, dim)]                                # ff.net.0.proj, ff.net.2
        n += sum(p.numel() for m in blk for p in m.parameters()) + 6 * dim     # scale_shift_table (6, dim)
    return n
