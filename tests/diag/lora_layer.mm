// A layer name that matches no Linear in the targets is an error naming it, with a note listing the names there.
import "llm.mm"

model M {
  let B = 2
  let T = 8
  llm  = LLM(vocab = 32, dim = 16, depth = 2, heads = 2, kv_heads = 1, ffn = 32)
  norm = RMSNorm(16)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
  train {
    // expected-error@+2:64 {{lora: no Linear named 'qproj' in llm}}
    // expected-note@+1:38 {{the Linear layers there are named: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, head}}
    lora = lora(rank = 4, targets = [llm], layers = ["q_proj", "qproj"])
  }
}
