// batch must equal the samples the inputs hold: another number is refused,
// the same number is accepted (model N).
model M {
  forward(x: f32[4, 2]) -> loss { return mean(x) }
  // expected-error@+1:19 {{batch = 3, but the inputs hold 4 samples}}
  train { batch = 3 }
}
model N {
  forward(x: f32[4, 2]) -> loss { return mean(x) }
  train { batch = 4 }
}
