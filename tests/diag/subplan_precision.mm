import "internvl2.mm"
// Precision per sub-model is not built: a block refuses it at its key.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:22 {{unknown sub-model setting 'precision' (expected tp, dp, sp or recompute)}}
    vision { dp = 2; precision = bf16 }
    llm { tp = 2 }
  }
}
