// Layer counts per sub-model: the name must be a sub-model.
import "internvl2.mm"
model V extends InternVL2Tiny {
  // expected-error@+1:60 {{stages: 'visio' is not a sub-model of this model}}
  parallel { pp = 2; micro_batches = 2; stages = by_module(visio = [2, 0], llm = [0, 2]) }
}
