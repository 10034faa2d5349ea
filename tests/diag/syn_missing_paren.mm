module M(d: int) {
  // expected-note@+1:11 {{to match this '('}}
  let a = (1 + 2
// expected-error@+1:1 {{unexpected '}', expected an operator or ')'}}
}
