// The 1F1B check stays for the pipeline issue; until then pp, micro_batches
// and schedule are each refused as not built yet.
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{pipeline parallel (pp = 4) is not built yet}}
    pp = 4
    // expected-error@+2:5 {{needs micro_batches >= pp}}
    // expected-error@+1:5 {{micro_batches (a step split for the pipeline) is not built yet}}
    micro_batches = 2
    // expected-error@+1:5 {{the pipeline schedule is not built yet}}
    schedule = 1f1b
  }
}
