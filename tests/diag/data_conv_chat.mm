// A conversation's chat format is one of the tokenizer chat families.
model M {
  forward(pixels: f32[2, 1, 3, 28, 28], text: i32[2, 8], labels: i32[2, 8]) -> loss { return mean(pixels) }
  data {
    format = conversation
    // expected-error@+1:12 {{unknown chat format 'gpt4'}}
    chat = gpt4
  }
}
