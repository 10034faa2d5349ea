// t2v.mm: text-to-video as a model of four atomic modules, the way
// InternVL2 composes three: the WF-VAE encoder (frozen), a T5 text encoder
// (frozen), VideoDiT and DDPM. The frozen encoders are two named forwards,
// `latents` (the clip to the posterior's mean, as WFVAE's `encode`) and
// `text_features` (the caption ids to T5's hidden states); the forward is
// the DiT's diffusion loss on what they give. The trainer runs them on every
// batch (online encoding), or `mmc compile --task extract` runs them once
// over the training clips and the trainer reads the shards (`--features
// DIR`, docs/design/t2v.md "Offline features"). The WF-VAE encoder keeps
// WFVAE's names (encoder.*), so a WF-VAE checkpoint or weights file loads
// into it by name (`--init-from`); the wavelets have no parameters.
import "wfvae.mm"
import "t5.mm"
import "videodit.mm"
import "diffusion.mm"

// 17-frame 64x64 moving-item clips (the video task's f32[B, 1, 17, 64, 64])
// through WFVAETiny's encoder (latent 4: [B, 4, 5, 8, 8]), captions of at
// most 7 words + EOS through a 1-layer T5, a 2-layer VideoDiT.
model T2VTiny {
  let B = 4
  let L = 8
  let F = 17
  let S = 64
  let latent = 4
  let lat_mean = 0.0             // the DiT diffuses (latents - lat_mean) / lat_std
  let lat_std = 1.0
  encoder      = WFEncoder(1, latent, 16, 1, 16, 0)
  wavelet_in   = Haar3D(1)
  wavelet_l1   = Haar2D(1)
  wavelet_l2   = Haar3D(1)
  text_encoder = T5Encoder(vocab = 32, dim = 32, depth = 1, heads = 2, head_dim = 16, ffn = 64,
                           buckets = 8, max_distance = 16)
  dit          = VideoDiT(channels = latent, frames = 5, height = 8, width = 8, depth = 2,
                          heads = 2, head_dim = 24, text_dim = 32)
  diffusion    = DDPM()

  // WFVAE's encode: the clip's wavelet levels into the encoder, the mean
  forward latents(video: f32[B, 1, F, S, S]) {
    let T1 = (F + 1) // 2
    coeffs = wavelet_in(video)
    frames = coeffs.transpose(1, 2).reshape(B * T1, 8, S // 2, S // 2)
    l1 = wavelet_l1(frames[:, 0:1])
    l1v = l1.reshape(B, T1, 4, S // 4, S // 4).transpose(1, 2)
    return encoder(coeffs, l1, wavelet_l2(l1v[:, 0:1]))[:, 0:latent]
  }

  forward text_features(text: i32[B, L]) { return text_encoder(text) }

  // text: the caption ids, for the padding mask of the DiT's cross-attention
  forward(latents: f32[B, latent, 5, 8, 8], text_features: f32[B, L, 32], text: i32[B, L],
          noise: f32[B, latent, 5, 8, 8], t_uniform: f32[B]) -> loss {
    x0 = (latents - lat_mean) * (1.0 / lat_std)
    t = diffusion.timesteps(t_uniform)
    pred = dit(diffusion.add_noise(x0, noise, t), t.float(), text_features,
               text_encoder.mask(text))
    return diffusion.loss(pred, x0, noise, t)
  }

  data { format = t2v_diffusion }
  train {
    freeze    = [encoder, text_encoder]
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = constant
  }
}

// T2VTiny's composition at tools/t2v.sh's scale: WFVAEFit's encoder
// (stdlib_models/wfvae.mm: latent 8, base 8, energy flow 8, layer norm; its
// weights file loads by name), VideoDiTSmall's DiT (4 layers, 4 heads x 36,
// the caption pooled into AdaLN-single), batch 16, lr 2e-3 with warmup and
// cosine decay. The DiT diffuses the standardised latents
// (latents - lat_mean) / lat_std, as latent diffusion scales its VAE's
// latents; the two depend on the WF-VAE's weights, so tools/t2v.sh measures
// them on the extracted features and passes them with --set (the sampler
// T2VFitSample undoes it with the same two).
model T2VFit extends T2VTiny {
  let B = 16
  let latent = 8
  encoder = WFEncoder(1, latent, 8, 1, 8, 0)
  dit     = VideoDiT(channels = latent, frames = 5, height = 8, width = 8, depth = 4, heads = 4,
                     head_dim = 36, text_dim = 32, pooled = 1)

  train {
    freeze    = [encoder, text_encoder]
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = cosine(warmup = 200)
  }
}
