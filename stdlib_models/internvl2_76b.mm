// InternVL2-76B at its published sizes, for the planner (mmc plan --device
// h100 --devices 1024 --search; docs/planner.md): InternViT-6B-448px-V1.5
// (45 layers, width 3200, 25 heads, FFN 12800, q/k RMSNorm, no qkv bias),
// the pixel-shuffle MLP projector (4 x 3200 -> 8192) and a Llama-3-70B LLM
// (Hermes-2-Theta-Llama-3-70B: 80 layers, width 8192, 64 heads, 8 KV heads,
// FFN 28672, RoPE theta 500000, vocabulary 128256, untied head). Sizes from
// the models' Hugging Face configurations as the InternVL2 model card lists
// them (no weights are read). Assumed for a training step: one 448 px tile
// a sample (256 image tokens) in a 4,096-token row, 1,024 samples a step,
// full fine-tuning in bf16. InternViT's norms are LayerNorm here where the
// 6B uses RMSNorm (the same cost, near enough).
import "internvl2.mm"

model InternVL2_76B {
  let B = 1024
  let T = 4096
  let IMG = 128258            // <IMG_CONTEXT> after Llama-3's 128256 tokens (assumed)
  vision    = InternViT(image = 448, patch = 14, dim = 3200, depth = 45, heads = 25, ffn = 12800,
                        qkv_bias = false, qk_norm = true)
  projector = PixelShuffleMLP(dim_in = 3200, dim_out = 8192, grid = 32)
  llm       = LLM(vocab = 128264, dim = 8192, depth = 80, heads = 64, kv_heads = 8, ffn = 28672,
                  theta = 500000.0, eps = 1e-5, qkv_bias = false)

  forward(pixels: f32[B, 3, 448, 448], text: i32[B, T], labels: i32[B, T]) -> loss {
    image  = projector(vision(pixels)[:, 1:])                // [B, 256, 8192]
    logits = llm.decode(place(llm.embed(text), image, text, token = IMG))
    return cross_entropy(logits, labels, ignore = -100)
  }

  train {
    precision = bf16
    optimizer = adamw(lr = 2e-5, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 100)
  }

  // InternViT-6B's 25 heads take no tensor parallel (a plan per sub-model,
  // docs/subplans.md, does not combine with pp yet): a pipeline of 16 stages
  // on whole devices, ZeRO-1 over dp = 64 (1,024 devices)
  parallel { pp = 16; dp = 64; zero = 1; recompute = full; micro_batches = 16 }
}
