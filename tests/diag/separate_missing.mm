import "internvl2.mm"
// Separate placement needs a block for each group: the LLM's is missing.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:5 {{placement = separate needs two sub-model blocks, the first stage's group and the second's (e.g. vision { dp = 2 } llm { tp = 2 }), but the parallel section has 1}}
    placement = separate
    vision { dp = 1 }
  }
}
