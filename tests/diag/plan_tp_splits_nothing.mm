// tp = 2 on WF-VAE: each convolution pair has a channel norm between them, so
// no parameter splits; the model would run replicated on 2 ranks (refused).
import "wfvae.mm"
model M extends WFVAETiny {
  parallel {
    // expected-error@+1:5 {{tp = 2 splits nothing in M: no column/row-parallel pair of linears or convolutions}}
    tp = 2
  }
}
