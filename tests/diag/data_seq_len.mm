// The data section's seq_len is the ids input's T (its source: this file, which exists).
import "gpt2.mm"
model M {
  gpt = GPT(vocab = 16, ctx = 8, dim = 8, depth = 1, heads = 2)
  forward(ids: i32[2, 8], labels: i32[2, 8]) -> loss { return gpt(ids, labels) }
  // expected-error@+1:38 {{seq_len = 4, but the forward's ids hold 8 tokens a row (their second dimension T)}}
  data { source = "data_seq_len.mm"; seq_len = 4 }
}
