import "nn.mm"
model M {
  // expected-error@+1:32 {{is a bool, but the value given is a string}}
  fc = Linear(8, 8, has_bias = "yes")
  forward(x: f32[2, 8]) -> loss { return mean(fc(x)) }
}
