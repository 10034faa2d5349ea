// Layer counts per stage (MindSpeed-MM's pipeline_num_layers) must add up
// to the stack's layers: the message gives the sum and the expected count.
import "gpt2.mm"
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 28, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 4
    micro_batches = 4
    // expected-error@+1:14 {{stages: the layer counts add up to 27, but gpt.h has 28 layers}}
    stages = [1, 7, 9, 10]
  }
}
