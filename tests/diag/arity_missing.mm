import "nn.mm"
model M {
  // expected-error@+1:8 {{missing hyper-parameter 'out_dim' of 'Linear'}}
  fc = Linear(8)
  forward(x: f32[2, 8]) -> loss { return mean(fc(x)) }
}
