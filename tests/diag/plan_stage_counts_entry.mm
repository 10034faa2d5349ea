// A layer count is a whole number >= 0: a negative or fractional entry is an
// error at the entry.
import "gpt2.mm"
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 3
    micro_batches = 4
    // expected-error@+2:15 {{stages: entry 0 is -1; a layer count is a whole number >= 0}}
    // expected-error@+1:19 {{stages: entry 1 is 2.5; a layer count is a whole number >= 0}}
    stages = [-1, 2.5, 3]
  }
}
