// Layer counts per sub-model add up to that sub-model's stack.
import "internvl2.mm"
model V extends InternVL2Tiny {
  // expected-error@+1:83 {{stages: the layer counts of 'llm' add up to 3, but llm.blocks has 2 layers}}
  parallel { pp = 2; micro_batches = 2; stages = by_module(vision = [2, 0], llm = [1, 2]) }
}
