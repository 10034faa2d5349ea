import "internvl2.mm"
// A sub-model block names an instance the model does not have.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:5 {{'vison' is not a sub-model of M (its sub-models: }}
    vison { dp = 2 }
    llm { tp = 2 }
  }
}
