// A forward without an input the format needs (captions need the text ids).
model M {
  forward(pixels: f32[2, 1, 28, 28], labels: i32[2, 8]) -> loss { return mean(pixels) }
  // expected-error@+1:10 {{format = fmnist_captions fills pixels f32[B, 1, 28, 28], text i32[B, _], labels i32[B, _], but the forward takes no 'text' input}}
  data { format = fmnist_captions }
}
