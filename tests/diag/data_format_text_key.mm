// A text setting (seq_len, tokenizer, pack, ...) under a format that is not text.
model M {
  forward(video: f32[2, 1, 17, 64, 64]) -> loss { return mean(video) }
  data {
    format = clips_video
    // expected-error@+1:5 {{'seq_len' is a setting of text data, not of format = clips_video}}
    seq_len = 16
  }
}
