// A vision-heavy InternVL2 for bench/subplans.sh: InternVL2Tiny's 28 x 28
// images and data, a deeper and wider InternViT (4 layers of width 128, ffn
// 512) in front of a small LLM (2 layers of width 128, ffn 256, 4 query and 4 key/value
// heads, so tp = 4 divides both towers). `mmc plan --json` gives the vision
// encoder several times the LLM's FLOPs per sample.
import "internvl2.mm"

model VLHeavy extends InternVL2Tiny {
  let B = 16
  vision    = InternViT(image = 28, patch = 7, dim = 128, depth = 4, heads = 4, ffn = 512, channels = 1)
  projector = PixelShuffleMLP(dim_in = 128, dim_out = 128, grid = grid)
  llm       = LLM(vocab = 64, dim = 128, depth = 2, heads = 4, kv_heads = 4, ffn = 256, theta = 10000.0)
}

// the uniform plans
model VLHeavyDp4 extends VLHeavy { parallel { dp = 4 } }
model VLHeavyTp2Dp2 extends VLHeavy { parallel { tp = 2; dp = 2 } }
model VLHeavyTp4 extends VLHeavy { parallel { tp = 4 } }
// per-sub-model plans
model VLHeavySubTp2 extends VLHeavy { parallel { vision { dp = 4 } llm { tp = 2; dp = 2 } } }
model VLHeavySubTp4 extends VLHeavy { parallel { vision { dp = 4 } llm { tp = 4 } } }
