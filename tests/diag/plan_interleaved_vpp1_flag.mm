// RUN-ARGS: --pp 2 --micro-batches 4 --schedule interleaved
// The same from the command line: the message names the flag, at the model.
import "gpt2.mm"
// expected-error@+1:7 {{--schedule interleaved needs vpp > 1 virtual stages per rank, but vpp = 1: set vpp = 2 (or more) in the model's parallel section}}
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
}
