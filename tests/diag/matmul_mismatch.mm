model M {
  let B = 2
  let dim = 8
  // expected-note@+1:3 {{'w' declared here as [3 * dim, dim] = [24, 8]}}
  w = param f32[3 * dim, dim] = normal(0.02)
  forward(x: f32[B, dim]) -> loss {
    // expected-error@+1:17 {{matmul}}
    return mean(x @ w)
  }
}
