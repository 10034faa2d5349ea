import "gpt2.mm"
// sp and cp both split the sequence: refused (tp = 2 + sp + cp = 2 gave
// losses 0.9% off the serial ones).
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    tp = 2
    // expected-error@+1:5 {{sequence parallel (sp) and context parallel (cp = 2) both split the sequence}}
    sp = true
    cp = 2
  }
}
