// recompute: a policy per sub-model names sub-models of the model
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  parallel {
    // expected-error@+1:43 {{recompute: 'vision' is not a sub-model of this model}}
    recompute = by_module(llm = block(1), vision = full)
  }
}
