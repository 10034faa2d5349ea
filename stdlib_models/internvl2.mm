// InternVL2: InternViT, the pixel-shuffle projector and an LLM. The text
// holds one image-context token (IMG) per image token; `place` puts the
// projected image features where they stand, as InternVL's chat template
// does. The loss covers the answer tokens only (labels are -100 elsewhere).
import "internvit.mm"
import "projector.mm"
import "llm.mm"

// InternVL2-1B: InternViT-300M + Qwen2-0.5B (untied head), 448 px, 256 image tokens.
model InternVL2_1B {
  let B = 2                   // samples per micro-batch, split over dp = 2
  let T = 512                 // 256 image-context tokens and the text
  let IMG = 151648            // <IMG_CONTEXT> in Qwen2's tokenizer as InternVL2 extends it
  vision    = InternViT(image = 448, patch = 14, dim = 1024, depth = 24, heads = 16, ffn = 4096)
  projector = PixelShuffleMLP(dim_in = 1024, dim_out = 896, grid = 32)
  llm       = LLM(vocab = 151655, dim = 896, depth = 24, heads = 14, kv_heads = 2, ffn = 4864, theta = 1e6)

  forward(pixels: f32[B, 3, 448, 448], text: i32[B, T], labels: i32[B, T]) -> loss {
    image  = projector(vision(pixels)[:, 1:])                // drop CLS: [B, 256, 896]
    logits = llm.decode(place(llm.embed(text), image, text, token = IMG))
    return cross_entropy(logits, labels, ignore = -100)
  }

  train {
    freeze    = [vision]
    optimizer = adamw(lr = 2e-5, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 100)
  }

  // The published recipe adds a two-stage pipeline (pp = 2; micro_batches = 8;
  // schedule = 1f1b; stages = [vision + projector + llm.embed + llm.blocks[0:8],
  // llm.blocks[8:24] + llm.norm + llm.head]); mmc refuses those until the
  // pipeline is built.
  parallel {
    tp = 2; sp = true; dp = 2
    zero = 1; recompute = selective
  }
}

// InternVL2-2B: InternViT-300M + InternLM2-1.8B.
model InternVL2_2B {
  let B = 1
  let T = 512
  let IMG = 92546             // <IMG_CONTEXT> in InternLM2's tokenizer as InternVL2 extends it
  vision    = InternViT(image = 448, patch = 14, dim = 1024, depth = 24, heads = 16, ffn = 4096)
  projector = PixelShuffleMLP(dim_in = 1024, dim_out = 2048, grid = 32)
  llm       = LLM(vocab = 92553, dim = 2048, depth = 24, heads = 16, kv_heads = 8, ffn = 8192,
                  theta = 1e6, eps = 1e-5, qkv_bias = false)

  forward(pixels: f32[B, 3, 448, 448], text: i32[B, T], labels: i32[B, T]) -> loss {
    image  = projector(vision(pixels)[:, 1:])                // [B, 256, 2048]
    logits = llm.decode(place(llm.embed(text), image, text, token = IMG))
    return cross_entropy(logits, labels, ignore = -100)
  }

  train {
    freeze    = [vision]
    optimizer = adamw(lr = 4e-5, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 100)
  }
}

// A tiny InternVL2 for 28x28 one-channel images (Fashion-MNIST): a 4x4 grid
// of 7x7 patches, pixel-shuffled into 4 image tokens placed in the text of a
// 2-layer LLM.
model InternVL2Tiny {
  let B = 8
  let T = 16                  // <bos>, 4 image-context tokens, prompt, answer, <eos>
  let IMG = 3                 // the caption tokenizer's <img>
  let grid = 4
  vision    = InternViT(image = 28, patch = 7, dim = 64, depth = 2, heads = 4, ffn = 128, channels = 1)
  projector = PixelShuffleMLP(dim_in = 64, dim_out = 64, grid = grid)
  llm       = LLM(vocab = 64, dim = 64, depth = 2, heads = 4, kv_heads = 2, ffn = 128, theta = 10000.0)

  forward(pixels: f32[B, 1, 28, 28], text: i32[B, T], labels: i32[B, T]) -> loss {
    image  = projector(vision(pixels)[:, 1:])                // [B, 4, 64]
    logits = llm.decode(place(llm.embed(text), image, text, token = IMG))
    return cross_entropy(logits, labels, ignore = -100)
  }

  data { format = fmnist_captions }
  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}

// InternVL2Tiny fine-tuned with LoRA: rank-4 adapters (scale alpha / rank = 2)
// on the query and value projections of every LLM layer; the rest is frozen
// (the `lora` pass adds llm.blocks.N.attn.{q,v}_proj.lora_a / .lora_b).
model InternVL2TinyLoRA extends InternVL2Tiny {
  train {
    lora      = lora(rank = 4, alpha = 8, targets = [llm], layers = ["q_proj", "v_proj"])
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}

// InternVL2Tiny with the vision encoder frozen: no gradients and no
// optimizer state for vision.* (mmc plan --json shows the difference).
model InternVL2TinyFrozenVision extends InternVL2Tiny {
  train {
    freeze    = [vision]
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}

// InternVL2Tiny on conversations (data { format = conversation }: a
// LLaVA/InternVL JSONL, a folder of images, a tokenizer.json): each image
// tiled by InternVL2's rule into 28 x 28 RGB tiles (1 or 2 and a thumbnail
// at --max-tiles 2), a sample's tiles in its K slots, the rest zero. The
// compiled step always runs K tiles a sample (the most; mmc plan's memory
// is that maximum's); `place` puts the first tiles' features at the
// sample's image-context tokens (fewer tiles: fewer tokens) and the padding
// tiles' go nowhere. IMG and V are the tokenizer's (<IMG_CONTEXT>'s id, its
// vocabulary): --set IMG=... V=... for another.
model InternVL2TinyConv {
  let B = 4
  let K = 12                  // tiles a sample at most: 4 images of 2 tiles and a thumbnail
  let T = 160
  let V = 300
  let IMG = 6                 // <IMG_CONTEXT>
  vision    = InternViT(image = 28, patch = 7, dim = 64, depth = 2, heads = 4, ffn = 128, channels = 3)
  projector = PixelShuffleMLP(dim_in = 64, dim_out = 64, grid = 4)
  llm       = LLM(vocab = V, dim = 64, depth = 2, heads = 4, kv_heads = 2, ffn = 128, theta = 10000.0)

  forward(pixels: f32[B, K, 3, 28, 28], text: i32[B, T], labels: i32[B, T]) -> loss {
    tiles  = projector(vision(pixels.reshape(B * K, 3, 28, 28))[:, 1:])   // [B * K, 4, 64]
    logits = llm.decode(place(llm.embed(text), tiles.reshape(B, K * 4, 64), text, token = IMG))
    return cross_entropy(logits, labels, ignore = -100)
  }

  data { format = conversation }
  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 0.01, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}

// InternVL2TinyConv with a tile pool: `tiles` holds the tiles of all the
// batch's rows one after another (a dp rank's rows in its share), B x K in
// all, and `place(..., flat = true)` takes the pool in order across the
// rows. Compiled with --tile-buckets K1,K2 (smaller K), the trainer runs
// each step on the smallest pool that holds its rows' tiles: the vision
// encoder encodes about the filled tiles only (docs/architecture.md, "Data").
model InternVL2TinyConvPool extends InternVL2TinyConv {
  forward(tiles: f32[B, K, 3, 28, 28], text: i32[B, T], labels: i32[B, T]) -> loss {
    feats  = projector(vision(tiles.reshape(B * K, 3, 28, 28))[:, 1:])   // [B * K, 4, 64]
    logits = llm.decode(place(llm.embed(text), feats.reshape(B, K * 4, 64), text, token = IMG,
                              flat = true))
    return cross_entropy(logits, labels, ignore = -100)
  }
}

// InternVL2TinyConv at the main job's scale (tools/main.sh): Fashion-MNIST
// written out as one 28 x 28 image a conversation (tools/fmnist_conv/), one
// tile an image (--max-tiles 1), the committed tokenizer of 120 ids
// (tools/fmnist_conv/tokenizer.json) under --chat chatml, where <image> (id
// 7) is the image-context token; a question and a class name fit T = 24.
model InternVL2TinyFashion extends InternVL2TinyConv {
  let B = 64
  let K = 1
  let T = 24
  let V = 120
  let IMG = 7
  llm = LLM(vocab = V, dim = 64, depth = 2, heads = 4, kv_heads = 2, ffn = 128, theta = 10000.0)
}
