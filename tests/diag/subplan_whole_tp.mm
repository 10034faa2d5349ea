import "internvl2.mm"
// Beside sub-model blocks, the mesh's axes belong in the blocks.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:5 {{'tp' for the whole model beside sub-model blocks: set it in each sub-model's block}}
    tp = 2
    vision { dp = 2 }
    llm { tp = 2 }
  }
}
