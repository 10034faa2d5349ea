import "llm.mm"
// Ulysses: 4 query heads but 1 key/value head on cp = 2
model OneKvHead {
  let B = 2
  let T = 8
  llm = LLM(vocab = 32, dim = 32, depth = 1, heads = 4, kv_heads = 1, ffn = 64, theta = 10000.0)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  parallel {
    // expected-error@+1:5 {{Ulysses context parallel: tp * cp = 2 does not divide the 1 key/value heads}}
    cp = 2
  }
}
