/* Activation memory per stack layer, from a planned module (after
 * memplan), beside Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models", Table 2).
 *
 * mmc's figure is measured on the IR: the bytes, on one rank, of the values
 * the forward of @train makes and the backward reads (after recompute, so
 * clones the backward makes itself do not count), each attributed to the
 * layer of its first backward reader, their buffers as memplan placed them
 * (a view or an in-place result shares its operand's bytes: the union of
 * the byte ranges is counted). It is what a layer holds from its forward to
 * its backward.
 *
 * Korthikanti's figure is the table's row for the plan (none, tp, tp + sp,
 * tp + selective, tp + sp + selective, full; block N: full for the first N
 * layers) at the layer's s (sequence), b (batch), h (hidden), a (heads)
 * and t (tp), read off its attention op: 16-bit activations and 1-byte
 * dropout masks, and the same with the tensors at mmc's activation dtype
 * (the masks stay 1 byte). The accountings differ, by design (see
 * docs/design/backend.md "Activation memory per layer"): mmc stores no
 * dropout mask (a mask is a function of its seed and the element, made
 * again in the backward), its attention is flash-style (no s x s tensor:
 * the backward recomputes scores and softmax from q, k, v and the
 * log-sum-exp, which it keeps: a s b floats), its norms keep mean and rstd
 * (2 s b floats each), and its selective recompute also drops the
 * attention output (the out projection's input), which the backward
 * recomputes with the core. */
#ifndef MM_PASSES_ACTMEM_H
#define MM_PASSES_ACTMEM_H

#include <stdbool.h>
#include <stdint.h>

#include "../ir/settings.h"
#include "../ir/ir.h"

typedef struct MpLayerAct {
  int group, layer;
  int64_t bytes;   /* mmc: the layer's saved values on one rank */
  int nvalues;     /* how many values (before sharing buffers) */
  int64_t dropout; /* dropout ops in the layer's forward (their masks are not stored) */
  /* Korthikanti et al. Table 2 (0 when the layer has no attention op) */
  int64_t s, b, h, a, t;
  const char *row;     /* "none", "tp", "tp+sp", "tp+selective", "tp+sp+selective", "full" */
  double k16;          /* the row in bytes: 16-bit activations, 1-byte masks */
  double kscaled;      /* the tensors at the activation dtype's size, the masks 1 byte */
  int act_dtype_bytes; /* the activation dtype's size (4: f32) */
} MpLayerAct;

/* The layers of m's @train (up to max), in group then layer order; returns
 * how many (0: no @train or no stack layer). */
int mp_layer_acts(const IrModule *m, MpLayerAct *out, int max);

/* The recompute policy of a node of module instance `scope` under plan pl:
 * the first per-sub-model rule whose instance holds it ("vision=full"),
 * else the plan's; *block is N of block N (passes/recompute.c). */
MmRecompute recompute_policy(const MmPlan *pl, const char *scope, int *block);

#endif
