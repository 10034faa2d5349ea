// 1F1B needs at least as many micro-batches as pipeline stages.
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 4
    // expected-error@+1:5 {{needs micro_batches >= pp}}
    micro_batches = 2
    schedule = 1f1b
  }
}
