module M(d: int) {
  let a = 1
  // expected-error@+1:7 {{redefinition of 'a'}}
  let a = 2
  // expected-note@-3:7 {{previous definition}}
}
