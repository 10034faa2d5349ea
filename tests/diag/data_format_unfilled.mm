// A forward input the declared format does not fill (here: clips_frames fills frames, labels).
model M {
  forward(frames: f32[2, 1, 64, 64], labels: i32[2], mask: f32[2]) -> loss { return mean(frames) }
  // expected-error@+1:10 {{the forward's input 'mask' is filled by no data: format = clips_frames fills frames f32[B, 1, 64, 64], labels i32[B]}}
  data { format = clips_frames }
}
