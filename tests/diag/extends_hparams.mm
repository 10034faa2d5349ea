// An extending model takes its base's hyper-parameters and declares none.
model Base(n: int = 2) {
  forward(x: f32[n, 2]) -> loss { return mean(x) }
}
// expected-error@+1:9 {{model 'M' extends 'Base' and cannot declare hyper-parameters (it has those of 'Base')}}
model M(m: int = 3) extends Base {
  train { optimizer = sgd(lr = 0.1) }
}
