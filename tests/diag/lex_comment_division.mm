// '//' right after a value, followed by a number that does not continue an
// expression, is an error: the number reads as a divisor.
model M {
  // expected-error@+1:14 {{'//' here starts a comment, not a division: the rest of the line ('2 2')}}
  let a = 64 // 2 2
  // expected-error@+1:14 {{('4 tokens')}}
  let b = 16 // 4 tokens
  let c = 64 // 2
  let T = 16   // <bos>, 4 <img>
  let u = 16 // <bos> and more
  let B = 2
  forward(x: f32[B, 4]) -> loss { return mean(x) }
}
