// A vision-heavy conversation model for bench/encoder_balance.sh:
// InternVL2TinyConvPool's tile pool and LLM with a deeper and wider
// InternViT (4 layers of width 128, ffn 512), so that the tiles a rank
// encodes set its step time; up to 24 tiles a sample, rows of 192 tokens.
import "internvl2.mm"

model ConvHeavyPool extends InternVL2TinyConvPool {
  let B = 8
  let K = 24
  let T = 192
  vision    = InternViT(image = 28, patch = 7, dim = 128, depth = 4, heads = 4, ffn = 512, channels = 3)
  projector = PixelShuffleMLP(dim_in = 128, dim_out = 64, grid = 4)
  parallel { dp = 2 }
}
