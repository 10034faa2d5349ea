// LoRA targets are sub-models: a parameter or a number is an error at the item.
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  norm = RMSNorm(16)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  train {
    // expected-error@+2:43 {{lora: target 1 is a parameter, not a sub-model}}
    // expected-error@+1:56 {{lora: target 2 is an int, not a sub-model}}
    lora = lora(rank = 4, targets = [llm, norm.weight, 3], layers = ["q_proj"])
  }
}
