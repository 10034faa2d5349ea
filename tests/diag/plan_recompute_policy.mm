// recompute: an unknown policy
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  parallel {
    // expected-error@+1:17 {{unknown recompute policy 'everything' (expected none, selective, full or block(N))}}
    recompute = everything
  }
}
