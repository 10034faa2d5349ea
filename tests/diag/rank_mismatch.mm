import "nn.mm"
model M {
  attn = Attention(8, 2)
  forward(x: f32[2, 8]) -> loss {
    // expected-error@+1:22 {{must have rank 3}}
    return mean(attn(x))
  }
}
