import "gpt2.mm"
// Ulysses: 3 heads on cp = 2
model OddHeads {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 1, heads = 3)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{Ulysses context parallel: tp * cp = 2 does not divide the 3 attention heads of 'gpt.h.0.attn'}}
    cp = 2
  }
}
