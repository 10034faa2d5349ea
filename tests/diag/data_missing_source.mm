// The data section's source must exist (relative to this file's folder).
import "gpt2.mm"
model M {
  gpt = GPT(vocab = 16, ctx = 8, dim = 8, depth = 1, heads = 2)
  forward(ids: i32[2, 8], labels: i32[2, 8]) -> loss { return gpt(ids, labels) }
  // expected-error@+1:10 {{not found (expected a .jsonl file or an indexed PREFIX with PREFIX.bin)}}
  data { source = "no_such_corpus.jsonl" }
}
