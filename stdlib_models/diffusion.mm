// diffusion.mm: the training side of diffusion as modules. A model draws
// its randomness as inputs (the trainer's task fills them from its Philox
// stream: noise like the latents, u uniform in [0, 1) or n standard normal
// per sample), so runs are reproducible and resume exactly; the schedule's
// arithmetic is here.

// DDPM (diffusers' DDPMScheduler as OpenSoraPlan 1.3 sets it): `steps`
// steps, betas linear from beta_start to beta_end, rescaled to zero terminal
// SNR, v-prediction, the loss weighted by min-SNR (gamma): per sample
// min(SNR_t, gamma) / (SNR_t + 1) times the mean squared error over its
// latents, averaged over the batch.
module DDPM(steps: int = 1000, beta_start: float = 0.0001, beta_end: float = 0.02,
            zero_snr: bool = true, gamma: float = 5.0) {
  let z = 1 if zero_snr else 0

  // t = floor(u * steps), uniform over the steps for u uniform in [0, 1)
  forward timesteps(u: [B]) -> i32[B] { return (u * steps).to("i32") }

  // row t: sqrt(abar_t), sqrt(1 - abar_t), the min-SNR weight (the
  // sampler reads the whole table, mmc compile --task sample)
  forward table() -> [steps, 3] {
    return ddpm_table(steps = steps, beta_start = beta_start, beta_end = beta_end, zero_snr = z,
                      gamma = gamma)
  }

  // row b: table row t_b
  forward coef(t: i32[B]) -> [B, 3] { return embedding(t, table()) }

  // x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise
  forward add_noise(x0: [B, C, T, H, W], noise: [B, C, T, H, W], t: i32[B]) -> [B, C, T, H, W] {
    c = coef(t)
    return c[:, 0].reshape(B, 1, 1, 1, 1) * x0 + c[:, 1].reshape(B, 1, 1, 1, 1) * noise
  }

  // v = sqrt(abar_t) noise - sqrt(1 - abar_t) x0
  forward target(x0: [B, C, T, H, W], noise: [B, C, T, H, W], t: i32[B]) -> [B, C, T, H, W] {
    c = coef(t)
    return c[:, 0].reshape(B, 1, 1, 1, 1) * noise - c[:, 1].reshape(B, 1, 1, 1, 1) * x0
  }

  // the min-SNR weighted MSE of a v-prediction (sums and a scale rather
  // than means, which codegen does not take over split values yet)
  forward loss(pred: [B, C, T, H, W], x0: [B, C, T, H, W], noise: [B, C, T, H, W], t: i32[B]) -> loss {
    d = pred - target(x0, noise, t)
    per = sum(d * d, axis = [1, 2, 3, 4])
    return sum(per * coef(t)[:, 2], axis = 0) * (1.0 / (B * C * T * H * W))
  }
}

// Flow matching (rectified flow): t = sigmoid(n) for n standard normal
// (logit-normal timesteps), x_t = (1 - t) x0 + t noise, the model predicts
// the velocity noise - x0, plain MSE.
module FlowMatching {
  forward timesteps(n: [B]) -> [B] { return sigmoid(n) }

  // the sampler's schedule (mmc compile --task sample: Euler steps): the
  // coefficients (x0, noise) of x_t at t = 0 and t = 1, rows (1, 0), (0, 1)
  forward table() -> [2, 2] {
    return concat([concat([ones(1, 1), zeros(1, 1)], axis = 1),
                   concat([zeros(1, 1), ones(1, 1)], axis = 1)], axis = 0)
  }

  forward add_noise(x0: [B, C, T, H, W], noise: [B, C, T, H, W], t: [B]) -> [B, C, T, H, W] {
    return x0 + t.reshape(B, 1, 1, 1, 1) * (noise - x0)
  }

  forward loss(pred: [B, C, T, H, W], x0: [B, C, T, H, W], noise: [B, C, T, H, W]) -> loss {
    d = pred - (noise - x0)
    return sum(d * d, axis = [0, 1, 2, 3, 4]) * (1.0 / (B * C * T * H * W))
  }
}
