// A data section on a model whose forward takes an input the text does not fill.
model M {
  forward(x: f32[4, 8]) -> loss { return mean(x) }
  // expected-error@+1:3 {{the forward's input 'x' is filled by no source: the data section's text fills ids and labels (and seg, pos)}}
  data { source = "data_unfilled_input.mm" }
}
