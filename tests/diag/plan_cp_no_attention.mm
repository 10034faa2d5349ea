// cp without an attention to split
model NoAttn {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:5 {{context parallel (cp = 2) splits attention, but this model has none}}
    cp = 2
  }
}
