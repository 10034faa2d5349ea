import "internvl2.mm"
// A sub-model's block takes only tp, dp, sp and recompute: ZeRO stays a whole-model setting (refused beside blocks).
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:22 {{'zero' is set for the whole model: a sub-model's block takes tp, dp, sp and recompute}}
    vision { dp = 2; zero = 1 }
    llm { tp = 2 }
  }
}
