// expected-note@+1:18 {{'{' opened here}}
module M(d: int) {
  // expected-error@+1:12 {{unexpected end of file, expected '}' to close '{'}}
  let a = 1
