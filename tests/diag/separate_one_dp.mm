import "internvl2.mm"
// A one-rank vision group plays the LLM's tp ranks only: an LLM group
// with dp = 2 (each dp rank its own samples) is refused at its block.
model M extends InternVL2Tiny {
  parallel {
    placement = separate
    vision { dp = 1 }
    // expected-error@+1:19 {{placement = separate: sub-model 'llm' runs on tp x dp = 2 x 2 = 4 ranks, but 'vision' on 1 x 1 = 1}}
    llm { tp = 2; dp = 2 }
  }
}
