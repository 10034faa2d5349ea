model M {
  // expected-error@+1:13 {{too many elements}}
  w = param f32[1000000, 1000000, 1000000] = zeros
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
