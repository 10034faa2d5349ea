/* The `memplan` pass: a static memory plan, so that the trainer allocates
 * every byte it will use before the first step (see memplan.h).
 *
 * Per function, in node order (the schedule codegen emits):
 *   1. live ranges: a value lives from its node to its last use; function
 *      results, and in @forward the logits of the last cross_entropy (read
 *      by the trainer for accuracy), live to the end. The saved values of
 *      @train simply have long ranges.
 *   2. storage sharing (ggml-alloc): a reshape or a contiguous slice is a
 *      view of its operand; an elementwise result takes over an operand of
 *      the same size whose storage dies at that node (in place).
 *   3. offsets: decreasing-size best fit over the live ranges (XLA's
 *      GlobalDecreasingSizeBestFitHeap), one arena per role; the plan is
 *      then checked: no two buffers live at once may overlap.
 * Params and optimizer state get fixed offsets in declaration order, inputs
 * one slot per name shared by all functions. Under dp with micro-batches
 * the deferred dp reductions' gradient sums and results live in the grad
 * arena for all of @train (sums_of; docs/accumulation.md "Memory"). Arena
 * sizes are the largest any function needs (the act arena is shared by
 * @forward and @train). */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

#include "../support/ring_ws.h"
#include "accum.h"
#include "pp_sched.h"
#include "pp_stage.h"
#include "pass.h"

int64_t mp_value_bytes(const IrModule *m, const IrValue *v) {
  return ir_local_numel(m, v) * ir_dtype_size(v->dtype);
}

static IrShape local(const IrModule *m, const IrValue *v) {
  IrShape s;
  ir_local_shape(m, v->pl, &v->shape, &s);
  return s;
}

/* An op flagged OPF_SCRATCH_OUTS (ops.def) may leave off its results after
 * the first; its kernel still writes them, into scratch of their size: the
 * types the op's shape rule gives them on this rank's operand shapes. */
int64_t mp_ring_ws_bytes(const IrModule *m, const IrNode *n) {
  if ((n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_GRAD) ||
      !ir_attrs_has(&n->attrs, IR_ATTR_RING) || !n->attrs.v[IR_ATTR_RING].i)
    return 0;
  int qi = n->op == IR_OP_ATTENTION ? 0 : 1;
  IrShape q = local(m, n->in[qi]), k = local(m, n->in[qi + 1]);
  int U = m->plan.cp_ulysses > 1 ? m->plan.cp_ulysses : 1;
  return 4 * mmrt_ring_ws_floats(qi, q.d[0], q.d[1], q.d[2], k.d[2], q.d[3], m->mesh[IR_AX_CP], U);
}

static int64_t scratch_outs_bytes(const IrModule *m, const IrNode *n) {
  const IrOpInfo *op = &ir_ops[n->op];
  if (!(op->flags & OPF_SCRATCH_OUTS) || n->nout >= op->nout || n->nin < 1) return 0;
  IrShape sh[64];
  char err[256] = "";
  IrShapeCtx cx = {.node = n, .nin = n->nin, .err = err, .errlen = sizeof err, .bad_operand = -1};
  for (int i = 0; i < n->nin; i++) {
    sh[i] = local(m, n->in[i]);
    cx.in_shape[i] = &sh[i];
    cx.in_dtype[i] = n->in[i]->dtype;
  }
  if (!op->shape(&cx))
    mm_die(__FILE__, __LINE__, "memplan: %s on this rank's shapes: %s", op->name, err);
  int64_t bytes = 0;
  for (int j = n->nout; j < op->nout; j++)
    bytes += ir_dtype_size(cx.out_dtype[j]) * ir_numel(&cx.out_shape[j]);
  return bytes;
}

int64_t mp_workspace_bytes(const IrModule *m, const IrNode *n) {
  return scratch_outs_bytes(m, n) + mp_ring_ws_bytes(m, n);
}

int64_t mp_view_offset(const IrModule *m, const IrNode *n) {
  if (n->nin < 1 || n->nout != 1) return -1;
  const IrValue *v = n->in[0];
  if (n->op == IR_OP_RESHAPE) return 0;
  if (n->op ==
      IR_OP_SLICE) { /* contiguous: step 1 and only size-1 dims before the axis, not split */
    IrShape x = local(m, v);
    int axis = (int)n->attrs.v[IR_ATTR_AXIS].i;
    int64_t step = ir_attrs_has(&n->attrs, IR_ATTR_STEP) ? n->attrs.v[IR_ATTR_STEP].i : 1;
    if (step != 1 || axis < 0 || axis >= x.rank || x.d[axis] != v->shape.d[axis]) return -1;
    for (int d = 0; d < axis; d++)
      if (x.d[d] != 1) return -1;
    int64_t inner = 1;
    for (int d = axis + 1; d < x.rank; d++) inner *= x.d[d];
    int64_t start = n->attrs.v[IR_ATTR_START].i;
    if (start < 0) start += x.d[axis];
    if (start < 0 || start >= x.d[axis]) return -1;
    return start * inner * ir_dtype_size(v->dtype);
  }
  return -1;
}

/* ---- one function's buffers ---- */

typedef struct Buf {
  IrRole arena;
  int64_t size;   /* aligned */
  int start, end; /* node positions, inclusive */
  int64_t offset;
  uint64_t ranks; /* the pipeline ranks that touch it (all: no pipeline) */
  int *rr;        /* a transfer's: per pp rank r its own range [rr[2r], rr[2r + 1]]
                   * within [start, end] (NULL: [start, end] on every rank) */
  bool keep;      /* a gradient sum: in the grad arena for the whole step */
  int twin;       /* a transfer's send room on its makers (pp_send_room), or -1 */
} Buf;

/* Where a value lives: in buffer `buf` of the function at byte `off`, or
 * (buf < 0) at a fixed place of a module-wide arena. */
typedef struct Loc {
  int buf;
  IrRole arena;
  int64_t off;
} Loc;

typedef struct FPlan {
  Arena *a;
  const IrFunc *f;
  Buf *bufs;
  int nbufs, cap;
  IrMap loc;   /* IrValue* -> p: Loc* */
  IrMap last;  /* IrValue* -> i: last use */
  int *ws_buf; /* per node: its scratch buffer or -1 */
  int ninplace, nviews;
  int64_t live_peak;
} FPlan;

static IrRole arena_of(IrRole role) {
  return role == IR_ROLE_GRAD || role == IR_ROLE_OPT || role == IR_ROLE_PARAM ||
                 role == IR_ROLE_INPUT
             ? role
             : IR_ROLE_ACT;
}

static int new_buf(FPlan *p, IrRole arena, int64_t bytes, int start, int end) {
  if (p->nbufs == p->cap) {
    int ncap = p->cap ? p->cap * 2 : 64;
    p->bufs =
        arena_realloc(p->a, p->bufs, sizeof(Buf) * (size_t)p->cap, sizeof(Buf) * (size_t)ncap);
    p->cap = ncap;
  }
  p->bufs[p->nbufs] =
      (Buf){arena, mp_align(bytes > 0 ? bytes : 1), start, end, -1, ~(uint64_t)0, NULL, false, -1};
  return p->nbufs++;
}

static Loc *loc_of(FPlan *p, const IrValue *v) {
  IrMapSlot *s = ir_map_get(&p->loc, v);
  return s ? s->p : NULL;
}

static void set_loc(FPlan *p, const IrValue *v, Loc l) {
  Loc *x = ARENA_NEW(p->a, Loc);
  *x = l;
  ir_map_put(&p->loc, v)->p = x;
}

static int last_use(FPlan *p, const IrValue *v, int dflt) {
  IrMapSlot *s = ir_map_get(&p->last, v);
  return s ? (int)s->i : dflt;
}

/* The logits of the last cross_entropy of f, which the trainer reads after
 * an evaluation step (NULL when there is none). */
static const IrValue *eval_logits(const IrFunc *f) {
  for (int i = f->nodes.len - 1; i >= 0; i--) {
    const IrNode *n = f->nodes.items[i];
    if (n->op == IR_OP_CROSS_ENTROPY) return n->in[0];
  }
  return NULL;
}

/* The gradient sums of @train's deferred dp reductions (passes/accum.h,
 * docs/accumulation.md "Memory"), into keep (value -> 1: its buffer lives
 * in the grad arena for the whole step, over the micro-batches and the
 * stage parts of a pipeline, to the update) and alias (value -> p: the
 * value it shares its buffer with): each root's home, and every deferred
 * node's result (the reduced gradients the update reads after the last
 * micro-batch), and each parameter gathered once a step (MbDefer.once: one
 * copy a rank, not one a micro-batch in flight); an all_reduce of a fused
 * root's operand reduces it in place. False when nothing is deferred. */
static bool sums_of(const IrModule *m, const IrFunc *f, Arena *a, IrMap *keep, IrMap *alias) {
  MbDefer d;
  ir_map_init(keep, a, false);
  ir_map_init(alias, a, false);
  if (!mb_defer_of_train(m, f, a, &d)) return false;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int j = 0; (d.node[i] || d.once[i]) && j < n->nout; j++) ir_map_put(keep, n->out[j]);
  }
  for (int j = 0; j < d.nroots; j++) {
    if (!d.home[j]) continue;
    ir_map_put(keep, d.home[j]);
    const IrNode *r = f->nodes.items[d.rnode[j]];
    if (d.home[j] == d.roots[j] && r->op == IR_OP_ALL_REDUCE)
      ir_map_put(alias, r->out[0])->p = (void *)d.roots[j];
  }
  return true;
}

/* Steps 1 and 2: buffers with live ranges, views and in-place sharing.
 * `fixed(v)` gives the place of a param or input. sums: plan @train's
 * gradient sums (sums_of). */
static void analyze(FPlan *p, const IrModule *m, const IrFunc *f, Arena *a, bool sums) {
  memset(p, 0, sizeof *p);
  p->a = a;
  p->f = f;
  ir_map_init(&p->loc, a, false);
  ir_map_init(&p->last, a, false);
  int nn = f->nodes.len;
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) ir_map_put(&p->last, n->in[k])->i = i;
  }
  for (int i = 0; i < f->results.len; i++) ir_map_put(&p->last, f->results.items[i])->i = nn;
  if (strcmp(f->name, "forward") == 0 && eval_logits(f))
    ir_map_put(&p->last, eval_logits(f))->i = nn;

  for (int i = 0; i < m->params.len; i++) {
    const IrValue *v = m->params.items[i];
    set_loc(p, v, (Loc){-1, arena_of(v->role), v->mem_offset});
  }
  for (int i = 0; i < f->inputs.len; i++) {
    const IrValue *v = f->inputs.items[i];
    set_loc(p, v, (Loc){-1, arena_of(v->role), v->mem_offset});
  }

  IrMap keep, alias;
  if (!sums || !sums_of(m, f, a, &keep, &alias)) {
    ir_map_init(&keep, a, false);
    ir_map_init(&alias, a, false);
  }
  p->ws_buf = ARENA_ARRAY(a, int, nn ? nn : 1);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    int64_t ws = mp_workspace_bytes(m, n);
    p->ws_buf[i] = ws > 0 ? new_buf(p, IR_ROLE_ACT, ws, i, i) : -1;

    int64_t view = mp_view_offset(m, n);
    if (view >= 0) {
      const Loc *src = loc_of(p, n->in[0]);
      IrValue *v = n->out[0];
      /* of a kept buffer too (a parameter gathered once a step, its real
       * rows): the view lives as long */
      if (src && (src->buf < 0 || p->bufs[src->buf].arena == arena_of(v->role) ||
                  p->bufs[src->buf].keep)) {
        set_loc(p, v, (Loc){src->buf, src->arena, src->off + view});
        if (src->buf >= 0) {
          Buf *b = &p->bufs[src->buf];
          int lu = last_use(p, v, i);
          if (lu > b->end) b->end = lu;
        }
        p->nviews++;
        continue;
      }
    }
    bool elementwise = (ir_ops[n->op].flags & OPF_ELEMWISE) && n->nout == 1;
    for (int j = 0; j < n->nout; j++) {
      IrValue *v = n->out[j];
      IrRole ar = arena_of(v->role);
      int64_t bytes = mp_value_bytes(m, v);
      int lu = last_use(p, v, i);
      int reuse = -1;
      IrMapSlot *al = ir_map_get(&alias, v);
      const Loc *home = al ? loc_of(p, al->p) : NULL;
      if (home && home->buf >= 0 && p->bufs[home->buf].size == mp_align(bytes)) {
        set_loc(p, v, *home); /* reduced in place, in its sum */
        p->ninplace++;
        continue;
      }
      if (ir_map_get(&keep, v)) { /* a sum: the whole step, the grad arena */
        int b = new_buf(p, IR_ROLE_GRAD, bytes, 0, nn);
        p->bufs[b].keep = true;
        set_loc(p, v, (Loc){b, IR_ROLE_GRAD, 0});
        continue;
      }
      for (int k = 0; elementwise && k < n->nin && reuse < 0; k++) {
        const IrValue *x = n->in[k];
        const Loc *src = loc_of(p, x);
        if (!src || src->buf < 0 || src->off != 0) continue;
        const Buf *b = &p->bufs[src->buf];
        if (b->arena == ar && b->end <= i && b->size == mp_align(bytes) &&
            mp_value_bytes(m, x) == bytes && ir_local_numel(m, x) == ir_local_numel(m, v))
          reuse = src->buf;
        /* every other operand in that storage must be read at the same
         * element (a view at another offset would be overwritten first) */
        for (int q = 0; reuse >= 0 && q < n->nin; q++) {
          const Loc *o = loc_of(p, n->in[q]);
          if (o && o->buf == reuse && (o->off != 0 || mp_value_bytes(m, n->in[q]) != bytes))
            reuse = -1;
        }
      }
      if (reuse >= 0) {
        Buf *b = &p->bufs[reuse];
        if (lu > b->end) b->end = lu;
        set_loc(p, v, (Loc){reuse, ar, 0});
        p->ninplace++;
      } else {
        set_loc(p, v, (Loc){new_buf(p, ar, bytes, i, lu), ar, 0});
      }
    }
  }
  /* the act bytes live at each node: a lower bound for any plan */
  int64_t *delta = ARENA_ARRAY(a, int64_t, nn + 2), live = 0;
  for (int b = 0; b < p->nbufs; b++)
    if (p->bufs[b].arena == IR_ROLE_ACT) {
      delta[p->bufs[b].start] += p->bufs[b].size;
      delta[p->bufs[b].end + 1] -= p->bufs[b].size;
    }
  for (int t = 0; t <= nn; t++) {
    live += delta[t];
    if (live > p->live_peak) p->live_peak = live;
  }
}

static const Buf *sort_bufs;
static int by_size(const void *a, const void *b) {
  const Buf *x = &sort_bufs[*(const int *)a], *y = &sort_bufs[*(const int *)b];
  /* under a pipeline, buffers several ranks touch first (the transfers, at
   * one offset on both ranks; the update's values all ranks compute):
   * placed among one rank's own they would push the other ranks' extents
   * up by what the first holds */
  bool mx = x->ranks != ~(uint64_t)0 && (x->ranks & (x->ranks - 1)),
       my = y->ranks != ~(uint64_t)0 && (y->ranks & (y->ranks - 1));
  if (mx != my) return mx ? -1 : 1;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

typedef struct Span {
  int64_t lo, hi;
} Span;
static int by_lo(const void *a, const void *b) {
  const Span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Two buffers conflict when both live at one node on one rank (under a
 * pipeline each rank has its own memory: another rank's buffers do not
 * count). */
static bool overlap_time(const Buf *a, const Buf *b) {
  uint64_t both = a->ranks & b->ranks;
  if (!both || a->start > b->end || b->start > a->end) return false;
  if (!a->rr && !b->rr) return true;
  for (int r = 0; both; r++, both >>= 1) {
    if (!(both & 1)) continue;
    int as = a->rr ? a->rr[2 * r] : a->start, ae = a->rr ? a->rr[2 * r + 1] : a->end;
    int bs = b->rr ? b->rr[2 * r] : b->start, be = b->rr ? b->rr[2 * r + 1] : b->end;
    if (as <= be && bs <= ae) return true;
  }
  return false;
}

/* Step 3: offsets of the buffers of one arena by decreasing-size best fit;
 * returns the arena's size. */
static int64_t assign(FPlan *p, IrRole arena, Arena *a) {
  int *order = ARENA_ARRAY(a, int, p->nbufs + 1), n = 0;
  for (int b = 0; b < p->nbufs; b++)
    if (p->bufs[b].arena == arena) order[n++] = b;
  sort_bufs = p->bufs;
  qsort(order, (size_t)n, sizeof *order, by_size);
  Span *busy = ARENA_ARRAY(a, Span, n + 1);
  int64_t top_all = 0;
  for (int k = 0; k < n; k++) {
    Buf *b = &p->bufs[order[k]];
    int nb = 0;
    for (int j = 0; j < k; j++) {
      const Buf *o = &p->bufs[order[j]];
      if (overlap_time(b, o)) busy[nb++] = (Span){o->offset, o->offset + o->size};
    }
    qsort(busy, (size_t)nb, sizeof *busy, by_lo);
    int64_t cur = 0, best = -1, best_gap = 0;
    for (int j = 0; j < nb; j++) {
      if (busy[j].lo > cur) {
        int64_t gap = busy[j].lo - cur;
        if (gap >= b->size && (best < 0 || gap < best_gap)) best = cur, best_gap = gap;
      }
      if (busy[j].hi > cur) cur = busy[j].hi;
    }
    b->offset = best >= 0 ? best : cur;
    if (b->offset + b->size > top_all) top_all = b->offset + b->size;
  }
  return top_all;
}

/* The invariant the whole plan rests on. */
static bool check_plan(const FPlan *p, char *err, size_t errlen) {
  for (int i = 0; i < p->nbufs; i++)
    for (int j = i + 1; j < p->nbufs; j++) {
      const Buf *x = &p->bufs[i], *y = &p->bufs[j];
      if (x->arena != y->arena || !overlap_time(x, y)) continue;
      if (x->offset < y->offset + y->size && y->offset < x->offset + x->size) {
        snprintf(err, errlen, "@%s: buffers %d and %d of arena %s overlap while both live",
                 p->f->name, i, j, ir_role_name(x->arena));
        return false;
      }
    }
  return true;
}

static const IrRole planned_arenas[] = {IR_ROLE_ACT, IR_ROLE_GRAD, IR_ROLE_OPT};

/* An order of the sets of pipeline ranks (masks[0..n)) in which the sets
 * each rank is in follow one another: for each order of the ranks, the
 * sets sorted by their first and last rank in it, kept if it works (GPT-2's
 * {1} {2} {0} {0, 3} {3}); false when none does (then the plan counts the
 * sets between a rank's as its bytes too). */
static bool rank_contiguous(const uint64_t *masks, const int *order, int n, int P) {
  for (int r = 0; r < P; r++) {
    int first = -1, last = -1, count = 0;
    for (int j = 0; j < n; j++)
      if (masks[order[j]] >> r & 1) {
        if (first < 0) first = j;
        last = j, count++;
      }
    if (count && last - first + 1 != count) return false;
  }
  return true;
}

static bool try_ranks(const uint64_t *masks, int n, int P, const int *perm, int *order) {
  int pos[64];
  for (int k = 0; k < P; k++) pos[perm[k]] = k;
  long key[256];
  for (int j = 0; j < n; j++) {
    int lo = P, hi = -1;
    for (int r = 0; r < P; r++)
      if (masks[j] >> r & 1) lo = pos[r] < lo ? pos[r] : lo, hi = pos[r] > hi ? pos[r] : hi;
    key[j] = (long)lo * 128 + hi;
    order[j] = j;
  }
  for (int j = 1; j < n; j++) /* insertion sort by key */
    for (int k = j; k > 0 && key[order[k]] < key[order[k - 1]]; k--) {
      int t = order[k];
      order[k] = order[k - 1], order[k - 1] = t;
    }
  return rank_contiguous(masks, order, n, P);
}

static bool order_rank_sets(const uint64_t *masks, int n, int P, int *order) {
  int perm[64], c[64] = {0};
  for (int k = 0; k < P; k++) perm[k] = k;
  if (try_ranks(masks, n, P, perm, order)) return true;
  if (P > 8) {
    /* too many orders to try them all: a tied first and last stage (1 ..
     * P - 2, 0, P - 1), the rotations, and rank 0 with one other rank
     * moved next to it (a tied embedding's {0, P - 1}) */
    for (int k = 0; k < P - 2; k++) perm[k] = k + 1;
    perm[P - 2] = 0, perm[P - 1] = P - 1;
    if (try_ranks(masks, n, P, perm, order)) return true;
    for (int r = 1; r < P; r++) {
      for (int k = 0; k < P; k++) perm[k] = (k + r) % P;
      if (try_ranks(masks, n, P, perm, order)) return true;
      int j = 0;
      perm[j++] = 0, perm[j++] = r;
      for (int k = 1; k < P; k++)
        if (k != r) perm[j++] = k;
      if (try_ranks(masks, n, P, perm, order)) return true;
    }
    for (int k = 0; k < P; k++) perm[k] = k;
    try_ranks(masks, n, P, perm, order); /* the identity's order, as before */
    return false;
  }
  for (int i = 1; i < P;) { /* Heap's algorithm over the orders of the ranks */
    if (c[i] < i) {
      int j = i % 2 ? c[i] : 0, t = perm[j];
      perm[j] = perm[i], perm[i] = t;
      if (try_ranks(masks, n, P, perm, order)) return true;
      c[i]++, i = 1;
    } else {
      c[i++] = 0;
    }
  }
  return try_ranks(masks, n, P, perm, order);
}

/* Under a pipeline, the params and optimizer state in groups of the pp
 * ranks that hold them (pp_stage.h pp_holders), in an order where each
 * rank's groups are adjacent: rank r allocates only its range of each
 * arena (pp_rank_ranges). rank[i]: the place of m->params.items[i] in that
 * order (declaration order within a group). */
static void pp_param_order(IrModule *m, int *rank) {
  for (int i = 0; i < m->params.len; i++) rank[i] = 0;
  IrFunc *f = ir_module_func(m, "train");
  PpAssign pa;
  char err[256];
  if (!f || m->plan.pp <= 1 || m->plan.pp > 64 || !pp_facts(m, f, &pa, err, sizeof err)) return;
  uint64_t *mask = calloc((size_t)m->params.len + 1, sizeof *mask), sets[256];
  int nsets = 0, order[256];
  pp_holders(m, f, &pa, mask);
  pp_assign_free(&pa);
  for (int i = 0; i < m->params.len; i++) {
    int j = 0;
    while (j < nsets && sets[j] != mask[i]) j++;
    if (j == nsets && nsets < 256) sets[nsets++] = mask[i];
  }
  order_rank_sets(sets, nsets, m->plan.pp, order);
  for (int i = 0; i < m->params.len; i++)
    for (int j = 0; j < nsets; j++)
      if (sets[order[j]] == mask[i]) rank[i] = j;
  free(mask);
}

/* Fixed places: params (and optimizer state) in declaration order (under a
 * pipeline, grouped by the ranks that hold them), inputs one slot per name
 * in order of first appearance. */
static bool place_fixed(IrModule *m, Arena *a, int64_t *top, char *err, size_t errlen) {
  int *group = ARENA_ARRAY(a, int, m->params.len + 1), ngroups = 1;
  pp_param_order(m, group);
  for (int i = 0; i < m->params.len; i++)
    if (group[i] + 1 > ngroups) ngroups = group[i] + 1;
  for (int g = 0; g < ngroups; g++)
    for (int i = 0; i < m->params.len; i++) {
      IrValue *v = m->params.items[i];
      if (group[i] != g) continue;
      IrRole ar = arena_of(v->role);
      v->mem_planned = true;
      v->mem_arena = ar;
      v->mem_offset = top[ar];
      top[ar] += mp_align(mp_value_bytes(m, v));
    }
  IrMap names;
  ir_map_init(&names, a, true);
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->inputs.len; i++) {
      IrValue *v = f->inputs.items[i];
      IrMapSlot *s = ir_map_put(&names, v->name);
      if (s->p) {
        const IrValue *w = s->p;
        if (w->dtype != v->dtype || !ir_shape_eq(&w->shape, &v->shape) || w->role != v->role) {
          snprintf(err, errlen,
                   "input %%%s of @%s differs in type or role from the input of the same name of "
                   "another function",
                   v->name, f->name);
          return false;
        }
      } else {
        IrRole ar = arena_of(v->role);
        s->p = v;
        s->i = top[ar];
        top[ar] += mp_align(mp_value_bytes(m, v));
      }
      v->mem_planned = true;
      v->mem_arena = arena_of(v->role);
      v->mem_offset = s->i;
    }
  }
  return true;
}

/* ---- @train under a pipeline ---- */

/* The pp ranks that run each node of @train (nm[i], bit r for rank r): a
 * stage's node its stage's rank; an update node the ranks whose update
 * keeps it (codegen/cg_pp.c rank_update: those holding every parameter and
 * state it reads, and keeping the update nodes it reads from). */
static void pp_node_ranks(const IrModule *m, const IrFunc *f, const PpAssign *pa,
                          const uint64_t *hold, uint64_t *nm, Arena *a) {
  int P = m->plan.pp;
  uint64_t all = P >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << P) - 1;
  IrMap held, umade;
  ir_map_init(&held, a, false);
  ir_map_init(&umade, a, false);
  for (int i = 0; i < m->params.len; i++)
    if (hold[i]) ir_map_put(&held, m->params.items[i])->i = (int64_t)hold[i];
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (pa->part[i] != PPN_U) {
      nm[i] = (uint64_t)1 << (pa->stage[i] % P);
      continue;
    }
    uint64_t k = all;
    for (int j = 0; j < n->nin; j++) {
      IrMapSlot *s = ir_map_get(&held, n->in[j]);
      if (!s) s = ir_map_get(&umade, n->in[j]);
      if (s) k &= (uint64_t)s->i;
    }
    nm[i] = k;
    for (int j = 0; j < n->nout; j++) ir_map_put(&umade, n->out[j])->i = (int64_t)k;
  }
}

/* The ranks on which node i of @train touches its operand or result k
 * (k < nin: operand k; past it the results): nm[i], but for a gradient
 * norm in the update, which on each rank reads only the gradients that
 * rank's stages make (codegen cg_pp_keeps_grad): made, the ranks of the
 * stage nodes that make each value. */
static uint64_t pp_touch(const IrNode *n, int k, uint64_t nmi, IrMap *made) {
  IrMapSlot *s = n->op == IR_OP_GRAD_NORM && k < n->nin ? ir_map_get(made, n->in[k]) : NULL;
  return s ? (uint64_t)s->i : nmi;
}

static void pp_made_by(const IrFunc *f, const PpAssign *pa, const uint64_t *nm, IrMap *made,
                       Arena *a) {
  ir_map_init(made, a, false);
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int j = 0; pa->part[i] != PPN_U && j < n->nout; j++)
      ir_map_put(made, n->out[j])->i = (int64_t)nm[i];
  }
}

/* pp_node_ranks for a module's @train, by the stages `given` or (NULL)
 * its nodes' pipeline facts (pp_facts), into *pa; NULL without a pipeline. */
static uint64_t *pp_train_ranks(const IrModule *m, const IrFunc *f, const PpAssign *given,
                                PpAssign *pa, Arena *a) {
  char err[256];
  if (m->plan.pp <= 1 || m->plan.pp > 64 || !f || strcmp(f->name, "train") != 0) return NULL;
  if (given)
    *pa = *given;
  else if (!pp_facts(m, f, pa, err, sizeof err))
    return NULL;
  uint64_t *hold = ARENA_ARRAY(a, uint64_t, m->params.len + 1);
  uint64_t *nm = ARENA_ARRAY(a, uint64_t, f->nodes.len + 1);
  pp_holders(m, f, pa, hold);
  pp_node_ranks(m, f, pa, hold, nm, a);
  return nm;
}

/* Under a pipeline, a transfer's buffer (touched by the parts of several
 * ranks, by no update node, used by nothing after them) has one offset on
 * every rank but a range of its own on each (docs/pp-memory.md):
 *   - on a rank that makes a value in it, from its first touch to the end
 *     of the part of its last: the part sends it when it ends, and the
 *     trainer waits for a slot's sends before that slot's next part (those
 *     from the working set before the rank's next part);
 *   - on a rank whose first touch reads it (a receiver), from the start of
 *     that part, which receives it, to its last reader there.
 * pp_transfers finds them (xf[b]), the parts' node ranges and each
 * transfer's first and last touch per rank; pp_transfer_place sets its
 * ranges and arena. */
static int *g_pfirst, *g_plast; /* per part 3 s + q: its first and last node */

static int part_fn(const PpAssign *pa, int i) {
  return 3 * pa->stage[i] + (pa->part[i] == PPN_F ? 0 : pa->part[i] == PPN_I ? 1 : 2);
}

static uint64_t *g_made; /* per buffer: the ranks that make a value in it */

static bool *pp_transfers(FPlan *p, const IrFunc *f, const PpAssign *pa, const uint64_t *nm,
                          const int *hi, Arena *a) {
  int nn = f->nodes.len, nb = p->nbufs;
  g_pfirst = ARENA_ARRAY(a, int, 3 * pa->nstages + 1);
  g_plast = ARENA_ARRAY(a, int, 3 * pa->nstages + 1);
  for (int k = 0; k < 3 * pa->nstages; k++) g_pfirst[k] = nn, g_plast[k] = -1;
  uint64_t *rnu = ARENA_ARRAY(a, uint64_t, nb + 1);
  g_made = ARENA_ARRAY(a, uint64_t, nb + 1);
  bool *ut = ARENA_ARRAY(a, bool, nb + 1), *xf = ARENA_ARRAY(a, bool, nb + 1);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    bool u = pa->part[i] == PPN_U;
    if (!u) {
      int fn = part_fn(pa, i);
      if (i < g_pfirst[fn]) g_pfirst[fn] = i;
      if (i > g_plast[fn]) g_plast[fn] = i;
    }
    for (int k = 0; k < n->nin + n->nout; k++) {
      const Loc *l = loc_of(p, ir_node_value(n, k));
      if (!l || l->buf < 0) continue;
      if (u)
        ut[l->buf] = true;
      else
        rnu[l->buf] |= nm[i];
    }
    if (p->ws_buf[i] >= 0) ut[p->ws_buf[i]] = true; /* scratch: never a transfer */
  }
  for (int b = 0; b < nb; b++) {
    Buf *x = &p->bufs[b];
    xf[b] = !ut[b] && (rnu[b] & (rnu[b] - 1)) && hi[b] >= 0 && x->end == hi[b] &&
            (x->arena == IR_ROLE_ACT || x->arena == IR_ROLE_GRAD);
    if (!xf[b]) continue;
    x->rr = ARENA_ARRAY(a, int, 2 * 64);
    for (int r = 0; r < 64; r++) x->rr[2 * r] = nn, x->rr[2 * r + 1] = -1;
  }
  /* per rank: its first and last touch; a first touch that reads is stored
   * as -1 - i (a receiver), until pp_transfer_place */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    if (pa->part[i] == PPN_U) continue;
    int r = __builtin_ctzll(nm[i]);
    for (int k = 0; k < n->nin + n->nout; k++) {
      const Loc *l = loc_of(p, ir_node_value(n, k));
      if (!l || l->buf < 0 || !xf[l->buf]) continue;
      int *rr = p->bufs[l->buf].rr;
      if (rr[2 * r] == nn) rr[2 * r] = k < n->nin ? -1 - i : i;
      rr[2 * r + 1] = i;
      if (k >= n->nin) g_made[l->buf] |= nm[i];
    }
  }
  return xf;
}

/* A stage's forward output that another rank keeps in its slot (the next
 * stage's input, its checkpoint) need not be in the sender's slots: on its
 * makers it gets a room of its own in the working set (a buffer there that
 * lives for the whole function on those ranks, so nothing else of theirs
 * takes it), which the forward part writes and the trainer sends from,
 * waiting for the send before the rank's next forward part
 * (MMRT_XFER_FWD); the buffer keeps the receivers' ranges alone. Under
 * 1F1B a rank holds p - r micro-batches: the output is then counted once,
 * not in each slot (docs/pp-memory.md "The send room"). */
static void pp_send_room(FPlan *p, int b, uint64_t makers) {
  int nn = p->f->nodes.len;
  int t = new_buf(p, IR_ROLE_GRAD, p->bufs[b].size, 0, nn > 0 ? nn - 1 : 0);
  Buf *x = &p->bufs[b]; /* after new_buf, which may move the buffers */
  p->bufs[t].ranks = makers;
  x->twin = t;
  int lo = -1, hi = -1;
  for (int r = 0; r < 64; r++) {
    if (makers >> r & 1) x->rr[2 * r] = x->end + 1, x->rr[2 * r + 1] = -1;
    if (!(x->ranks >> r & 1) || x->rr[2 * r + 1] < 0) continue;
    if (lo < 0 || x->rr[2 * r] < lo) lo = x->rr[2 * r];
    if (x->rr[2 * r + 1] > hi) hi = x->rr[2 * r + 1];
  }
  x->ranks &= ~makers;
  x->start = lo >= 0 ? lo : 0, x->end = hi; /* no receiver's range: none at all */
}

/* Transfer b's ranges per rank and its arena. The working set when, with
 * one virtual stage a rank (the trainer waits for the working set's sends
 * before the rank's next part, which under an interleaved schedule may be
 * another stage's that the receiver needs first), on every rank it lives
 * within one part, or the I and W of one backward action (whole_b), and no
 * forward part touches it (an output gradient received, an input gradient
 * sent); and when it is summed over the micro-batches (pp_summed_xfers).
 * Else the slot, where what an I part sends keeps its room to the end of
 * its stage's W (one action runs both). One the trainer sends without
 * waiting before the sender's next parts (pp_xfer_unwaited: a W part
 * receives it) keeps its room on the senders to the end of the stages'
 * parts (last_part). */
static void pp_transfer_place(FPlan *p, const PpAssign *pa, int b, const bool *whole_b,
                              bool update_reads, bool summed, int last_part, int P, int sched) {
  Buf *x = &p->bufs[b];
  int *rr = x->rr, lo = -1, hi = -1, last = x->end;
  /* several stages a rank: the trainer does not wait for a transfer before
   * the sender's next parts (the receiver, another rank's earlier or later
   * stage, may first need what the sender sends next): on its senders it
   * keeps its room to its last reader on any rank (in node order, the
   * order each micro-batch's parts run) */
  bool interleaved = pa->nstages != P;
  bool transient = !update_reads && !interleaved, unwaited = false;
  /* a send room (below): every maker makes and last touches it within
   * one forward part, every receiver receives it in a forward part */
  bool room = !update_reads && !interleaved && !summed;
  uint64_t makers = 0;
  int from = 1; /* the makers' part (I: 1), for pp_xfer_unwaited */
  for (int r = 0; r < 64; r++)
    if (x->ranks >> r & 1 && g_made[b] >> r & 1 && rr[2 * r] >= 0 && pa->part[rr[2 * r]] != PPN_I)
      from = part_fn(pa, rr[2 * r]);
  for (int r = 0; r < 64; r++) {
    if (!(x->ranks >> r & 1) || rr[2 * r + 1] < 0) {
      rr[2 * r] = x->end + 1, rr[2 * r + 1] = -1; /* untouched there */
      continue;
    }
    int s = rr[2 * r], e = rr[2 * r + 1];
    if (g_made[b] >> r & 1) {
      makers |= (uint64_t)1 << r;
      if (s < 0 || pa->part[s] != PPN_F || part_fn(pa, s) != part_fn(pa, e)) room = false;
    }
    if (s < 0) { /* a receiver: from the start of the part that receives it */
      int fn = part_fn(pa, -1 - s);
      /* a send room is waited for before the sender's next forward, which
       * comes before the receiver's backward parts */
      if (pa->part[-1 - s] != PPN_F) room = false;
      s = g_pfirst[fn];
      /* several stages a rank: no transfer is waited for before the
       * sender's next parts, so a W receiver's exception in
       * pp_xfer_unwaited (the transfer sets off its stage's backward
       * action) does not hold: no later part of the sender needs what that
       * W does (InternVL2Tiny at pp = 4, vpp = 2: stage 5's I sends the
       * gradient stage 4's W reads, and stage 4 has no I part to pass on) */
      if (pp_xfer_unwaited(pa, p->f->nodes.len, sched, from, fn) || (interleaved && fn % 3 == 2))
        unwaited = true;
    }
    if (g_made[b] >> r & 1) /* a sender: to its part's end */
      e = interleaved && !summed && last > e ? last : g_plast[part_fn(pa, e)];
    rr[2 * r] = s, rr[2 * r + 1] = e;
    if (lo < 0 || s < lo) lo = s;
    if (e > hi) hi = e;
    PpPart q0 = pa->part[s], q1 = pa->part[e];
    bool same = q0 == q1 || (whole_b[pa->stage[s] % P] && q0 == PPN_I && q1 == PPN_W);
    if (pa->stage[s] != pa->stage[e] || !same || q0 == PPN_F || q1 == PPN_F) transient = false;
  }
  x->start = lo, x->end = hi;
  if (summed) {
    x->arena = IR_ROLE_GRAD;
    return;
  }
  if (unwaited) transient = false;
  x->arena = transient ? IR_ROLE_GRAD : IR_ROLE_ACT;
  /* in the slot, what an I part sends keeps its room to the end of its
   * stage's W when one action runs both: the trainer does not wait for the
   * slot's sends between them (the receiver, under an interleaved schedule
   * another rank's earlier stage, may first need what this rank sends next) */
  for (int r = 0; !transient && sched != MM_SCHED_ZBH1 && r < 64; r++) {
    int e = rr[2 * r + 1];
    if (e < 0 || !(g_made[b] >> r & 1) || pa->part[e] != PPN_I) continue;
    int w = g_plast[3 * pa->stage[e] + 2];
    if (w > e) rr[2 * r + 1] = w;
    if (w > x->end) x->end = w;
  }
  if (unwaited && last_part > x->end) {
    for (int r = 0; r < 64; r++)
      if (rr[2 * r + 1] >= 0 && g_made[b] >> r & 1) rr[2 * r + 1] = last_part;
    x->end = last_part;
  }
  if (room && !unwaited && !transient && makers && makers != x->ranks) pp_send_room(p, b, makers);
}

/* Under a pipeline, where each buffer of @train lives (memplan.h): the act
 * arena is a micro-batch's slot (one per micro-batch in flight on a rank),
 * the grad arena the rank's working set, one for all its slots. A buffer
 * goes to the grad arena when one stage part (F, I or W of one stage: a
 * contiguous run of nodes, since the pipeline pass orders @train so) makes
 * it and is its only reader, or the I and W parts of one stage's backward
 * when the schedule runs them as one action (all but ZB-H1) and the rank
 * holds more than one micro-batch at once, and neither the trainer nor the
 * update reads it, but for a parameter's gradient made in a W part (the trainer adds it
 * to its sums right after the part); the update's own buffers too (the
 * update runs in slot 0 alone). Every other buffer, what lives from a part
 * to a later one (a forward's values the backward reads, an input gradient
 * a later W reads, a transfer), goes to the slot, and so does kernel scratch (the
 * generated code finds it in the act arena). Each buffer is marked with
 * the ranks whose parts touch it: buffers of different ranks never
 * conflict. */
static void pp_place(FPlan *p, const IrModule *m, const IrFunc *f, Arena *a) {
  PpAssign pa;
  uint64_t *nm = pp_train_ranks(m, f, NULL, &pa, a);
  if (!nm) return;
  int nn = f->nodes.len, nb = p->nbufs;
  /* per rank: whether what a backward's I half makes for its W half goes
   * to the working set: when one action runs I then W (not ZB-H1, which
   * defers W) and the rank holds more than one micro-batch at once (with
   * one slot the slot is the cheaper place: its forward values die during
   * the backward and leave their room to the output gradients) */
  int P = m->plan.pp;
  bool *whole_b = ARENA_ARRAY(a, bool, P + 1);
  PpSchedule sc;
  char serr[160];
  if (m->plan.schedule != MM_SCHED_ZBH1 &&
      pp_sched_build(&sc, (PpSchedKind)m->plan.schedule, P, pa.nstages / P, m->plan.micro_batches,
                     serr, sizeof serr)) {
    for (int r = 0; r < P; r++) whole_b[r] = pp_sched_slots(&sc, r) > 1;
    pp_sched_free(&sc);
  }
  int *lo = ARENA_ARRAY(a, int, nb + 1), *hi = ARENA_ARRAY(a, int, nb + 1);
  unsigned char *esc = ARENA_ARRAY(a, unsigned char, nb + 1);
  unsigned char *acc = ARENA_ARRAY(a, unsigned char, nb + 1);
  unsigned char *ws = ARENA_ARRAY(a, unsigned char, nb + 1);
  for (int b = 0; b < nb; b++) p->bufs[b].ranks = 0, lo[b] = nn, hi[b] = -1;
  IrMap umade, made;
  ir_map_init(&umade, a, false);
  pp_made_by(f, &pa, nm, &made, a);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    bool u = pa.part[i] == PPN_U;
    for (int k = 0; k < n->nin + n->nout; k++) {
      const IrValue *v = ir_node_value(n, k);
      const Loc *l = loc_of(p, v);
      if (!l || l->buf < 0) continue;
      p->bufs[l->buf].ranks |= pp_touch(n, k, nm[i], &made);
      if (!u) {
        if (i < lo[l->buf]) lo[l->buf] = i;
        if (i > hi[l->buf]) hi[l->buf] = i;
      } else if (k < n->nin && !ir_map_get(&umade, v)) {
        (v->role == IR_ROLE_GRAD ? acc : esc)[l->buf] = 1;
      }
    }
    if (u)
      for (int j = 0; j < n->nout; j++) ir_map_put(&umade, n->out[j]);
    if (p->ws_buf[i] >= 0) {
      int b = p->ws_buf[i];
      p->bufs[b].ranks = nm[i], ws[b] = 1;
    }
  }
  for (int i = 0; i < f->results.len; i++) {
    const IrValue *v = f->results.items[i];
    const Loc *l = loc_of(p, v);
    if (l && l->buf >= 0 && !ir_map_get(&umade, v))
      (v->role == IR_ROLE_GRAD ? acc : esc)[l->buf] = 1;
  }
  int last_part = -1;
  int *fr = ARENA_ARRAY(a, int, nb + 1); /* the first reader on another rank than the maker's */
  for (int b = 0; b < nb; b++) fr[b] = -1;
  for (int i = 0; i < nn; i++) {
    if (pa.part[i] == PPN_U) continue;
    last_part = i;
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) {
      const Loc *l = loc_of(p, n->in[k]);
      if (l && l->buf >= 0 && fr[l->buf] < 0 && lo[l->buf] < nn &&
          pa.stage[i] % P != pa.stage[lo[l->buf]] % P)
        fr[l->buf] = i;
    }
  }
  bool *xf = pp_transfers(p, f, &pa, nm, hi, a);
  IrMap summed;
  pp_summed_xfers(f, &pa, P, a, &summed);
  unsigned char *sumb = ARENA_ARRAY(a, unsigned char, nb + 1);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) {
      const Loc *l = loc_of(p, n->out[j]);
      if (l && l->buf >= 0 && ir_map_get(&summed, n->out[j])) sumb[l->buf] = 1;
    }
  }
  for (int b = 0; b < nb; b++) {
    Buf *x = &p->bufs[b];
    if (x->keep || (x->arena != IR_ROLE_ACT && x->arena != IR_ROLE_GRAD)) continue;
    if (xf[b]) {
      pp_transfer_place(p, &pa, b, whole_b, esc[b] || acc[b], sumb[b], last_part, P,
                        m->plan.schedule);
      continue;
    }
    bool transient;
    if (ws[b])
      transient = false;
    else if (hi[b] < 0)
      transient = true; /* the update's */
    else {
      int s0 = pa.stage[lo[b]], s1 = pa.stage[hi[b]];
      PpPart q0 = pa.part[lo[b]], q1 = pa.part[hi[b]];
      /* one backward action runs I then W at once unless the schedule
       * defers W (ZB-H1): then what I makes for W lives in the slot */
      bool same = q0 == q1 || (whole_b[s0 % P] && q0 == PPN_I && q1 == PPN_W);
      transient = s0 == s1 && same && !esc[b] && (!acc[b] || q0 == PPN_W);
    }
    x->arena = transient ? IR_ROLE_GRAD : IR_ROLE_ACT;
    /* a transfer is sent without waiting, and the sender's later parts of
     * the micro-batch wait for the receiver only through the forwards and
     * input gradients: one whose first reader on another rank is a W part
     * (a tied parameter's gradient) may still be on its way when they run,
     * so it keeps its room in the slot to the end of the stages' parts */
    if (x->arena == IR_ROLE_ACT && fr[b] >= 0 && pa.part[fr[b]] == PPN_W && last_part > x->end)
      x->end = last_part;
  }
  pp_assign_free(&pa);
}

bool mp_pp_arenas(const IrModule *m, const PpAssign *given, MpPpArenas *out, int nout) {
  int P = m->plan.pp;
  const IrFunc *f = ir_module_func((IrModule *)m, "train");
  if (P <= 1 || P > nout) return false;
  Arena a;
  arena_init(&a);
  PpAssign pa;
  uint64_t *nm = pp_train_ranks(m, f, given, &pa, &a);
  if (!nm) {
    arena_free(&a);
    return false;
  }
  memset(out, 0, sizeof *out * (size_t)P);
  IrMap made;
  pp_made_by(f, &pa, nm, &made, &a);
  int64_t other[IR_ROLE_COUNT] = {0}; /* the other functions' (all in slot 0) */
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *g = m->funcs.items[fi];
    for (int i = 0; i < g->nodes.len; i++) {
      const IrNode *n = g->nodes.items[i];
      for (int k = 0; k < n->nin + n->nout; k++) {
        const IrValue *v = ir_node_value(n, k);
        if (!v->mem_planned || (v->mem_arena != IR_ROLE_ACT && v->mem_arena != IR_ROLE_GRAD))
          continue;
        int64_t e = v->mem_offset + mp_value_bytes(m, v);
        bool act = v->mem_arena == IR_ROLE_ACT;
        if (g != f && e > other[v->mem_arena]) other[v->mem_arena] = e;
        uint64_t on = g == f ? pp_touch(n, k, nm[i], &made) : 0;
        for (int r = 0; r < P; r++)
          if (on >> r & 1) {
            bool sent = v->mem_send_ranks >> r & 1; /* its send room there */
            int64_t *t = act && !sent ? &out[r].act : &out[r].grad;
            int64_t ee = sent ? v->mem_send_offset + mp_value_bytes(m, v) : e;
            if (ee > *t) *t = ee;
          }
      }
      int64_t w = n->ws_bytes > 0 ? n->ws_offset + n->ws_bytes : 0;
      if (g != f && w > other[IR_ROLE_ACT]) other[IR_ROLE_ACT] = w;
      for (int r = 0; g == f && r < P; r++)
        if (nm[i] >> r & 1 && w > out[r].act) out[r].act = w;
    }
  }
  for (int r = 0; r < P; r++) {
    MpPpArenas *x = &out[r];
    x->act = mp_align(x->act), x->grad = mp_align(x->grad);
    x->act0 = x->act > mp_align(other[IR_ROLE_ACT]) ? x->act : mp_align(other[IR_ROLE_ACT]);
    x->grad0 = x->grad > mp_align(other[IR_ROLE_GRAD]) ? x->grad : mp_align(other[IR_ROLE_GRAD]);
  }
  if (!given) pp_assign_free(&pa);
  arena_free(&a);
  return true;
}

/* MMC_TEST_MEMPLAN_DUMP=1: @train's pipeline plan on stderr for
 * tests/tools/pp_live.py, which checks that no two buffers of one slot or
 * working set are alive at once on a rank, counting each transfer's send
 * to its completion (docs/pp-live.md). Lines: "S P stages schedule M";
 * "A rank kind stage mb" (the schedule's actions, pp_sched.h's kinds);
 * "N node stage part ranks"; "B buf arena offset bytes start end ranks
 * [r:lo-hi ...] [twin=T]" (T: its send room on the makers); "U node buf
 * r|w value summed" (each operand). */
static void dump_live(FPlan *p, const IrModule *m, const IrFunc *f, Arena *a) {
  PpAssign pa;
  uint64_t *nm = pp_train_ranks(m, f, NULL, &pa, a);
  if (!nm) return;
  int P = m->plan.pp;
  fprintf(stderr, "S %d %d %d %d\n", P, pa.nstages, (int)m->plan.schedule, m->plan.micro_batches);
  PpSchedule sc;
  char serr[160];
  if (pp_sched_build(&sc, (PpSchedKind)m->plan.schedule, P, pa.nstages / P, m->plan.micro_batches,
                     serr, sizeof serr)) {
    for (int r = 0; r < P; r++)
      for (int j = 0; j < sc.n[r]; j++)
        fprintf(stderr, "A %d %d %d %d\n", r, (int)sc.act[r][j].kind, sc.act[r][j].stage,
                sc.act[r][j].mb);
    pp_sched_free(&sc);
  }
  IrMap summed;
  pp_summed_xfers(f, &pa, P, a, &summed);
  for (int i = 0; i < f->nodes.len; i++)
    fprintf(stderr, "N %d %d %d %llx\n", i, pa.stage[i], (int)pa.part[i],
            (unsigned long long)nm[i]);
  for (int b = 0; b < p->nbufs; b++) {
    const Buf *x = &p->bufs[b];
    fprintf(stderr, "B %d %s %lld %lld %d %d %llx", b, ir_role_name(x->arena), (long long)x->offset,
            (long long)x->size, x->start, x->end, (unsigned long long)x->ranks);
    for (int r = 0; x->rr && r < P; r++)
      fprintf(stderr, " %d:%d-%d", r, x->rr[2 * r], x->rr[2 * r + 1]);
    if (x->twin >= 0) fprintf(stderr, " twin=%d", x->twin); /* its send room (pp_send_room) */
    fprintf(stderr, "\n");
  }
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin + n->nout; k++) {
      const IrValue *v = ir_node_value(n, k);
      const Loc *l = loc_of(p, v);
      if (l && l->buf >= 0)
        fprintf(stderr, "U %d %d %c %p %d\n", i, l->buf, k < n->nin ? 'r' : 'w', (const void *)v,
                ir_map_get(&summed, v) != NULL);
    }
  }
  pp_assign_free(&pa);
}

bool pass_memplan(IrModule *m, PassCtx *cx) {
  Arena a;
  arena_init(&a);
  char err[512];
  int64_t fixed[IR_ROLE_COUNT] = {0}; /* bytes of each arena taken by params and inputs */
  /* under a pipeline the stages of @train and @forward are the pipeline
   * pass's facts */
  bool ok = true;
  for (int k = 0; ok && m->plan.pp > 1 && ir_module_func(m, "train") && k < 2; k++) {
    IrFunc *g = ir_module_func(m, k ? "forward" : "train");
    PpAssign pa = {0};
    ok = !g || pp_facts(m, g, &pa, err, sizeof err);
    pp_assign_free(&pa);
  }
  ok = ok && place_fixed(m, &a, fixed, err, sizeof err);
  for (int fi = 0; ok && fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    FPlan p;
    analyze(&p, m, f, &a, true);
    pp_place(&p, m, f, &a);
    for (size_t r = 0; r < sizeof planned_arenas / sizeof planned_arenas[0]; r++)
      assign(&p, planned_arenas[r], &a);
    for (int b = 0; b < p.nbufs; b++)
      p.bufs[b].offset += fixed[p.bufs[b].arena]; /* planned above the fixed part */
    if (getenv("MMC_TEST_MEMPLAN_DUMP") && m->plan.pp > 1 && strcmp(f->name, "train") == 0)
      dump_live(&p, m, f, &a);
    if (!check_plan(&p, err, sizeof err)) {
      ok = false;
      break;
    }
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      n->ws_offset = p.ws_buf[i] >= 0 ? p.bufs[p.ws_buf[i]].offset : 0;
      n->ws_bytes = p.ws_buf[i] >= 0 ? mp_workspace_bytes(m, n) : 0;
      for (int j = 0; j < n->nout; j++) {
        IrValue *v = n->out[j];
        const Loc *l = loc_of(&p, v);
        MM_ASSERT(l != NULL);
        v->mem_planned = true;
        v->mem_send_ranks = 0, v->mem_send_offset = 0;
        if (l->buf >= 0) {
          v->mem_arena = p.bufs[l->buf].arena;
          v->mem_offset = p.bufs[l->buf].offset + l->off;
          int t = p.bufs[l->buf].twin;
          if (t >= 0) {
            MM_ASSERT(p.bufs[t].arena == IR_ROLE_GRAD);
            v->mem_send_ranks = p.bufs[t].ranks;
            v->mem_send_offset = p.bufs[t].offset + l->off;
          }
        } else { /* a view of a param or input */
          v->mem_arena = l->arena;
          v->mem_offset = l->off;
        }
      }
    }
  }
  if (!ok) diag_error_plain(cx->d, "memplan: %s", err);
  arena_free(&a);
  return ok;
}

/* ---- the summary ---- */

static void extent(const IrModule *m, int64_t *top, const IrValue *v) {
  if (!v->mem_planned || (unsigned)v->mem_arena >= IR_ROLE_COUNT) return;
  int64_t e = v->mem_offset + mp_value_bytes(m, v);
  if (e > top[v->mem_arena]) top[v->mem_arena] = e;
}

bool mp_summarize(const IrModule *m, MpSummary *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  bool planned = true;
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *v = m->params.items[i];
    if (!v->mem_planned) planned = false;
    extent(m, s->arena, v);
  }
  Arena a;
  arena_init(&a);
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    int64_t top[IR_ROLE_COUNT] = {0};
    for (int i = 0; i < f->inputs.len; i++) {
      const IrValue *v = f->inputs.items[i];
      if (!v->mem_planned) planned = false;
      extent(m, s->arena, v);
    }
    for (int i = 0; i < f->nodes.len; i++) {
      const IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++) {
        if (!n->out[j]->mem_planned) planned = false;
        extent(m, top, n->out[j]);
      }
      if (n->ws_bytes > 0 && n->ws_offset + n->ws_bytes > top[IR_ROLE_ACT])
        top[IR_ROLE_ACT] = n->ws_offset + n->ws_bytes;
    }
    for (int r = 0; r < IR_ROLE_COUNT; r++) {
      top[r] = mp_align(top[r]);
      if (r != IR_ROLE_PARAM && r != IR_ROLE_INPUT && top[r] > s->arena[r]) s->arena[r] = top[r];
    }
    if (s->nfuncs < MP_MAX_FUNCS) {
      MpFuncStats *fs = &s->funcs[s->nfuncs++];
      FPlan p;
      analyze(&p, m, f, &a, true);
      fs->name = f->name;
      memcpy(fs->arena, top, sizeof top);
      fs->live_peak = p.live_peak;
      fs->nbuffers = p.nbufs;
      fs->ninplace = p.ninplace;
      fs->nviews = p.nviews;
    }
  }
  arena_free(&a);
  if (!planned) {
    snprintf(err, errlen, "the module has no memory plan (run the memplan pass)");
    return false;
  }
  for (int r = 0; r < IR_ROLE_COUNT; r++) {
    s->arena[r] = mp_align(s->arena[r]);
    s->total += s->arena[r];
  }
  return true;
}
