// The sampler's test model (tests/dit_sample.sh): a 1-layer T5, a 1-layer
// VideoDiT on the DiT task's latents [B, 8, 5, 8, 8] and a tiny WF-VAE
// decoder (latent 8) to 17-frame 64x64 clips, a tiny frame classifier. The
// forward is the DiT's training loss (so the trainer writes its initial
// weights); denoise, table, decode and classify are the sampler's (mmc
// compile --task sample).
import "t5.mm"
import "videodit.mm"
import "diffusion.mm"
import "wfvae.mm"
import "frame_classifier.mm"

model T2VSampleTest {
  let B = 2
  let L = 8
  text_encoder = T5Encoder(vocab = 32, dim = 16, depth = 1, heads = 2, head_dim = 8, ffn = 32,
                           buckets = 8, max_distance = 16)
  dit         = VideoDiT(channels = 8, frames = 5, height = 8, width = 8, depth = 1, heads = 2,
                         head_dim = 12, text_dim = 16)
  diffusion   = DDPM()
  decoder     = WFDecoder(1, 8, 8, 1, 8, 0, t_interpolation = "trilinear", connect_res = 1)
  wavelet_out = IHaar3D(1)
  classifier  = FrameClassifier(dim = 16)

  forward(latents: f32[B, 8, 5, 8, 8], text: i32[B, L], noise: f32[B, 8, 5, 8, 8],
          t_uniform: f32[B]) -> loss {
    t = diffusion.timesteps(t_uniform)
    pred = dit(diffusion.add_noise(latents, noise, t), t.float(), text_encoder(text),
               text_encoder.mask(text))
    return diffusion.loss(pred, latents, noise, t)
  }

  forward denoise(x: f32[B, 8, 5, 8, 8], t: f32[B], text: i32[B, L]) {
    return dit(x, t, text_encoder(text), text_encoder.mask(text))
  }

  forward table() { return diffusion.table() }

  forward decode(z: f32[B, 8, 5, 8, 8]) {
    m = decoder.mid(z)
    u = decoder.up(m)
    return wavelet_out(decoder.coeffs(u, decoder.l1(u, decoder.l2(m))))
  }

  // the frame classifier on every decoded frame (the sampler's score)
  forward classify(frames: f32[17, 1, 64, 64]) { return classifier(frames) }

  train {
    freeze = [text_encoder, decoder, classifier]
  }
}


// The same networks under flow matching (the sampler's Euler steps): the
// table is FlowMatching's, denoise takes the flow time t in [0, 1] and gives
// the DiT 1000 t, as VideoDiTTinyFlow's training does. Its parameters are
// T2VSampleTest's: the trainer's weights file of that model loads.
model T2VSampleFlowTest extends T2VSampleTest {
  diffusion = FlowMatching()

  forward(latents: f32[B, 8, 5, 8, 8], text: i32[B, L], noise: f32[B, 8, 5, 8, 8],
          t_normal: f32[B]) -> loss {
    t = diffusion.timesteps(t_normal)
    pred = dit(diffusion.add_noise(latents, noise, t), t * 1000.0, text_encoder(text),
               text_encoder.mask(text))
    return diffusion.loss(pred, latents, noise)
  }

  forward denoise(x: f32[B, 8, 5, 8, 8], t: f32[B], text: i32[B, L]) {
    return dit(x, t * 1000.0, text_encoder(text), text_encoder.mask(text))
  }
}

// T2VStandIn's decode (stdlib_models/t2v_sample.mm: the inverse of the DiT
// task's 4x8x8 downsample), frame 0 the mean of group 0's halves through a
// concat, on T2VSampleTest's networks: compiled with B = 4, the sampler
// decodes two clips at once and classifies each in turn; tests/dit_sample.sh
// checks every clip of --raw against numpy's inverse of the --dump latents
// (the classifier's activations once overwrote the decoded clips after the
// first).
model T2VSampleStandInTest extends T2VSampleTest {
  forward decode(z: f32[B, 8, 5, 8, 8]) {
    g    = z.reshape(B, 2, 2, 2, 5, 8, 8).permute(0, 4, 1, 5, 2, 6, 3)   // [B, k, half, i, sy, j, sx]
    cols = g.reshape(B * 160, 16, 1).expand(B * 160, 16, 4)
    rows = cols.reshape(B * 80, 2, 1, 64).expand(B * 80, 2, 4, 64)
    f    = rows.reshape(B * 5, 2, 1, 64, 64).expand(B * 5, 2, 2, 64, 64).reshape(B, 20, 64, 64)
    clip = concat([(f[:, 0:1] + f[:, 2:3]) * 0.5, f[:, 4:20]], axis = 1)
    return (clip.reshape(B, 1, 17, 64, 64) + 1.0) * 0.25
  }
}
