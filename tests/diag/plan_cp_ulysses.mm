import "gpt2.mm"
// USP: cp = ulysses x ring, so cp_ulysses must divide cp.
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    cp = 4
    // expected-error@+1:5 {{cp_ulysses = 3 does not divide cp = 4 (USP: cp = ulysses x ring)}}
    cp_ulysses = 3
  }
}
