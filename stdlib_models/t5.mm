// t5.mm: a T5-style text encoder (T5 v1.1 / mT5): pre-norm blocks with RMS
// norm (no mean subtraction, no bias), self-attention without the 1/sqrt(d)
// scale and with a learned relative-position bias (log-spaced buckets, one
// table [buckets, heads] shared by every layer, as T5's first block holds it),
// a gated-GELU (tanh) feed-forward, and no bias anywhere. The names follow
// Hugging Face's T5EncoderModel with its `layer.0` / `layer.1` sub-layers
// spelt out: shared.weight, encoder.block.N.attn_norm.weight,
// encoder.block.N.attn.{q,k,v,o}.weight, encoder.block.N.ff_norm.weight,
// encoder.block.N.ff.{wi_0,wi_1,wo}.weight, encoder.rel_bias (UMT5, per_layer:
// encoder.block.N.rel_bias), encoder.final_norm.weight.
// Padding: captions of different lengths are padded with the id `pad`; a
// padded token is not attended (its keys get Hugging Face's extended
// attention mask, a large negative score, so exactly zero probability) and
// its output is zero. The scores are written out (matmul + softmax) because
// of the relative-position bias, so the mask enters as that additive bias
// rather than as attention's `mask`; `mask(ids)` gives the keep mask the
// DiT's cross-attention takes.
import "nn.mm"

module T5Attention(dim: int, heads: int, head_dim: int) {
  q = Linear(dim, heads * head_dim, has_bias = false)
  k = Linear(dim, heads * head_dim, has_bias = false)
  v = Linear(dim, heads * head_dim, has_bias = false)
  o = Linear(heads * head_dim, dim, has_bias = false)

  // bias [B, heads, T, T]: the relative-position bias and the padding mask
  forward(x: [B, T, dim], bias: [B, heads, T, T]) -> [B, T, dim] {
    qh = q(x).reshape(B, T, heads, head_dim).permute(0, 2, 1, 3)
    kh = k(x).reshape(B, T, heads, head_dim).permute(0, 2, 3, 1)
    vh = v(x).reshape(B, T, heads, head_dim).permute(0, 2, 1, 3)
    p = softmax(qh @ kh + bias, axis = -1)
    return o((p @ vh).permute(0, 2, 1, 3).reshape(B, T, heads * head_dim))
  }
}

// wo(gelu_tanh(wi_0 x) * wi_1 x): T5 v1.1's "gated-gelu"
module T5GatedFF(dim: int, ffn: int) {
  wi_0 = Linear(dim, ffn, has_bias = false)
  wi_1 = Linear(dim, ffn, has_bias = false)
  wo   = Linear(ffn, dim, has_bias = false)

  forward(x) { return wo(gelu_tanh(wi_0(x)) * wi_1(x)) }
}

// own_bias: the block's own relative-position table (UMT5), added to `bias`
module T5Block(dim: int, heads: int, head_dim: int, ffn: int, eps: float, own_bias: bool = false,
               buckets: int = 32, max_distance: int = 128) {
  attn_norm = RMSNorm(dim, eps)
  attn      = T5Attention(dim, heads, head_dim)
  ff_norm   = RMSNorm(dim, eps)
  ff        = T5GatedFF(dim, ffn)
  if own_bias {
    rel_bias = param f32[buckets, heads] = normal(1.0 / sqrt(dim))
  }

  forward(x: [B, T, dim], bias: [B, heads, T, T]) -> [B, T, dim] {
    if own_bias {
      ids = rel_buckets(len = T, buckets = buckets, max_distance = max_distance)
      bias = bias + embedding(ids, rel_bias).permute(2, 0, 1)
    }
    h = x + attn(attn_norm(x), bias)
    return h + ff(ff_norm(h))
  }
}

// per_layer: a relative-position table in every block (UMT5) instead of one shared
module T5Stack(dim: int, depth: int, heads: int, head_dim: int, ffn: int, buckets: int,
               max_distance: int, eps: float, per_layer: bool = false) {
  if not per_layer {
    rel_bias = param f32[buckets, heads] = normal(1.0 / sqrt(dim))
  }
  block      = T5Block(dim, heads, head_dim, ffn, eps, per_layer, buckets, max_distance) x depth
  final_norm = RMSNorm(dim, eps)

  // keep [B, T]: 1 for a token, 0 for padding (no query attends to it)
  forward(x: [B, T, dim], keep: [B, T]) -> [B, T, dim] {
    pad = ((keep - 1.0) * 1e9).reshape(B, 1, 1, T)
    if per_layer {
      return final_norm(block(x, pad.expand(B, heads, T, T)))
    }
    ids = rel_buckets(len = T, buckets = buckets, max_distance = max_distance)
    return final_norm(block(x, embedding(ids, rel_bias).permute(2, 0, 1) + pad))
  }
}

// The encoder: token ids [B, T] -> hidden states [B, T, dim], zero at the
// padding id `pad` (T5's and mT5's 0; -1: no padding, every id >= 0 a token).
// per_layer: UMT5's relative-position table in every block (encoder.block.N.rel_bias).
module T5Encoder(vocab: int, dim: int, depth: int, heads: int, head_dim: int, ffn: int,
                 buckets: int = 32, max_distance: int = 128, eps: float = 1e-6, pad: int = 0,
                 per_layer: bool = false) {
  shared  = Embedding(vocab, dim, std = 1.0)
  encoder = T5Stack(dim, depth, heads, head_dim, ffn, buckets, max_distance, eps, per_layer)

  // 1 where ids[b, t] != pad, else 0 (integer ids: 1 - relu(1 - |id - pad|))
  forward mask(ids: i32[B, T]) -> [B, T] { return 1.0 - relu(1.0 - abs(ids.float() - pad)) }

  forward(ids: i32[B, T]) -> [B, T, dim] {
    keep = mask(ids)
    return encoder(shared(ids), keep) * keep.reshape(B, T, 1)
  }
}

// mT5-XXL's encoder (google/mt5-xxl: d_model 4096, d_kv 64, 64 heads, d_ff
// 10240, 24 layers, vocabulary 250112, 32 buckets, max distance 128):
// 5,655,173,120 parameters (`mmc stats`), the text encoder of OpenSoraPlan 1.3.
model MT5XXLEncoder {
  let B = 1
  let T = 512
  text = T5Encoder(vocab = 250112, dim = 4096, depth = 24, heads = 64, head_dim = 64, ffn = 10240)
  head = Linear(4096, 250112, has_bias = false)

  // a masked-token-style objective, so that the encoder is a model to check and count
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {
    return cross_entropy(head(text(ids)), labels)
  }
}

// A tiny T5 encoder (4 heads of 16, 2 layers) with a byte head, trained on the
// next-pixel task (ids, labels i32[B, T]): tests and PyTorch parity.
model T5Tiny {
  let B = 4
  let T = 32
  text = T5Encoder(vocab = 256, dim = 64, depth = 2, heads = 4, head_dim = 16, ffn = 128,
                   buckets = 32, max_distance = 20, pad = -1)
  head = Linear(64, 256, has_bias = false)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {
    return cross_entropy(head(text(ids)), labels)
  }

  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.99], weight_decay = 0.01, clip = 1.0)
    schedule  = constant
  }
}
