import "internvl2.mm"
// Separate placement makes the pipeline: pp and stages beside it are refused.
model M extends InternVL2Tiny {
  parallel {
    placement = separate
    // expected-error@+1:5 {{'pp' for the whole model beside sub-model blocks: placement = separate makes the pipeline (two stages, a block each)}}
    pp = 2
    // expected-error@+1:5 {{'stages' for the whole model beside sub-model blocks: placement = separate makes the pipeline}}
    stages = [vision, projector + llm]
    vision { dp = 1 }
    llm { tp = 2 }
  }
}
