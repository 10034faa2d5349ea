model M {
  forward(x: f32[2, 8], y: i32[2, 8]) -> loss {
    // expected-error@+1:17 {{dtypes differ}}
    return mean(x + y)
  }
}
