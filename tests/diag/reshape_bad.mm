model M {
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:17 {{reshape}}
    return mean(x.reshape(3, 5))
  }
}
