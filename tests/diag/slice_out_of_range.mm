model M {
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:24 {{index 12 is out of range for a dimension of size 8}}
    return mean(x[:, 2:12])
  }
}
