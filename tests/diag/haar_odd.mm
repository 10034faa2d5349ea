// The wavelet transforms take even sizes only: located errors naming the axis
model M {
  forward(x: f32[2, 3, 5, 4, 4], y: f32[2, 6, 6, 4], z: f32[2, 3, 4, 5]) -> loss {
    // expected-error@+1:14 {{haar3d: T = 5 of [2, 3, 5, 4, 4] must be even}}
    a = mean(haar3d(x))
    // expected-error@+1:14 {{ihaar2d: channels 6 of [2, 6, 6, 4] must be a multiple of 4}}
    b = mean(ihaar2d(y))
    // expected-error@+1:14 {{haar2d: W = 5 of [2, 3, 4, 5] must be even}}
    c = mean(haar2d(z))
    return a + b + c
  }
}
