module M(d: int) {
  // expected-error@+1:11 {{unexpected character '$'}}
  let a = $ 3
}
