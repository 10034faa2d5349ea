// The format's input with another shape: Fashion-MNIST images are 1 x 28 x 28.
model M {
  forward(pixels: f32[2, 1, 32, 32], labels: i32[2]) -> loss { return mean(pixels) }
  // expected-error@+1:10 {{format = fmnist_classify fills pixels f32[B, 1, 28, 28], but the forward's pixels is f32[2, 1, 32, 32]}}
  data { format = fmnist_classify }
}
