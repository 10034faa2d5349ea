// A model extends itself.
// expected-error@+1:17 {{model 'M' extends itself}}
model M extends M {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
