import "gpt2.mm"
// A causal ring splits the sequence in 2 * cp chunks: 8 tokens, cp = 8.
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{ring context parallel: the sequence of 8 of 'gpt.h.0.attn' is not divisible by 2 * cp = 16}}
    cp = 8
    cp_kind = ring
  }
}
