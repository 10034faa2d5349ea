// 1F1B needs micro_batches >= pp; pp and schedule are refused as not built
// yet (micro-batches are built).
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{pipeline parallel (pp = 4) is not built yet}}
    pp = 4
    // expected-error@+1:5 {{needs micro_batches >= pp}}
    micro_batches = 2
    // expected-error@+1:5 {{the pipeline schedule is not built yet}}
    schedule = 1f1b
  }
}
