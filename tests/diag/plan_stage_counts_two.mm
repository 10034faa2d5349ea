// Plain layer counts name no stack: with two (vision, llm) they are per sub-model.
import "internvl2.mm"
model V extends InternVL2Tiny {
  // expected-error@+1:50 {{stages: layer counts cut one stack, but the model has 2; give the counts per sub-model}}
  parallel { pp = 2; micro_batches = 2; stages = [2, 2] }
}
