// A correct LoRA setting: no diagnostics (the target may be a stack; alpha defaults to the rank).
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  norm = RMSNorm(16)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  train {
    lora = lora(rank = 2, targets = [llm.blocks], layers = ["q_proj", "v_proj", "down_proj"])
  }
}
