import "gpt2.mm"
// ranks_per_node is hierarchical ZeRO's node size: without zero_across it
// would change nothing, and is refused.
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    dp = 4
    zero = 3
    // expected-error@+1:5 {{ranks_per_node = 2 sets hierarchical ZeRO's node size, but zero_across is not set: alone it changes nothing}}
    ranks_per_node = 2
  }
}
