import "gpt2.mm"
// A narrow GPT on a large batch (tests/memory_measured.sh): under cp = 2
// ring the ring attention's workspace (support/ring_ws.h: K/V and
// dK/dV blocks in flight) is about a tenth of what a rank holds with the
// data set, so leaving it out of the plan shows in the measurement.
model GPTRingMem {
  let B = 128
  let T = 128
  gpt = GPT(vocab = 256, ctx = 128, dim = 32, depth = 1, heads = 2)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
}
