import "nn.mm"
model M {
  // expected-error@+1:21 {{'Linear' has no hyper-parameter named 'biass'}}
  fc = Linear(8, 8, biass = false)
  forward(x: f32[2, 8]) -> loss { return mean(fc(x)) }
}
