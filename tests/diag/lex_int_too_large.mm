module M(d: int) {
  // expected-error@+1:11 {{too large}}
  let a = 99999999999999999999999
}
