model M {
  forward(x: f32[2, 8], y: f32[2, 6]) -> loss {
    // expected-error@+1:17 {{do not broadcast}}
    return mean(x + y)
  }
}
