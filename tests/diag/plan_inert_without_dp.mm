// zero and bucket_mb act on data parallel only: with dp = 1 they would do
// nothing, so they are refused.
model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:5 {{zero = 1 shards over data parallel, but dp = 1}}
    zero = 1
    // expected-error@+1:5 {{bucket_mb groups the data-parallel gradient all-reduces, but dp = 1}}
    bucket_mb = 1
  }
}
