// nn.mm: the primitive layers every model is built from.
// Parameter names and layouts follow PyTorch (Linear.weight is [out, in]),
// so a checkpoint exported from PyTorch under the same names loads as it is.

// y = x W^T + b. Initialised like PyTorch (uniform +-1/sqrt(in)) unless std > 0.
module Linear(in_dim: int, out_dim: int, has_bias: bool = true, std: float = 0.0) {
  if std > 0.0 {
    weight = param f32[out_dim, in_dim] = normal(std)
  } else {
    weight = param f32[out_dim, in_dim] = fan_in(1.0)
  }
  if has_bias {
    bias = param f32[out_dim] = zeros
  }

  forward(x) {
    if has_bias {
      return linear(x, weight, bias)
    }
    return linear(x, weight)
  }
}

module LayerNorm(dim: int, eps: float = 1e-5, affine: bool = true) {
  if affine {
    weight = param f32[dim] = ones
    bias   = param f32[dim] = zeros
  }

  forward(x) {
    if affine {
      return layer_norm(x, weight, bias, eps = eps)
    }
    return layer_norm(x, eps = eps)
  }
}

module RMSNorm(dim: int, eps: float = 1e-6) {
  weight = param f32[dim] = ones

  forward(x) { return rms_norm(x, weight, eps = eps) }
}

module GroupNorm(groups: int, channels: int, eps: float = 1e-5) {
  weight = param f32[channels] = ones
  bias   = param f32[channels] = zeros

  forward(x) { return group_norm(x, weight, bias, groups = groups, eps = eps) }
}

module Conv2d(in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, has_bias: bool = true) {
  weight = param f32[out_ch, in_ch, kernel, kernel] = fan_in(1.0)
  if has_bias {
    bias = param f32[out_ch] = zeros
  }

  forward(x: [B, in_ch, H, W]) {
    if has_bias {
      return conv2d(x, weight, bias, stride = stride, padding = padding)
    }
    return conv2d(x, weight, stride = stride, padding = padding)
  }
}

module Conv3d(in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, has_bias: bool = true) {
  weight = param f32[out_ch, in_ch, kernel, kernel, kernel] = fan_in(1.0)
  if has_bias {
    bias = param f32[out_ch] = zeros
  }

  forward(x: [B, in_ch, D, H, W]) {
    if has_bias {
      return conv3d(x, weight, bias, stride = stride, padding = padding)
    }
    return conv3d(x, weight, stride = stride, padding = padding)
  }
}

module Embedding(vocab: int, dim: int, std: float = 0.02) {
  weight = param f32[vocab, dim] = normal(std)   // vocab-parallel under tp

  forward(ids) { return embedding(ids, weight) }
}

// Multi-head attention with grouped-query heads (kv_heads < heads), optional
// RoPE (rope_theta > 0), causal masking and RMS qk-norm. Under tensor
// parallel q/k/v are column-parallel (heads split) and o_proj row-parallel.
module Attention(dim: int, heads: int, kv_heads: int = heads, head_dim: int = dim // heads,
                 qkv_bias: bool = true, out_bias: bool = true, causal: bool = false,
                 rope_theta: float = 0.0, qk_norm: bool = false, std: float = 0.0) {
  q_proj = Linear(dim, heads * head_dim, has_bias = qkv_bias, std = std)
  k_proj = Linear(dim, kv_heads * head_dim, has_bias = qkv_bias, std = std)
  v_proj = Linear(dim, kv_heads * head_dim, has_bias = qkv_bias, std = std)
  o_proj = Linear(heads * head_dim, dim, has_bias = out_bias, std = std)
  if qk_norm {
    q_norm = RMSNorm(head_dim)
    k_norm = RMSNorm(head_dim)
  }

  forward(x: [B, T, dim]) -> [B, T, dim] {
    q = q_proj(x).reshape(B, T, heads, head_dim)
    k = k_proj(x).reshape(B, T, kv_heads, head_dim)
    v = v_proj(x).reshape(B, T, kv_heads, head_dim)
    if qk_norm {
      q = q_norm(q)
      k = k_norm(k)
    }
    if rope_theta > 0.0 {
      q = rope(q, theta = rope_theta)
      k = rope(k, theta = rope_theta)
    }
    o = attention(q, k, v, causal = causal)
    return o_proj(o.reshape(B, T, heads * head_dim))
  }
}

// fc1 column-parallel, fc2 row-parallel.
module MLP(dim: int, hidden: int, act: string = "gelu", has_bias: bool = true, std: float = 0.0) {
  fc1 = Linear(dim, hidden, has_bias = has_bias, std = std)
  fc2 = Linear(hidden, dim, has_bias = has_bias, std = std)

  forward(x) { return fc2(activation(fc1(x), act)) }
}

// SwiGLU: down(act(gate(x)) * up(x)).
module GatedMLP(dim: int, hidden: int, act: string = "silu", has_bias: bool = false) {
  gate_proj = Linear(dim, hidden, has_bias = has_bias)
  up_proj   = Linear(dim, hidden, has_bias = has_bias)
  down_proj = Linear(hidden, dim, has_bias = has_bias)

  forward(x) { return down_proj(activation(gate_proj(x), act) * up_proj(x)) }
}

// WF-VAE's causal 3D convolution: the time axis is padded on the left only,
// with kernel - 1 copies of the first frame (replicate, as WF-VAE's
// CausalConv3d), so output frame t sees input frames t - kernel + 1 .. t and
// never t + 1; H and W are padded with zeros by `padding` on each side.
module CausalConv3d(in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, has_bias: bool = true) {
  weight = param f32[out_ch, in_ch, kernel, kernel, kernel] = fan_in(1.0)
  if has_bias {
    bias = param f32[out_ch] = zeros
  }

  forward(x: [B, in_ch, T, H, W]) {
    // kernel - 1 copies of frame 0 in front; a chunked encoder keeps the
    // last kernel - stride padded frames for the next chunk instead
    xp = causal_pad(x, kernel - 1, keep = max(kernel - stride, 0))
    if has_bias {
      return conv3d(xp, weight, bias, stride = stride, padding = [0, padding, padding])
    }
    return conv3d(xp, weight, stride = stride, padding = [0, padding, padding])
  }
}
