import "internvl2.mm"
// Colocated sub-models cover the same ranks: 2 and 4 do not match.
model M extends InternVL2Tiny {
  parallel {
    vision { dp = 2 }
    // expected-error@+1:19 {{sub-model 'llm' runs on tp x dp = 2 x 2 = 4 ranks, but 'vision' on 1 x 2 = 2}}
    llm { tp = 2; dp = 2 }
  }
}
