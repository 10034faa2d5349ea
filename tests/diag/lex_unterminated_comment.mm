module M(d: int) {
  let a = 1
}
// expected-error@+1:1 {{unterminated comment}}
/* this comment never ends
