// A cycle of extensions, reported once at the first model of the cycle with
// a note at each other link; a model extending the cycle adds no error.
// expected-error@+1:17 {{cycle of model extensions: A extends B extends C extends A}}
model A extends B {
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
// expected-note@+1:17 {{'B' extends 'C' here}}
model B extends C {
  train { optimizer = sgd(lr = 0.1) }
}
// expected-note@+1:17 {{'C' extends 'A' here}}
model C extends A {
  let k = 1
}
model D extends B {
  let k = 2
}
