// tests/dit_sp_slice.sh: the final layer of stdlib_models/videodit.mm with
// its modulation as in diffusers, a [B, 2, dim] (table + emb(t)) sliced on
// dim 1: under tp + sp that dim is no sequence and must not be split.
import "videodit.mm"

model SpSliceDiT {
  let B = 4
  let dim = 32
  pos_embed    = Conv3dPatch(8, dim, 2)
  adaln_single = AdaLNSingle(dim)
  norm1        = LayerNorm(dim, 1e-6, affine = false)
  ff           = MLP(dim, 64, act = "gelu_tanh")
  norm_out     = LayerNorm(dim, 1e-6, affine = false)
  scale_shift_table = param f32[2, dim] = normal(0.2)
  proj_out     = Linear(dim, 32)
  diffusion    = DDPM()

  forward(latents: f32[B, 8, 5, 8, 8], text: i32[B, 8], noise: f32[B, 8, 5, 8, 8],
          t_uniform: f32[B]) -> loss {
    t = diffusion.timesteps(t_uniform)
    h = pos_embed(diffusion.add_noise(latents, noise, t))
    e = adaln_single.emb(t.float())
    h = h + ff(norm1(h))
    m = scale_shift_table + e.reshape(B, 1, dim)
    o = proj_out(norm_out(h) * (m[:, 1:2] + 1.0) + m[:, 0:1])
    o = o.reshape(B, 5, 4, 4, 2, 2, 8).permute(0, 6, 1, 2, 4, 3, 5)
    return diffusion.loss(o.reshape(B, 8, 5, 8, 8), latents, noise, t)
  }

  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = constant
  }
}
