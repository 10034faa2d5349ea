// bucket_mb takes a number of MiB, a fraction or 0 (no buckets)
model M {
  let mb = 0.5
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel { dp = 2; bucket_mb = mb / 4 }
}
