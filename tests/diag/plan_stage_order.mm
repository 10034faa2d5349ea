// Stages listed against the forward's order are an error at the stage list.
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 2
    micro_batches = 4
    // expected-error@+1:5 {{pipeline stages out of order: 'gpt.h.2' is in stage 0, but its first use takes values computed in stage 1}}
    stages = [gpt.h[2:4] + gpt.ln_f, gpt.wte + gpt.wpe + gpt.h[0:2]]
  }
}
