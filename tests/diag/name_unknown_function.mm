model M {
  forward(x: f32[2, 3]) -> loss {
    // expected-error@+1:17 {{unknown function 'softplus'}}
    return mean(softplus(x))
  }
}
