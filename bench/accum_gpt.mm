// bench/accum.sh's GPT-2-small-ish model: GPT-2's blocks at dim 512 and
// depth 6 (19M parameters), byte vocabulary, 64 tokens a row.
import "gpt2.mm"

model GPTMid {
  let B = 16
  let T = 64
  gpt = GPT(vocab = 256, ctx = 64, dim = 512, depth = 6, heads = 8)

  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }

  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)
    schedule  = constant
  }
}
