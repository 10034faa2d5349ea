import "internvl2.mm"
// A block's recompute joins the per-sub-model policies: giving the same
// sub-model a policy in its block and in by_module is refused.
model M extends InternVL2Tiny {
  parallel {
    vision { dp = 2; recompute = full }
    llm { tp = 2 }
    // expected-error@+1:27 {{recompute: 'vision' is given twice}}
    recompute = by_module(vision = selective)
  }
}
