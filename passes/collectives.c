/* The `collectives` pass: every `reshard` (inserted by shard and zero where
 * a value's placement differs from what its consumer needs) becomes the
 * collectives of §7.3 of the IR design, one mesh axis at a time:
 *
 *   P -> B     all_reduce          P -> S(d)  reduce_scatter
 *   S(d) -> B  all_gather          S(i) -> S(j)  all_to_all
 *   B -> S(d)  all_slice (local)   X -> X     nothing
 *
 * Partial sums are resolved first (a reduce-scatter where the target is
 * split, else an all-reduce), then splits that move (all-to-all), then
 * splits that go (all-gather), then splits that come (a local slice). The
 * last collective takes the reshard's place: its uses, role and gradient
 * link. After this pass no reshard is left, and the verifier checks every
 * collective against its attributes. */
#include <string.h>

#include "pass.h"

typedef struct Co {
  IrModule *m;
  IrFunc *f;
  const int *nest, *outer_first; /* the nesting of a dim split by several axes (below) */
  IrMap repl;                    /* reshard result -> its replacement */
  Arena a;
} Co;

static IrValue *emit(Co *c, const IrNode *at, IrOp op, IrValue *x, int axis, int dim, int to,
                     IrPlacement p) {
  char err[400];
  IrBuilder b = {.m = c->m, .f = c->f, .scope = at->scope, .group = at->group, .layer = at->layer};
  IrAttrs a = {0};
  ir_attrs_set_mesh(&a, IR_ATTR_MESH, (IrAxis)axis);
  if (op != IR_OP_ALL_REDUCE) ir_attrs_set_int(&a, IR_ATTR_DIM, dim);
  if (op == IR_OP_ALL_TO_ALL) ir_attrs_set_int(&a, IR_ATTR_TO, to);
  IrNode *n = ir_build(&b, op, &x, 1, &a, at->loc, err, sizeof err, NULL);
  MM_ASSERT(n != NULL);
  memcpy(n->out[0]->pl, x->pl, sizeof n->out[0]->pl);
  n->out[0]->pl[axis] = p;
  return n->out[0];
}

/* Whether x, with axis a set to p, splits its dims evenly. */
static bool fits(const IrModule *m, const IrValue *x, int a, IrPlacement p) {
  IrPlacement pl[IR_NAXES];
  memcpy(pl, x->pl, sizeof pl);
  pl[a] = p;
  for (int d = 0; d < x->shape.rank; d++) {
    int64_t ways = 1;
    for (int b = 0; b < IR_NAXES; b++)
      if (pl[b].kind == IR_PL_S && pl[b].dim == d) ways *= m->mesh[b];
    if (x->shape.d[d] % ways) return false;
  }
  return true;
}

/* A dim split by several axes nests cp outermost, then tp, then dp: the
 * sequence is cut into cp chunks and sp cuts each chunk over tp (so that
 * gathering tp before an attention restores the rank's contiguous cp
 * chunk), and ZeRO cuts a tp slice over dp. A collective on one rank's
 * data splits or joins the innermost level, so before an axis splits or
 * joins a dim that an inner axis splits too, the inner split is gathered
 * (and sliced again by the splits that come, when wanted). */
static const int nest_tp[IR_NAXES] = {[IR_AX_CP] = 2, [IR_AX_TP] = 1, [IR_AX_DP] = 0};
static const int outer_tp[IR_NAXES] = {IR_AX_CP, IR_AX_TP, IR_AX_DP};
/* Under per-sub-model plans (docs/subplans.md) the one dim two axes split
 * is the batch of a tp = 1 sub-model (cp and ZeRO are refused beside
 * blocks), and there dp nests outside tp, as the ranks do: a rank's piece
 * of the sub-model's batch is the tp-th piece of its dp shard, so the
 * batch enters by a local slice over tp and leaves by a gather over tp,
 * with nothing sent over dp. */
static const int nest_dp[IR_NAXES] = {[IR_AX_CP] = 2, [IR_AX_DP] = 1, [IR_AX_TP] = 0};
static const int outer_dp[IR_NAXES] = {IR_AX_CP, IR_AX_DP, IR_AX_TP};

/* Gathers every axis inner to a that splits dim d of x. */
static IrValue *gather_inner(Co *c, const IrNode *at, IrValue *x, int a, int d) {
  for (int k = IR_NAXES - 1; k >= 0; k--) { /* the innermost first */
    int o = c->outer_first[k];
    if (c->nest[o] < c->nest[a] && x->pl[o].kind == IR_PL_S && x->pl[o].dim == d)
      x = emit(c, at, IR_OP_ALL_GATHER, x, o, d, 0, (IrPlacement){IR_PL_B, 0});
  }
  return x;
}

/* The chain of collectives from x's placement to `to`, built at the end of
 * the function; returns its last value. */
static IrValue *lower(Co *c, const IrNode *at, IrValue *x, const IrPlacement *to) {
  const IrPlacement B = {IR_PL_B, 0};
  for (int a = 0; a < IR_NAXES; a++) { /* partial sums */
    if (x->pl[a].kind != IR_PL_P || to[a].kind == IR_PL_P) continue;
    /* an outer axis' slice of the same dim comes first (slicing a partial
     * sum is exact), so that the reduce-scatter splits that axis' piece */
    if (to[a].kind == IR_PL_S) x = gather_inner(c, at, x, a, to[a].dim);
    for (int k = 0; to[a].kind == IR_PL_S && k < IR_NAXES; k++) {
      int o = c->outer_first[k];
      if (c->nest[o] > c->nest[a] && x->pl[o].kind == IR_PL_B && ir_placement_eq(to[o], to[a]) &&
          fits(c->m, x, o, to[o]))
        x = emit(c, at, IR_OP_ALL_SLICE, x, o, to[o].dim, 0, to[o]);
    }
    if (to[a].kind == IR_PL_S && fits(c->m, x, a, to[a]))
      x = emit(c, at, IR_OP_REDUCE_SCATTER, x, a, to[a].dim, 0, to[a]);
    else
      x = emit(c, at, IR_OP_ALL_REDUCE, x, a, 0, 0, B);
  }
  for (int a = 0; a < IR_NAXES; a++) /* splits that move */
    if (x->pl[a].kind == IR_PL_S && to[a].kind == IR_PL_S && x->pl[a].dim != to[a].dim &&
        fits(c->m, x, a, to[a]))
      x = emit(c, at, IR_OP_ALL_TO_ALL, x, a, x->pl[a].dim, to[a].dim, to[a]);
  for (int k = IR_NAXES - 1; k >= 0; k--) { /* splits that go, the innermost first */
    int a = c->outer_first[k];
    if (x->pl[a].kind == IR_PL_S && !ir_placement_eq(x->pl[a], to[a])) {
      x = gather_inner(c, at, x, a, x->pl[a].dim);
      x = emit(c, at, IR_OP_ALL_GATHER, x, a, x->pl[a].dim, 0, B);
    }
  }
  for (int k = 0; k < IR_NAXES; k++) { /* splits that come, the outermost first */
    int a = c->outer_first[k];
    if (x->pl[a].kind == IR_PL_B && to[a].kind == IR_PL_S) {
      x = gather_inner(c, at, x, a, to[a].dim);
      x = emit(c, at, IR_OP_ALL_SLICE, x, a, to[a].dim, 0, to[a]);
    }
  }
  for (int a = 0; a < IR_NAXES; a++) MM_ASSERT(ir_placement_eq(x->pl[a], to[a]));
  return x;
}

static IrValue *repl(Co *c, IrValue *v) {
  IrMapSlot *s = ir_map_get(&c->repl, v);
  return s ? s->p : v;
}

static void lower_func(Co *c, IrFunc *f) {
  c->f = f;
  ir_map_init(&c->repl, &c->a, false);
  int nold = f->nodes.len;
  void **old = ARENA_ARRAY(&c->a, void *, nold ? nold : 1);
  memcpy(old, f->nodes.items, sizeof(void *) * (size_t)nold);
  f->nodes.len = 0;
  for (int i = 0; i < nold; i++) {
    IrNode *n = old[i];
    for (int k = 0; k < n->nin; k++) n->in[k] = repl(c, n->in[k]);
    if (n->op != IR_OP_RESHARD) {
      ptrvec_push(&c->m->arena, &f->nodes, n);
      continue;
    }
    IrValue *y = n->out[0], *x = lower(c, n, n->in[0], y->pl);
    if (x != n->in[0]) { /* the last collective is the reshard's result now */
      x->role = y->role;
      x->grad_of = y->grad_of;
    } else if (y->grad_of) { /* a no-op reshard of a gradient: the operand is the gradient */
      x->role = y->role;
      x->grad_of = y->grad_of;
    }
    ir_map_put(&c->repl, y)->p = x;
  }
  for (int i = 0; i < f->results.len; i++) f->results.items[i] = repl(c, f->results.items[i]);
  ir_func_renumber(f);
}

bool pass_collectives(IrModule *m, PassCtx *cx) {
  (void)cx;
  bool sub = m->plan.nsubplans > 0;
  Co c = {.m = m, .nest = sub ? nest_dp : nest_tp, .outer_first = sub ? outer_dp : outer_tp};
  arena_init(&c.a);
  for (int i = 0; i < m->funcs.len; i++) {
    IrFunc *f = m->funcs.items[i];
    bool any = false;
    for (int j = 0; j < f->nodes.len && !any; j++)
      any = ((IrNode *)f->nodes.items[j])->op == IR_OP_RESHARD;
    if (any) lower_func(&c, f);
  }
  arena_free(&c.a);
  return true;
}
