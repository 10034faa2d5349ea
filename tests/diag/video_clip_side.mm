// A frame size the video autoencoder cannot take: a located error at the
// call in the model (require() in the module says why)
import "../video/clipvae.mm"
model Side60 {
  enc = TinyEnc(8, 8)
  forward(video: f32[1, 1, 17, 60, 64]) -> loss {
    // expected-error@+1:17 {{the frame height and width must be multiples of 8}}
    return mean(enc(video))
  }
}
