model M {
  let d = 4 - 8
  // expected-error@+1:17 {{must be positive}}
  w = param f32[d, 4] = zeros
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
