import "gpt2.mm"
// A small GPT on a sequence of 2,048 tokens (bench/cp.sh): the pixel task gives rows of
// 512 bytes, repeated 4 times (the attention sees all 2,048 positions).
model GPTLong {
  let B = 2
  let T = 512
  gpt = GPT(vocab = 256, ctx = 2048, dim = 128, depth = 2, heads = 8)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {
    return gpt(concat([ids, ids, ids, ids], axis = 1), concat([labels, labels, labels, labels], axis = 1))
  }
}
