// Member errors of an extending model: a member declared inside an `if` of
// the base cannot be replaced; two members of the same name are a
// redefinition as in one body; a replacing member sees only what comes
// before its place in the base.
import "nn.mm"
model Base {
  let d = 4
  let wide = false
  if wide {
    // expected-note@+1:9 {{'h' is declared here}}
    let h = 16
  } else {
    let h = 8
  }
  fc = Linear(d, h)
  forward(x: f32[2, d]) -> loss { return mean(fc(x)) }
}
model M extends Base {
  // expected-error@+1:7 {{cannot replace 'h' of 'Base': it is declared inside an 'if' there}}
  let h = 12
}
model N extends Base {
  let d = 6
  // expected-error@+1:7 {{redefinition of 'd'}}
  let d = 7
  // expected-note@-3:7 {{previous definition is here}}
}
model P extends Base {
  // expected-error@+1:11 {{unknown name 'e'}}
  let d = e
  let e = 3
}
