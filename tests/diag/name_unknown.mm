model M {
  let B = 2
  w = param f32[4, 4] = normal(0.02)
  forward(x: f32[B, 4]) -> loss {
    // expected-error@+1:17 {{unknown name 'wq'}}
    return mean(wq @ x)
  }
}
