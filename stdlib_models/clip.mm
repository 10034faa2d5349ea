// CLIP's vision transformer (transformers' CLIPVisionModel, the vision tower
// of LLaVA): a patch convolution without bias, a learned class embedding and
// position table, a LayerNorm before the encoder (CLIP's "pre_layrnorm"),
// pre-norm layers with biased attention and a quick-GELU MLP, and a
// LayerNorm on the class token only (the pooled output).
// CLIP ViT-L/14-336 at the defaults below: 24 layers, width 1024, 16 heads.
import "nn.mm"

// fc2(quick_gelu(fc1(x))), quick_gelu(h) = h * sigmoid(1.702 h)
module QuickGeluMLP(dim: int, hidden: int) {
  fc1 = Linear(dim, hidden)
  fc2 = Linear(hidden, dim)

  forward(x) {
    h = fc1(x)
    return fc2(h * sigmoid(h * 1.702))
  }
}

module CLIPLayer(dim: int, heads: int, ffn: int, eps: float = 1e-5) {
  layer_norm1 = LayerNorm(dim, eps)
  self_attn   = Attention(dim, heads)
  layer_norm2 = LayerNorm(dim, eps)
  mlp         = QuickGeluMLP(dim, ffn)

  forward(x: [B, S, dim]) -> [B, S, dim] {
    h = x + self_attn(layer_norm1(x))
    return h + mlp(layer_norm2(h))
  }
}

module CLIPVision(image: int = 336, patch: int = 14, dim: int = 1024, depth: int = 24,
                  heads: int = 16, ffn: int = 4096, channels: int = 3, eps: float = 1e-5) {
  let grid = image // patch
  let S = grid * grid + 1
  patch_embedding    = Conv2d(channels, dim, kernel = patch, stride = patch, has_bias = false)
  class_embedding    = param f32[dim] = normal(0.02)
  position_embedding = param f32[S, dim] = normal(0.02)
  pre_norm           = LayerNorm(dim, eps)
  layers             = CLIPLayer(dim, heads, ffn, eps) x depth
  post_norm          = LayerNorm(dim, eps)

  // the encoder's input: [B, S, dim]; token 0 is the class token
  forward embed(pixels: [B, channels, image, image]) -> [B, S, dim] {
    p = patch_embedding(pixels).flatten(2).transpose(1, 2)
    x = concat([class_embedding.reshape(1, 1, dim).expand(B, 1, dim), p], axis = 1)
    return pre_norm(x + position_embedding.reshape(1, S, dim))
  }

  // the last hidden state [B, S, dim] (transformers' last_hidden_state)
  forward(pixels: [B, channels, image, image]) -> [B, S, dim] {
    return layers(embed(pixels))
  }

  // the class token of the last hidden state, normalised (pooler_output)
  forward pooled(pixels: [B, channels, image, image]) -> [B, dim] {
    return post_norm(layers(embed(pixels))[:, 0])
  }
}
