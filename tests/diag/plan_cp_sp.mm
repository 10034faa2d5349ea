import "gpt2.mm"
// sp with cp is accepted: the sequence is cut into cp chunks and sp cuts
// each chunk over tp (tests/mpi_cp.sh runs tp = 2 + sp + cp = 2 against
// serial); this file checks that no refusal comes back.
model M {
  let B = 2
  let T = 8
  gpt = GPT(vocab = 32, ctx = 8, dim = 16, depth = 1, heads = 4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  parallel {
    tp = 2
    sp = true
    cp = 2
  }
}
