model M {
  // expected-error@+1:3 {{must be a scalar loss}}
  forward(x: f32[2, 8]) -> loss {
    return x * 2.0
  }
}
