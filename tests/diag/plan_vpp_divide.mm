// Interleaved without a stage list: pp x vpp virtual stages must divide the
// stack layers (an error at vpp).
import "gpt2.mm"
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 6, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    pp = 2
    // expected-error@+1:5 {{interleaved: pp = 2 x vpp = 2 = 4 virtual stages do not divide the 6 stack layers}}
    vpp = 2
    schedule = interleaved
    micro_batches = 4
  }
}
