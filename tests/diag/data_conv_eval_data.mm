// The evaluation file of a conversation model is a file beside the .mm file.
model M {
  forward(pixels: f32[2, 1, 3, 28, 28], text: i32[2, 8], labels: i32[2, 8]) -> loss { return mean(pixels) }
  data {
    format = conversation
    // expected-error@+1:5 {{eval_data: file '}}
    eval_data = "no_such_eval.jsonl"
  }
}
