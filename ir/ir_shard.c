/* Sharding rules, one per op of ops.def (the SH column), and what the
 * passes and the verifier derive from them.
 *
 * A rule describes a node as factors in the manner of an einsum: every
 * operand and result dim is mapped to the factors it is made of (a mask; a
 * flattened dim such as the rows of layer_norm's statistics has several).
 * Splitting a factor on a mesh axis splits every dim mapped to it; a result
 * without the factor becomes what the factor's `miss` says: P (a reduction:
 * linear's K, sum's axes, the rows of a weight gradient), B (the kernel
 * reduces internally: the vocabulary of a vocab-parallel cross_entropy) or
 * nothing legal. A dim mapped to no factor is never split. On top of the
 * factors the SH column gives the op's linearity (which operands a partial
 * sum P may pass through: add of partials, mul by a replicated value,
 * reshape, ...) and whether it is in the sequence-parallel region.
 *
 * Per mesh axis, a node runs one strategy: NONE (everything B), SPLIT(f) or
 * PASSP (partial sums pass through). ir_shard_apply turns a strategy into
 * the operand placements it needs and the result placements it gives; the
 * verifier checks that some strategy explains each node's placements, and
 * the shard pass picks the cheapest strategy per node and axis.
 *
 * Also here: the collective ops (all_reduce, all_gather, reduce_scatter,
 * all_to_all, all_slice, reshard) with their shape rules (global shapes:
 * a collective changes placements, never the logical tensor) and gradient
 * rules, local shapes of a rank, and the element counts a collective sends. */
#include <stdarg.h>
#include <string.h>

#include "ir.h"
#include "ir_fused.h"

/* ---- building rules ---- */

static int newf(IrShardRule *r, int64_t size, IrFactorMiss miss) {
  MM_ASSERT(r->nf < IR_SH_MAXF);
  r->f[r->nf] = (IrFactor){.size = size, .miss = (uint8_t)miss};
  return r->nf++;
}

static void in_f(IrShardRule *r, int i, int d, int f) {
  if (i < r->nin && d >= 0 && d < IR_MAX_RANK && f >= 0) r->in[i][d] |= 1u << f;
}

static void out_f(IrShardRule *r, int j, int d, int f) {
  if (j < r->nout && d >= 0 && d < IR_MAX_RANK && f >= 0) r->out[j][d] |= 1u << f;
}

static const IrShape *ish(const IrNode *n, int i) {
  return &n->in[i]->shape;
}
static const IrShape *osh(const IrNode *n, int j) {
  return &n->out[j]->shape;
}
static int64_t iattr(const IrNode *n, IrAttrId id) {
  return n->attrs.v[id].i;
}

/* Operand i's leading dims (all but the last `skip`) as new factors shared
 * with result j's leading dims; returns the mask of the factors. */
static uint32_t rows(IrShardRule *r, const IrNode *n, int i, int skip, int j, IrFactorMiss miss) {
  uint32_t mask = 0;
  const IrShape *s = ish(n, i);
  for (int d = 0; d < s->rank - skip; d++) {
    int f = newf(r, s->d[d], miss);
    in_f(r, i, d, f);
    if (j >= 0) out_f(r, j, d, f);
    mask |= 1u << f;
  }
  return mask;
}

/* numpy broadcasting: result dims are factors; operands in `which` (mask of
 * operand indices, aligned at the trailing dim) map non-broadcast dims. */
static void broadcast(IrShardRule *r, const IrNode *n, const IrShape *out, uint64_t which, int j) {
  for (int k = 0; k < out->rank; k++) {
    int f = newf(r, out->d[k], IR_FM_BAD);
    if (j >= 0) out_f(r, j, k, f);
    for (int i = 0; i < n->nin && i < 64; i++) {
      if (!(which >> i & 1)) continue;
      const IrShape *s = ish(n, i);
      int d = k - (out->rank - s->rank);
      if (d >= 0 && s->d[d] == out->d[k]) in_f(r, i, d, f);
    }
  }
}

static void rule_ELEM(const IrNode *n, IrShardRule *r) {
  broadcast(r, n, osh(n, 0), ~0ull, 0);
}

/* adamw, sgd: param, grad and state (the first `k` operands) elementwise;
 * the scalars after them replicated */
static void rule_OPT_STEP(const IrNode *n, IrShardRule *r) {
  int k = n->op == IR_OP_SGD ? 3 : 4;
  broadcast(r, n, ish(n, 0), (1ull << k) - 1, -1);
}

static void rule_FULL(const IrNode *n, IrShardRule *r) {
  for (int d = 0; d < osh(n, 0)->rank; d++) out_f(r, 0, d, newf(r, osh(n, 0)->d[d], IR_FM_BAD));
}

static void rule_SCALAR(const IrNode *n, IrShardRule *r) {
  (void)n, (void)r;
}

/* [..., M, K] @ [..., K, N]: batch dims broadcast, K reduces */
static void rule_MATMUL(const IrNode *n, IrShardRule *r) {
  const IrShape *o = osh(n, 0), *a = ish(n, 0), *b = ish(n, 1);
  for (int k = 0; k < o->rank - 2; k++) {
    int f = newf(r, o->d[k], IR_FM_BAD);
    out_f(r, 0, k, f);
    int da = k - (o->rank - a->rank), db = k - (o->rank - b->rank);
    if (da >= 0 && a->d[da] == o->d[k]) in_f(r, 0, da, f);
    if (db >= 0 && b->d[db] == o->d[k]) in_f(r, 1, db, f);
  }
  int m = newf(r, a->d[a->rank - 2], IR_FM_BAD), kk = newf(r, a->d[a->rank - 1], IR_FM_P),
      nn = newf(r, b->d[b->rank - 1], IR_FM_BAD);
  in_f(r, 0, a->rank - 2, m), out_f(r, 0, o->rank - 2, m);
  in_f(r, 0, a->rank - 1, kk), in_f(r, 1, b->rank - 2, kk);
  in_f(r, 1, b->rank - 1, nn), out_f(r, 0, o->rank - 1, nn);
}

/* x[..., K], w[N, K] -> [..., N] */
static void rule_LINEAR(const IrNode *n, IrShardRule *r) {
  rows(r, n, 0, 1, 0, IR_FM_BAD);
  int k = newf(r, ish(n, 1)->d[1], IR_FM_P), nn = newf(r, ish(n, 1)->d[0], IR_FM_BAD);
  in_f(r, 0, ish(n, 0)->rank - 1, k), in_f(r, 1, 1, k);
  in_f(r, 1, 0, nn), out_f(r, 0, osh(n, 0)->rank - 1, nn);
}

/* dy[..., N], w[N, K] -> [..., K] */
static void rule_LINEAR_GRAD_X(const IrNode *n, IrShardRule *r) {
  rows(r, n, 0, 1, 0, IR_FM_BAD);
  int nn = newf(r, ish(n, 1)->d[0], IR_FM_P), k = newf(r, ish(n, 1)->d[1], IR_FM_BAD);
  in_f(r, 0, ish(n, 0)->rank - 1, nn), in_f(r, 1, 0, nn);
  in_f(r, 1, 1, k), out_f(r, 0, osh(n, 0)->rank - 1, k);
}

/* dy[..., N], x[..., K] -> [N, K], summed over the rows */
static void rule_LINEAR_GRAD_W(const IrNode *n, IrShardRule *r) {
  uint32_t m = rows(r, n, 0, 1, -1, IR_FM_P);
  for (int d = 0; d < ish(n, 1)->rank - 1; d++) r->in[1][d] = r->in[0][d] & m;
  int nn = newf(r, osh(n, 0)->d[0], IR_FM_BAD), k = newf(r, osh(n, 0)->d[1], IR_FM_BAD);
  in_f(r, 0, ish(n, 0)->rank - 1, nn), out_f(r, 0, 0, nn);
  in_f(r, 1, ish(n, 1)->rank - 1, k), out_f(r, 0, 1, k);
}

/* x[B, Cin, ...], w[Cout, Cin, ...], bias[Cout]: B and Cout split, Cin
 * reduces, the spatial dims stay whole (no halo exchange in v1). With Cin
 * split (row-parallel) the result is a partial sum and the bias (whole)
 * is added by the axis's rank 0 only (codegen: lower_conv). */
static void rule_CONV(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD), ci = newf(r, ish(n, 0)->d[1], IR_FM_P),
      co = newf(r, ish(n, 1)->d[0], IR_FM_BAD);
  in_f(r, 0, 0, b), out_f(r, 0, 0, b);
  in_f(r, 0, 1, ci), in_f(r, 1, 1, ci);
  in_f(r, 1, 0, co), out_f(r, 0, 1, co), in_f(r, 2, 0, co);
}

/* dy[B, Cout, ...], w[Cout, Cin, ...] -> dx[B, Cin, ...] */
static void rule_CONV_GRAD_X(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD), co = newf(r, ish(n, 0)->d[1], IR_FM_P),
      ci = newf(r, ish(n, 1)->d[1], IR_FM_BAD);
  in_f(r, 0, 0, b), out_f(r, 0, 0, b);
  in_f(r, 0, 1, co), in_f(r, 1, 0, co);
  in_f(r, 1, 1, ci), out_f(r, 0, 1, ci);
}

/* dy[B, Cout, ...], x[B, Cin, ...] -> dw[Cout, Cin, ...] */
static void rule_CONV_GRAD_W(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_P), co = newf(r, ish(n, 0)->d[1], IR_FM_BAD),
      ci = newf(r, ish(n, 1)->d[1], IR_FM_BAD);
  in_f(r, 0, 0, b), in_f(r, 1, 0, b);
  in_f(r, 0, 1, co), out_f(r, 0, 0, co);
  in_f(r, 1, 1, ci), out_f(r, 0, 1, ci);
}

/* Statistics vectors [rows] hold one entry per row of x: their dim 0 is
 * the flattened row factors. A split by a factor other than the first
 * leaves each rank its rows in local order; the statistics are read only by
 * the matching _grad op, which splits the same way. */
static void stats(IrShardRule *r, uint32_t m, int i, int j) {
  if (i >= 0 && i < r->nin) r->in[i][0] |= m;
  if (j >= 0 && j < r->nout) r->out[j][0] |= m;
}

/* The row dims of norm n's operand i (every dim but the normalised one,
 * layer_norm's axis or the last) as factors, mapped to result j's same
 * dims when j >= 0; their mask. */
static uint32_t norm_rows(IrShardRule *r, const IrNode *n, int i, int j, int cd,
                          IrFactorMiss miss) {
  uint32_t mask = 0;
  const IrShape *s = ish(n, i);
  for (int d = 0; d < s->rank; d++) {
    if (d == cd) continue;
    int f = newf(r, s->d[d], miss);
    in_f(r, i, d, f);
    if (j >= 0) out_f(r, j, d, f);
    mask |= 1u << f;
  }
  return mask;
}

/* layer_norm, rms_norm: x[..., C] (layer_norm {axis}: x[..., C, ...]; w, b [C]) -> y, stats.
 * layer_norm's C splits too, with w, b and y: the kernel all-reduces the rows' partial sums over
 * the axis itself (split statistics), so mean and rstd stay whole (miss B); rms_norm's C stays
 * whole. */
static void rule_NORM(const IrNode *n, IrShardRule *r) {
  int cd = ir_norm_dim(&n->attrs, ish(n, 0));
  uint32_t m = norm_rows(r, n, 0, 0, cd, IR_FM_BAD);
  for (int j = 1; j < n->nout; j++) stats(r, m, -1, j);
  if (n->op != IR_OP_LAYER_NORM) return;
  int c = newf(r, ish(n, 0)->d[cd], IR_FM_B);
  in_f(r, 0, cd, c), out_f(r, 0, cd, c);
  for (int i = 1; i < n->nin; i++) in_f(r, i, 0, c);
}

/* (dy, x, stats..., w?) -> dx, dw, (db): the rows reduce into dw, db;
 * layer_norm_grad's C splits as its forward's (the kernel all-reduces the
 * rows' two partial sums) */
static void rule_NORM_GRAD(const IrNode *n, IrShardRule *r) {
  int nstats = n->op == IR_OP_RMS_NORM_GRAD ? 1 : 2;
  int last = ir_norm_dim(&n->attrs, ish(n, 1));
  uint32_t m = norm_rows(r, n, 1, 0, last, IR_FM_P);
  for (int d = 0; d < ish(n, 1)->rank; d++)
    if (d != last) r->in[0][d] = r->in[1][d];
  for (int i = 2; i < 2 + nstats; i++) stats(r, m, i, -1);
  if (n->op != IR_OP_LAYER_NORM_GRAD) return;
  int c = newf(r, ish(n, 1)->d[last], IR_FM_BAD);
  in_f(r, 0, last, c), in_f(r, 1, last, c), out_f(r, 0, last, c);
  if (n->nin > 4) in_f(r, 4, 0, c);
  for (int j = 1; j < n->nout; j++) out_f(r, j, 0, c);
}

/* group_norm x[B, C, ...] (w, b [C]) per sample over channel groups and
 * space, with statistics [B * G]: the batch splits, and the groups (G
 * contiguous blocks of C / G channels; a factor of size G, so only a tp
 * that divides G splits it): each rank normalises its own groups, no
 * communication */
static void rule_BATCH_STATS(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD);
  in_f(r, 0, 0, b), out_f(r, 0, 0, b);
  uint32_t m = 1u << b;
  if (n->op == IR_OP_GROUP_NORM) {
    int g = newf(r, iattr(n, IR_ATTR_GROUPS), IR_FM_BAD);
    in_f(r, 0, 1, g), out_f(r, 0, 1, g);
    for (int i = 1; i < n->nin; i++) in_f(r, i, 0, g);
    m |= 1u << g;
  }
  for (int j = 1; j < n->nout; j++) stats(r, m, -1, j);
}

/* its gradient (dy, x, stats..., w?) -> dx, dw, db: the batch reduces into
 * dw, db; the groups split as the forward's */
static void rule_BATCH_STATS_GRAD(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 1)->d[0], IR_FM_P);
  in_f(r, 0, 0, b), in_f(r, 1, 0, b), out_f(r, 0, 0, b);
  uint32_t m = 1u << b;
  if (n->op == IR_OP_GROUP_NORM_GRAD) {
    int g = newf(r, iattr(n, IR_ATTR_GROUPS), IR_FM_BAD);
    in_f(r, 0, 1, g), in_f(r, 1, 1, g), out_f(r, 0, 1, g);
    if (n->nin > 4) in_f(r, 4, 0, g);
    for (int j = 1; j < n->nout; j++) out_f(r, j, 0, g);
    m |= 1u << g;
  }
  stats(r, m, 2, -1), stats(r, m, 3, -1);
}

/* sum, mean: the reduced axes reduce (mean divides by the global count) */
static void rule_REDUCE(const IrNode *n, IrShardRule *r) {
  const IrAttrVal *ax = &n->attrs.v[IR_ATTR_AXES];
  bool keep = ir_attrs_has(&n->attrs, IR_ATTR_KEEPDIM) && n->attrs.v[IR_ATTR_KEEPDIM].i;
  bool red[IR_MAX_RANK] = {0};
  for (int i = 0; i < ax->nints; i++)
    if (ax->ints[i] >= 0 && ax->ints[i] < IR_MAX_RANK) red[ax->ints[i]] = true;
  int o = 0;
  for (int d = 0; d < ish(n, 0)->rank; d++) {
    int f = newf(r, ish(n, 0)->d[d], red[d] ? IR_FM_P : IR_FM_BAD);
    in_f(r, 0, d, f);
    if (!red[d]) out_f(r, 0, o, f);
    if (!red[d] || keep) o++;
  }
}

/* Input dim i and result dim j of a reshape split alike when the products
 * of the dims from each to the end are equal (the same flat period). */
static void rule_RESHAPE(const IrNode *n, IrShardRule *r) {
  const IrShape *a = ish(n, 0), *b = osh(n, 0);
  int64_t sa = 1, sb[IR_MAX_RANK + 1];
  sb[b->rank] = 1;
  for (int j = b->rank - 1; j >= 0; j--) sb[j] = sb[j + 1] * b->d[j];
  for (int i = a->rank - 1; i >= 0; i--) {
    sa *= a->d[i];
    if (a->d[i] == 1) continue;
    for (int j = 0; j < b->rank; j++)
      if (sb[j] == sa && b->d[j] > 1) {
        int f = newf(r, a->d[i] < b->d[j] ? a->d[i] : b->d[j], IR_FM_BAD);
        in_f(r, 0, i, f), out_f(r, 0, j, f);
        break;
      }
  }
}

static void rule_TRANSPOSE(const IrNode *n, IrShardRule *r) {
  const IrAttrVal *p = &n->attrs.v[IR_ATTR_PERM];
  for (int k = 0; k < p->nints && k < osh(n, 0)->rank; k++) {
    int f = newf(r, osh(n, 0)->d[k], IR_FM_BAD);
    out_f(r, 0, k, f), in_f(r, 0, (int)p->ints[k], f);
  }
}

/* slice, pad_slice, concat, softmax and its gradient: every dim but `axis`,
 * all operands alike */
static void rule_AXIS_WHOLE(const IrNode *n, IrShardRule *r) {
  int ax = (int)iattr(n, IR_ATTR_AXIS);
  for (int d = 0; d < osh(n, 0)->rank; d++) {
    if (d == ax) continue;
    int f = newf(r, osh(n, 0)->d[d], IR_FM_BAD);
    for (int i = 0; i < n->nin; i++) in_f(r, i, d, f);
    out_f(r, 0, d, f);
  }
}

/* expand: broadcast dims are result-only factors */
static void rule_EXPAND(const IrNode *n, IrShardRule *r) {
  broadcast(r, n, osh(n, 0), 1, 0);
}

/* sum_to: x summed down to `shape`: the summed dims reduce */
static void rule_SUM_TO(const IrNode *n, IrShardRule *r) {
  const IrShape *x = ish(n, 0), *o = osh(n, 0);
  for (int d = 0; d < x->rank; d++) {
    int k = d - (x->rank - o->rank);
    bool kept = k >= 0 && o->d[k] == x->d[d];
    int f = newf(r, x->d[d], kept ? IR_FM_BAD : IR_FM_P);
    in_f(r, 0, d, f);
    if (kept) out_f(r, 0, k, f);
  }
}

/* embedding(ids[...], table[V, C]) -> [..., C]: a vocab split looks up the
 * rank's range only, so the result is a partial sum */
static void rule_EMBEDDING(const IrNode *n, IrShardRule *r) {
  rows(r, n, 0, 0, 0, IR_FM_BAD);
  int v = newf(r, ish(n, 1)->d[0], IR_FM_P), c = newf(r, ish(n, 1)->d[1], IR_FM_BAD);
  in_f(r, 1, 0, v);
  in_f(r, 1, 1, c), out_f(r, 0, osh(n, 0)->rank - 1, c);
}

/* embedding_grad(dy[..., C], ids[...]) -> [V, C]: the rows reduce; V is a
 * result-only factor (each rank scatters the ids of its range) */
static void rule_EMBEDDING_GRAD(const IrNode *n, IrShardRule *r) {
  uint32_t m = rows(r, n, 1, 0, -1, IR_FM_P);
  for (int d = 0; d < ish(n, 1)->rank; d++) r->in[0][d] = r->in[1][d] & m;
  int v = newf(r, osh(n, 0)->d[0], IR_FM_BAD), c = newf(r, osh(n, 0)->d[1], IR_FM_BAD);
  out_f(r, 0, 0, v);
  in_f(r, 0, ish(n, 0)->rank - 1, c), out_f(r, 0, 1, c);
}

/* rope x[B, T, H, D]: B, T (kernels take the global position of their
 * first row) and H split; D stays whole */
static void rule_ROPE(const IrNode *n, IrShardRule *r) {
  for (int d = 0; d < 3 && d < ish(n, 0)->rank; d++) {
    int f = newf(r, ish(n, 0)->d[d], IR_FM_BAD);
    in_f(r, 0, d, f), out_f(r, 0, d, f);
    if (d == 0 && n->nin > 1) in_f(r, 1, 0, f); /* pos[B] follows the batch */
  }
}

/* timestep_embedding t[...] -> [..., dim]: t's dims split as they are; dim whole */
static void rule_ROWS(const IrNode *n, IrShardRule *r) {
  rows(r, n, 0, 0, 0, IR_FM_BAD);
  out_f(r, 0, ish(n, 0)->rank, newf(r, osh(n, 0)->d[ish(n, 0)->rank], IR_FM_BAD));
}

/* place(x[B, T, C], src[B, N, C], ids[B, T]) -> [B, T, C]: batch and
 * channels split; T and N stay whole (the token positions are global) */
static void rule_PLACE(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD), c = newf(r, ish(n, 0)->d[2], IR_FM_BAD);
  for (int i = 0; i < 3; i++) in_f(r, i, 0, b);
  in_f(r, 0, 2, c), in_f(r, 1, 2, c);
  out_f(r, 0, 0, b), out_f(r, 0, 2, c);
}

/* haar2d/3d x[B, C, ...] -> [B, S*C, ...] and their inverses: batch and
 * channels split (result channel c*S + k belongs to input channel c, so a
 * block of channels maps to a block); time and space stay whole */
static void rule_HAAR(const IrNode *n, IrShardRule *r) {
  int64_t c_in = ish(n, 0)->d[1], c_out = osh(n, 0)->d[1];
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD), c = newf(r, c_in < c_out ? c_in : c_out, IR_FM_BAD);
  in_f(r, 0, 0, b), out_f(r, 0, 0, b);
  in_f(r, 0, 1, c), out_f(r, 0, 1, c);
}

/* place_grad(dy[B, T, C], ids[B, T]) -> dx[B, T, C], dsrc[B, N, C] */
static void rule_PLACE_GRAD(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD), c = newf(r, ish(n, 0)->d[2], IR_FM_BAD);
  in_f(r, 0, 0, b), in_f(r, 1, 0, b), in_f(r, 0, 2, c);
  for (int j = 0; j < 2; j++) out_f(r, j, 0, b), out_f(r, j, 2, c);
}

/* attention q[B, T, H, D], k, v[B, S, KVH, D] -> out[B, T, H, Dv],
 * lse[B, H, T]: batch and KV heads split (a query head block follows its
 * KV heads: H is KVH x group, KVH the major part; Ulysses splits them on
 * cp); the sequence stays whole unless the node is a ring attention. The
 * key mask [B, S] (operand 3; attention_grad's 6) follows the batch. */
static bool ring(const IrNode *n) {
  return ir_attrs_has(&n->attrs, IR_ATTR_RING) && n->attrs.v[IR_ATTR_RING].i &&
         ish(n, n->op == IR_OP_ATTENTION ? 0 : 1)->d[1] ==
             ish(n, n->op == IR_OP_ATTENTION ? 1 : 2)->d[1];
}

/* With {ring = true} (self-attention), the sequence is a factor of q, k, v,
 * out and lse: split on cp, the kernel passes the key/value blocks around
 * the axis itself (runtime/comm/mmrt_ring.c). */
static void rule_ATTENTION(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 0)->d[0], IR_FM_BAD), h = newf(r, ish(n, 1)->d[2], IR_FM_BAD);
  for (int i = 0; i < 3; i++) in_f(r, i, 0, b), in_f(r, i, 2, h);
  if (n->nin > 3) in_f(r, 3, 0, b);
  out_f(r, 0, 0, b), out_f(r, 0, 2, h);
  out_f(r, 1, 0, b), out_f(r, 1, 1, h);
  if (!ring(n)) return;
  int t = newf(r, ish(n, 0)->d[1], IR_FM_BAD);
  for (int i = 0; i < 3; i++) in_f(r, i, 1, t);
  out_f(r, 0, 1, t), out_f(r, 1, 2, t);
}

/* attention_grad(dy, q, k, v, out, lse) -> dq, dk, dv */
static void rule_ATTENTION_GRAD(const IrNode *n, IrShardRule *r) {
  int b = newf(r, ish(n, 1)->d[0], IR_FM_BAD), h = newf(r, ish(n, 2)->d[2], IR_FM_BAD);
  for (int i = 0; i < 5; i++) in_f(r, i, 0, b), in_f(r, i, 2, h);
  in_f(r, 5, 0, b), in_f(r, 5, 1, h);
  if (n->nin > 6) in_f(r, 6, 0, b);
  for (int j = 0; j < 3; j++) out_f(r, j, 0, b), out_f(r, j, 2, h);
  if (!ring(n)) return;
  int t = newf(r, ish(n, 1)->d[1], IR_FM_BAD);
  for (int i = 0; i < 5; i++) in_f(r, i, 1, t);
  in_f(r, 5, 2, t);
  for (int j = 0; j < 3; j++) out_f(r, j, 1, t);
}

bool ir_cp_balanced(const IrModule *m) {
  if (m->mesh[IR_AX_CP] <= 1) return false;
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      const IrNode *n = f->nodes.items[i];
      if ((n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTENTION_GRAD) && ring(n) &&
          n->attrs.v[IR_ATTR_CAUSAL].i)
        return true;
    }
  }
  return false;
}

/* cross_entropy(logits[..., V], labels[...]) -> loss[], lse[N]: the rows
 * reduce into the loss (each rank's share of the global mean); a vocab
 * split is Megatron's vocab-parallel loss: the kernel reduces the max, the
 * sum of exponentials and the target logit over the axis itself, so loss
 * and lse stay whole and the full logits are never gathered */
static void rule_CROSS_ENTROPY(const IrNode *n, IrShardRule *r) {
  uint32_t m = rows(r, n, 0, 1, -1, IR_FM_P);
  for (int d = 0; d < ish(n, 1)->rank; d++) r->in[1][d] = r->in[0][d];
  stats(r, m, -1, 1);
  in_f(r, 0, ish(n, 0)->rank - 1, newf(r, ish(n, 0)->d[ish(n, 0)->rank - 1], IR_FM_B));
}

/* cross_entropy_grad(dloss, logits, labels, lse) -> dlogits */
static void rule_CROSS_ENTROPY_GRAD(const IrNode *n, IrShardRule *r) {
  uint32_t m = rows(r, n, 1, 1, 0, IR_FM_BAD);
  for (int d = 0; d < ish(n, 2)->rank; d++) r->in[2][d] = r->in[1][d];
  stats(r, m, 3, -1);
  int v = newf(r, ish(n, 1)->d[ish(n, 1)->rank - 1], IR_FM_BAD);
  in_f(r, 1, ish(n, 1)->rank - 1, v), out_f(r, 0, osh(n, 0)->rank - 1, v);
}

/* mse(a, b) -> loss[]: every dim reduces */
static void rule_MSE(const IrNode *n, IrShardRule *r) {
  for (int d = 0; d < ish(n, 0)->rank; d++) {
    int f = newf(r, ish(n, 0)->d[d], IR_FM_P);
    in_f(r, 0, d, f), in_f(r, 1, d, f);
  }
}

static void rule_FREE(const IrNode *n, IrShardRule *r) {
  (void)n, r->kind = IR_SK_FREE;
}
static void rule_COLLECTIVE(const IrNode *n, IrShardRule *r) {
  (void)n, r->kind = IR_SK_COLLECTIVE;
}
static void rule_RESHARD(const IrNode *n, IrShardRule *r) {
  (void)n, r->kind = IR_SK_RESHARD;
}

/* The rule builders, by the SH column's rule name. */
static void (*const rule_fns[IR_SHR_COUNT])(const IrNode *, IrShardRule *) = {
    [IR_SHR_ELEM] = rule_ELEM,
    [IR_SHR_OPT_STEP] = rule_OPT_STEP,
    [IR_SHR_FULL] = rule_FULL,
    [IR_SHR_SCALAR] = rule_SCALAR,
    [IR_SHR_MATMUL] = rule_MATMUL,
    [IR_SHR_LINEAR] = rule_LINEAR,
    [IR_SHR_LINEAR_GRAD_X] = rule_LINEAR_GRAD_X,
    [IR_SHR_LINEAR_GRAD_W] = rule_LINEAR_GRAD_W,
    [IR_SHR_CONV] = rule_CONV,
    [IR_SHR_CONV_GRAD_X] = rule_CONV_GRAD_X,
    [IR_SHR_CONV_GRAD_W] = rule_CONV_GRAD_W,
    [IR_SHR_NORM] = rule_NORM,
    [IR_SHR_NORM_GRAD] = rule_NORM_GRAD,
    [IR_SHR_BATCH_STATS] = rule_BATCH_STATS,
    [IR_SHR_BATCH_STATS_GRAD] = rule_BATCH_STATS_GRAD,
    [IR_SHR_REDUCE] = rule_REDUCE,
    [IR_SHR_RESHAPE] = rule_RESHAPE,
    [IR_SHR_TRANSPOSE] = rule_TRANSPOSE,
    [IR_SHR_AXIS_WHOLE] = rule_AXIS_WHOLE,
    [IR_SHR_EXPAND] = rule_EXPAND,
    [IR_SHR_SUM_TO] = rule_SUM_TO,
    [IR_SHR_EMBEDDING] = rule_EMBEDDING,
    [IR_SHR_EMBEDDING_GRAD] = rule_EMBEDDING_GRAD,
    [IR_SHR_ROPE] = rule_ROPE,
    [IR_SHR_ATTENTION] = rule_ATTENTION,
    [IR_SHR_ATTENTION_GRAD] = rule_ATTENTION_GRAD,
    [IR_SHR_CROSS_ENTROPY] = rule_CROSS_ENTROPY,
    [IR_SHR_CROSS_ENTROPY_GRAD] = rule_CROSS_ENTROPY_GRAD,
    [IR_SHR_MSE] = rule_MSE,
    [IR_SHR_PLACE] = rule_PLACE,
    [IR_SHR_PLACE_GRAD] = rule_PLACE_GRAD,
    [IR_SHR_HAAR] = rule_HAAR,
    [IR_SHR_ROWS] = rule_ROWS,
    [IR_SHR_FREE] = rule_FREE,
    [IR_SHR_COLLECTIVE] = rule_COLLECTIVE,
    [IR_SHR_RESHARD] = rule_RESHARD,
};

/* The f32 cast of a bf16 weight gradient (passes/precision.c) lets a
 * partial sum through: the master gradient is reduced in f32, after the
 * cast. x is the cast's operand, y its result; either NULL when it is a
 * temporary inside a fused loop (a temporary has no producer or role). The same rule
 * judges a standalone cast and a cast inside a fused node, so a cast the
 * shard pass placed stays explained after `fuse` absorbs it. */
static bool grad_cast(const IrValue *x, const IrValue *y) {
  const IrNode *g = x ? x->def : NULL;
  return (y && y->grad_of) || (g && (g->op == IR_OP_LINEAR_GRAD_W || g->op == IR_OP_CONV2D_GRAD_W ||
                                     g->op == IR_OP_CONV3D_GRAD_W));
}

void ir_shard_rule(const IrNode *n, IrShardRule *r) {
  memset(r, 0, sizeof *r);
  r->nin = n->nin < 64 ? n->nin : 64;
  r->nout = n->nout;
  r->pflags = ir_ops[n->op].shard_pflags;
  if (n->op == IR_OP_CAST && n->nout == 1 && n->nin == 1 && grad_cast(n->in[0], n->out[0]))
    r->pflags |= IR_SHP_FIRST;
  r->kind = IR_SK_FACTORS;
  rule_fns[ir_ops[n->op].shard](n, r);
}

/* ---- strategies ---- */

static const IrPlacement PB = {IR_PL_B, 0}, PP = {IR_PL_P, 0};
static IrPlacement PS(int d) {
  return (IrPlacement){IR_PL_S, d};
}

bool ir_placement_eq(IrPlacement a, IrPlacement b) {
  return a.kind == b.kind && (a.kind != IR_PL_S || a.dim == b.dim);
}

/* The dim of a mask row mapped to factor f, or -1; -2 if several are. */
static int dim_of(const uint32_t *dims, int rank, int f) {
  int d = -1;
  for (int k = 0; k < rank; k++)
    if (dims[k] >> f & 1) d = d == -1 ? k : -2;
  return d;
}

/* Whether a fused node with partial sums in the operands of `mask` gives a
 * partial sum: every instruction must let them through as its op does. */
static bool prog_passes_p(const IrNode *n, uint32_t mask) {
  if (n->op != IR_OP_FUSED || n->nin > 32) return false;
  Arena a;
  arena_init(&a);
  IrFusedProg p;
  ir_fused_of(n, &p, &a);
  bool *isp = ARENA_ARRAY(&a, bool, p.n ? p.n : 1), ok = p.n > 0;
  for (int k = 0; k < p.n && ok; k++) {
    const IrFusedInstr *in = &p.ins[k];
    int np = 0;
    bool first = false;
    for (int j = 0; j < in->nargs; j++) {
      int x = in->arg[j];
      bool pj = x >= 0 ? isp[x] : (mask >> (-1 - x) & 1);
      np += pj;
      if (j == 0) first = pj;
    }
    unsigned pf = ir_ops[in->op].shard_pflags;
    /* a cast: as standalone, its operand the node's when it reads one, its
     * result the node's when it is the last instruction */
    if (in->op == IR_OP_CAST && in->nargs == 1 &&
        grad_cast(in->arg[0] < 0 ? n->in[-1 - in->arg[0]] : NULL, k == p.n - 1 ? n->out[0] : NULL))
      pf |= IR_SHP_FIRST;
    isp[k] = np > 0;
    if (np == 0) continue;
    if (pf & IR_SHP_ALL)
      ok = np == in->nargs;
    else if (pf & IR_SHP_ONE)
      ok = np == 1;
    else if (pf & IR_SHP_FIRST)
      ok = np == 1 && first;
    else
      ok = false;
  }
  ok = ok && isp[p.n - 1];
  arena_free(&a);
  return ok;
}

bool ir_shard_apply(const IrShardRule *r, const IrNode *n, IrStrategy s, IrPlacement *req,
                    IrPlacement *out) {
  if (r->kind != IR_SK_FACTORS) return false;
  for (int i = 0; i < r->nin; i++) req[i] = PB;
  for (int j = 0; j < r->nout; j++) out[j] = PB;
  switch (s.kind) {
    case IR_ST_NONE: return true;
    case IR_ST_SPLIT: {
      if (s.factor < 0 || s.factor >= r->nf) return false;
      const IrFactor *f = &r->f[s.factor];
      for (int i = 0; i < r->nin; i++) {
        int d = dim_of(r->in[i], n->in[i]->shape.rank, s.factor);
        if (d == -2) return false;
        if (d >= 0) req[i] = PS(d);
      }
      for (int j = 0; j < r->nout; j++) {
        int d = dim_of(r->out[j], n->out[j]->shape.rank, s.factor);
        if (d == -2) return false;
        if (d >= 0)
          out[j] = PS(d);
        else if (f->miss == IR_FM_P)
          out[j] = PP;
        else if (f->miss == IR_FM_BAD)
          return false;
      }
      return true;
    }
    case IR_ST_PASSP: {
      unsigned pf = r->pflags;
      if (r->nout != 1) return false;
      if (pf & IR_SHP_ALL) {
        for (int i = 0; i < r->nin; i++) req[i] = PP;
      } else if (pf & IR_SHP_ONE) {
        if (s.factor < 0 || s.factor >= r->nin) return false;
        req[s.factor] = PP;
      } else if (pf & IR_SHP_FIRST) {
        if (r->nin < 1) return false;
        req[0] = PP;
      } else if (pf & IR_SHP_PROG) {
        if (!s.factor || !prog_passes_p(n, (uint32_t)s.factor)) return false;
        for (int i = 0; i < r->nin && i < 32; i++)
          if ((uint32_t)s.factor >> i & 1) req[i] = PP;
      } else {
        return false;
      }
      out[0] = PP;
      return true;
    }
  }
  return false;
}

int ir_shard_strategies(const IrShardRule *r, const IrNode *n, int a, IrStrategy *out, int max) {
  int k = 0;
  if (r->kind != IR_SK_FACTORS) return 0;
  if (r->pflags & IR_SHP_PROG) {
    uint32_t mask = 0;
    for (int i = 0; i < n->nin && i < 32; i++)
      if (n->in[i]->pl[a].kind == IR_PL_P) mask |= 1u << i;
    if (mask && k < max) out[k++] = (IrStrategy){IR_ST_PASSP, (int)mask};
  }
  if (k < max) out[k++] = (IrStrategy){IR_ST_NONE, -1};
  for (int f = 0; f < r->nf && k < max; f++) out[k++] = (IrStrategy){IR_ST_SPLIT, f};
  if (r->pflags & IR_SHP_ONE) {
    for (int i = 0; i < r->nin && k < max; i++) out[k++] = (IrStrategy){IR_ST_PASSP, i};
  } else if (r->pflags & (IR_SHP_ALL | IR_SHP_FIRST)) {
    if (k < max) out[k++] = (IrStrategy){IR_ST_PASSP, 0};
  }
  return k;
}

static const char *pl_str(char *buf, size_t n, IrPlacement p) {
  if (p.kind == IR_PL_S)
    snprintf(buf, n, "S(%d)", p.dim);
  else
    snprintf(buf, n, "%s", p.kind == IR_PL_P ? "P" : "B");
  return buf;
}

const char *ir_placement_str(char *buf, size_t n, IrPlacement p) {
  return pl_str(buf, n, p);
}

static bool check_collective(const IrModule *m, const IrNode *n, char *err, size_t errlen) {
  if (n->nin != 1 || n->nout != 1) return true; /* arity is reported elsewhere */
  const IrValue *x = n->in[0], *y = n->out[0];
  if (n->op == IR_OP_RESHARD) return true;
  int a = (int)n->attrs.v[IR_ATTR_MESH].i;
  if (a < 0 || a >= IR_NAXES) {
    snprintf(err, errlen, "mesh axis #%d is out of range", a);
    return false;
  }
  for (int b = 0; b < IR_NAXES; b++)
    if (b != a && !ir_placement_eq(x->pl[b], y->pl[b])) {
      snprintf(err, errlen, "changes the placement on %s, but it acts on %s",
               ir_axis_name((IrAxis)b), ir_axis_name((IrAxis)a));
      return false;
    }
  int dim = (int)n->attrs.v[IR_ATTR_DIM].i, to = (int)n->attrs.v[IR_ATTR_TO].i;
  IrPlacement want_in, want_out;
  switch (n->op) {
    case IR_OP_ALL_REDUCE: want_in = PP, want_out = PB; break;
    case IR_OP_REDUCE_SCATTER: want_in = PP, want_out = PS(dim); break;
    case IR_OP_ALL_GATHER: want_in = PS(dim), want_out = PB; break;
    case IR_OP_ALL_TO_ALL: want_in = PS(dim), want_out = PS(to); break;
    case IR_OP_ALL_SLICE: want_in = PB, want_out = PS(dim); break;
    default: return true;
  }
  (void)m;
  if (!ir_placement_eq(x->pl[a], want_in) || !ir_placement_eq(y->pl[a], want_out)) {
    char b1[16], b2[16], b3[16], b4[16];
    snprintf(err, errlen, "takes %s to %s on %s, but its operand is %s and its result %s",
             pl_str(b1, sizeof b1, want_in), pl_str(b2, sizeof b2, want_out),
             ir_axis_name((IrAxis)a), pl_str(b3, sizeof b3, x->pl[a]),
             pl_str(b4, sizeof b4, y->pl[a]));
    return false;
  }
  return true;
}

bool ir_shard_check_node(const IrModule *m, const IrNode *n, char *err, size_t errlen) {
  err[0] = 0;
  for (int i = 0; i < n->nin; i++)
    if (!n->in[i]) return true;
  for (int j = 0; j < n->nout; j++)
    if (!n->out[j]) return true;
  IrShardRule r;
  ir_shard_rule(n, &r);
  if (r.kind == IR_SK_COLLECTIVE || r.kind == IR_SK_RESHARD)
    return check_collective(m, n, err, errlen);
  for (int a = 0; a < IR_NAXES; a++) {
    if (m->mesh[a] <= 1) continue;
    if (r.kind == IR_SK_FREE) {
      bool ok = true;
      for (int i = 0; i < n->nin; i++) ok = ok && n->in[i]->pl[a].kind != IR_PL_P;
      for (int j = 0; j < n->nout; j++) ok = ok && n->out[j]->pl[a].kind == IR_PL_B;
      if (ok) continue;
    } else {
      IrStrategy st[IR_SH_MAXF + 66];
      int ns = ir_shard_strategies(&r, n, a, st, (int)(sizeof st / sizeof st[0]));
      bool found = false;
      for (int k = 0; k < ns && !found; k++) {
        IrPlacement req[64], out[4];
        if (!ir_shard_apply(&r, n, st[k], req, out)) continue;
        bool eq = true;
        for (int i = 0; i < r.nin && eq; i++) eq = ir_placement_eq(req[i], n->in[i]->pl[a]);
        for (int j = 0; j < r.nout && eq; j++) eq = ir_placement_eq(out[j], n->out[j]->pl[a]);
        found = eq;
      }
      if (found) continue;
    }
    /* describe what there is */
    size_t k =
        (size_t)snprintf(err, errlen, "no sharding of %s explains its placements on %s (operands ",
                         ir_ops[n->op].name, ir_axis_name((IrAxis)a));
    for (int i = 0; i < n->nin && k < errlen; i++) {
      char b[16];
      k += (size_t)snprintf(err + k, errlen - k, "%s%s", i ? ", " : "",
                            pl_str(b, sizeof b, n->in[i]->pl[a]));
    }
    if (k < errlen) k += (size_t)snprintf(err + k, errlen - k, "; results ");
    for (int j = 0; j < n->nout && k < errlen; j++) {
      char b[16];
      k += (size_t)snprintf(err + k, errlen - k, "%s%s", j ? ", " : "",
                            pl_str(b, sizeof b, n->out[j]->pl[a]));
    }
    if (k < errlen) snprintf(err + k, errlen - k, ")");
    return false;
  }
  return true;
}

/* ---- ranks and local shapes ---- */

int ir_world_size(const IrModule *m) {
  return (int)mesh_product(m->mesh, IR_NAXES);
}

bool ir_one_rank_first_stage(const IrModule *m) {
  MmSubPlan s0;
  return m->plan.nsubplans == 2 && mm_subplan_parse(m->plan.subplans[0], &s0) &&
         mm_subplan_one_rank(&m->plan, &s0);
}

/* the numbering of support/mesh_axes.h over the IR's axes: rank = (dp * cp +
 * cp) * tp + tp, tp varies fastest (a tp group is consecutive ranks) */
void ir_rank_coords(const IrModule *m, int rank, int coord[IR_NAXES]) {
  mesh_coords(m->mesh, rank, coord, IR_NAXES);
}

int ir_rank_of(const IrModule *m, const int coord[IR_NAXES]) {
  return mesh_rank_of(m->mesh, coord, IR_NAXES);
}

void ir_local_shape(const IrModule *m, const IrPlacement *pl, const IrShape *global,
                    IrShape *local) {
  *local = *global;
  for (int a = 0; a < IR_NAXES; a++)
    if (pl[a].kind == IR_PL_S && pl[a].dim >= 0 && pl[a].dim < local->rank && m->mesh[a] > 0)
      local->d[pl[a].dim] /= m->mesh[a];
}

int64_t ir_local_numel(const IrModule *m, const IrValue *v) {
  IrShape s;
  ir_local_shape(m, v->pl, &v->shape, &s);
  return ir_numel(&s);
}

bool ir_op_is_collective(IrOp op) {
  return (ir_ops[op].flags & OPF_COLLECTIVE) != 0;
}

/* Ring algorithms on a group of n ranks, per rank: all_reduce sends
 * 2 (n - 1) / n of the tensor, all_gather and reduce_scatter (n - 1) / n of
 * the full tensor, all_to_all (n - 1) / n of the local piece. */
int64_t ir_collective_elems(const IrModule *m, const IrNode *n, int64_t *msg) {
  if (!ir_op_is_collective(n->op) || n->nin != 1 || n->nout != 1) {
    if (msg) *msg = 0;
    return 0;
  }
  int a = (int)n->attrs.v[IR_ATTR_MESH].i;
  int64_t g = a >= 0 && a < IR_NAXES ? m->mesh[a] : 1;
  /* the message: the tensor on the axis' group, i.e. local on the other axes */
  const IrValue *full = n->op == IR_OP_ALL_GATHER ? n->out[0] : n->in[0];
  int64_t t = ir_local_numel(m, full);
  if (msg) *msg = t;
  switch (n->op) {
    case IR_OP_ALL_REDUCE: return 2 * t * (g - 1) / g;
    case IR_OP_ALL_GATHER:
    case IR_OP_REDUCE_SCATTER: return t * (g - 1) / g;
    case IR_OP_ALL_TO_ALL: return t * (g - 1) / g;
    default: return 0;
  }
}

/* ---- the collective ops: shape rules ---- */

static bool same(IrShapeCtx *cx) {
  cx->out_dtype[0] = cx->in_dtype[0];
  cx->out_shape[0] = *cx->in_shape[0];
  return true;
}

static bool mesh_attr(IrShapeCtx *cx) {
  int64_t a = cx->node->attrs.v[IR_ATTR_MESH].i;
  if (a < 0 || a >= IR_NAXES)
    return ir_shape_fail(cx, -1, "mesh axis #%lld is out of range", (long long)a);
  return true;
}

static bool dim_attr(IrShapeCtx *cx, IrAttrId id) {
  int64_t d = cx->node->attrs.v[id].i;
  if (d < 0 || d >= cx->in_shape[0]->rank)
    return ir_shape_fail(cx, -1, "%s %lld is out of range for rank %d", ir_attrs[id].name,
                         (long long)d, cx->in_shape[0]->rank);
  return true;
}

bool ir_shape_ALL_REDUCE(IrShapeCtx *cx) {
  return mesh_attr(cx) && same(cx);
}
bool ir_shape_ALL_GATHER(IrShapeCtx *cx) {
  return mesh_attr(cx) && dim_attr(cx, IR_ATTR_DIM) && same(cx);
}
bool ir_shape_REDUCE_SCATTER(IrShapeCtx *cx) {
  return mesh_attr(cx) && dim_attr(cx, IR_ATTR_DIM) && same(cx);
}
bool ir_shape_ALL_SLICE(IrShapeCtx *cx) {
  return mesh_attr(cx) && dim_attr(cx, IR_ATTR_DIM) && same(cx);
}
bool ir_shape_RESHARD(IrShapeCtx *cx) {
  return same(cx);
}
bool ir_shape_BUCKET_WAIT(IrShapeCtx *cx) {
  int64_t k = cx->node->attrs.v[IR_ATTR_BUCKET].i;
  if (k < 0 || k >= 1 << 20)
    return ir_shape_fail(cx, -1, "bucket must be between 0 and %d, not %lld", (1 << 20) - 1,
                         (long long)k);
  return true;
}

bool ir_shape_ALL_TO_ALL(IrShapeCtx *cx) {
  if (!mesh_attr(cx) || !dim_attr(cx, IR_ATTR_DIM) || !dim_attr(cx, IR_ATTR_TO)) return false;
  if (cx->node->attrs.v[IR_ATTR_DIM].i == cx->node->attrs.v[IR_ATTR_TO].i)
    return ir_shape_fail(cx, -1, "dim and to are both %lld",
                         (long long)cx->node->attrs.v[IR_ATTR_DIM].i);
  return same(cx);
}

/* ---- the collective ops: gradient rules ----
 * Cotangents follow Megatron's (and JAX's) convention: the cotangent of a
 * replicated value that feeds split computation is a partial sum. So
 *   all_reduce (P -> B)        <-> identity (the B cotangent is each partial's)
 *   all_gather (S(d) -> B)     <-> reduce_scatter (P -> S(d)); with a
 *                                  replicated cotangent, a local all_slice
 *   reduce_scatter (P -> S(d)) <-> all_gather (S(d) -> B)
 *   all_to_all (S(i) -> S(j))  <-> all_to_all (S(j) -> S(i))
 *   all_slice (B -> S(d))      <-> all_gather (S(d) -> B)
 *   reshard (X -> Y)           <-> reshard (Y' -> X'), P read as B
 * The emitted values carry their placements; everything else about them is
 * the forward value's. */

static IrValue *emit1(IrGradCtx *cx, IrOp op, IrValue *x, IrAttrs *a, const IrPlacement *pl) {
  char err[400];
  IrNode *n = ir_build(cx->b, op, &x, 1, a, cx->node->loc, err, sizeof err, NULL);
  if (!n) {
    snprintf(cx->err, cx->errlen, "gradient of %s: %s", ir_ops[cx->node->op].name, err);
    return NULL;
  }
  memcpy(n->out[0]->pl, pl, sizeof n->out[0]->pl);
  return n->out[0];
}

static IrValue *coll(IrGradCtx *cx, IrOp op, IrValue *dy, int axis, int dim, int to,
                     const IrPlacement *pl) {
  IrAttrs a = {0};
  ir_attrs_set_mesh(&a, IR_ATTR_MESH, (IrAxis)axis);
  if (op != IR_OP_ALL_REDUCE) ir_attrs_set_int(&a, IR_ATTR_DIM, dim);
  if (op == IR_OP_ALL_TO_ALL) ir_attrs_set_int(&a, IR_ATTR_TO, to);
  return emit1(cx, op, dy, &a, pl);
}

static int axis_of(const IrGradCtx *cx) {
  return (int)cx->node->attrs.v[IR_ATTR_MESH].i;
}
static int dim_of_node(const IrGradCtx *cx) {
  return (int)cx->node->attrs.v[IR_ATTR_DIM].i;
}

/* the placements of dy with axis a set to p */
static void with(const IrValue *dy, int a, IrPlacement p, IrPlacement *pl) {
  memcpy(pl, dy->pl, sizeof(IrPlacement) * IR_NAXES);
  pl[a] = p;
}

bool ir_grad_ALL_REDUCE(IrGradCtx *cx) {
  if (cx->need[0]) cx->din[0] = cx->dout[0];
  return true;
}

bool ir_grad_ALL_GATHER(IrGradCtx *cx) {
  if (!cx->need[0]) return true;
  IrValue *dy = cx->dout[0];
  int a = axis_of(cx), d = dim_of_node(cx);
  IrPlacement pl[IR_NAXES];
  with(dy, a, PS(d), pl);
  IrOp op = dy->pl[a].kind == IR_PL_P ? IR_OP_REDUCE_SCATTER : IR_OP_ALL_SLICE;
  cx->din[0] = coll(cx, op, dy, a, d, 0, pl);
  return cx->din[0] != NULL;
}

/* reduce_scatter and all_slice: their S(dim) cotangent gathered back to B */
bool ir_grad_GATHER(IrGradCtx *cx) {
  if (!cx->need[0]) return true;
  IrPlacement pl[IR_NAXES];
  with(cx->dout[0], axis_of(cx), PB, pl);
  cx->din[0] = coll(cx, IR_OP_ALL_GATHER, cx->dout[0], axis_of(cx), dim_of_node(cx), 0, pl);
  return cx->din[0] != NULL;
}

bool ir_grad_ALL_TO_ALL(IrGradCtx *cx) {
  if (!cx->need[0]) return true;
  int d = dim_of_node(cx), to = (int)cx->node->attrs.v[IR_ATTR_TO].i;
  IrPlacement pl[IR_NAXES];
  with(cx->dout[0], axis_of(cx), PS(d), pl);
  cx->din[0] = coll(cx, IR_OP_ALL_TO_ALL, cx->dout[0], axis_of(cx), to, d, pl);
  return cx->din[0] != NULL;
}

bool ir_grad_RESHARD(IrGradCtx *cx) {
  if (!cx->need[0]) return true;
  IrPlacement pl[IR_NAXES];
  const IrValue *x = cx->node->in[0];
  for (int a = 0; a < IR_NAXES; a++) pl[a] = x->pl[a].kind == IR_PL_P ? PB : x->pl[a];
  IrAttrs none = {0};
  cx->din[0] = emit1(cx, IR_OP_RESHARD, cx->dout[0], &none, pl);
  return cx->din[0] != NULL;
}
