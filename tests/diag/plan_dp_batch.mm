// dp splits the batch: `mmc check` reports what the shard pass would.
model M {
  // expected-error@+1:11 {{data parallel: dp = 3 does not divide the batch of 4 of input 'x'}}
  forward(x: f32[4, 2]) -> loss { return mean(x) }
  parallel { dp = 3 }
}
