// A second forward of the same name is an error at it, with a note at the first.
import "nn.mm"
model M {
  let B = 2
  fc = Linear(8, 4)
  forward(x: f32[B, 8], y: i32[B]) -> loss { return cross_entropy(fc(x), y) }
  // expected-error@+1:3 {{second forward named 'forward' in 'M'}}
  forward(x: f32[B, 8], y: i32[B]) -> loss { return mean(fc(x)) }
  // expected-note@-3:3 {{the first forward named 'forward' is here}}
  forward enc(x: f32[B, 8]) { return fc(x) }
  // expected-error@+1:11 {{second forward named 'enc' in 'M'}}
  forward enc(x: f32[B, 8]) { return fc(x) + 1.0 }
}
