model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:17 {{bucket_mb must be between 0 and 1048576 MiB (0: no buckets), not -1}}
    bucket_mb = -1
  }
}
