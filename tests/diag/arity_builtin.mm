model M {
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:28 {{softmax has no argument named 'dim'}}
    return mean(softmax(x, dim = 1))
  }
}
