import "gpt2.mm"
// Hierarchical ZeRO: node groups of ranks_per_node / (tp x cp) = 3 dp ranks
// cannot tile dp = 4.
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    dp = 4
    zero = 3
    zero_across = 1
    // expected-error@+1:5 {{ranks_per_node = 3 makes node groups of 3 dp ranks, which do not divide dp = 4}}
    ranks_per_node = 3
  }
}
