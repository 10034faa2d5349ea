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
// No data section on purpose: it trains on text (--data FILE.jsonl) and on
// Fashion-MNIST's pixel bytes (no --data) alike, bound by trying (docs/data.md).
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

// Packed documents: several documents share a row of T tokens. seg numbers
// each token's document in its row (0, 1, ...; the trainer's text task fills
// it, and pos, each token's position within its document). Attention stays
// within a document (attention's segment operand: the kernel skips the tiles
// across a boundary), positions restart at each document, and the loss's
// labels never cross one (the task's -100). The parameters are GPT2Tiny's,
// name for name: its weights load with --init-from.
module PackedAttention(dim: int, heads: int, std: float = 0.0) {
  q_proj = Linear(dim, dim, std = std)
  k_proj = Linear(dim, dim, std = std)
  v_proj = Linear(dim, dim, std = std)
  o_proj = Linear(dim, dim, std = std)

  forward(x: [B, T, dim], seg) -> [B, T, dim] {
    q = q_proj(x).reshape(B, T, heads, dim // heads)
    k = k_proj(x).reshape(B, T, heads, dim // heads)
    v = v_proj(x).reshape(B, T, heads, dim // heads)
    o = attention(q, k, v, causal = true, mask = seg)
    return o_proj(o.reshape(B, T, dim))
  }
}

module GPT2PackedBlock(dim: int, heads: int) {
  ln_1 = LayerNorm(dim)
  attn = PackedAttention(dim, heads, std = 0.02)
  ln_2 = LayerNorm(dim)
  mlp  = MLP(dim, 4 * dim, act = "gelu_tanh", std = 0.02)

  forward(x: [B, T, dim], seg) -> [B, T, dim] {
    h = x + attn(ln_1(x), seg)
    return h + mlp(ln_2(h))
  }
}

module GPTPacked(vocab: int, ctx: int, dim: int, depth: int, heads: int) {
  wte  = Embedding(vocab, dim, std = 0.02)
  wpe  = param f32[ctx, dim] = normal(0.01)
  h    = GPT2PackedBlock(dim, heads) x depth
  ln_f = LayerNorm(dim)

  forward(ids: i32[B, T], labels: i32[B, T], seg: i32[B, T], pos: i32[B, T]) -> loss {
    x = wte(ids) + embedding(pos, wpe)
    logits = linear(ln_f(h(x, seg)), wte.weight)
    return cross_entropy(logits, labels, ignore = -100)
  }
}

// GPT2Tiny over packed rows (trainer: --data FILE.jsonl|PREFIX; packed by default).
model GPT2TinyPacked {
  let B = 4
  let T = 32
  gpt = GPTPacked(vocab = 256, ctx = 64, dim = 64, depth = 2, heads = 4)

  forward(ids: i32[B, T], labels: i32[B, T], seg: i32[B, T], pos: i32[B, T]) -> loss {
    return gpt(ids, labels, seg, pos)
  }

  data { format = text }
  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = constant
  }
}
