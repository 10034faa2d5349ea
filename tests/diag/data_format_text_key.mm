// A text setting (seq_len, tokenizer, pack, ...) under a format that does not take it
// (ir/data_formats.def's DATA_KEYS).
model M {
  forward(video: f32[2, 1, 17, 64, 64]) -> loss { return mean(video) }
  data {
    format = clips_video
    // expected-error@+1:5 {{'seq_len' is not a setting of format = clips_video (it takes source, video_fps and bad_samples)}}
    seq_len = 16
  }
}
