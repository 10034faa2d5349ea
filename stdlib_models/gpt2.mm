// GPT-2: learned positions, pre-norm blocks with LayerNorm and a GELU (tanh)
// MLP, the output head tied to the token embedding.
import "nn.mm"

module GPT2Block(dim: int, heads: int) {
  ln_1 = LayerNorm(dim)
  attn = Attention(dim, heads, causal = true, std = 0.02)
  ln_2 = LayerNorm(dim)
  mlp  = MLP(dim, 4 * dim, act = "gelu_tanh", std = 0.02)

  forward(x: [B, T, dim]) -> [B, T, dim] {
    h = x + attn(ln_1(x))
    return h + mlp(ln_2(h))
  }
}

module GPT(vocab: int, ctx: int, dim: int, depth: int, heads: int) {
  wte  = Embedding(vocab, dim, std = 0.02)
  wpe  = param f32[ctx, dim] = normal(0.01)
  h    = GPT2Block(dim, heads) x depth
  ln_f = LayerNorm(dim)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {
    x = wte(ids) + wpe[0:T]
    logits = linear(ln_f(h(x)), wte.weight)
    return cross_entropy(logits, labels, ignore = -100)
  }
}

// GPT-2 small: 124,439,808 parameters.
model GPT2 {
  let B = 4
  let T = 64
  gpt = GPT(vocab = 50257, ctx = 1024, dim = 768, depth = 12, heads = 12)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }

  train {
    optimizer = adamw(lr = 6e-4, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = cosine(warmup = 100)
  }
}

// A byte-level GPT small enough to train in seconds (tests, parallel equivalence).
model GPT2Tiny {
  let B = 4
  let T = 32
  gpt = GPT(vocab = 256, ctx = 64, dim = 64, depth = 2, heads = 4)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }

  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = constant
  }
}
