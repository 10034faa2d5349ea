// Without a stage list, the stack layers are cut into pp x vpp runs: fewer
// layers than stages is an error at pp.
import "gpt2.mm"
model M {
  let B = 4
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 48, depth = 3, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    // expected-error@+1:5 {{4 pipeline stages (pp = 4 x vpp = 1), but the model has 3 stack layers to cut}}
    pp = 4
    micro_batches = 4
  }
}
