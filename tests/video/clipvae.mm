// A tiny causal video autoencoder for the reconstruction tests (until the
// WF-VAE of stdlib_models/wfvae.mm): 4x in time (17 -> 5 frames) and 4x in
// space (64 -> 16), through two levels of causal Haar transforms and causal
// convolutions; every norm is per frame, so frame t's latents depend on
// earlier frames only through the causal convolutions and the chunked
// encoder (@encode_first, @encode_next: mmc compile --task reconstruct)
// gives the whole clip's latents.
import "nn.mm"

// group norm of each frame on its own (over channels and space, never time)
module FrameNorm(groups: int, channels: int) {
  norm = GroupNorm(groups, channels)
  forward(x: [B, C, T, H, W]) {
    h = norm(x.transpose(1, 2).reshape(B * T, C, H, W))
    return h.reshape(B, T, C, H, W).transpose(1, 2)
  }
}

module TinyEnc(ch: int, z: int) {
  conv1 = CausalConv3d(8, ch, kernel = 3, padding = 1)
  norm1 = FrameNorm(2, ch)
  conv2 = CausalConv3d(8 * ch, z, kernel = 3, padding = 1)
  forward(x: [B, 1, F, H, W]) {
    ok = require((F - 1) % 4 == 0, "the clips must have 1 + 4k frames (1, 5, 9, 13, 17, ...)")
    ok = require(H % 8 == 0 and W % 8 == 0, "the frame height and width must be multiples of 8")
    // causal Haar: frame 0 once more in front, so 1 + 2k frames pair up
    h = haar3d(causal_pad(x, 1, keep = 0))
    h = silu(norm1(conv1(h)))
    return conv2(haar3d(causal_pad(h, 1, keep = 0)))
  }
}

module TinyDec(ch: int, z: int) {
  conv1 = CausalConv3d(z, 8 * ch, kernel = 3, padding = 1)
  norm1 = FrameNorm(2, ch)
  conv2 = CausalConv3d(ch, 8, kernel = 3, padding = 1)
  forward(z: [B, Z, T, H, W]) {
    h = ihaar3d(conv1(z))
    h = silu(norm1(h[:, :, 1:]))
    y = ihaar3d(conv2(h))
    return y[:, :, 1:]
  }
}

model ClipVAE {
  let B = 2
  let F = 17
  let ch = 8
  let z = 8
  enc = TinyEnc(ch, z)
  dec = TinyDec(ch, z)
  forward(video: f32[B, 1, F, 64, 64]) -> loss {
    return mse(dec(enc(video)), video)
  }
  forward encode(video: f32[B, 1, F, 64, 64]) { return enc(video) }
  forward decode(latents: f32[B, z, (F - 1) / 4 + 1, 16, 16]) { return dec(latents) }
  train { optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.0) }
}
