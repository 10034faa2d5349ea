// A decoder-only LLM of the Llama family: RMSNorm, RoPE, grouped-query
// attention, SwiGLU. Qwen2 (qkv bias, tied embeddings in the small sizes) and
// InternLM2 (no biases, untied) are configurations of it.
import "nn.mm"

module DecoderBlock(dim: int, heads: int, kv_heads: int, ffn: int, theta: float, eps: float = 1e-6,
                    qkv_bias: bool = true) {
  norm1 = RMSNorm(dim, eps)
  attn  = Attention(dim, heads, kv_heads = kv_heads, qkv_bias = qkv_bias, out_bias = false,
                    causal = true, rope_theta = theta)
  norm2 = RMSNorm(dim, eps)
  mlp   = GatedMLP(dim, ffn, act = "silu")

  forward(x: [B, T, dim]) -> [B, T, dim] {
    h = x + attn(norm1(x))
    return h + mlp(norm2(h))
  }
}

module LLM(vocab: int, dim: int, depth: int, heads: int, kv_heads: int, ffn: int,
           theta: float = 1e6, eps: float = 1e-6, qkv_bias: bool = true, tied: bool = false) {
  embed  = Embedding(vocab, dim)                        // vocab-parallel under tp
  blocks = DecoderBlock(dim, heads, kv_heads, ffn, theta, eps, qkv_bias) x depth
  norm   = RMSNorm(dim, eps)
  if not tied {
    head = Linear(dim, vocab, has_bias = false)
  }

  // hidden states [B, T, dim] -> logits [B, T, vocab]
  forward decode(h: [B, T, dim]) -> [B, T, vocab] {
    h = norm(blocks(h))
    if tied {
      return linear(h, embed.weight)
    }
    return head(h)
  }

  // next-token loss: labels are the ids shifted by one, -100 where ignored
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {
    return cross_entropy(decode(embed(ids)), labels, ignore = -100)
  }
}

// Qwen2-0.5B: 24 layers, width 896, 14 heads, 2 KV heads, tied embeddings.
model Qwen2_0_5B {
  let B = 1
  let T = 256
  llm = LLM(vocab = 151936, dim = 896, depth = 24, heads = 14, kv_heads = 2, ffn = 4864,
            theta = 1e6, eps = 1e-6, qkv_bias = true, tied = true)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }

  train {
    optimizer = adamw(lr = 1e-4, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = cosine(warmup = 100)
  }
}

// InternLM2-1.8B (the LLM of InternVL2-2B): 24 layers, width 2048, 16 heads, 8 KV heads.
model InternLM2_1_8B {
  let B = 1
  let T = 256
  llm = LLM(vocab = 92553, dim = 2048, depth = 24, heads = 16, kv_heads = 8, ffn = 8192,
            theta = 1e6, eps = 1e-5, qkv_bias = false, tied = false)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return llm(ids, labels) }
}
