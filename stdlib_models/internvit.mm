// InternViT: a plain pre-norm vision transformer with layer scale
// (InternViT-300M-448px at the defaults: 24 layers, width 1024, 16 heads).
// qkv_bias, qk_norm (an RMSNorm over all heads of q and of k, as InternViT-6B
// and transformers' InternVLVisionModel with use_qk_norm) and eps are the
// Hugging Face configurations' (docs/huggingface.md); scale is the layer
// scale's init.
import "nn.mm"

// Attention with InternViT's q/k norm: one RMSNorm over all heads of q and one of k,
// before the heads are split (nn.mm's Attention(qk_norm = true) norms each head).
module ViTQKNormAttention(dim: int, heads: int, qkv_bias: bool = true, eps: float = 1e-6) {
  let hd = dim // heads
  q_proj = Linear(dim, dim, has_bias = qkv_bias)
  k_proj = Linear(dim, dim, has_bias = qkv_bias)
  v_proj = Linear(dim, dim, has_bias = qkv_bias)
  o_proj = Linear(dim, dim)
  q_norm = RMSNorm(dim, eps)
  k_norm = RMSNorm(dim, eps)

  forward(x: [B, T, dim]) -> [B, T, dim] {
    q = q_norm(q_proj(x)).reshape(B, T, heads, hd)
    k = k_norm(k_proj(x)).reshape(B, T, heads, hd)
    v = v_proj(x).reshape(B, T, heads, hd)
    return o_proj(attention(q, k, v).reshape(B, T, dim))
  }
}

module ViTBlock(dim: int, heads: int, ffn: int, eps: float = 1e-6, scale: float = 0.1,
                qkv_bias: bool = true, qk_norm: bool = false) {
  norm1 = LayerNorm(dim, eps)
  if qk_norm {
    attn = ViTQKNormAttention(dim, heads, qkv_bias, eps)
  }
  if not qk_norm {
    attn = Attention(dim, heads, qkv_bias = qkv_bias)
  }
  ls1   = param f32[dim] = fill(scale)
  norm2 = LayerNorm(dim, eps)
  mlp   = MLP(dim, ffn, act = "gelu")
  ls2   = param f32[dim] = fill(scale)

  forward(x: [B, S, dim]) -> [B, S, dim] {
    h = x + ls1 * attn(norm1(x))
    return h + ls2 * mlp(norm2(h))
  }
}

module InternViT(image: int = 448, patch: int = 14, dim: int = 1024, depth: int = 24,
                 heads: int = 16, ffn: int = 4096, channels: int = 3, eps: float = 1e-6,
                 qkv_bias: bool = true, qk_norm: bool = false) {
  let grid = image // patch
  embed  = Conv2d(channels, dim, kernel = patch, stride = patch)
  cls    = param f32[1, 1, dim] = normal(0.02)
  pos    = param f32[1, grid * grid + 1, dim] = normal(0.02)
  blocks = ViTBlock(dim, heads, ffn, eps, 0.1, qkv_bias, qk_norm) x depth

  // [B, channels, image, image] -> [B, 1 + grid * grid, dim]; token 0 is CLS
  forward(pixels: [B, channels, image, image]) -> [B, grid * grid + 1, dim] {
    p = embed(pixels).flatten(2).transpose(1, 2)
    return blocks(concat([cls.expand(B, 1, dim), p], axis = 1) + pos)
  }
}
