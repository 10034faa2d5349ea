/* actmem.c: activation memory per stack layer (see actmem.h). */
#include "actmem.h"

#include <stdlib.h>
#include <string.h>

#include "../ir/ir_fused.h"
#include "memplan.h"
#include "pass.h"

typedef struct Range {
  int64_t lo, hi;
} Range;

static int by_lo(const void *a, const void *b) {
  const Range *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Bytes covered by the ranges (sorted in place). */
static int64_t union_bytes(Range *r, int n) {
  qsort(r, (size_t)n, sizeof *r, by_lo);
  int64_t total = 0, lo = 0, hi = -1;
  for (int i = 0; i < n; i++) {
    if (r[i].lo > hi) {
      if (hi > lo) total += hi - lo;
      lo = r[i].lo, hi = r[i].hi;
    } else if (r[i].hi > hi) {
      hi = r[i].hi;
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

static int find_layer(MpLayerAct *out, int n, int group, int layer) {
  for (int i = 0; i < n; i++)
    if (out[i].group == group && out[i].layer == layer) return i;
  return -1;
}

/* Table 2 of Korthikanti et al. 2022 in bytes per layer: the coefficients
 * of sbh split into 16-bit tensors and 1-byte masks (so that the tensors
 * can be scaled to another dtype), plus the 5as/h term's parts (2as²b
 * softmax output, as²b its dropout mask, 2as²b the dropout's output). */
static void korthikanti(MpLayerAct *L, const MmPlan *pl, bool full, bool selective) {
  double s = (double)L->s, b = (double)L->b, h = (double)L->h, a = (double)L->a, t = (double)L->t,
         sbh = s * b * h, as2b = a * s * s * b;
  bool sp = pl->sp && L->t > 1;
  /* 16-bit tensors (bytes at 2 per element) and 1-byte masks, per sbh, and
   * the attention core's as²b tensors and mask */
  double tens, masks, core_t = 4 * as2b, core_m = as2b;
  if (full) {
    L->row = "full", tens = 2 * sbh, masks = 0, core_t = core_m = 0;
  } else if (L->t <= 1) {
    L->row = selective ? "selective" : "none";
    tens = 32 * sbh, masks = 2 * sbh; /* 34 = 32 in tensors + 2 masks */
  } else if (!sp) {
    L->row = selective ? "tp+selective" : "tp";
    tens = (8 + 24 / t) * sbh, masks = 2 * sbh; /* 10 = 8 unsplit tensors + 2 masks */
    core_t /= t, core_m /= t;
  } else {
    L->row = selective ? "tp+sp+selective" : "tp+sp";
    tens = 32 * sbh / t, masks = 2 * sbh / t;
    core_t /= t, core_m /= t;
  }
  if (selective) core_t = core_m = 0;
  L->k16 = tens + masks + core_t + core_m;
  double scale = (double)L->act_dtype_bytes / 2.0;
  L->kscaled = scale * (tens + core_t) + masks + core_m;
}

int mp_layer_acts(const IrModule *m, MpLayerAct *out, int max) {
  const IrFunc *f = ir_module_func((IrModule *)m, "train");
  if (!f) return 0;
  int bwd, upd;
  ir_train_phases(f, &bwd, &upd);
  if (bwd < 0) return 0;
  int n = 0;
  /* the layers, and what their forward holds: attention sizes, dropouts */
  for (int i = 0; i < bwd; i++) {
    const IrNode *nd = f->nodes.items[i];
    if (nd->group < 0) continue;
    int k = find_layer(out, n, nd->group, nd->layer);
    if (k < 0 && n < max) {
      k = n++;
      memset(&out[k], 0, sizeof out[k]);
      out[k].group = nd->group, out[k].layer = nd->layer;
      out[k].act_dtype_bytes = 4;
    }
    if (k < 0) continue;
    if (nd->op == IR_OP_DROPOUT) out[k].dropout++;
    if (nd->op == IR_OP_FUSED) { /* a dropout fused into a loop */
      Arena a;
      arena_init(&a);
      IrFusedProg prog;
      ir_fused_of(nd, &prog, &a);
      for (int q = 0; q < prog.n; q++) out[k].dropout += prog.ins[q].op == IR_OP_DROPOUT;
      arena_free(&a);
    }
    if (nd->op == IR_OP_ATTENTION && !out[k].s && nd->in[0]->shape.rank == 4) {
      const IrShape *q = &nd->in[0]->shape; /* [B, T, heads, head_dim] */
      out[k].b = q->d[0], out[k].s = q->d[1], out[k].a = q->d[2], out[k].h = q->d[2] * q->d[3];
      out[k].t = m->mesh[IR_AX_TP];
      out[k].act_dtype_bytes = ir_dtype_size(nd->in[0]->dtype);
      int block = 0;
      MmRecompute pol = recompute_policy(&m->plan, nd->scope, &block);
      bool full = pol == MM_RECOMPUTE_FULL || (pol == MM_RECOMPUTE_BLOCK && nd->layer < block);
      korthikanti(&out[k], &m->plan, full, pol == MM_RECOMPUTE_SELECTIVE);
    }
  }
  /* the saved values: made by the forward, read by the backward; each to
   * the layer of its first backward reader */
  Range **ranges = calloc((size_t)(n ? n : 1), sizeof *ranges);
  int *nr = calloc((size_t)(n ? n : 1), sizeof *nr);
  static char mark;
  for (int i = 0; i < bwd; i++) ((IrNode *)f->nodes.items[i])->aux = &mark;
  IrValue **seen = calloc((size_t)f->nodes.len * 4 + 1, sizeof *seen);
  int nseen = 0;
  for (int i = bwd; i < f->nodes.len && ranges && nr && seen; i++) {
    const IrNode *nd = f->nodes.items[i];
    int k = nd->group >= 0 ? find_layer(out, n, nd->group, nd->layer) : -1;
    for (int j = 0; j < nd->nin; j++) {
      IrValue *v = nd->in[j];
      if (!v->def || v->def->aux != &mark || !v->mem_planned || v->mem_arena != IR_ROLE_ACT)
        continue;
      bool dup = false;
      for (int q = 0; q < nseen && !dup; q++) dup = seen[q] == v;
      if (dup || nseen >= f->nodes.len * 4) continue;
      seen[nseen++] = v;
      if (k < 0) continue; /* the final norm's, the head's, the loss's */
      Range *r = realloc(ranges[k], sizeof *r * (size_t)(nr[k] + 1));
      if (!r) continue;
      ranges[k] = r;
      r[nr[k]++] = (Range){v->mem_offset, v->mem_offset + mp_value_bytes(m, v)};
      out[k].nvalues++;
    }
  }
  for (int i = 0; i < bwd; i++) ((IrNode *)f->nodes.items[i])->aux = NULL;
  for (int k = 0; k < n; k++) {
    if (ranges && nr && ranges[k]) out[k].bytes = union_bytes(ranges[k], nr[k]);
    if (ranges) free(ranges[k]);
  }
  free(ranges);
  free(nr);
  free(seen);
  return n;
}
