// vpp is not built yet: refused where set, never accepted and ignored.
model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:5 {{virtual pipeline stages (vpp) are not built yet}}
    vpp = 2
  }
}
model N {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel { recompute = none }
}
