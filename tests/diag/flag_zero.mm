// RUN-ARGS: --zero 2
// A flag that would do nothing here (zero without dp) is refused at the model.
// expected-error@+1:7 {{zero = 2 shards over data parallel, but dp = 1}}
model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
