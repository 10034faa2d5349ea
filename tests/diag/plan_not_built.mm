// vpp and recompute other than none are not built yet: refused where set,
// never accepted and ignored. recompute = none (what runs) is accepted.
model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:5 {{virtual pipeline stages (vpp) are not built yet}}
    vpp = 2
    // expected-error@+1:5 {{recompute = selective is not built yet}}
    recompute = selective
  }
}
model N {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel { recompute = none }
}
