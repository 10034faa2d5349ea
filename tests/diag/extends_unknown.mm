// `extends` names a model that does not exist.
model Base {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
// expected-error@+1:17 {{unknown model 'Bse' (the base of 'M')}}
model M extends Bse {
  train { optimizer = sgd(lr = 0.1) }
}
