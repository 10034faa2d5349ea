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
} MmrtMbAcc;

/* Sizes come from the descriptor: elems(d) is this rank's element count of
 * accum tensor d. Returns 0, or -1 when out of memory. */
int mmrt_mb_init(MmrtMbAcc *a, const MmrtModelDesc *m,
                 int64_t (*elems)(void *, const MmrtTensorDesc *), void *user);
void mmrt_mb_free(MmrtMbAcc *a);
/* Before a step's first micro-batch, and before each micro-batch. */
void mmrt_mb_begin_step(MmrtMbAcc *a);
void mmrt_mb_begin(void);
/* After micro-batch k's train_step: adds its gradients (in the arenas) and
 * its loss, weighted by its label count (1 when none was reported). */
void mmrt_mb_add(MmrtMbAcc *a, char **arenas, float loss);
/* After the last: the weighted means back into the arenas (where the update
 * reads them); returns the step's loss. */
float mmrt_mb_finish(MmrtMbAcc *a, char **arenas);

#endif
