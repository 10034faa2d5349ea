// A setting lora() does not know is an error at the setting.
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  norm = RMSNorm(16)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  train {
    // expected-error@+1:27 {{lora has no setting 'dropout' (expected rank, alpha, targets, layers)}}
    lora = lora(rank = 4, dropout = 0.1, targets = [llm], layers = ["q_proj"])
  }
}
