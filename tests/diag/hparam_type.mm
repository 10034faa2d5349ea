import "nn.mm"
model M {
  // expected-error@+1:18 {{hyper-parameter 'out_dim' of 'Linear' is a int, but the value given is a float}}
  fc = Linear(8, 8.5)
  forward(x: f32[2, 8]) -> loss { return mean(fc(x)) }
}
