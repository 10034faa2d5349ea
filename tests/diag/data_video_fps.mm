// video_fps samples each video at F frames a second: a positive number.
model M {
  forward(video: f32[2, 1, 17, 64, 64]) -> loss { return mean(video) }
  data {
    format = clips_video
    // expected-error@+1:17 {{video_fps}}
    video_fps = 0
  }
}
