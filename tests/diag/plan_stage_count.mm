// A stage list must have pp entries.
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 3, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 2
    micro_batches = 4
    // expected-error@+1:5 {{3 stages are listed, but pp = 2}}
    stages = [gpt.wte + gpt.wpe + gpt.h[0:1], gpt.h[1:2], gpt.h[2:3] + gpt.ln_f]
  }
}
