model M {
  forward(x: f32[2, 8, 4], y: f32[2, 9, 5]) -> loss {
    // expected-error@+1:17 {{concat}}
    return mean(concat([x, y], axis = 1))
  }
}
