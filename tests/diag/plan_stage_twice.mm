// A layer in two pipeline stages is an error at the stage list.
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 2
    micro_batches = 4
    // expected-error@+1:5 {{'gpt.h.2' is in stages 0 and 1}}
    stages = [gpt.wte + gpt.wpe + gpt.h[0:3], gpt.h[2:4] + gpt.ln_f]
  }
}
