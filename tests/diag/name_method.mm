model M {
  forward(x: f32[2, 3]) -> loss {
    // expected-error@+1:17 {{a tensor has no method 'squish'}}
    return mean(x.squish(1))
  }
}
