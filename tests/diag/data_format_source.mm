// A format that reads Fashion-MNIST takes a folder as its source, not a file.
model M {
  forward(pixels: f32[2, 1, 28, 28], labels: i32[2]) -> loss { return mean(pixels) }
  data {
    format = fmnist_classify
    // expected-error@+1:5 {{is not a folder (format = fmnist_classify reads Fashion-MNIST's folder)}}
    source = "data_format_source.mm"
  }
}
