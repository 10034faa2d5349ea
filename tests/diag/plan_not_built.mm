// vpp needs the interleaved schedule: refused where set, never accepted and
// ignored.
model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    pp = 2
    micro_batches = 2
    // expected-error@+1:5 {{vpp = 2 virtual stages per rank need schedule = interleaved}}
    vpp = 2
  }
}
model N {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel { recompute = none }
}
