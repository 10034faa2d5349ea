// The interleaved schedule with one virtual stage per rank changes nothing: refused.
import "gpt2.mm"
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 4, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 2
    micro_batches = 4
    // expected-error@+1:5 {{schedule = interleaved needs vpp > 1 virtual stages per rank, but vpp = 1: set vpp = 2}}
    schedule = interleaved
  }
}
