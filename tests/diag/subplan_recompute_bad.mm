import "internvl2.mm"
// A block's recompute takes the policies of the whole-model setting.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:34 {{unknown recompute policy 'most' (expected none, selective, full or block(N))}}
    vision { dp = 2; recompute = most }
    llm { tp = 2 }
  }
}
