model M {
  // expected-error@+1:18 {{size 'T' of input 'x' is not bound}}
  forward(x: f32[T, 8]) -> loss {
    return mean(x)
  }
}
