import "nn.mm"
model M {
  // expected-error@+1:32 {{'Linear' takes 4 hyper-parameters}}
  fc = Linear(8, 8, true, 0.0, 5)
  forward(x: f32[2, 8]) -> loss { return mean(fc(x)) }
}
