import "internvl2.mm"
// Separate groups of different sizes (2 ranks for vision, 4 for the LLM)
// are not built: the pipeline's two stages share one mesh shape, or the
// first is one rank before a second of dp = 1.
model M extends InternVL2Tiny {
  parallel {
    placement = separate
    vision { dp = 2 }
    // expected-error@+1:19 {{placement = separate: sub-model 'llm' runs on tp x dp = 2 x 2 = 4 ranks, but 'vision' on 1 x 2 = 2; groups of different sizes are not built yet}}
    llm { tp = 2; dp = 2 }
  }
}
