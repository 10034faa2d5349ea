import "internvl2.mm"
// RUN-ARGS: --tp 2
// A mesh flag beside sub-model blocks is refused, not applied to one of them.
// expected-error@+1:7 {{--tp: the parallel section gives each sub-model its plan; set it in each sub-model's block}}
model M extends InternVL2Tiny {
  parallel { vision { dp = 2 } llm { tp = 2 } }
}
