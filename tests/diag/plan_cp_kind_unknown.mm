import "gpt2.mm"
// an unknown kind
model BadKind {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    cp = 2
    // expected-error@+1:15 {{unknown context-parallel kind 'zigzag' (expected ulysses or ring)}}
    cp_kind = zigzag
  }
}
