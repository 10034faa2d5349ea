model M {
  // expected-error@+1:25 {{unknown initialiser 'gaussian'}}
  w = param f32[4, 4] = gaussian(0.1)
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
