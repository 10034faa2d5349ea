/* The static memory plan (the `memplan` pass) and what it tells the rest of
 * the backend.
 *
 * Storage is five arenas, one per role: param, grad, opt, act, input (their
 * IrRole names). Params and optimizer state have fixed offsets for the whole
 * run; inputs have one slot per name, shared by every function; the act
 * arena (activations, saved values, kernel scratch) and the grad arena are
 * planned per function over live ranges and sized by the largest function.
 * Every value ends up annotated with mem(arena, offset) and every node that
 * needs kernel scratch with ws(offset, bytes); the arena sizes follow from
 * those annotations alone, so `mmc plan`, codegen and the trainer agree on
 * them byte for byte. */
#ifndef MM_PASSES_MEMPLAN_H
#define MM_PASSES_MEMPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "../ir/ir.h"

#define MP_ALIGN 64 /* every buffer starts on a cache line (and AVX-512 vector) */

static inline int64_t mp_align(int64_t n) {
  return (n + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
}

/* Bytes one rank holds of a value (local numel * element size, the
 * placement's splits applied), unaligned. The plan is per rank: every rank
 * of the mesh runs the same program on same-sized pieces. */
int64_t mp_value_bytes(const IrModule *m, const IrValue *v);

/* Scratch the kernel of node n needs beyond its results (0 for most ops):
 * the saved statistics of a norm, attention or cross entropy whose node has
 * no result for them. The layout inside is the kernel binding's business. */
int64_t mp_workspace_bytes(const IrModule *m, const IrNode *n);
/* The part of it a ring attention (or its gradient) under cp uses for its
 * K/V (and dK/dV) blocks in flight and USP's head-split copies
 * (support/ring_ws.h), after the saved statistics; 0 for other nodes. */
int64_t mp_ring_ws_bytes(const IrModule *m, const IrNode *n);

/* When node n's result shares its first operand's storage (a reshape, a
 * contiguous slice), the byte offset of the result in that storage; else -1. */
int64_t mp_view_offset(const IrModule *m, const IrNode *n);

typedef struct MpFuncStats {
  const char *name;
  int64_t arena[IR_ROLE_COUNT]; /* bytes this function needs per planned arena (act, grad) */
  int64_t live_peak;    /* act: the largest sum of live buffers at one node (a lower bound) */
  int nbuffers;         /* act and grad buffers planned */
  int ninplace, nviews; /* results sharing an operand's storage */
} MpFuncStats;

#define MP_MAX_FUNCS 16

typedef struct MpSummary {
  int64_t arena[IR_ROLE_COUNT]; /* bytes per arena, by role */
  int64_t total;                /* the peak: everything is allocated before the first step */
  int nfuncs;
  MpFuncStats funcs[MP_MAX_FUNCS];
} MpSummary;

/* Sizes from a planned module's annotations, per-function statistics from
 * the same liveness analysis the pass runs. False (with a message in err)
 * when the module has no plan. */
bool mp_summarize(const IrModule *m, MpSummary *s, char *err, size_t errlen);

/* A pipeline's act and grad arenas per rank (pp > 1; memplan.c pp_place):
 * the act arena is a micro-batch's slot of @train's values that live from
 * one stage part to a later one (a forward's values its backward reads, the
 * transfers; what I makes for W only under ZB-H1, whose W runs later, or on
 * a rank holding one micro-batch at a time) and kernel scratch, allocated
 * once per micro-batch in flight; the grad arena the rank's working set
 * (values one part makes and reads alone, the parameters' gradients its W
 * parts make, the update's values) and, under dp with micro-batches, the
 * deferred reductions' gradient sums, kept for the whole step (memplan.c
 * sums_of), allocated once. act, grad: the bytes
 * rank r's stage parts and update touch (their extent); act0, grad0: slot
 * 0's, which the other functions (@forward) share. By the stages `pa`
 * (NULL: pp_assign's). False without one. */
typedef struct MpPpArenas {
  int64_t act, grad, act0, grad0;
} MpPpArenas;
struct PpAssign;
bool mp_pp_arenas(const IrModule *m, const struct PpAssign *pa, MpPpArenas *out, int nout);

#endif
