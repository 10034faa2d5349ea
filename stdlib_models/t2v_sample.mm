// t2v_sample.mm: samplers (mmc compile --task sample, README "Sampling")
// for the DiTs the trainer trains today: T2VStandIn for VideoDiTSmall (the
// stand-in latents), T2VTinySample for T2VTiny (WF-VAE latents).
//
// T2VStandIn samples VideoDiTSmall (stdlib_models/videodit.mm: its weights
// load by name), whose latents are still the DiT task's stand-in for the
// WF-VAE encoder (runtime/feeders/mmrt_feed_dit.c: a fixed 4x8x8 downsample of the
// clip, channel c = 4 half + 2 sy + sx the mean over frame half `half` of a
// 4-frame group and the 4x4 pixels of sub-block (sy, sx) of each 8x8 block,
// mapped to 2 mean - 1). Its decode is that downsample's exact inverse on
// the means (each mean spread back over its frames and pixels), not a
// WF-VAE decoder: a stand-in as the latents are, until the DiT trains on
// WF-VAE latents, after undoing VideoDiTSmall's standardisation. classify
// runs the frame classifier FrameCNN
// (frame_classifier.mm, FrameCNNFit's weights) on decoded frames.
import "videodit.mm"
import "frame_classifier.mm"

model T2VStandIn extends VideoDiTSmall {
  classifier = FrameCNN()

  forward denoise(x: f32[B, 8, 5, 8, 8], t: f32[B], text: i32[B, L]) {
    return dit(x, t, text_encoder(text), text_encoder.mask(text))
  }

  forward table() { return diffusion.table() }

  // [B, 8 = (half, sy, sx), 5 = k, 8 = i, 8 = j] -> clips [B, 1, 17, 64, 64]:
  // frame 0 from group 0's second half (its halves are equal in the task's
  // latents), frames 4k-3 .. 4k from group k (halves 0, 0, 1, 1), pixel
  // (8 i + 4 sy + y, 8 j + 4 sx + x) from mean (sy, sx, i, j). (Frame 0 as
  // the mean of group 0's halves, concat([(f[:, 0:1] + f[:, 2:3]) * 0.5,
  // f[:, 4:20]], axis = 1), once came out right for batch row 0 only: the
  // sampler classified each decoded clip from the activation arena, and
  // @classify overwrote the next ones; runtime/programs/mmrt_sample.c copies them out
  // now, tests/dit_sample.sh checks that decode on every clip.)
  forward decode(zs: f32[B, 8, 5, 8, 8]) {
    z = zs * (1.0 / 3.4) - 0.9                                            // VideoDiTSmall's scaling undone
    g = z.reshape(B, 2, 2, 2, 5, 8, 8).permute(0, 4, 1, 5, 2, 6, 3)      // [B, k, half, i, sy, j, sx]
    cols = g.reshape(B * 160, 16, 1).expand(B * 160, 16, 4)                // x: 4 pixels a mean
    rows = cols.reshape(B * 80, 2, 1, 64).expand(B * 80, 2, 4, 64)         // y: 4 rows a mean
    f = rows.reshape(B * 5, 2, 1, 64, 64).expand(B * 5, 2, 2, 64, 64)      // 2 frames a half
    f = f.reshape(B, 20, 64, 64)                                          // frame 4 k + 2 half + e
    clip = f[:, 3:20]
    return (clip.reshape(B, 1, 17, 64, 64) + 1.0) * 0.5
  }

  forward classify(frames: f32[17, 1, 64, 64]) { return classifier(frames) }

  // the sampler only reads the classifier: a trainer of this model (the DiT
  // loss) leaves it as loaded
  train { freeze = [text_encoder, classifier] }
}

// T2VTinySample samples T2VTiny (stdlib_models/t2v.mm: a DiT trained on
// WF-VAE latents, online or from `--task extract` features): the DiT and its
// frozen T5 from the T2VTiny trainer's weights, WFVAETiny's decoder
// (WFVAE's names decoder.*, from a WFVAETiny weights file) as decode, and
// the frame classifier FrameCNN (FrameCNNFit's weights).
import "t2v.mm"

model T2VTinySample extends T2VTiny {
  decoder     = WFDecoder(1, latent, 16, 1, 16, 0, t_interpolation = "trilinear", connect_res = 1)
  wavelet_out = IHaar3D(1)
  classifier  = FrameCNN()

  forward denoise(x: f32[B, latent, 5, 8, 8], t: f32[B], text: i32[B, L]) {
    return dit(x, t, text_encoder(text), text_encoder.mask(text))
  }

  forward table() { return diffusion.table() }

  forward decode(zs: f32[B, latent, 5, 8, 8]) {
    z = zs * lat_std + lat_mean                    // T2VTiny's standardisation undone
    m = decoder.mid(z)
    u = decoder.up(m)
    return wavelet_out(decoder.coeffs(u, decoder.l1(u, decoder.l2(m))))
  }

  forward classify(frames: f32[17, 1, 64, 64]) { return classifier(frames) }

  // the sampler only reads the decoder and the classifier: a trainer of this
  // model (the DiT loss) leaves them as loaded
  train { freeze = [encoder, text_encoder, decoder, classifier] }
}

// T2VFitSample samples T2VFit (stdlib_models/t2v.mm, tools/t2v.sh's route
// with VAE_WEIGHTS): the DiT and its frozen T5 from the trainer's weights,
// WFVAEFit's decoder (decoder.*, from the WF-VAE's weights file), the frame
// classifier; decode undoes the standardisation (--set lat_mean, lat_std:
// the trainer's) before the decoder.
model T2VFitSample extends T2VTinySample {
  let B = 16
  let latent = 8
  encoder = WFEncoder(1, latent, 8, 1, 8, 0)
  dit     = VideoDiT(channels = latent, frames = 5, height = 8, width = 8, depth = 4, heads = 4,
                     head_dim = 36, text_dim = 32, pooled = 1)
  decoder = WFDecoder(1, latent, 8, 1, 8, 0, t_interpolation = "trilinear", connect_res = 1,
                      tail = 16)
}
