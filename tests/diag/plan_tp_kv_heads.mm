import "llm.mm"
model M {
  let B = 1
  let T = 8
  llm = LLM(vocab = 32, dim = 64, depth = 1, heads = 8, kv_heads = 2, ffn = 64)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  parallel {
    // expected-error@+1:5 {{tp = 4 is more than the 2 key/value heads}}
    tp = 4
  }
}
