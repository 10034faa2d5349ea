module Tree(d: int) {
  // expected-error@+1:3 {{recursive module: 'Tree' contains itself}}
  left = Tree(d)
  forward(x) { return x }
}
model M {
  t = Tree(4)
  forward(x: f32[2, 2]) -> loss { return mean(x) }
}
