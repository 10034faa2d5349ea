// A conversation's source is its .json or .jsonl file, not a folder.
model M {
  forward(pixels: f32[2, 1, 3, 28, 28], text: i32[2, 8], labels: i32[2, 8]) -> loss { return mean(pixels) }
  data {
    format = conversation
    // expected-error@+1:5 {{is not a .json or .jsonl file (format = conversation reads a conversation file)}}
    source = "."
  }
}
