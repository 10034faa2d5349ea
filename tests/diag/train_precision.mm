model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  train {
    // expected-error@+1:17 {{unknown precision 'fp16' (expected fp32 or bf16)}}
    precision = fp16
  }
}
