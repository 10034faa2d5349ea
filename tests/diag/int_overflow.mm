model M {
  // expected-error@+1:11 {{integer overflow}}
  let n = 4611686018427387904 * 4
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
