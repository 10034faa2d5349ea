// The InternVL projector: pixel shuffle trades 2x2 neighbouring patches for
// 4x channels, then LayerNorm, Linear, GELU, Linear into the LLM's width.
import "nn.mm"

module PixelShuffleMLP(dim_in: int, dim_out: int, grid: int, factor: int = 2) {
  let wide = dim_in * factor * factor
  norm = LayerNorm(wide)
  fc1  = Linear(wide, dim_out)
  fc2  = Linear(dim_out, dim_out)

  forward(x: [B, grid * grid, dim_in]) -> [B, (grid // factor) ** 2, dim_out] {
    s = x.reshape(B, grid, grid, dim_in).pixel_unshuffle(factor).reshape(B, (grid // factor) ** 2, wide)
    return fc2(gelu(fc1(norm(s))))
  }
}

// LLaVA's projector: Linear, GELU, Linear from the vision width into the LLM's.
module LinearGeluMLP(dim_in: int, dim_out: int) {
  fc1 = Linear(dim_in, dim_out)
  fc2 = Linear(dim_out, dim_out)

  forward(x: [B, S, dim_in]) -> [B, S, dim_out] { return fc2(gelu(fc1(x))) }
}
