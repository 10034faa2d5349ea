// A format the table (ir/data_formats.def) does not have.
model M {
  forward(pixels: f32[2, 1, 28, 28], labels: i32[2]) -> loss { return mean(pixels) }
  // expected-error@+1:19 {{unknown data format 'fmnist'}}
  data { format = fmnist }
}
