model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  train {
    // expected-error@+1:17 {{unknown optimizer 'adam8bit'}}
    optimizer = adam8bit(lr = 1e-3)
  }
}
