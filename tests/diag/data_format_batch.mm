// Every input a format fills has the batch B first: here frames 2 rows, labels 3.
model M {
  forward(frames: f32[2, 1, 64, 64], labels: i32[3]) -> loss { return mean(frames) }
  // expected-error@+1:10 {{format = clips_frames fills a batch of B rows of each input, but the forward's frames has 2 rows and its labels 3}}
  data { format = clips_frames }
}
