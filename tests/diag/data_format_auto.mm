// format = auto (the trainer tries its feeders, as without a data section) takes no other setting.
model M {
  forward(pixels: f32[2, 1, 28, 28], labels: i32[2]) -> loss { return mean(pixels) }
  data {
    format = auto
    // expected-error@+1:5 {{'source' under format = auto: auto is a model's data found by trying the trainer's feeders, as without a data section, and takes no other setting (name a format: text, fmnist_classify, fmnist_pixels, fmnist_captions, clips_video, clips_frames, t2v_diffusion or conversation)}}
    source = "data_format_auto.mm"
  }
}
