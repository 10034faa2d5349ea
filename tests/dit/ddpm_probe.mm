// tests/dit_formulas.sh: the DDPM module's numbers read out through one SGD
// step (lr 1) from zero: each probe's gradient is 2 (probe - value) times a
// power of two, so the saved probes are the values, exactly scaled.
import "videodit.mm"

model DDPMProbe {
  let B = 16
  ddpm  = DDPM()
  xt    = param f32[B, 8, 4, 8, 8] = zeros
  v     = param f32[B, 8, 4, 8, 8] = zeros
  wv    = param f32[B, 8, 4, 8, 8] = zeros
  table = param f32[1000, 3] = zeros

  forward(latents: f32[B, 8, 4, 8, 8], text: i32[B, 8], noise: f32[B, 8, 4, 8, 8],
          t_uniform: f32[B]) -> loss {
    t = ddpm.timesteps(t_uniform)
    a = xt - ddpm.add_noise(latents, noise, t)
    b = v - ddpm.target(latents, noise, t)
    c = table - ddpm_table()
    return sum(a * a) + sum(b * b) + sum(c * c) + ddpm.loss(wv, latents, noise, t)
  }

  train { optimizer = sgd(lr = 1.0) }
}
