model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:5 {{unknown parallel setting 'tensor_parallel'}}
    tensor_parallel = 2
  }
}
