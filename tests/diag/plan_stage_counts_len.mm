// Layer counts per sub-model: every list has one entry per stage.
import "internvl2.mm"
model V extends InternVL2Tiny {
  // expected-error@+1:83 {{stages: 'llm' lists 3 stages, but 'vision' lists 2}}
  parallel { pp = 2; micro_batches = 2; stages = by_module(vision = [2, 0], llm = [0, 1, 1]) }
}
