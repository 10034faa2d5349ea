model M {
  // expected-error@+1:7 {{unknown module 'Missing'}}
  a = Missing(3)
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
