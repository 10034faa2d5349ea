// Three independent semantic errors in one model: all three are reported.
import "nn.mm"

model M {
  let B = 2
  // expected-error@+1:9 {{unknown module 'Linnear'}}
  fc1 = Linnear(8, 8)
  fc2 = Linear(8, 8)
  forward(x: f32[B, 8], y: i32[B]) -> loss {
    // expected-error@+1:9 {{unknown name 'zz'}}
    h = zz + x
    // expected-error@+1:26 {{unknown function 'gelux'}}
    return cross_entropy(gelux(fc2(x)), y)
  }
}
