import "internvl2.mm"
// placement places sub-model blocks: without any it would change nothing.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:5 {{placement places per-sub-model plans, but the parallel section has no sub-model block}}
    placement = colocated
    tp = 2
  }
}
