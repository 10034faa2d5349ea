/* Gradient accumulation without a dp collective per micro-batch
 * (docs/accumulation.md), as the backend (codegen/cg_pp.c) and `mmc plan`
 * read it: with micro_batches = M > 1 and dp > 1, which collectives of
 * @train's micro-batch part run only on the step's last micro-batch, and
 * what the runtime sums over the micro-batches instead. */
#ifndef MM_PASSES_ACCUM_H
#define MM_PASSES_ACCUM_H

#include "../ir/ir.h"

typedef struct MbDefer {
  /* per node of f: 0 kept, 1 deferred, 2 + j deferred root j (its operand,
   * roots[j], is summed over the micro-batches) */
  int64_t *node;
  const IrValue **roots;
  int nroots;
  /* the update's operands the micro-batches make (the trainer's `accum`),
   * in first-read order, and per one 1 when a deferred node makes it */
  const IrValue **accum;
  unsigned char *accum_deferred;
  int naccum;
  /* per root: the index of the weight-gradient matmul (linear_grad_w, its
   * bf16 result's cast to f32 folded into it) that makes the root's operand
   * and accumulates it into the root's sum itself, or -1 when the runtime
   * adds the operand into the sum after it (mmrt_mb_defer); per node: 1 + j
   * for the matmul of root j, else 0 */
  int64_t *fused;
  int64_t *maker;
  /* per root: the node index of its collective, and the value whose
   * storage is its sum (memplan keeps it in the grad arena for the whole
   * step: the one sum, docs/accumulation.md "Memory"), or NULL when the
   * runtime allocates the sum: a fused root's operand (the matmul
   * accumulates into it in place; a deferred all_reduce of it then reduces
   * in place too), else an all_reduce root's result (the sum until the last
   * micro-batch adds it into the operand, then the reduction's output); a
   * reduce-scatter of an operand a separate op makes keeps a sum of its own */
  int64_t *rnode;
  const IrValue **home;
  /* per node of f: 1 for a ZeRO-1/2 parameter's all-gather over dp that runs
   * on the step's first micro-batch only (a pipeline stage's micro-batch 0):
   * the parameters do not change between micro-batches, so memplan keeps
   * the gathered copy in the grad arena for the whole step and the later
   * micro-batches read it there (docs/accumulation.md "Gathered once") */
  unsigned char *once;
  int nonce;
} MbDefer;

/* The deferral of @train f (after memplan; up[i]: node i is the update's,
 * ir_update_part, or under a pipeline the pp_facts part U), in a's memory:
 * nroots = 0 (nothing deferred) unless micro_batches > 1 and dp > 1; with
 * dp = 1 and micro_batches > 1 the roots are the weight gradients a fused
 * matmul makes and only the update reads (no collective, node[] all 0:
 * the matmul accumulates into its home, and accum_deferred marks them). A
 * node of the micro-batch is deferred when it is a collective or all_slice
 * whose result only the update and other deferred nodes read and which is
 * not a result of f; a bucket_wait with its bucket. A root is a deferred
 * all_reduce or reduce_scatter over dp whose operand no deferred node makes
 * and only it reads; a collective that would be a root over another axis (a
 * tp reduction before the dp one) is kept. A bucket that would defer in
 * part turns the deferral off. With zero = 1 or 2 (micro_batches > 1,
 * dp > 1) each blocking all-gather over dp of a parameter in the
 * micro-batch is marked `once` (MMC_TEST_GATHER_EVERY=1: none, the
 * control). */
void mb_defer_plan(const IrModule *m, const IrFunc *f, const unsigned char *up, Arena *a,
                   MbDefer *out);

/* Of the deferred roots' operands of @train f (pp = 1): the local elements
 * the weight-gradient matmuls accumulate into their sums themselves, and
 * those a separate add puts there each micro-batch (both 0 when nothing is
 * deferred). */
void mb_sum_elems(const IrModule *m, const IrFunc *f, int64_t *fused, int64_t *added);

/* The bytes a rank's trainer allocates for the micro-batches' sums: per
 * accum tensor that no deferred node makes, and per deferred root's
 * operand without a home (MbDefer.home: that sum is in the grad arena),
 * 4 (elements + 1) (runtime/comm/mmrt_pp.c mmrt_mb_init); 0 when
 * micro_batches <= 1, pp > 1 (pp_rank_memory counts a pipeline's) or f is
 * NULL. */
int64_t mb_accum_bytes(const IrModule *m, const IrFunc *f, int64_t *deferred_bytes);

/* Of the sums of @train f (pp = 1), the bytes of those that live in the
 * grad arena (their homes, 64-byte aligned as memplan places them). */
int64_t mb_home_bytes(const IrModule *m, const IrFunc *f);

/* The deferral of @train f planned by memplan (pp = 1: ir_update_part's
 * update; pp > 1: the pipeline's part U), into *d in a; false when no
 * root is deferred and no gather runs once a step. */
bool mb_defer_of_train(const IrModule *m, const IrFunc *f, Arena *a, MbDefer *d);

#endif
