import "internvit.mm"
model M {
  blk = ViTBlock(16, 2, 32)
  forward(x: f32[2, 5, 12]) -> loss {
    // expected-error@+1:21 {{dimension 2 of argument 'x' of ViTBlock.forward is 12, but the declared size dim = 16}}
    return mean(blk(x))
  }
}
