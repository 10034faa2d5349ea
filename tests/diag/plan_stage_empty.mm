// A stage that holds no parameter is an error at the stage list (here a
// layer-count list with 0 for a middle stage: nothing else lands there).
import "gpt2.mm"
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 2, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 3
    micro_batches = 4
    // expected-error@+1:5 {{stage 1 holds no parameters}}
    stages = [1, 0, 1]
  }
}
