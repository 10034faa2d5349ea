import "internvl2.mm"
// The vision encoder's dp = 4 (over all 4 ranks) does not divide 6 samples,
// although the LLM's dp = 2 does.
model M extends InternVL2Tiny {
  let B = 6
  parallel {
    // expected-error@+1:14 {{sub-model 'vision': dp = 4 does not divide the batch of 6 of input 'pixels'}}
    vision { dp = 4 }
    llm { tp = 2; dp = 2 }
  }
}
