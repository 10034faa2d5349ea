/* support/ring_ws.h: the workspace a ring attention kernel (runtime/mmrt_ring.c)
 * needs, in floats, so that the memory plan (passes/memplan.c) gives it a
 * piece of the activation arena and the kernel allocates nothing.
 * B, T, H, KVH, D: this rank's operand shape (T its rows); P = cp; U the
 * Ulysses degree of USP (1: a plain ring). The ring runs over R = P / U
 * groups on U T rows of H / U heads (and KVH / U key/value heads), so its
 * blocks have the sizes of this rank's operands:
 *   forward:  the K/V block held and the next (4 nk) + a block's output
 *             and log-sum-exp (nq + nl);
 *   backward: the K/V blocks and their travelling dK/dV (8 nk) + room
 *             for a chunk's log-sum-exp (nl);
 *   USP adds the head-split copies and the all-to-all buffers: forward
 *   q, out, send, receive (4 nq) and k, v (2 nk); backward q, out, dout, dq
 *   and the buffers (6 nq) and k, v, dk, dv (4 nk).
 * nq = B T H D, nk = B T KVH D, nl = B H T. */
#ifndef MM_SUPPORT_RING_WS_H
#define MM_SUPPORT_RING_WS_H
#include <stdint.h>

static inline int64_t mmrt_ring_ws_floats(int backward, int64_t B, int64_t T, int64_t H,
                                          int64_t KVH, int64_t D, int64_t P, int64_t U) {
  if (U < 1) U = 1;
  int64_t R = P / U, nq = B * T * H * D, nk = B * T * KVH * D, nl = B * H * T, n = 0;
  if (R > 1) n += backward ? 8 * nk + nl : 4 * nk + nq + nl;
  if (U > 1) n += backward ? 6 * nq + 4 * nk : 4 * nq + 2 * nk;
  return n;
}
#endif
