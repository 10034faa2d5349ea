module Id(d: int) {
  // expected-error@+1:3 {{ends without 'return'}}
  forward(x) {
    y = x
  }
}
model M {
  i = Id(2)
  forward(x: f32[2, 2]) -> loss { return mean(i(x)) }
}
