module Block(d: int, heads: int) {
  // expected-error@+1:18 {{division by zero}}
  let head_dim = d // heads
  w = param f32[d, d] = zeros
  forward(x) { return x }
}
model M {
  b = Block(8, 0)
  forward(x: f32[2, 8]) -> loss { return mean(b(x)) }
}
