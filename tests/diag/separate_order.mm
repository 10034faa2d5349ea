import "internvl2.mm"
// The first block is the first stage: the LLM reads the vision encoder's
// output, so it cannot run before it.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:5 {{pipeline stages out of order: 'llm.blocks.0' is in stage 0, but its first use takes values computed in stage 1; placement = separate runs the first block's sub-model first: write the blocks in the order of the forward}}
    placement = separate
    llm { tp = 2 }
    vision { dp = 2 }
  }
}
