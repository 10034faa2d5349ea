import "gpt2.mm"
// Hierarchical ZeRO is ZeRO-1 across nodes under a ZeRO stage within them;
// with zero = 0 there is no stage within.
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    dp = 4
    // expected-error@+1:5 {{zero_across = 1 is the ZeRO stage across nodes under a stage within them, but zero = 0: set zero = 1, 2 or 3}}
    zero_across = 1
    ranks_per_node = 2
  }
}
