// max_tiles counts tiles an image: from 1.
model M {
  forward(pixels: f32[2, 1, 3, 28, 28], text: i32[2, 8], labels: i32[2, 8]) -> loss { return mean(pixels) }
  data {
    format = conversation
    // expected-error@+1:17 {{max_tiles}}
    max_tiles = 0
  }
}
