// Only a model can extend a model.
model Base {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
// expected-error@+1:18 {{module 'M' cannot extend 'Base': only a model can extend another model}}
module M extends Base {
  forward(x) { return x }
}
// expected-error@+1:9 {{unexpected name 'extend' after the declaration's name, expected 'extends' or '{'}}
model N extend Base {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
