// RUN-ARGS: --tp 3
// A plan error from a command-line flag points at the model.
import "gpt2.mm"
// expected-error@+1:7 {{tp = 3 does not divide the 4 attention heads}}
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
}
