// micro_batches must divide the batch (the let B that the inputs' first
// dimension names): each micro-batch is B / micro_batches samples.
import "gpt2.mm"
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 2, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{micro_batches = 3 does not divide the batch B = 4}}
    micro_batches = 3
  }
}
