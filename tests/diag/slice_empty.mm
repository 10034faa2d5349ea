model M {
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:22 {{empty slice}}
    return mean(x[:, 5:3])
  }
}
