import "nn.mm"
model M {
  fc = Linear(8, 8)
  norm = LayerNorm(8)
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:17 {{LayerNorm.forward takes 1 argument, 2 given}}
    return mean(norm(x, x))
  }
}
