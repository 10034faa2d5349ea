// Three independent syntax errors: all three are reported.
module A(d: int) {
  // expected-error@+1:11 {{unexpected}}
  let a = * 2
  // expected-error@+1:11 {{unexpected}}
  let b = ]
  // expected-error@+1:15 {{unexpected}}
  let c = 1 + + 
}
