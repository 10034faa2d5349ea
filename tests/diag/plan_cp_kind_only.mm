import "gpt2.mm"
// cp_kind without cp
model KindOnly {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{cp_kind chooses how context parallel splits, but cp = 1}}
    cp_kind = ulysses
  }
}
