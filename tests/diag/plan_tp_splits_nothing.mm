// tp = 2 where tp splits nothing: the linear pair has a softmax over the
// features between them (the features stay whole), so no parameter splits
// and the model would run replicated on 2 ranks (refused). WF-VAE's conv
// pairs with a channel norm between them do split (split statistics,
// tests/wfvae_mpi.sh).
import "nn.mm"
model M {
  fc1 = Linear(8, 16)
  fc2 = Linear(16, 4)
  forward(x: f32[4, 8], y: f32[4, 4]) -> loss {
    return mse(fc2(softmax(fc1(x), axis = -1)), y)
  }
  parallel {
    // expected-error@+1:5 {{tp = 2 splits nothing in M: no column/row-parallel pair of linears or convolutions}}
    tp = 2
  }
}
