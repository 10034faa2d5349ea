/* mmrt_pp.h: micro-batches (issue 11). With micro_batches = M > 1 a
 * training step runs the descriptor's train_step once per micro-batch (its
 * forward and backward on batch / M samples), sums the tensors the update
 * reads from it (`accum`: the gradients), each micro-batch weighted by its
 * share of the step's labels, and runs update_step once on the sums. The
 * loss is the step's mean: micro-batch k's mean loss L_k, over c_k labels
 * (those not ignored, counted over the ranks of the labels' split axes, as
 * the generated cross entropy reports through mmrt_mb_count), weighs
 * c_k / sum(c); without a cross entropy every micro-batch weighs 1 / M. */
#ifndef MMRT_PP_H
#define MMRT_PP_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_main.h"

typedef struct MmrtMbAcc {
  const MmrtModelDesc *m;
  float **acc;  /* per accum tensor: this rank's sum */
  int64_t *n;   /* its elements */
  double loss;  /* sum of c_k L_k */
  double count; /* sum of c_k */
  int k;        /* micro-batches added */
  /* the dp reductions deferred to the last micro-batch (docs/accumulation.md):
   * per deferred root, its operand's weighted sum over the micro-batches */
  float **dsum;
  int64_t *dn;
  /* the bytes of the sums allocated (beside the arenas: a root whose sum
   * the plan keeps in the grad arena, the descriptor's defer_home, has
   * none of its own) */
  int64_t bytes;
} MmrtMbAcc;

/* Sizes come from the descriptor: elems(d) is this rank's element count of
 * accum tensor d; grad: the grad arena (a deferred root's home).
 * Returns 0, or -1 when out of memory. */
int mmrt_mb_init(MmrtMbAcc *a, const MmrtModelDesc *m, char *grad,
                 int64_t (*elems)(void *, const MmrtTensorDesc *), void *user);
void mmrt_mb_free(MmrtMbAcc *a);
/* Before a step's first micro-batch, and before each micro-batch. */
void mmrt_mb_begin_step(MmrtMbAcc *a);
void mmrt_mb_begin(void);
/* After micro-batch k's train_step: adds its gradients (in the arenas) and
 * its loss, weighted by its label count (1 when none was reported). */
void mmrt_mb_add(MmrtMbAcc *a, char **arenas, float loss);
/* After the last: the weighted means back into the arenas (where the update
 * reads them); returns the step's loss. An accum tensor a deferred
 * reduction makes (the descriptor's accum_deferred) is not summed by
 * mmrt_mb_add: the last micro-batch reduced the weighted sum of all, and
 * mmrt_mb_finish divides it in place. */
float mmrt_mb_finish(MmrtMbAcc *a, char **arenas);
/* The bytes mmrt_mb_init allocates (without a pipeline): 4 (elements + 1)
 * per accum tensor not deferred and per deferred root's operand without a
 * home in the grad arena; `mmc plan`
 * counts the same (passes/accum.h mb_accum_bytes). */
int64_t mmrt_mb_bytes(const MmrtModelDesc *m, int64_t (*elems)(void *, const MmrtTensorDesc *),
                      void *user);

#endif

/* ---- the pipeline (pp > 1) ----
 * A rank holds the parameters and optimizer state of its stages only and
 * runs its own update (pp_update[rank]) on them; stage s of the pp * vpp
 * stages runs on pipeline rank s % pp. A rank walks
 * its list of actions (the descriptor's pp_rank[rank] in pp_actions). A micro-batch takes a
 * slot (its own act and input arenas, sized for its rank's stages; slot 0
 * is the trainer's; the grad arena, the rank's working set, is one for all
 * slots) at its first action on the rank, where its inputs are filled in,
 * and gives it back after its last, its loss kept. After each W part the
 * gradients that stage makes are added to the sums. A rank allocates as many slots as its
 * list holds micro-batches at once (mmrt_pp_slots, the list walked in
 * order: 1F1B's stage r p - r, GPipe's M), reused across micro-batches;
 * a slot is filled again only once the sends from it are done. Before a
 * stage part runs on a slot it receives the values other ranks' stages
 * made for it (blocking MPI_Recv), after it sends the ones it made for
 * other ranks (MPI_Isend); before it runs, the sends whose room the plan
 * lets it reuse are waited for (the descriptor's pp_xfer_how: its slot's,
 * and the working set's), and a transfer summed over the micro-batches
 * (the head's share of a tied embedding's gradient) is added to a sum on
 * its sender instead, its reader finding zeros, the sum sent once a step
 * before the update into the gradient's sum. The backward's seed of micro-batch k is its
 * label count c_k (mmrt_mb_seed). A rank keeps the sums of its stages'
 * gradients only; at the end of the step they go into slot 0, divided by
 * sum(c), a tied parameter's from the rank that makes it to its other
 * holders (tied_grads), and the step's loss is all-reduced over pp. With
 * dp > 1 the gradients' dp reductions run on each stage's last W part only
 * (docs/accumulation.md): the other parts add the local gradients into the
 * stage's sums (mmrt_mb_defer), and a deferred reduction's result joins
 * the sums on the last W only. */
typedef struct MmrtPp MmrtPp;

typedef struct MmrtPpHooks {
  void *user;
  /* micro-batch k's inputs (and lr, step) into the arenas of its slot */
  int (*fill)(void *user, int64_t k, char **arenas);
  /* runs fn on arenas; 0, or 1 after a message */
  int (*run)(void *user, MmrtStepFn fn, char **arenas, const char *what);
  int64_t (*elems)(void *user, const MmrtTensorDesc *d);
  int (*fail)(void *user, const char *msg);
} MmrtPpHooks;

/* NULL after a message through hooks->fail. trace: a Chrome trace JSON
 * file this rank's part of which it writes (NULL: none). */
MmrtPp *mmrt_pp_new(const MmrtModelDesc *m, void *mesh, char **arenas, const MmrtPpHooks *h);
int mmrt_pp_step(MmrtPp *pp, int64_t step, const char *what, float *loss);
void mmrt_pp_free(MmrtPp *pp);
/* The slots pipeline rank `rank` allocates (-1: its list cannot be read),
 * and the bytes it allocates beyond the trainer's arenas: the act and
 * input arenas of every slot but the first, and the gradient sums of its
 * stages (one f32 tensor of elements + 1 per accum tensor a stage of this
 * rank makes; elems as for mmrt_mb_init). */
int mmrt_pp_slots(const MmrtModelDesc *m, int rank);
/* The bytes of gradient sums pp allocated beside the arenas (MmrtMbAcc.bytes). */
int64_t mmrt_pp_sum_bytes(const MmrtPp *pp);
/* The bytes of arena `arena` pipeline rank `rank` allocates for slot 0
 * (first) or for each further slot (the descriptor's pp_rank[rank]: a
 * slot's act arena holds the values that live from one stage part to a
 * later one; the grad arena, the rank's working set, is slot 0's for
 * every slot; param and opt: the whole arena, pp_range cuts it); -1 when
 * the descriptor holds no valid figures. */
int64_t mmrt_pp_arena_bytes(const MmrtModelDesc *m, int rank, int arena, int first);
int64_t mmrt_pp_extra_bytes(const MmrtModelDesc *m, int rank,
                            int64_t (*elems)(void *, const MmrtTensorDesc *), void *user);

/* The evaluation through the pipeline (mmrt_pp_eval.c): one test batch's
 * @forward, stage by stage, on this pp rank's stages (pp_eval_fn[s] for
 * s = rank, rank + pp, ...) in `arenas`: before a stage runs it receives
 * the values other ranks' stages made for it (blocking), after it sends
 * the ones it made for other ranks; the sends are waited for before it
 * returns (the next batch overwrites them). Only the parameters the rank
 * holds are read. The loss and logits are on the last stage's rank; with
 * share, broadcast from it to every pp rank. 0, or 1 after hooks->fail. */
int mmrt_pp_eval(const MmrtModelDesc *m, void *mesh, char **arenas, const MmrtPpHooks *h, int share,
                 const char *what);
/* Whether this rank runs the last stage (its evaluation has the metrics). */
int mmrt_pp_eval_last(const MmrtModelDesc *m, const void *mesh);

/* --trace: mmrt_trace.h */
