model M {
  let a = 3
  // expected-error@+1:16 {{must be a compile-time bool}}
  let b = 1 if a else 2
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
