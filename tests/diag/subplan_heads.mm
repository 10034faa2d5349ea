import "internvl2.mm"
// The vision encoder's 3 heads do not take its own tp = 2.
model M extends InternVL2Tiny {
  vision = InternViT(image = 28, patch = 7, dim = 48, depth = 2, heads = 3, ffn = 96, channels = 1)
  projector = PixelShuffleMLP(dim_in = 48, dim_out = 64, grid = grid)
  parallel {
    // expected-error@+1:14 {{tp = 2 does not divide the 3 attention heads of 'vision.blocks}}
    vision { tp = 2 }
    llm { tp = 2 }
  }
}
