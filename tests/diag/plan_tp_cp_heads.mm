import "gpt2.mm"
// Ulysses splits the heads over tp * cp: 8 ways do not divide 4 heads.
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    tp = 2
    // expected-error@+1:5 {{Ulysses context parallel: tp * cp = 8 does not divide the 4 attention heads}}
    cp = 4
  }
}
