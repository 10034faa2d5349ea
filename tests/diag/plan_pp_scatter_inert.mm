model M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
  parallel {
    // expected-error@+1:5 {{pp_scatter splits the pipeline's transfers over tp: it needs pp > 1 and tp > 1 without sub-model plans, but pp = 1, tp = 1}}
    pp_scatter = false
  }
}
