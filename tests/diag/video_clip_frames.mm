// A clip shape a video autoencoder cannot take is a located error at the
// call in the model: require() in the module says why, nothing follows
// (no odd-length haar3d error from inside the module)
import "../video/clipvae.mm"
model Frames16 {
  enc = TinyEnc(8, 8)
  forward(video: f32[1, 1, 16, 64, 64]) -> loss {
    // expected-error@+1:17 {{the clips must have 1 + 4k frames}}
    return mean(enc(video))
  }
}
