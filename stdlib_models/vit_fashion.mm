// ViTFashion: a small InternViT classifier for 28x28 one-channel images
// (Fashion-MNIST): 7x7 grid of 4x4 patches, the CLS token into a linear head.
import "internvit.mm"

model ViTFashion {
  let B = 64
  let classes = 10
  vit  = InternViT(image = 28, patch = 4, dim = 64, depth = 4, heads = 4, ffn = 128, channels = 1)
  norm = LayerNorm(64)
  head = Linear(64, classes)

  forward(pixels: f32[B, 1, 28, 28], labels: i32[B]) -> loss {
    features = vit(pixels)[:, 0]                     // the CLS token: [B, 64]
    return cross_entropy(head(norm(features)), labels)
  }

  data { format = fmnist_classify }
  train {
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 100)
  }
}
