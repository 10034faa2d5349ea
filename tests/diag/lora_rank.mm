// LoRA needs a rank of at least 1.
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  norm = RMSNorm(16)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  train {
    // expected-error@+1:24 {{lora rank must be at least 1, not 0}}
    lora = lora(rank = 0, alpha = 16, targets = [llm], layers = ["q_proj"])
  }
}
