// causal_pad takes [B, C, T, ...] and keeps at most the padded frames
model M {
  forward(x: f32[1, 2, 3, 4, 4], y: f32[2, 4]) -> loss {
    // expected-error@+1:14 {{causal_pad: needs x [B, C, T, ...] and 0 <= frames, 0 <= keep <= frames + T; got [1, 2, 3, 4, 4], frames = 1, keep = 5}}
    a = mean(causal_pad(x, 1, keep = 5))
    return a
  }
}
