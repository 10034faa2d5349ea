import "internvl2.mm"
// Sequence parallel in a block needs that block's own tp > 1.
model M extends InternVL2Tiny {
  parallel {
    // expected-error@+1:22 {{sub-model 'vision': sequence parallel (sp) needs tensor parallel, but tp = 1}}
    vision { dp = 2; sp = true }
    llm { tp = 2 }
  }
}
