/* Gradient accumulation without a dp collective per micro-batch
 * (passes/accum.h, docs/accumulation.md). With micro_batches = M > 1 and
 * dp > 1 the data-parallel reductions of the gradients run once a step, on
 * the micro-batches' weighted sum, as Megatron and DDP's no_sync do: on a
 * micro-batch but the last the runtime adds a root's operand (the local,
 * unreduced gradient), weighted by the micro-batch's label count, into a sum
 * and the deferred collectives do not run; on the last the sum joins the
 * operand and they run, still overlapped with that micro-batch's backward.
 * The tp chain that finishes a gradient after its dp reduction
 * (passes/bucket.c) defers with it. */
#include "accum.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "memplan.h"
#include "pp_stage.h"

static bool chain_node(IrOp op) {
  return ir_op_is_collective(op) || op == IR_OP_ALL_SLICE;
}

static void accum_of(const IrFunc *f, const unsigned char *up, Arena *a, MbDefer *out) {
  int N = f->nodes.len;
  IrMap made, seen;
  ir_map_init(&made, a, false);
  ir_map_init(&seen, a, false);
  out->accum = ARENA_ARRAY(a, const IrValue *, N + 1);
  out->accum_deferred = ARENA_ARRAY(a, unsigned char, N + 1);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!up[i])
      for (int j = 0; j < n->nout; j++) ir_map_put(&made, n->out[j]);
  }
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; up[i] && k < n->nin; k++)
      if (ir_map_get(&made, n->in[k]) && !ir_map_get(&seen, n->in[k])) {
        ir_map_put(&seen, n->in[k]);
        out->accum[out->naccum++] = n->in[k];
      }
  }
}

/* The node that makes root operand v and can write it into the root's sum
 * itself: a linear_grad_w of f32 (or, under bf16, of bf16 whose only use is
 * the cast to f32 right after it, which the backend folds into it:
 * codegen/cg_ops.c f32_dest_of_next); -1 when none. */
static int64_t fused_maker(const IrFunc *f, const IrValue *v, IrMap *index, IrMap *uses) {
  const IrNode *d = v->def;
  IrMapSlot *s = d ? ir_map_get(index, d) : NULL;
  if (!s || v->dtype != IR_F32 || d->nout != 1) return -1;
  if (d->op == IR_OP_LINEAR_GRAD_W) return d->in[0]->dtype == IR_F32 ? s->i : -1;
  if (d->op != IR_OP_CAST || d->nin != 1) return -1;
  const IrValue *y = d->in[0];
  const IrNode *p = y->def;
  IrMapSlot *ps = p ? ir_map_get(index, p) : NULL, *u = ir_map_get(uses, y);
  if (!ps || p->op != IR_OP_LINEAR_GRAD_W || p->nout != 1 || y->dtype != IR_BF16 ||
      p->in[0]->dtype != IR_BF16 || !u || u->i != 1 || ps->i + 1 != s->i ||
      !ir_shape_eq(&y->shape, &v->shape))
    return -1;
  (void)f;
  return ps->i;
}

/* The dp reductions' roots (mb_defer_plan). */
static void defer_dp(const IrModule *m, const IrFunc *f, const unsigned char *up, Arena *a,
                     MbDefer *out) {
  int N = f->nodes.len;
  if (m->plan.micro_batches <= 1 || m->mesh[IR_AX_DP] <= 1 || getenv("MMC_TEST_NO_DEFER")) return;
  unsigned char *d = ARENA_ARRAY(a, unsigned char, N + 1);
  IrMap good, bad, uses, maker, index;
  ir_map_init(&good, a, false);
  ir_map_init(&bad, a, false);
  ir_map_init(&uses, a, false);
  ir_map_init(&maker, a, false);
  ir_map_init(&index, a, false);
  for (int i = 0; i < f->results.len; i++) ir_map_put(&bad, f->results.items[i]);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) ir_map_put(&uses, n->in[k])->i++;
    ir_map_put(&index, n)->i = i;
  }
  /* backwards: a node is deferred when only the update and deferred nodes
   * read its result */
  for (int i = N - 1; i >= 0; i--) {
    const IrNode *n = f->nodes.items[i];
    if (up[i]) {
      for (int k = 0; k < n->nin; k++) ir_map_put(&good, n->in[k]);
      continue;
    }
    if (n->op == IR_OP_BUCKET_WAIT) continue;
    d[i] = chain_node(n->op) && n->nout == 1 && n->nin == 1 && n->in[0]->dtype == IR_F32 &&
           ir_map_get(&good, n->out[0]) && !ir_map_get(&bad, n->out[0]);
    for (int k = 0; k < n->nin; k++) ir_map_put(d[i] ? &good : &bad, n->in[k]);
  }
  /* forwards: the roots; a would-be root over another axis is kept, and the
   * next node of its chain may be a root */
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!d[i]) continue;
    if (ir_map_get(&maker, n->in[0])) {
      ir_map_put(&maker, n->out[0]);
      out->node[i] = 1;
      continue;
    }
    d[i] = (n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER) &&
           n->attrs.v[IR_ATTR_MESH].i == IR_AX_DP && ir_map_get(&uses, n->in[0])->i == 1;
    if (!d[i]) continue;
    ir_map_put(&maker, n->out[0]);
    out->node[i] = 2 + out->nroots;
    out->rnode[out->nroots] = i;
    out->roots[out->nroots++] = n->in[0];
  }
  /* a bucket's members defer together, its wait with them */
  IrMap bk; /* bucket id + 1 -> 1 + deferred */
  ir_map_init(&bk, a, false);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    int64_t id = up[i] ? -1 : async_slot(n);
    if (id < 0 || n->op == IR_OP_BUCKET_WAIT) continue;
    IrMapSlot *s = ir_map_get(&bk, (const void *)(intptr_t)(id + 1));
    if (s && s->i != 1 + d[i]) {
      memset(out->node, 0, sizeof(int64_t) * (size_t)N);
      out->nroots = 0;
      return;
    }
    ir_map_put(&bk, (const void *)(intptr_t)(id + 1))->i = 1 + d[i];
  }
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (up[i] || n->op != IR_OP_BUCKET_WAIT) continue;
    IrMapSlot *s = ir_map_get(&bk, (const void *)(intptr_t)(n->attrs.v[IR_ATTR_BUCKET].i + 1));
    if (s && s->i == 2) out->node[i] = 1;
  }
  if (!out->nroots) {
    memset(out->node, 0, sizeof(int64_t) * (size_t)N);
    return;
  }
  for (int j = 0; j < out->nroots; j++) {
    out->fused[j] =
        getenv("MMC_TEST_NO_FUSED_ACCUM") ? -1 : fused_maker(f, out->roots[j], &index, &uses);
    if (out->fused[j] >= 0) out->maker[out->fused[j]] = 1 + j;
    const IrNode *r = f->nodes.items[out->rnode[j]];
    out->home[j] = out->fused[j] >= 0          ? out->roots[j]
                   : r->op == IR_OP_ALL_REDUCE ? r->out[0]
                                               : NULL;
  }
  for (int i = 0; i < out->naccum; i++) {
    const IrNode *def = out->accum[i]->def;
    for (int j = 0; def && j < N && !out->accum_deferred[i]; j++)
      out->accum_deferred[i] = f->nodes.items[j] == def && out->node[j] != 0;
  }
}

/* With no dp reduction to defer (dp = 1), an accum tensor that a
 * weight-gradient matmul makes and only the update reads is a root of its
 * own, without a collective: the matmul accumulates into it over the
 * micro-batches (its home), and the trainer neither sums it again nor
 * needs the gradient in the working set (docs/accumulation.md "Memory"). */
static void local_roots(const IrFunc *f, const unsigned char *up, Arena *a, MbDefer *out) {
  int N = f->nodes.len;
  IrMap uses, index, mb;
  ir_map_init(&uses, a, false);
  ir_map_init(&index, a, false);
  ir_map_init(&mb, a, false); /* read in the micro-batch, or a result */
  for (int i = 0; i < f->results.len; i++) ir_map_put(&mb, f->results.items[i]);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) {
      ir_map_put(&uses, n->in[k])->i++;
      if (!up[i]) ir_map_put(&mb, n->in[k]);
    }
    ir_map_put(&index, n)->i = i;
  }
  for (int i = 0; i < out->naccum; i++) {
    const IrValue *v = out->accum[i];
    if (out->accum_deferred[i] || ir_map_get(&mb, v)) continue;
    int64_t fm = fused_maker(f, v, &index, &uses);
    if (fm < 0 || out->maker[fm]) continue;
    int j = out->nroots++;
    out->roots[j] = v, out->rnode[j] = fm, out->fused[j] = fm, out->home[j] = v;
    out->maker[fm] = 1 + j;
    out->accum_deferred[i] = 1;
  }
}

/* ZeRO-1/2's parameter gathers, once a step (MbDefer.once). ZeRO-3's are
 * per region, their copies freed between (passes/zero.c), and stay. */
static void once_gathers(const IrModule *m, const IrFunc *f, const unsigned char *up,
                         MbDefer *out) {
  if (m->plan.micro_batches <= 1 || m->mesh[IR_AX_DP] <= 1 || m->plan.zero < 1 ||
      m->plan.zero > 2 || getenv("MMC_TEST_GATHER_EVERY"))
    return;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (up[i] || n->op != IR_OP_ALL_GATHER || n->nin != 1 || n->nout != 1 ||
        n->attrs.v[IR_ATTR_MESH].i != IR_AX_DP || async_slot(n) >= 0)
      continue;
    const IrValue *p = n->in[0];
    if (p->def || p->role != IR_ROLE_PARAM) continue;
    out->once[i] = 1;
    out->nonce++;
  }
}

void mb_defer_plan(const IrModule *m, const IrFunc *f, const unsigned char *up, Arena *a,
                   MbDefer *out) {
  int N = f->nodes.len;
  memset(out, 0, sizeof *out);
  out->node = ARENA_ARRAY(a, int64_t, N + 1);
  out->maker = ARENA_ARRAY(a, int64_t, N + 1);
  out->rnode = ARENA_ARRAY(a, int64_t, N + 1);
  out->home = ARENA_ARRAY(a, const IrValue *, N + 1);
  out->roots = ARENA_ARRAY(a, const IrValue *, N + 1);
  out->fused = ARENA_ARRAY(a, int64_t, N + 1);
  out->once = ARENA_ARRAY(a, unsigned char, N + 1);
  accum_of(f, up, a, out);
  defer_dp(m, f, up, a, out);
  once_gathers(m, f, up, out);
  if (m->plan.micro_batches > 1 && m->mesh[IR_AX_DP] <= 1 && !getenv("MMC_TEST_NO_DEFER") &&
      !getenv("MMC_TEST_NO_FUSED_ACCUM"))
    local_roots(f, up, a, out);
}

/* The plan of @train f with pp = 1 (the update by ir_update_part) into *d,
 * in a; false when nothing can be deferred or summed (M <= 1, pp > 1). */
static bool plan_pp1(const IrModule *m, const IrFunc *f, Arena *a, MbDefer *d) {
  if (!f || m->plan.micro_batches <= 1 || m->plan.pp > 1) return false;
  int bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  if (upd < 0) upd = f->nodes.len;
  unsigned char *up = ARENA_ARRAY(a, unsigned char, f->nodes.len + 1);
  ir_update_part(f, upd, a, up);
  mb_defer_plan(m, f, up, a, d);
  return true;
}

int64_t mb_accum_bytes(const IrModule *m, const IrFunc *f, int64_t *deferred_bytes) {
  if (deferred_bytes) *deferred_bytes = 0;
  Arena a;
  arena_init(&a);
  MbDefer d;
  int64_t bytes = 0;
  if (!plan_pp1(m, f, &a, &d)) d.naccum = d.nroots = 0;
  for (int i = 0; i < d.naccum; i++)
    if (!d.accum_deferred[i]) bytes += 4 * (ir_local_numel(m, d.accum[i]) + 1);
  for (int j = 0; j < d.nroots; j++) {
    if (d.home[j]) continue; /* in the grad arena (mb_home_bytes) */
    int64_t b = 4 * (ir_local_numel(m, d.roots[j]) + 1);
    bytes += b;
    if (deferred_bytes) *deferred_bytes += b;
  }
  arena_free(&a);
  return bytes;
}

void mb_sum_elems(const IrModule *m, const IrFunc *f, int64_t *fused, int64_t *added) {
  *fused = *added = 0;
  Arena a;
  arena_init(&a);
  MbDefer d;
  if (!plan_pp1(m, f, &a, &d)) d.nroots = 0;
  for (int j = 0; j < d.nroots; j++)
    *(d.fused[j] >= 0 ? fused : added) += ir_local_numel(m, d.roots[j]);
  arena_free(&a);
}

int64_t mb_home_bytes(const IrModule *m, const IrFunc *f) {
  Arena a;
  arena_init(&a);
  MbDefer d;
  int64_t bytes = 0;
  if (!plan_pp1(m, f, &a, &d)) d.nroots = 0;
  for (int j = 0; j < d.nroots; j++)
    if (d.home[j]) bytes += mp_align(mp_value_bytes(m, d.home[j]));
  arena_free(&a);
  return bytes;
}

bool mb_defer_of_train(const IrModule *m, const IrFunc *f, Arena *a, MbDefer *d) {
  memset(d, 0, sizeof *d);
  if (!f || strcmp(f->name, "train") != 0 || m->plan.micro_batches <= 1) return false;
  if (m->plan.pp <= 1) return plan_pp1(m, f, a, d) && (d->nroots > 0 || d->nonce > 0);
  PpAssign pa;
  char err[160];
  if (!pp_facts(m, f, &pa, err, sizeof err)) return false;
  unsigned char *up = ARENA_ARRAY(a, unsigned char, f->nodes.len + 1);
  for (int i = 0; i < f->nodes.len; i++) up[i] = pa.part[i] == PPN_U;
  pp_assign_free(&pa);
  mb_defer_plan(m, f, up, a, d);
  return d->nroots > 0 || d->nonce > 0;
}
