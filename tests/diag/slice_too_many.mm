model M {
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:17 {{3 indices for a tensor of rank 2}}
    return mean(x[0, 1, 2])
  }
}
