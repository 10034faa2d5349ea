// A data section names its format; auto is only what a model without one gets.
model M {
  forward(pixels: f32[2, 1, 28, 28], labels: i32[2]) -> loss { return mean(pixels) }
  // expected-error@+1:10 {{format = auto is what a model without a data section gets (the trainer tries its feeders); a data section names its format (text, fmnist_classify, fmnist_pixels, fmnist_captions, clips_video, clips_frames or t2v_diffusion)}}
  data { format = auto }
}
