// videodit.mm: OpenSoraPlan 1.3's VideoDiT (OpenSoraT2V_v1_3 without the
// Skiparse sparse attention): latents [B, C, T, H, W] are cut into 1x2x2
// patches, each block is LayerNorm (no affine) -> self-attention with 3D
// RoPE -> cross-attention to the projected text -> LayerNorm -> GELU (tanh)
// FFN, modulated by AdaLN-single (one timestep MLP for the model, a
// scale-shift table [6, dim] per block and [2, dim] for the final layer),
// and the last linear is unpatchified back to the latent shape.
// Names follow diffusers / OpenSoraPlan where the module tree allows:
// pos_embed.proj, caption_projection.linear_1/2,
// adaln_single.emb.timestep_embedder.linear_1/2, adaln_single.linear,
// transformer_blocks.N.{attn1,attn2}.{to_q,to_k,to_v,to_out},
// transformer_blocks.N.ff.{fc1,fc2} (diffusers' ff.net.0.proj, ff.net.2),
// transformer_blocks.N.scale_shift_table, scale_shift_table, proj_out.
import "nn.mm"
import "t5.mm"
import "diffusion.mm"

// RoPE over (t, h, w) on x[B, t*h*w, heads, 3d] (OSP's RoPE3D): the head
// dims in three equal parts, each rotated (rotate-half, base theta) by the
// token's frame, row and column.
module RoPE3D(t: int, h: int, w: int, heads: int, head_dim: int, theta: float = 10000.0) {
  let d = head_dim // 3

  forward(x: [B, N, heads, head_dim]) -> [B, N, heads, head_dim] {
    xt = x[:, :, :, 0:d].reshape(B, t, h * w * heads, d)
    xh = x[:, :, :, d:2 * d].reshape(B, t, h, w * heads, d).permute(0, 2, 1, 3, 4).reshape(B, h, t * w * heads, d)
    xw = x[:, :, :, 2 * d:3 * d].reshape(B, t * h, w, heads, d).permute(0, 2, 1, 3, 4).reshape(B, w, t * h * heads, d)
    rt = rope(xt, theta = theta).reshape(B, N, heads, d)
    rh = rope(xh, theta = theta).reshape(B, h, t, w * heads, d).permute(0, 2, 1, 3, 4).reshape(B, N, heads, d)
    rw = rope(xw, theta = theta).reshape(B, w, t * h, heads, d).permute(0, 2, 1, 3, 4).reshape(B, N, heads, d)
    return concat([rt, rh, rw], axis = 3)
  }
}

// diffusers' Attention with biases; rope3d on q and k for self-attention;
// cross-attention takes the text's keep mask [B, S] (0: a padded token,
// never attended)
module DiTAttention(dim: int, heads: int, head_dim: int, kv_dim: int, t: int = 0, h: int = 0,
                    w: int = 0) {
  to_q   = Linear(dim, heads * head_dim)
  to_k   = Linear(kv_dim, heads * head_dim)
  to_v   = Linear(kv_dim, heads * head_dim)
  to_out = Linear(heads * head_dim, dim)
  if t > 0 {
    rope3d = RoPE3D(t, h, w, heads, head_dim)
  }

  forward(x: [B, N, dim], ctx: [B, S, kv_dim]) -> [B, N, dim] {
    q = to_q(x).reshape(B, N, heads, head_dim)
    k = to_k(ctx).reshape(B, S, heads, head_dim)
    v = to_v(ctx).reshape(B, S, heads, head_dim)
    if t > 0 {
      q = rope3d(q)
      k = rope3d(k)
    }
    return to_out(attention(q, k, v).reshape(B, N, heads * head_dim))
  }

  forward cross(x: [B, N, dim], ctx: [B, S, kv_dim], keep: [B, S]) -> [B, N, dim] {
    q = to_q(x).reshape(B, N, heads, head_dim)
    k = to_k(ctx).reshape(B, S, heads, head_dim)
    v = to_v(ctx).reshape(B, S, heads, head_dim)
    return to_out(attention(q, k, v, mask = keep).reshape(B, N, heads * head_dim))
  }
}

module DiTBlock(dim: int, heads: int, head_dim: int, ffn: int, t: int, h: int, w: int,
                eps: float = 1e-6) {
  norm1 = LayerNorm(dim, eps, affine = false)
  attn1 = DiTAttention(dim, heads, head_dim, dim, t, h, w)
  attn2 = DiTAttention(dim, heads, head_dim, dim)
  norm2 = LayerNorm(dim, eps, affine = false)
  ff    = MLP(dim, ffn, act = "gelu_tanh")
  scale_shift_table = param f32[6, dim] = normal(1.0 / sqrt(dim))

  // temb [B, 6 dim]: shift, scale, gate of the attention, then of the FFN
  // (each [B, 1, dim], taken from the last dim; a [B, 6, dim] sliced on dim 1
  // also works since ed4d5f8, which stopped sp splitting that dim as a sequence)
  forward(x: [B, N, dim], text: [B, L, dim], keep: [B, L], temb: [B, 6 * dim]) -> [B, N, dim] {
    shift_msa = (temb[:, 0:dim] + scale_shift_table[0]).reshape(B, 1, dim)
    scale_msa = (temb[:, dim:2 * dim] + scale_shift_table[1]).reshape(B, 1, dim)
    gate_msa  = (temb[:, 2 * dim:3 * dim] + scale_shift_table[2]).reshape(B, 1, dim)
    shift_mlp = (temb[:, 3 * dim:4 * dim] + scale_shift_table[3]).reshape(B, 1, dim)
    scale_mlp = (temb[:, 4 * dim:5 * dim] + scale_shift_table[4]).reshape(B, 1, dim)
    gate_mlp  = (temb[:, 5 * dim:6 * dim] + scale_shift_table[5]).reshape(B, 1, dim)
    a = norm1(x) * (scale_msa + 1.0) + shift_msa
    x1 = x + gate_msa * attn1(a, a)
    x2 = x1 + attn2.cross(x1, text, keep)
    f = norm2(x2) * (scale_mlp + 1.0) + shift_mlp
    return x2 + gate_mlp * ff(f)
  }
}

// diffusers' PixArtAlphaTextProjection: linear, GELU (tanh), linear
module CaptionProjection(in_dim: int, dim: int) {
  linear_1 = Linear(in_dim, dim)
  linear_2 = Linear(dim, dim)

  forward(x) { return linear_2(gelu_tanh(linear_1(x))) }
}

// diffusers' TimestepEmbedding on a 256-wide sinusoidal embedding
module TimestepEmbedder(dim: int) {
  linear_1 = Linear(256, dim)
  linear_2 = Linear(dim, dim)

  forward(t: [B]) -> [B, dim] { return linear_2(silu(linear_1(timestep_embedding(t, dim = 256)))) }
}

module AdaLNEmb(dim: int) {
  timestep_embedder = TimestepEmbedder(dim)

  forward(t: [B]) -> [B, dim] { return timestep_embedder(t) }
}

// AdaLayerNormSingle: emb(t) for the final layer, linear(silu(emb(t))) [B, 6 dim] for the blocks
module AdaLNSingle(dim: int) {
  emb    = AdaLNEmb(dim)
  linear = Linear(dim, 6 * dim)

  forward(e: [B, dim]) -> [B, 6 * dim] { return linear(silu(e)) }
}

// latents [B, channels, frames, height, width] (frames, height, width the
// latent sizes, height and width even), timesteps t [B] (a float: the DDPM
// step, or 1000 x the flow time), text features [B, L, text_dim] and their
// keep mask [B, L] (1 a token, 0 padding: T5Encoder's mask) -> the
// prediction, the latents' shape.
// pooled = 1 (not in OSP 1.3, whose text reaches the DiT only through
// cross-attention): the text features' mean over the kept tokens, through
// pooled_projection (linear, GELU (tanh), linear), is added to the timestep
// embedding before AdaLN-single, as SD3 adds its pooled text embedding
// (diffusers CombinedTimestepTextProjEmbeddings), so every block's and the
// final layer's scale, shift and gate see the caption.
module VideoDiT(channels: int, frames: int, height: int, width: int, depth: int, heads: int,
                head_dim: int, text_dim: int, patch: int = 2, pooled: int = 0) {
  let dim = heads * head_dim
  let gh = height // patch
  let gw = width // patch
  let n = frames * gh * gw
  pos_embed          = Conv3dPatch(channels, dim, patch)
  caption_projection = CaptionProjection(text_dim, dim)
  adaln_single       = AdaLNSingle(dim)
  if pooled == 1 {
    pooled_projection = CaptionProjection(text_dim, dim)
  }
  transformer_blocks = DiTBlock(dim, heads, head_dim, 4 * dim, frames, gh, gw) x depth
  norm_out           = LayerNorm(dim, 1e-6, affine = false)
  scale_shift_table  = param f32[2, dim] = normal(1.0 / sqrt(dim))
  proj_out           = Linear(dim, patch * patch * channels)

  forward(x: [B, channels, frames, height, width], t: [B], text: [B, L, text_dim], keep: [B, L]) -> [B, channels, frames, height, width] {
    ok = require(pooled == 0 or pooled == 1,
                 "VideoDiT takes pooled = 0 (cross-attention only) or 1 (the mean text feature too)")
    h = pos_embed(x)
    e = adaln_single.emb(t)
    if pooled == 1 {
      kk = keep.reshape(B, L, 1)
      e = e + pooled_projection(sum(text * kk, axis = 1) / sum(kk, axis = 1))
    }
    ctx = caption_projection(text)
    h = transformer_blocks(h, ctx, keep, adaln_single(e))
    shift = (e + scale_shift_table[0]).reshape(B, 1, dim)
    scale = (e + scale_shift_table[1]).reshape(B, 1, dim)
    o = proj_out(norm_out(h) * (scale + 1.0) + shift)
    o = o.reshape(B, frames, gh, gw, patch, patch, channels).permute(0, 6, 1, 2, 4, 3, 5)
    return o.reshape(B, channels, frames, height, width)
  }
}

// PatchEmbed2D over every frame: a 1 x p x p convolution with stride p, the
// tokens in (t, h, w) order. The weight is OSP's Conv2d [dim, C, p, p].
module Conv3dPatch(channels: int, dim: int, patch: int) {
  weight = param f32[dim, channels, patch, patch] = fan_in(1.0)
  bias   = param f32[dim] = zeros

  forward(x: [B, channels, T, H, W]) -> [B, T * (H // patch) * (W // patch), dim] {
    y = conv3d(x, weight.reshape(dim, channels, 1, patch, patch), bias, stride = [1, patch, patch])
    return y.reshape(B, dim, T * (H // patch) * (W // patch)).transpose(1, 2)
  }
}

// OpenSoraPlan 1.3's OpenSoraT2V_v1_3-2B/122: 32 layers, 24 heads x 96 =
// 2304, 8 latent channels, patch 1x2x2, mT5-XXL features (4096) projected;
// 93 frames at 480x640 are 24 x 60 x 80 latents (WFVAE 4x8x8).
model OSP13VideoDiT {
  let B = 1
  let L = 512
  dit = VideoDiT(channels = 8, frames = 24, height = 60, width = 80, depth = 32, heads = 24,
                 head_dim = 96, text_dim = 4096)
  diffusion = DDPM()

  forward(latents: f32[B, 8, 24, 60, 80], text_features: f32[B, L, 4096], text_mask: f32[B, L],
          noise: f32[B, 8, 24, 60, 80], t_uniform: f32[B]) -> loss {
    t = diffusion.timesteps(t_uniform)
    pred = dit(diffusion.add_noise(latents, noise, t), t.float(), text_features, text_mask)
    return diffusion.loss(pred, latents, noise, t)
  }
}

// A tiny text-to-video DiT on moving-item clips (the DiT task of the
// trainer: latents [B, 8, 5, 8, 8] of 17-frame clips, caption ids [B, 8]):
// a frozen 1-layer T5 encoder (random weights fixed by the run seed), a
// 2-layer VideoDiT of 2 heads x 24, DDPM with v-prediction and min-SNR.
model VideoDiTTiny {
  let B = 4
  let L = 8
  text_encoder = T5Encoder(vocab = 32, dim = 32, depth = 1, heads = 2, head_dim = 16, ffn = 64,
                           buckets = 8, max_distance = 16)
  dit       = VideoDiT(channels = 8, frames = 5, height = 8, width = 8, depth = 2, heads = 2,
                       head_dim = 24, text_dim = 32)
  diffusion = DDPM()

  forward(latents: f32[B, 8, 5, 8, 8], text: i32[B, L], noise: f32[B, 8, 5, 8, 8],
          t_uniform: f32[B]) -> loss {
    t = diffusion.timesteps(t_uniform)
    pred = dit(diffusion.add_noise(latents, noise, t), t.float(), text_encoder(text),
               text_encoder.mask(text))
    return diffusion.loss(pred, latents, noise, t)
  }

  data { format = t2v_diffusion }
  train {
    freeze    = [text_encoder]
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = constant
  }
}

// VideoDiTTiny with its T5 encoder trained too (tests/dit_t5.sh: the T5's
// PyTorch parity on the task's captions, of unequal lengths, padded and
// masked).
model VideoDiTTinyT5 extends VideoDiTTiny {
  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = constant
  }
}

// VideoDiTTiny with the pooled text embedding in AdaLN-single (VideoDiT
// pooled = 1; tests/dit_videodit.sh: its PyTorch parity)
model VideoDiTTinyPooled extends VideoDiTTiny {
  dit = VideoDiT(channels = 8, frames = 5, height = 8, width = 8, depth = 2, heads = 2,
                 head_dim = 24, text_dim = 32, pooled = 1)
}

// The same DiT trained by flow matching: logit-normal t, velocity target.
model VideoDiTTinyFlow extends VideoDiTTiny {
  diffusion = FlowMatching()

  forward(latents: f32[B, 8, 5, 8, 8], text: i32[B, L], noise: f32[B, 8, 5, 8, 8],
          t_normal: f32[B]) -> loss {
    t = diffusion.timesteps(t_normal)
    pred = dit(diffusion.add_noise(latents, noise, t), t * 1000.0, text_encoder(text),
               text_encoder.mask(text))
    return diffusion.loss(pred, latents, noise)
  }
}

// The DiT tools/t2v.sh trains (README "Sampling"): VideoDiTTiny's task and
// frozen T5, a wider and deeper VideoDiT, a larger batch, cosine decay, and
// the latents standardised before diffusion, as latent diffusion scales its
// VAE's latents: the stand-in latents (a black canvas, -1, with one item)
// have mean -0.89 and standard deviation 0.34 (2,000 items at random
// places), so the DiT diffuses (latents + 0.9) * 3.4 (mean 0.03, standard
// deviation 1.17; the sampler's decode undoes it, t2v_sample.mm
// T2VStandIn). Unscaled, 3,000 steps gave dim, shrunken items (mean pixel
// 0.033 against the clips' 0.055) recognised in 11.4% of frames. The
// caption also reaches AdaLN-single (pooled = 1): at 1,500 steps 15.2% of
// 200 clips' frames against 14.0% without (seed 1, guidance 4); the steps
// matter most: 3,500 steps (pooled = 0) 36.3%, 10,000 (pooled = 1) 57.3%
// of 1,000 clips' frames (README "Sampling"); then the lr: at 3,500 steps
// 2e-3 47.0% of 200 clips' frames against 36.2% at 1e-3 and 41.8% at 4e-3
// (Zen 3); 8,500 steps at 2e-3 66.0% of 1,000 clips' frames with DDIM
// sampling, 69.6% with DDPM, 9,200 steps with DDPM 71.1% (tools/t2v.sh).
model VideoDiTSmall extends VideoDiTTiny {
  let B = 16
  dit = VideoDiT(channels = 8, frames = 5, height = 8, width = 8, depth = 4, heads = 4,
                 head_dim = 36, text_dim = 32, pooled = 1)

  forward(latents: f32[B, 8, 5, 8, 8], text: i32[B, L], noise: f32[B, 8, 5, 8, 8],
          t_uniform: f32[B]) -> loss {
    x0 = (latents + 0.9) * 3.4
    t = diffusion.timesteps(t_uniform)
    pred = dit(diffusion.add_noise(x0, noise, t), t.float(), text_encoder(text),
               text_encoder.mask(text))
    return diffusion.loss(pred, x0, noise, t)
  }

  train {
    freeze    = [text_encoder]
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = cosine(warmup = 200)
  }
}

