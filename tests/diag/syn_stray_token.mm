module M(d: int) {
  // expected-error@+1:13 {{unexpected}}
  let a = 1 ) 
}
