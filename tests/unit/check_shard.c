/* Check suite of the parallel passes: the sharding rule of each op on small
 * graphs, the gradient rules of the collectives, placements through the text
 * form, and the shard / zero / collectives passes on GPT2Tiny against
 * Megatron's and ZeRO's counts:
 *   TP, per layer and micro-batch: 2 all-reduces forward and 2 backward of
 *     s*b*h elements each, nothing else on activations;
 *   TP+SP: 2 all-gathers and 2 reduce-scatters forward, the same backward;
 *   DP, ZeRO-1, ZeRO-2: 2 Psi (d - 1) / d gradient and parameter elements
 *     sent per rank and step; ZeRO-3: 3 Psi (d - 1) / d;
 *   ZeRO-1: optimizer state per rank 1/dp of the serial one.
 * Also the errors of plans that cannot be sharded, and the serial plan
 * leaving the IR as it was. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/sema.h"
#include "ir/ir.h"
#include "passes/bucket.h"
#include "passes/pass.h"

static IrShape shp(const int64_t *d, int n) {
  IrShape s = {.rank = n};
  for (int i = 0; i < n; i++) s.d[i] = d[i];
  return s;
}
#define SHP(...)                                                                                   \
  shp((const int64_t[]){__VA_ARGS__},                                                              \
      (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define INTS(...)                                                                                  \
  (const int64_t[]){__VA_ARGS__}, (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define VS(...)                                                                                    \
  (IrValue *[]){__VA_ARGS__}, (int)(sizeof((IrValue *[]){__VA_ARGS__}) / sizeof(IrValue *))

static const IrPlacement B = {IR_PL_B, 0}, P = {IR_PL_P, 0};
static IrPlacement S(int d) {
  return (IrPlacement){IR_PL_S, d};
}

/* A Diag whose messages are kept in *buf (open_memstream), for the asserts. */
static void msgs_open(Diag *d, char **buf, size_t *len) {
  diag_init(d);
  *buf = NULL, *len = 0;
  d->out = open_memstream(buf, len);
}

/* buf read after fclose, which writes it */
static void msgs_close(Diag *d, char **buf) {
  fclose(d->out);
  free(*buf);
  diag_free(d);
}

/* ---- small graphs on a tp = 2 mesh ---- */

typedef struct T {
  Diag d;
  char *dbuf;
  size_t dlen;
  IrModule *m;
  IrFunc *f;
  IrBuilder b;
} T;

static void t_init(T *t) {
  memset(t, 0, sizeof *t);
  msgs_open(&t->d, &t->dbuf, &t->dlen);
  t->m = ir_module_new(&t->d, "S");
  t->m->mesh[IR_AX_TP] = 2;
  t->f = ir_func_new(t->m, "f");
  t->b = (IrBuilder){.m = t->m, .f = t->f, .group = -1, .layer = -1};
}

static void t_free(T *t) {
  ir_module_free(t->m);
  msgs_close(&t->d, &t->dbuf);
}

static IrValue *input(T *t, const char *name, IrDType dt, IrShape s, IrPlacement tp) {
  IrValue *v = ir_add_input(t->m, t->f, name, dt, &s, (SrcLoc){0});
  v->pl[IR_AX_TP] = tp;
  return v;
}

static IrNode *node(T *t, IrOp op, IrValue **in, int nin, const IrAttrs *a) {
  char err[512];
  IrNode *n = ir_build(&t->b, op, in, nin, a, (SrcLoc){0}, err, sizeof err, NULL);
  ck_assert_msg(n != NULL, "ir_build: %s", err);
  return n;
}

/* Whether the node's placements with results `out` on tp follow its rule. */
static bool legal(T *t, IrNode *n, const IrPlacement *out) {
  for (int j = 0; j < n->nout; j++) n->out[j]->pl[IR_AX_TP] = out[j];
  char err[512];
  return ir_shard_check_node(t->m, n, err, sizeof err);
}
#define LEGAL(n, ...) legal(&t, n, (IrPlacement[]){__VA_ARGS__})

START_TEST(test_rule_linear) {
  T t;
  t_init(&t);
  IrValue *x = input(&t, "x", IR_F32, SHP(4, 8, 16), B),
          *w = input(&t, "w", IR_F32, SHP(32, 16), S(0));
  IrNode *n = node(&t, IR_OP_LINEAR, VS(x, w), NULL);
  ck_assert(LEGAL(n, S(2))); /* column-parallel */
  ck_assert(!LEGAL(n, B));
  ck_assert(!LEGAL(n, P));
  x->pl[IR_AX_TP] = S(2), w->pl[IR_AX_TP] = S(1); /* row-parallel: the contraction splits */
  ck_assert(LEGAL(n, P));
  ck_assert(!LEGAL(n, S(2)));
  x->pl[IR_AX_TP] = S(1), w->pl[IR_AX_TP] = B; /* rows split (sequence parallel) */
  ck_assert(LEGAL(n, S(1)));
  x->pl[IR_AX_TP] = S(2), w->pl[IR_AX_TP] = S(0); /* one axis, two factors */
  ck_assert(!LEGAL(n, S(2)) && !LEGAL(n, P) && !LEGAL(n, B));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_elementwise) {
  T t;
  t_init(&t);
  IrValue *x = input(&t, "x", IR_F32, SHP(4, 8, 16), P),
          *y = input(&t, "y", IR_F32, SHP(4, 8, 16), P);
  IrValue *bias = input(&t, "b", IR_F32, SHP(16), B);
  IrNode *add = node(&t, IR_OP_ADD, VS(x, y), NULL);
  ck_assert(LEGAL(add, P)); /* a sum of partial sums */
  IrNode *addb = node(&t, IR_OP_ADD, VS(x, bias), NULL);
  ck_assert(!LEGAL(addb, P) && !LEGAL(addb, B)); /* the bias would be added tp times */
  IrNode *mul = node(&t, IR_OP_MUL, VS(x, bias), NULL);
  ck_assert(LEGAL(mul, P)); /* linear in one operand */
  IrNode *mul2 = node(&t, IR_OP_MUL, VS(x, y), NULL);
  ck_assert(!LEGAL(mul2, P));
  IrNode *g = node(&t, IR_OP_GELU, VS(x), NULL);
  ck_assert(!LEGAL(g, P));
  x->pl[IR_AX_TP] = S(1);
  ck_assert(LEGAL(addb, S(1))); /* the bias broadcasts over the split */
  bias->pl[IR_AX_TP] = S(0);
  x->pl[IR_AX_TP] = S(2);
  ck_assert(LEGAL(addb, S(2))); /* a column-parallel bias */
  ck_assert(LEGAL(g, S(2)));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_layout) {
  T t;
  t_init(&t);
  IrValue *x = input(&t, "x", IR_F32, SHP(4, 8, 64), S(2));
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(4, 8, 4, 16));
  IrNode *r = node(&t, IR_OP_RESHAPE, VS(x), &a);
  ck_assert(LEGAL(r, S(2))); /* hidden -> heads (the major part) */
  ck_assert(!LEGAL(r, S(3)));
  x->pl[IR_AX_TP] = S(1);
  ck_assert(LEGAL(r, S(1)));
  x->pl[IR_AX_TP] = P;
  ck_assert(LEGAL(r, P));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, INTS(0, 2, 1));
  x->pl[IR_AX_TP] = S(1);
  IrNode *tr = node(&t, IR_OP_TRANSPOSE, VS(x), &a);
  ck_assert(LEGAL(tr, S(2)) && !LEGAL(tr, S(1)));
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  ir_attrs_set_int(&a, IR_ATTR_START, 0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 4);
  IrNode *sl = node(&t, IR_OP_SLICE, VS(x), &a);
  ck_assert(!LEGAL(sl, S(1)) && !LEGAL(sl, B)); /* a slice of a split axis needs the whole */
  x->pl[IR_AX_TP] = S(2);
  ck_assert(LEGAL(sl, S(2)));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(2));
  IrNode *sum = node(&t, IR_OP_SUM, VS(x), &a);
  ck_assert(LEGAL(sum, P) && !LEGAL(sum, B)); /* summing the split axis: partial sums */
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 2);
  IrNode *sm = node(&t, IR_OP_SOFTMAX, VS(x), &a);
  ck_assert(!LEGAL(sm, S(2)));
  x->pl[IR_AX_TP] = S(0);
  ck_assert(LEGAL(sm, S(0)));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_transformer) {
  T t;
  t_init(&t);
  /* GQA: 8 query heads, 2 KV heads; tp splits the KV heads and their groups */
  IrValue *q = input(&t, "q", IR_F32, SHP(2, 16, 8, 8), S(2)),
          *k = input(&t, "k", IR_F32, SHP(2, 16, 2, 8), S(2)),
          *v = input(&t, "v", IR_F32, SHP(2, 16, 2, 8), S(2));
  IrAttrs a = {0};
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, true);
  ir_attrs_set_float(&a, IR_ATTR_SCALE, 0.35);
  IrNode *at = node(&t, IR_OP_ATTENTION, VS(q, k, v), &a);
  ck_assert(LEGAL(at, S(2), S(1))); /* out heads, lse [B, H, T] heads */
  ck_assert(!LEGAL(at, S(2), B));
  q->pl[IR_AX_TP] = k->pl[IR_AX_TP] = v->pl[IR_AX_TP] =
      S(1); /* the sequence: not without context parallel */
  ck_assert(!LEGAL(at, S(1), S(2)) && !LEGAL(at, B, B));
  /* vocab-parallel embedding: a partial sum of the rows each rank holds */
  IrValue *ids = input(&t, "ids", IR_I32, SHP(2, 16), B),
          *tab = input(&t, "tab", IR_F32, SHP(64, 8), S(0));
  IrNode *e = node(&t, IR_OP_EMBEDDING, VS(ids, tab), NULL);
  ck_assert(LEGAL(e, P) && !LEGAL(e, B));
  /* vocab-parallel cross-entropy: the loss and lse stay whole */
  IrValue *lg = input(&t, "logits", IR_F32, SHP(2, 16, 64), S(2)),
          *lb = input(&t, "labels", IR_I32, SHP(2, 16), B);
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_IGNORE, -100);
  IrNode *ce = node(&t, IR_OP_CROSS_ENTROPY, VS(lg, lb), &a);
  ck_assert(LEGAL(ce, B, B));
  ck_assert(!LEGAL(ce, P, B));
  lg->pl[IR_AX_TP] = S(0), lb->pl[IR_AX_TP] = S(0); /* batch split: each rank's share of the mean */
  ck_assert(LEGAL(ce, P, S(0)));
  /* layer_norm under sequence parallel: statistics per local row */
  IrValue *x = input(&t, "x", IR_F32, SHP(2, 16, 8), S(1)), *w = input(&t, "w", IR_F32, SHP(8), B);
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-5);
  IrNode *ln = node(&t, IR_OP_LAYER_NORM, VS(x, w, w), &a);
  ck_assert(LEGAL(ln, S(1), S(0), S(0)));
  x->pl[IR_AX_TP] = S(2);
  ck_assert(!LEGAL(ln, S(2), B, B)); /* split statistics: w and b split with the channels */
  w->pl[IR_AX_TP] = S(0);
  ck_assert(LEGAL(ln, S(2), B, B)); /* mean and rstd whole: the kernel all-reduces */
  ck_assert(!LEGAL(ln, S(2), S(0), S(0)));
  IrNode *rms = node(&t, IR_OP_RMS_NORM, VS(x, w), &a);
  ck_assert(!LEGAL(rms, S(2), B)); /* rms_norm's normalised dim stays whole */
  /* layer_norm {axis = 1} over [B, C, T]: the channels (dim 1) split as the last dim does */
  IrValue *xc = input(&t, "xc", IR_F32, SHP(2, 8, 16), S(1)),
          *wc = input(&t, "wc", IR_F32, SHP(8), B);
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  IrNode *lnc = node(&t, IR_OP_LAYER_NORM, VS(xc, wc, wc), &a);
  ck_assert(!LEGAL(lnc, S(1), B, B));
  wc->pl[IR_AX_TP] = S(0);
  ck_assert(LEGAL(lnc, S(1), B, B));
  xc->pl[IR_AX_TP] = S(2), wc->pl[IR_AX_TP] = B; /* a row dim: per-row statistics split */
  ck_assert(LEGAL(lnc, S(2), S(0), S(0)));
  /* convolution: output channels (column) or input channels (row) */
  IrValue *img = input(&t, "img", IR_F32, SHP(2, 4, 8, 8), B),
          *cw = input(&t, "cw", IR_F32, SHP(6, 4, 3, 3), S(0)),
          *cb = input(&t, "cb", IR_F32, SHP(6), S(0));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(1, 1));
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, INTS(1, 1));
  IrNode *cv = node(&t, IR_OP_CONV2D, VS(img, cw, cb), &a);
  ck_assert(LEGAL(cv, S(1)));
  img->pl[IR_AX_TP] = S(1), cw->pl[IR_AX_TP] = S(1), cb->pl[IR_AX_TP] = B;
  ck_assert(LEGAL(cv, P)); /* row-parallel: rank 0 adds the bias (lower_conv) */
  IrNode *cv2 = node(&t, IR_OP_CONV2D, VS(img, cw), &a);
  ck_assert(LEGAL(cv2, P));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_backward) {
  T t;
  t_init(&t);
  /* linear_grad_w over split rows: a partial sum (data parallel) */
  IrValue *dy = input(&t, "dy", IR_F32, SHP(4, 8, 32), S(0)),
          *x = input(&t, "x", IR_F32, SHP(4, 8, 16), S(0));
  IrNode *gw = node(&t, IR_OP_LINEAR_GRAD_W, VS(dy, x), NULL);
  ck_assert(LEGAL(gw, P));
  dy->pl[IR_AX_TP] = S(2), x->pl[IR_AX_TP] = B; /* column-parallel: the weight's rows */
  ck_assert(LEGAL(gw, S(0)));
  IrValue *w = input(&t, "w", IR_F32, SHP(32, 16), S(0));
  IrNode *gx = node(&t, IR_OP_LINEAR_GRAD_X, VS(dy, w), NULL);
  ck_assert(LEGAL(gx, P)); /* Megatron's f in backward: an all-reduce follows */
  /* embedding_grad into a vocab-split table */
  IrValue *d2 = input(&t, "d2", IR_F32, SHP(2, 16, 8), B),
          *ids = input(&t, "ids", IR_I32, SHP(2, 16), B);
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(64, 8));
  IrNode *eg = node(&t, IR_OP_EMBEDDING_GRAD, VS(d2, ids), &a);
  ck_assert(LEGAL(eg, S(0)) && LEGAL(eg, B));
  /* grad_norm: any split, never a partial sum; the result whole */
  IrValue *g1 = input(&t, "g1", IR_F32, SHP(32, 16), S(0)),
          *g2 = input(&t, "g2", IR_F32, SHP(16), B);
  IrNode *gn = node(&t, IR_OP_GRAD_NORM, VS(g1, g2), NULL);
  ck_assert(LEGAL(gn, B) && !LEGAL(gn, P));
  g2->pl[IR_AX_TP] = P;
  ck_assert(!LEGAL(gn, B));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_fused) {
  T t;
  t_init(&t);
  IrValue *x = input(&t, "x", IR_F32, SHP(4, 8), P), *y = input(&t, "y", IR_F32, SHP(4, 8), P);
  IrAttrs a = {0};
  a.set |= 1ull << IR_ATTR_PROG;
  a.v[IR_ATTR_PROG].s = "t0 = add(i0, i1); t1 = mul_scalar(t0) {value = 2}";
  IrNode *lin = node(&t, IR_OP_FUSED, VS(x, y), &a);
  ck_assert(LEGAL(lin, P)); /* every instruction lets partial sums through */
  a.v[IR_ATTR_PROG].s = "t0 = add(i0, i1); t1 = gelu(t0)";
  IrNode *nl = node(&t, IR_OP_FUSED, VS(x, y), &a);
  ck_assert(!LEGAL(nl, P) && !LEGAL(nl, B));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_collectives) {
  T t;
  t_init(&t);
  IrValue *x = input(&t, "x", IR_F32, SHP(4, 8), S(1));
  IrAttrs a = {0};
  ir_attrs_set_mesh(&a, IR_ATTR_MESH, IR_AX_TP);
  ir_attrs_set_int(&a, IR_ATTR_DIM, 1);
  IrNode *ag = node(&t, IR_OP_ALL_GATHER, VS(x), &a);
  ck_assert(LEGAL(ag, B) && !LEGAL(ag, S(1)));
  ir_attrs_set_int(&a, IR_ATTR_DIM, 0);
  IrNode *ag0 = node(&t, IR_OP_ALL_GATHER, VS(x), &a);
  char err[512];
  ag0->out[0]->pl[IR_AX_TP] = B;
  ck_assert(!ir_shard_check_node(t.m, ag0, err, sizeof err));
  ck_assert_str_eq(err, "takes S(0) to B on tp, but its operand is S(1) and its result B");
  ag0->out[0]->pl[IR_AX_DP] = S(0); /* a collective on tp leaves dp alone */
  t.m->mesh[IR_AX_DP] = 2;
  ck_assert(!ir_shard_check_node(t.m, ag0, err, sizeof err));
  ck_assert_str_eq(err, "changes the placement on dp, but it acts on tp");
  t_free(&t);
}
END_TEST

/* The rules not met above, one case each at least. */
/* haar2d / ihaar3d: batch and channels split (a block of input channels is
 * a block of sub-band channels), partial sums pass, time and space whole */
START_TEST(test_rule_haar) {
  T t;
  t_init(&t);
  IrValue *x = input(&t, "x", IR_F32, SHP(2, 4, 6, 8), S(1));
  IrNode *h = node(&t, IR_OP_HAAR2D, VS(x), NULL);
  ck_assert(LEGAL(h, S(1)) && !LEGAL(h, B) && !LEGAL(h, S(0)));
  x->pl[IR_AX_TP] = S(0);
  ck_assert(LEGAL(h, S(0)) && !LEGAL(h, S(1)));
  x->pl[IR_AX_TP] = P;
  ck_assert(LEGAL(h, P));
  x->pl[IR_AX_TP] = S(2);
  ck_assert(!LEGAL(h, S(2)) && !LEGAL(h, B));
  IrValue *c = input(&t, "c", IR_F32, SHP(2, 16, 2, 4, 4), S(1));
  IrNode *ih = node(&t, IR_OP_IHAAR3D, VS(c), NULL);
  ck_assert(LEGAL(ih, S(1)));
  c->pl[IR_AX_TP] = S(3);
  ck_assert(!LEGAL(ih, S(3)));
  t_free(&t);
}
END_TEST

START_TEST(test_rule_more) {
  T t;
  t_init(&t);
  IrAttrs a = {0};
  /* matmul: batch, M and N split; K gives partial sums */
  IrValue *ma = input(&t, "ma", IR_F32, SHP(2, 4, 6), S(2)),
          *mb = input(&t, "mb", IR_F32, SHP(2, 6, 8), S(1));
  IrNode *mm = node(&t, IR_OP_MATMUL, VS(ma, mb), NULL);
  ck_assert(LEGAL(mm, P) && !LEGAL(mm, S(2)));
  ma->pl[IR_AX_TP] = S(0), mb->pl[IR_AX_TP] = S(0);
  ck_assert(LEGAL(mm, S(0)));
  ma->pl[IR_AX_TP] = B, mb->pl[IR_AX_TP] = S(2);
  ck_assert(LEGAL(mm, S(2)));
  /* expand: a broadcast dim may come out split (each rank fills its piece) */
  IrValue *cls = input(&t, "cls", IR_F32, SHP(1, 1, 8), B);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(4, 1, 8));
  IrNode *ex = node(&t, IR_OP_EXPAND, VS(cls), &a);
  ck_assert(LEGAL(ex, B) && LEGAL(ex, S(0)) && !LEGAL(ex, P));
  ck_assert(!LEGAL(ex, S(2))); /* a dim the operand has: split it first */
  /* sum_to: the summed dims give partial sums */
  IrValue *st = input(&t, "st", IR_F32, SHP(4, 6, 8), S(0));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(8));
  IrNode *su = node(&t, IR_OP_SUM_TO, VS(st), &a);
  ck_assert(LEGAL(su, P) && !LEGAL(su, B));
  st->pl[IR_AX_TP] = S(2);
  ck_assert(LEGAL(su, S(0)));
  /* rope: batch, sequence (at its offset) and heads split, the head dim not */
  IrValue *rx = input(&t, "rx", IR_F32, SHP(2, 8, 4, 16), S(1));
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_THETA, 10000);
  IrNode *ro = node(&t, IR_OP_ROPE, VS(rx), &a);
  ck_assert(LEGAL(ro, S(1)));
  rx->pl[IR_AX_TP] = S(3);
  ck_assert(!LEGAL(ro, S(3)) && !LEGAL(ro, B));
  /* mse: every dim reduces */
  IrValue *m1 = input(&t, "m1", IR_F32, SHP(4, 6), S(1)),
          *m2 = input(&t, "m2", IR_F32, SHP(4, 6), S(1));
  IrNode *ms = node(&t, IR_OP_MSE, VS(m1, m2), NULL);
  ck_assert(LEGAL(ms, P) && !LEGAL(ms, B));
  /* group_norm: the batch only */
  IrValue *gx = input(&t, "gx", IR_F32, SHP(4, 8, 5, 5), S(0)),
          *gw = input(&t, "gw", IR_F32, SHP(8), B);
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-5);
  ir_attrs_set_int(&a, IR_ATTR_GROUPS, 2);
  IrNode *gn = node(&t, IR_OP_GROUP_NORM, VS(gx, gw, gw), &a);
  ck_assert(LEGAL(gn, S(0), S(0), S(0)));
  gx->pl[IR_AX_TP] = S(1);
  ck_assert(!LEGAL(gn, S(1), B, B));
  /* layer_norm_grad over split rows: dw and db are partial sums */
  IrValue *dy = input(&t, "dy", IR_F32, SHP(4, 6, 8), S(1)),
          *lx = input(&t, "lx", IR_F32, SHP(4, 6, 8), S(1)),
          *mean = input(&t, "mean", IR_F32, SHP(24), S(0)),
          *rstd = input(&t, "rstd", IR_F32, SHP(24), S(0)),
          *lw = input(&t, "lw", IR_F32, SHP(8), B);
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-5);
  IrNode *lg = node(&t, IR_OP_LAYER_NORM_GRAD, VS(dy, lx, mean, rstd, lw), &a);
  ck_assert(LEGAL(lg, S(1), P, P) && !LEGAL(lg, S(1), B, B));
  /* attention_grad: heads */
  IrValue *ad = input(&t, "ad", IR_F32, SHP(2, 8, 4, 8), S(2)),
          *aq = input(&t, "aq", IR_F32, SHP(2, 8, 4, 8), S(2)),
          *ak = input(&t, "ak", IR_F32, SHP(2, 8, 2, 8), S(2)),
          *av = input(&t, "av", IR_F32, SHP(2, 8, 2, 8), S(2)),
          *ao = input(&t, "ao", IR_F32, SHP(2, 8, 4, 8), S(2)),
          *al = input(&t, "al", IR_F32, SHP(2, 4, 8), S(1));
  a = (IrAttrs){0};
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, true);
  ir_attrs_set_float(&a, IR_ATTR_SCALE, 0.35);
  IrNode *ag = node(&t, IR_OP_ATTENTION_GRAD, VS(ad, aq, ak, av, ao, al), &a);
  ck_assert(LEGAL(ag, S(2), S(2), S(2)) && !LEGAL(ag, B, B, B));
  /* cross_entropy_grad: the vocabulary split stays local */
  IrValue *dl = input(&t, "dl", IR_F32, SHP(), B),
          *cl = input(&t, "cl", IR_F32, SHP(2, 8, 16), S(2)),
          *cy = input(&t, "cy", IR_I32, SHP(2, 8), B), *cs = input(&t, "cs", IR_F32, SHP(16), B);
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_IGNORE, -100);
  IrNode *cg = node(&t, IR_OP_CROSS_ENTROPY_GRAD, VS(dl, cl, cy, cs), &a);
  ck_assert(LEGAL(cg, S(2)) && !LEGAL(cg, B));
  /* conv backward: dgrad over split output channels is a partial sum, wgrad over a split batch too
   */
  IrValue *cdy = input(&t, "cdy", IR_F32, SHP(2, 6, 8, 8), S(1)),
          *cw = input(&t, "cw", IR_F32, SHP(6, 4, 3, 3), S(0));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(1, 1));
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, INTS(1, 1));
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(2, 4, 8, 8));
  IrNode *cgx = node(&t, IR_OP_CONV2D_GRAD_X, VS(cdy, cw), &a);
  ck_assert(LEGAL(cgx, P));
  IrValue *cx = input(&t, "cx", IR_F32, SHP(2, 4, 8, 8), S(0));
  cdy->pl[IR_AX_TP] = S(0);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(6, 4, 3, 3));
  IrNode *cgw = node(&t, IR_OP_CONV2D_GRAD_W, VS(cdy, cx), &a);
  ck_assert(LEGAL(cgw, P) && !LEGAL(cgw, S(0)));
  /* adamw: parameter, gradient and state alike, the scalars whole */
  IrValue *pw = input(&t, "pw", IR_F32, SHP(8, 4), S(0)),
          *pg = input(&t, "pg", IR_F32, SHP(8, 4), S(0)),
          *pm = input(&t, "pm", IR_F32, SHP(8, 4), S(0)),
          *pv = input(&t, "pv", IR_F32, SHP(8, 4), S(0)), *lr = input(&t, "lr", IR_F32, SHP(), B);
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_BETA1, 0.9);
  ir_attrs_set_float(&a, IR_ATTR_BETA2, 0.95);
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-8);
  ir_attrs_set_float(&a, IR_ATTR_WEIGHT_DECAY, 0.1);
  IrNode *ad2 = node(&t, IR_OP_ADAMW, VS(pw, pg, pm, pv, lr, lr, lr), &a);
  char err[512];
  ck_assert(ir_shard_check_node(t.m, ad2, err, sizeof err));
  pg->pl[IR_AX_TP] = S(1);
  ck_assert(!ir_shard_check_node(t.m, ad2, err, sizeof err));
  /* full and clip_scale: whole (full may also fill a piece) */
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(4));
  ir_attrs_set_float(&a, IR_ATTR_VALUE, 1);
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_F32);
  IrNode *fu = node(&t, IR_OP_FULL, NULL, 0, &a);
  ck_assert(LEGAL(fu, B) && LEGAL(fu, S(0)) && !LEGAL(fu, P));
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_VALUE, 1);
  IrNode *cs2 = node(&t, IR_OP_CLIP_SCALE, VS(dl), &a);
  ck_assert(LEGAL(cs2, B) && !LEGAL(cs2, P));
  t_free(&t);
}
END_TEST

/* ---- gradient rules of the collectives ---- */

static IrNode *grad_of(T *t, IrNode *fwd, IrValue *dy) {
  IrGradCtx g;
  memset(&g, 0, sizeof g);
  char err[256] = "";
  g.b = &t->b;
  g.node = fwd;
  g.dout[0] = dy;
  g.need[0] = true;
  g.err = err;
  g.errlen = sizeof err;
  ck_assert_msg(ir_ops[fwd->op].grad(&g), "%s", err);
  ck_assert_ptr_nonnull(g.din[0]);
  return g.din[0] == dy ? NULL : g.din[0]->def;
}

static IrNode *coll(T *t, IrOp op, IrValue *x, int dim, int to, IrPlacement out) {
  IrAttrs a = {0};
  ir_attrs_set_mesh(&a, IR_ATTR_MESH, IR_AX_TP);
  if (op != IR_OP_ALL_REDUCE) ir_attrs_set_int(&a, IR_ATTR_DIM, dim);
  if (op == IR_OP_ALL_TO_ALL) ir_attrs_set_int(&a, IR_ATTR_TO, to);
  IrNode *n = node(t, op, VS(x), &a);
  n->out[0]->pl[IR_AX_TP] = out;
  return n;
}

START_TEST(test_grad_collectives) {
  T t;
  t_init(&t);
  char err[256];
  IrValue *xp = input(&t, "xp", IR_F32, SHP(4, 8), P),
          *xs = input(&t, "xs", IR_F32, SHP(4, 8), S(0));
  IrValue *dyb = input(&t, "dyb", IR_F32, SHP(4, 8), B),
          *dyp = input(&t, "dyp", IR_F32, SHP(4, 8), P);
  IrValue *dys1 = input(&t, "dys1", IR_F32, SHP(4, 8), S(1)),
          *dys0 = input(&t, "dys0", IR_F32, SHP(4, 8), S(0));
  /* all_reduce <-> identity */
  ck_assert_ptr_null(grad_of(&t, coll(&t, IR_OP_ALL_REDUCE, xp, 0, 0, B), dyb));
  /* all_gather <-> reduce_scatter (a partial cotangent) */
  IrNode *g = grad_of(&t, coll(&t, IR_OP_ALL_GATHER, xs, 0, 0, B), dyp);
  ck_assert(g && g->op == IR_OP_REDUCE_SCATTER && g->attrs.v[IR_ATTR_DIM].i == 0);
  ck_assert(ir_placement_eq(g->out[0]->pl[IR_AX_TP], S(0)) &&
            ir_shard_check_node(t.m, g, err, sizeof err));
  /* ... or a local slice of a replicated one */
  g = grad_of(&t, coll(&t, IR_OP_ALL_GATHER, xs, 0, 0, B), dyb);
  ck_assert(g && g->op == IR_OP_ALL_SLICE && ir_shard_check_node(t.m, g, err, sizeof err));
  /* reduce_scatter <-> all_gather */
  g = grad_of(&t, coll(&t, IR_OP_REDUCE_SCATTER, xp, 0, 0, S(0)), dys0);
  ck_assert(g && g->op == IR_OP_ALL_GATHER && ir_placement_eq(g->out[0]->pl[IR_AX_TP], B));
  ck_assert(ir_shard_check_node(t.m, g, err, sizeof err));
  /* all_to_all <-> all_to_all with the dims swapped */
  g = grad_of(&t, coll(&t, IR_OP_ALL_TO_ALL, xs, 0, 1, S(1)), dys1);
  ck_assert(g && g->op == IR_OP_ALL_TO_ALL && g->attrs.v[IR_ATTR_DIM].i == 1 &&
            g->attrs.v[IR_ATTR_TO].i == 0);
  ck_assert(ir_placement_eq(g->out[0]->pl[IR_AX_TP], S(0)) &&
            ir_shard_check_node(t.m, g, err, sizeof err));
  /* all_slice <-> all_gather */
  g = grad_of(&t, coll(&t, IR_OP_ALL_SLICE, dyb, 1, 0, S(1)), dys1);
  ck_assert(g && g->op == IR_OP_ALL_GATHER && ir_shard_check_node(t.m, g, err, sizeof err));
  /* reshard P -> S(0): back to B (the cotangent of a partial sum is whole) */
  IrNode *r = node(&t, IR_OP_RESHARD, VS(xp), NULL);
  r->out[0]->pl[IR_AX_TP] = S(0);
  g = grad_of(&t, r, dys0);
  ck_assert(g && g->op == IR_OP_RESHARD && ir_placement_eq(g->out[0]->pl[IR_AX_TP], B));
  t_free(&t);
}
END_TEST

/* ---- the text form ---- */

static char *print_str(const IrModule *m, int rank) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (rank >= 0)
    ir_print_module_rank(f, m, rank);
  else
    ir_print_module(f, m);
  fclose(f);
  return buf;
}

/* IR text parsed with its messages kept in buf (the tests below). */
typedef struct Parsed {
  Diag d;
  char *buf;
  size_t len;
} Parsed;

static void parsed_init(Parsed *p) {
  msgs_open(&p->d, &p->buf, &p->len);
}

/* The module of text (file names it in the messages), NULL after an error. */
static IrModule *parse_text(Parsed *p, const char *file, const char *text) {
  IrModule *m = ir_parse(&p->d, diag_add_buffer(&p->d, file, text, strlen(text)));
  fflush(p->d.out);
  return m;
}

/* The same, which must parse and verify. */
static IrModule *parse_ok(Parsed *p, const char *file, const char *text) {
  IrModule *m = parse_text(p, file, text);
  ck_assert_msg(m != NULL && ir_verify(m), "%s: %s", file, p->buf);
  return m;
}

static void parsed_free(Parsed *p) {
  msgs_close(&p->d, &p->buf);
}

START_TEST(test_text_roundtrip) {
  const char *text =
      "module @m mesh(dp = 2, cp = 1, tp = 2)\n"
      "param @w : f32[8, 4]{dp:S(0), cp:B, tp:S(0)}\n"
      "func @f(%x : f32[4, 6, 4]{dp:S(0), cp:B, tp:B}) {\n"
      "  %0 = reshard(@w) : f32[8, 4]{dp:B, cp:B, tp:S(0)}\n"
      "  %1 = linear(%x, %0) : f32[4, 6, 8]{dp:S(0), cp:B, tp:S(2)}\n"
      "  %2 = all_to_all(%1) {mesh = tp, dim = 2, to = 1} : f32[4, 6, 8]{dp:S(0), cp:B, tp:S(1)}\n"
      "  %3 = all_gather(%2) {mesh = tp, dim = 1} : f32[4, 6, 8]{dp:S(0), cp:B, tp:B}\n"
      "  %4 = sum(%3) {axes = [0]} : f32[6, 8]{dp:P, cp:B, tp:B}\n"
      "  %5 = reduce_scatter(%4) {mesh = dp, dim = 1} : f32[6, 8]{dp:S(1), cp:B, tp:B}\n"
      "  %6 = all_slice(%5) {mesh = tp, dim = 0} : f32[6, 8]{dp:S(1), cp:B, tp:S(0)}\n"
      "  %7 = all_gather(%6) {mesh = dp, dim = 1} : f32[6, 8]{dp:B, cp:B, tp:S(0)}\n"
      "  %8 = all_gather(%7) {mesh = tp, dim = 0} : f32[6, 8]{dp:B, cp:B, tp:B}\n"
      "  %9 = sum(%8) {axes = [0, 1]} : f32[]{dp:B, cp:B, tp:B}\n"
      "  %10 = all_reduce(%4) {mesh = dp} : f32[6, 8]{dp:B, cp:B, tp:B}\n"
      "  return %9, %10\n"
      "}\n";
  Parsed ps;
  parsed_init(&ps);
  IrModule *m = parse_ok(&ps, "t.ir", text);
  char *s = print_str(m, -1);
  ck_assert_str_eq(s, text);
  IrModule *m2 = parse_ok(&ps, "u.ir", s);
  char *s2 = print_str(m2, -1);
  ck_assert_str_eq(s, s2);
  /* rank 3 = (dp 1, tp 1): local shapes, the group of each collective */
  char *r3 = print_str(m, 3);
  ck_assert_ptr_nonnull(strstr(r3, "module @m mesh(dp = 2, cp = 1, tp = 2) rank 3 of 4 (dp = 1, cp "
                                   "= 0, tp = 1): local shapes\n"));
  ck_assert_ptr_nonnull(strstr(r3, "param @w : f32[2, 4]{dp:S(0), cp:B, tp:S(0)}\n"));
  ck_assert_ptr_nonnull(strstr(r3, "%2 = all_to_all(%1) {mesh = tp, dim = 2, to = 1} : f32[2, 3, "
                                   "8]{dp:S(0), cp:B, tp:S(1)} group(2, 3)\n"));
  ck_assert_ptr_nonnull(strstr(r3, "%5 = reduce_scatter(%4) {mesh = dp, dim = 1} : f32[6, "
                                   "4]{dp:S(1), cp:B, tp:B} group(1, 3)\n"));
  free(r3);
  free(s);
  free(s2);
  ir_module_free(m2);
  ir_module_free(m);
  /* a placement the rule cannot explain is a parse error at the node */
  const char *bad = "module @m mesh(tp = 2)\n"
                    "func @f(%x : f32[4, 6]{tp:S(1)}) {\n"
                    "  %0 = softmax(%x) {axis = 1} : f32[4, 6]{tp:S(1)}\n"
                    "  return %0\n"
                    "}\n";
  ck_assert_ptr_null(parse_text(&ps, "bad.ir", bad));
  ck_assert_msg(strstr(ps.buf, "bad.ir:3:33: error: no sharding of softmax explains its placements "
                               "on tp (operands S(1); results S(1))"),
                "%s", ps.buf);
  parsed_free(&ps);
}
END_TEST

/* ---- the passes on GPT2Tiny ---- */

typedef struct Run {
  Diag d;
  char *dbuf;
  size_t dlen;
  FeProgram *p;
  FeResult r;
  bool ok;
} Run;

static const char *stdlib_path(const char *file) {
  static char buf[1024];
  const char *src = getenv("MMC_SOURCE_DIR");
  snprintf(buf, sizeof buf, "%s/stdlib_models/%s", src ? src : ".", file);
  return buf;
}

/* Loads a model with plan flags and runs the pipeline up to `stop`. */
static void run_model(Run *x, const char *path, const char *text, const char *model,
                      MmPlanFlags flags, const char *stop) {
  memset(x, 0, sizeof *x);
  msgs_open(&x->d, &x->dbuf, &x->dlen);
  FeOptions fo = {0};
  fo.flags = flags;
  fo.tp_splits = shard_tp_splits;
  x->p = text ? fe_load_buffer(&x->d, path, text, strlen(text), &fo) : fe_load(&x->d, path, &fo);
  x->ok = x->p && !x->d.errors && fe_elaborate(x->p, model, &x->r);
  if (x->ok) {
    PassCtx cx = {.d = &x->d};
    x->ok = pass_run_pipeline(x->r.ir, &cx, stop, NULL, NULL) && ir_verify(x->r.ir);
  }
  fflush(x->d.out);
}

static void run_free(Run *x) {
  if (x->r.ir) ir_module_free(x->r.ir);
  fe_free(x->p);
  msgs_close(&x->d, &x->dbuf);
}

static MmPlanFlags flags(int tp, int dp, bool sp, int zero) {
  MmPlanFlags f;
  mm_plan_flags_init(&f);
  f.given[MM_SET_TP] = tp > 0, f.plan.tp = tp;
  f.given[MM_SET_DP] = dp > 0, f.plan.dp = dp;
  f.given[MM_SET_SP] = true, f.plan.sp = sp;
  f.given[MM_SET_ZERO] = zero >= 0, f.plan.zero = zero;
  return f;
}

static void gpt2tiny(Run *x, MmPlanFlags f) {
  run_model(x, stdlib_path("gpt2.mm"), NULL, "GPT2Tiny", f, "collectives");
  ck_assert_msg(x->ok, "%s", x->dbuf ? x->dbuf : "");
}

/* Collectives of @train: per layer, region (0 forward, 1 backward) and op,
 * on activations (not gradients, not parameter gathers). */
#define MAXL 8
typedef struct Counts {
  int n[MAXL][2][IR_OP_COUNT];       /* [layer][region][op] */
  int64_t msg[MAXL][2][IR_OP_COUNT]; /* the largest message */
  int64_t msg_min[MAXL][2][IR_OP_COUNT];
  int other;                          /* activation collectives outside the layers */
  int64_t grad_param_elems[IR_NAXES]; /* elements sent per rank for gradients and parameters, per
                                         axis */
} Counts;

/* Counts the collectives of the layers of group `gname` (others: c->other). */
static void count_group(const IrModule *m, Counts *c, const char *gname) {
  memset(c, 0, sizeof *c);
  int group = -1;
  for (int g = 0; g < m->groups.len; g++)
    if (!strcmp(((IrGroup *)m->groups.items[g])->name, gname)) group = g;
  ck_assert_int_ge(group, 0);
  IrFunc *f = ir_module_func((IrModule *)m, "train");
  ck_assert_ptr_nonnull(f);
  int bwd = f->nodes.len;
  for (int i = 0; i < f->nodes.len && bwd == f->nodes.len; i++)
    if (((IrNode *)f->nodes.items[i])->op == IR_OP_CROSS_ENTROPY) bwd = i + 1;
  /* collectives that move a gradient or a parameter: chains ending in a
   * grad(@p) value, chains starting at a parameter */
  bool *gp = calloc((size_t)f->nodes.len + 1, 1);
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (!ir_op_is_collective(n->op)) continue;
    IrValue *x = n->in[0];
    if (!x->def && x->role == IR_ROLE_PARAM) gp[i] = true;
    for (int j = 0; j < i && !gp[i]; j++)
      gp[i] = gp[j] && ((IrNode *)f->nodes.items[j])->out[0] == x;
    if (n->out[0]->role == IR_ROLE_GRAD) /* back along the chain */
      for (IrNode *k = n; k && ir_op_is_collective(k->op); k = k->in[0]->def)
        for (int j = 0; j <= i; j++)
          if (f->nodes.items[j] == k) gp[j] = true;
  }
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (!ir_op_is_collective(n->op)) continue;
    int64_t msg = 0, sent = ir_collective_elems(m, n, &msg);
    int a = (int)n->attrs.v[IR_ATTR_MESH].i;
    if (gp[i]) {
      c->grad_param_elems[a] += sent;
      continue;
    }
    if (n->in[0]->shape.rank == 0) continue; /* the loss */
    if (n->group != group || n->layer < 0 || n->layer >= MAXL) {
      c->other++;
      continue;
    }
    int r = i >= bwd;
    c->n[n->layer][r][n->op]++;
    if (msg > c->msg[n->layer][r][n->op]) c->msg[n->layer][r][n->op] = msg;
    if (!c->msg_min[n->layer][r][n->op] || msg < c->msg_min[n->layer][r][n->op])
      c->msg_min[n->layer][r][n->op] = msg;
  }
  free(gp);
}

static void count(const IrModule *m, Counts *c) {
  count_group(m, c, "gpt.h");
}

/* s * b * h of GPT2Tiny: T = 32, B = 4, dim = 64 */
#define SBH (32 * 4 * 64)

static void expect_layer_msg(const Counts *c, int layer, int region, IrOp op, int n, int64_t sbh) {
  ck_assert_msg(c->n[layer][region][op] == n, "layer %d %s: %d %s, expected %d", layer,
                region ? "backward" : "forward", c->n[layer][region][op], ir_ops[op].name, n);
  if (n) {
    ck_assert_int_eq(c->msg[layer][region][op], sbh);
    ck_assert_int_eq(c->msg_min[layer][region][op], sbh);
  }
}

static void expect_layer(const Counts *c, int layer, int region, IrOp op, int n) {
  expect_layer_msg(c, layer, region, op, n, SBH);
}

static int total_layer(const Counts *c, int layer, int region) {
  int t = 0;
  for (int op = 0; op < IR_OP_COUNT; op++) t += c->n[layer][region][op];
  return t;
}

START_TEST(test_megatron_tp) {
  Run x;
  gpt2tiny(&x, flags(2, -1, false, -1));
  Counts c;
  count(x.r.ir, &c);
  for (int l = 0; l < 2; l++)
    for (int r = 0; r < 2; r++) {
      expect_layer(&c, l, r, IR_OP_ALL_REDUCE, 2);
      ck_assert_int_eq(total_layer(&c, l, r), 2);
    }
  /* tensor parallel keeps every gradient where its parameter is */
  ck_assert_int_eq(c.grad_param_elems[IR_AX_TP], 0);
  /* the weights: q/k/v and fc1 column-parallel, o_proj and fc2 row-parallel, the vocabulary split
   */
  static const struct {
    const char *name;
    IrPlacement pl;
  } want[] = {
      {"gpt.wte.weight", {IR_PL_S, 0}},
      {"gpt.wpe", {IR_PL_B, 0}},
      {"gpt.h.0.attn.q_proj.weight", {IR_PL_S, 0}},
      {"gpt.h.0.attn.q_proj.bias", {IR_PL_S, 0}},
      {"gpt.h.0.attn.v_proj.weight", {IR_PL_S, 0}},
      {"gpt.h.0.attn.o_proj.weight", {IR_PL_S, 1}},
      {"gpt.h.0.attn.o_proj.bias", {IR_PL_B, 0}},
      {"gpt.h.1.mlp.fc1.weight", {IR_PL_S, 0}},
      {"gpt.h.1.mlp.fc2.weight", {IR_PL_S, 1}},
      {"gpt.h.1.ln_2.weight", {IR_PL_B, 0}},
      {"adamw.m.gpt.h.1.mlp.fc2.weight", {IR_PL_S, 1}},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    IrValue *p = ir_module_param(x.r.ir, want[i].name);
    ck_assert_msg(p && ir_placement_eq(p->pl[IR_AX_TP], want[i].pl), "%s", want[i].name);
  }
  run_free(&x);
}
END_TEST

START_TEST(test_megatron_tp_sp) {
  Run x;
  gpt2tiny(&x, flags(2, -1, true, -1));
  Counts c;
  count(x.r.ir, &c);
  /* the backward gathers the norms' outputs again for the column-parallel
   * linears' weight gradients (Megatron's sequence-parallel linears do):
   * 2 all-gathers more there, the forward's gathered copies not kept */
  for (int l = 0; l < 2; l++)
    for (int r = 0; r < 2; r++) {
      expect_layer(&c, l, r, IR_OP_ALL_GATHER, r ? 4 : 2);
      expect_layer(&c, l, r, IR_OP_REDUCE_SCATTER, 2);
      ck_assert_int_eq(total_layer(&c, l, r), r ? 6 : 4);
    }
  /* the residual stream is split along the sequence between the layers */
  IrFunc *f = ir_module_func(x.r.ir, "forward");
  int seq = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (n->op == IR_OP_LAYER_NORM) seq += ir_placement_eq(n->in[0]->pl[IR_AX_TP], S(1));
  }
  ck_assert_int_eq(seq, 5);
  run_free(&x);
}
END_TEST

/* The same counts for the layers of ViTFashion (4 layers, s*b*h = 50 * 64 *
 * 64, layer scale) and for the LLM of InternVL2Tiny (GQA with 2 KV heads,
 * RoPE, SwiGLU; s*b*h = 16 * 8 * 64). */
START_TEST(test_megatron_other_models) {
  static const struct {
    const char *file, *model, *group;
    int layers;
    int64_t sbh;
  } ms[] = {{"vit_fashion.mm", "ViTFashion", "vit.blocks", 4, 50 * 64 * 64},
            {"internvl2.mm", "InternVL2Tiny", "llm.blocks", 2, 16 * 8 * 64}};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    for (int sp = 0; sp <= 1; sp++) {
      Run x;
      run_model(&x, stdlib_path(ms[i].file), NULL, ms[i].model, flags(2, -1, sp, -1),
                "collectives");
      ck_assert_msg(x.ok, "%s", x.dbuf ? x.dbuf : "");
      Counts c;
      count_group(x.r.ir, &c, ms[i].group);
      for (int l = 0; l < ms[i].layers; l++)
        for (int r = 0; r < 2; r++) {
          if (sp) {
            expect_layer_msg(&c, l, r, IR_OP_ALL_GATHER, r ? 4 : 2, ms[i].sbh); /* re-gathers */
            expect_layer_msg(&c, l, r, IR_OP_REDUCE_SCATTER, 2, ms[i].sbh);
          } else {
            expect_layer_msg(&c, l, r, IR_OP_ALL_REDUCE, 2, ms[i].sbh);
          }
        }
      run_free(&x);
    }
}
END_TEST

/* Convolutions pair like linears over channels: output channels split
 * (weight and bias S(0)), the next conv's input channels (weight S(1)); a
 * row half's own bias stays whole (rank 0 adds it to its partial sums). */
static const char *conv_model = "import \"nn.mm\"\n"
                                "model Convs {\n"
                                "  let B = 2\n"
                                "  c1 = Conv2d(3, 8, 3, padding = 1)\n"
                                "  c2 = Conv2d(8, 4, 3, padding = 1, has_bias = false)\n"
                                "  c3 = Conv2d(4, 4, 3, padding = 1)\n"
                                "  c4 = Conv2d(4, 4, 3, padding = 1)\n"
                                "  forward(x: f32[B, 3, 8, 8], y: f32[B, 4, 8, 8]) -> loss {\n"
                                "    return mse(c4(relu(c3(c2(relu(c1(x)))))), y)\n"
                                "  }\n"
                                "}\n";

START_TEST(test_conv_pairs) {
  Run x;
  run_model(&x, stdlib_path("convs.mm"), conv_model, "Convs", flags(2, -1, false, -1),
            "collectives");
  ck_assert_msg(x.ok, "%s", x.dbuf);
  IrModule *m = x.r.ir;
  ck_assert(ir_placement_eq(ir_module_param(m, "c1.weight")->pl[IR_AX_TP], S(0)));
  ck_assert(ir_placement_eq(ir_module_param(m, "c1.bias")->pl[IR_AX_TP], S(0)));
  ck_assert(ir_placement_eq(ir_module_param(m, "c2.weight")->pl[IR_AX_TP], S(1)));
  ck_assert(ir_placement_eq(ir_module_param(m, "c3.weight")->pl[IR_AX_TP], S(0)));
  ck_assert(ir_placement_eq(ir_module_param(m, "c4.weight")->pl[IR_AX_TP], S(1)));
  ck_assert(ir_placement_eq(ir_module_param(m, "c4.bias")->pl[IR_AX_TP], B));
  /* the forward: two all-reduces, of c2's and c4's partial sums */
  IrFunc *f = ir_module_func(m, "forward");
  int ar = 0;
  for (int i = 0; i < f->nodes.len; i++)
    ar += ((IrNode *)f->nodes.items[i])->op == IR_OP_ALL_REDUCE;
  ck_assert_int_eq(ar, 2);
  run_free(&x);
}
END_TEST

/* Trainable parameters of GPT2Tiny. */
static int64_t psi(const IrModule *m) {
  int64_t n = 0;
  for (int i = 0; i < m->params.len; i++) {
    IrValue *p = m->params.items[i];
    if (p->role == IR_ROLE_PARAM && !p->frozen) n += ir_numel(&p->shape);
  }
  return n;
}

static void expect_dp(int zero, int64_t times) {
  Run x;
  gpt2tiny(&x, flags(-1, 2, false, zero));
  Counts c;
  count(x.r.ir, &c);
  int64_t d = 2, want = times * psi(x.r.ir) * (d - 1) / d;
  ck_assert_msg(c.grad_param_elems[IR_AX_DP] == want, "zero %d: %lld elements, expected %lld", zero,
                (long long)c.grad_param_elems[IR_AX_DP], (long long)want);
  for (int l = 0; l < 2; l++)
    for (int r = 0; r < 2; r++)
      ck_assert_int_eq(total_layer(&c, l, r), 0); /* no activation moves */
  ck_assert_int_eq(c.other, 0);
  /* the input batch is split, the loss made whole */
  IrFunc *f = ir_module_func(x.r.ir, "train");
  ck_assert(ir_placement_eq(((IrValue *)f->inputs.items[0])->pl[IR_AX_DP], S(0)));
  IrValue *loss = f->results.items[0];
  ck_assert(loss->def->op == IR_OP_ALL_REDUCE && ir_placement_eq(loss->pl[IR_AX_DP], B));
  if (zero >= 1) { /* the optimizer state per rank is 1/dp of the serial one */
    int64_t local = 0, full = 0;
    for (int i = 0; i < x.r.ir->params.len; i++) {
      IrValue *p = x.r.ir->params.items[i];
      if (p->role != IR_ROLE_OPT) continue;
      full += ir_numel(&p->shape);
      local += ir_local_numel(x.r.ir, p);
    }
    ck_assert_int_eq(local * 2, full);
  }
  run_free(&x);
}

START_TEST(test_dp) {
  expect_dp(0, 2);
}
END_TEST
START_TEST(test_zero1) {
  expect_dp(1, 2);
}
END_TEST
START_TEST(test_zero2) {
  expect_dp(2, 2);
}
END_TEST
START_TEST(test_zero3) {
  expect_dp(3, 3);
}
END_TEST

/* Moved to IR text: ZeRO-1 reduce-scatters the gradients after the whole
 * backward, ZeRO-2 each as soon as it is complete, ZeRO-3 gathers again in
 * the backward (tests/passes/zero/zero{1,2,3}.mmir). */

/* tp x dp with sp and ZeRO-1: Megatron's counts on tp, ZeRO's on dp with
 * each rank's tp-local share of the parameters. */
START_TEST(test_tp_dp_sp_zero1) {
  Run x;
  gpt2tiny(&x, flags(2, 2, true, 1));
  Counts c;
  count(x.r.ir, &c);
  for (int l = 0; l < 2; l++)
    for (int r = 0; r < 2; r++) {
      ck_assert_int_eq(c.n[l][r][IR_OP_ALL_GATHER], r ? 4 : 2); /* re-gathers in the backward */
      ck_assert_int_eq(c.n[l][r][IR_OP_REDUCE_SCATTER], 2);
      ck_assert_int_eq(c.msg[l][r][IR_OP_ALL_GATHER], SBH / 2); /* the batch is split over dp */
    }
  int64_t local = 0;
  for (int i = 0; i < x.r.ir->params.len; i++) {
    IrValue *p = x.r.ir->params.items[i];
    if (p->role == IR_ROLE_PARAM && !p->frozen)
      local += ir_numel(&p->shape) / (p->pl[IR_AX_TP].kind == IR_PL_S ? 2 : 1);
  }
  ck_assert_int_eq(c.grad_param_elems[IR_AX_DP], 2 * local / 2);
  run_free(&x);
}
END_TEST

/* ---- gradient buckets (passes/bucket.c) ---- */

static int
    bucket_zero; /* the ZeRO stage of the bucket tests: 0 all-reduces, else reduce-scatters */

static MmPlanFlags bucket_flags(int tp, bool sp, double mb) {
  MmPlanFlags f = flags(tp, 2, sp, bucket_zero);
  f.given[MM_SET_BUCKET_MB] = mb >= 0;
  f.plan.bucket_mb = mb;
  return f;
}

/* The bucket pass on a dp = 2 plan: every trainable parameter's gradient is
 * all-reduced over dp in exactly one bucket; a bucket is one run of
 * consecutive all_reduce nodes (bucket_run), numbered 0, 1, ... in order; a
 * bucket closes at the first gradient that brings it to the cap or more, so
 * every bucket but the last holds at least the cap and less than the cap
 * before its last gradient; the buckets hold Psi's local share in all.
 * in_reverse: the order is the reverse of the parameters' (the backward's
 * order, as DDP assumes), and the count is then the greedy count over the
 * parameter sizes in that order, computed here apart from the pass. Returns
 * the number of buckets. */
/* The gradient a rank holds before its reduction: the parameter's piece on
 * the axes other than dp (ZeRO stores the parameter split over dp too). */
static int64_t grad_numel(const IrModule *m, const IrValue *p) {
  IrPlacement pl[IR_NAXES];
  memcpy(pl, p->pl, sizeof pl);
  pl[IR_AX_DP] = B;
  IrShape s;
  ir_local_shape(m, pl, &p->shape, &s);
  return ir_numel(&s);
}

static int expect_buckets(const char *file, const char *model, int tp, bool sp, double mb,
                          bool in_reverse) {
  Run x;
  run_model(&x, stdlib_path(file), NULL, model, bucket_flags(tp, sp, mb), "bucket");
  ck_assert_msg(x.ok, "%s", x.dbuf ? x.dbuf : "");
  IrModule *m = x.r.ir;
  IrFunc *f = ir_module_func(m, "train");
  ck_assert_ptr_nonnull(f);
  int64_t cap = (int64_t)(mb * 1048576.0);
  IrMap seen;
  Arena a;
  arena_init(&a);
  ir_map_init(&seen, &a, false);
  const IrValue *order[1024];
  int nb = 0, ng = 0, next_id = 0;
  int64_t total = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    int run = bucket_run(f, i);
    if (bucket_id(n) < 0) {
      /* no gradient of a trainable parameter left alone on dp */
      if ((n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER) &&
          n->attrs.v[IR_ATTR_MESH].i == IR_AX_DP)
        ck_assert_msg(!bucket_grad_param(f, i), "%s: the dp all-reduce of %s is in no bucket",
                      model, bucket_grad_param(f, i)->name);
      continue;
    }
    if (run == 0) continue;
    ck_assert_int_eq(bucket_id(n), next_id++); /* one run per bucket, in order */
    int64_t bytes = 0, last = 0;
    for (int j = 0; j < run; j++) {
      IrNode *u = f->nodes.items[i + j];
      ck_assert(u->op == (bucket_zero ? IR_OP_REDUCE_SCATTER : IR_OP_ALL_REDUCE) &&
                bucket_id(u) == bucket_id(n) && u->attrs.v[IR_ATTR_MESH].i == IR_AX_DP);
      const IrValue *p = bucket_grad_param(f, i + j);
      ck_assert_msg(p != NULL, "%s: bucket %d member %d reduces no gradient", model, nb, j);
      IrMapSlot *sl = ir_map_put(&seen, p);
      ck_assert_msg(sl->i == 0, "%s: the gradient of %s is in two buckets", model, p->name);
      sl->i = 1;
      ck_assert_int_lt(ng, 1024);
      order[ng++] = p;
      last = ir_local_numel(m, u->in[0]) * 4;
      bytes += last;
    }
    total += bytes / 4;
    ck_assert_msg(bytes - last < cap,
                  "%s: bucket %d held %lld bytes before its last gradient (cap %lld)", model, nb,
                  (long long)(bytes - last), (long long)cap);
    /* every bucket but the last is full; the last one ends the gradients */
    bool is_last = true;
    for (int k = i + run; k < f->nodes.len && is_last; k++)
      is_last = bucket_id(f->nodes.items[k]) < 0;
    if (!is_last)
      ck_assert_msg(bytes >= cap, "%s: bucket %d closed at %lld bytes < %lld", model, nb,
                    (long long)bytes, (long long)cap);
    nb++;
  }
  int64_t local_psi = 0;
  int ntrain = 0;
  for (int i = 0; i < m->params.len; i++) {
    IrValue *p = m->params.items[i];
    if (p->role != IR_ROLE_PARAM || p->frozen) continue;
    ck_assert_msg(ir_map_get(&seen, p) != NULL, "%s: the gradient of %s is in no bucket", model,
                  p->name);
    local_psi += grad_numel(m, p);
    ntrain++;
  }
  ck_assert_int_eq(ng, ntrain);
  ck_assert_int_eq(total, local_psi);
  if (in_reverse) {
    int k = 0, want = 0;
    int64_t fill = 0;
    for (int i = m->params.len - 1; i >= 0; i--) {
      IrValue *p = m->params.items[i];
      if (p->role != IR_ROLE_PARAM || p->frozen) continue;
      ck_assert_msg(order[k] == p, "%s: gradient %d of the buckets is %s, expected %s", model, k,
                    order[k]->name, p->name);
      k++;
      fill += grad_numel(m, p) * 4;
      if (fill >= cap) want++, fill = 0;
    }
    if (fill) want++;
    ck_assert_int_eq(nb, want);
  }
  arena_free(&a);
  run_free(&x);
  return nb;
}

START_TEST(test_buckets) {
  /* GPT2Tiny: Psi = 120576 f32 = 471 KiB; its largest gradients (wte, fc1,
   * fc2) are 64 KiB */
  ck_assert_int_eq(expect_buckets("gpt2.mm", "GPT2Tiny", -1, false, 1000, true), 1);
  ck_assert_int_eq(expect_buckets("gpt2.mm", "GPT2Tiny", -1, false, 0.25, true), 2);
  ck_assert_int_eq(expect_buckets("gpt2.mm", "GPT2Tiny", -1, false, 0.05, true), 7);
  /* a bucket smaller than any gradient: one per gradient */
  ck_assert_int_eq(expect_buckets("gpt2.mm", "GPT2Tiny", -1, false, 1e-6, true), 36);
  /* tp x dp with sp: the dp all-reduces of the norms' gradients, followed by
   * their tp all-reduces, are bucketed too; sizes are the tp-local pieces */
  ck_assert_int_ge(expect_buckets("gpt2.mm", "GPT2Tiny", 2, true, 0.05, true), 4);
  expect_buckets("vit_fashion.mm", "ViTFashion", -1, false, 0.1, false);
  expect_buckets("internvl2.mm", "InternVL2Tiny", -1, false, 0.1, false);
  expect_buckets("vit_fashion.mm", "ViTFashion", 2, false, 0.1, false);
}
END_TEST

/* ZeRO-1/2/3: the gradients' reduce-scatters over dp in buckets, by the same
 * rule (the input, the whole gradient, counts against the cap). */
START_TEST(test_buckets_zero) {
  for (bucket_zero = 1; bucket_zero <= 3; bucket_zero++) {
    ck_assert_int_eq(expect_buckets("gpt2.mm", "GPT2Tiny", -1, false, 0.25, true), 2);
    ck_assert_int_eq(expect_buckets("gpt2.mm", "GPT2Tiny", -1, false, 0.05, true), 7);
  }
  bucket_zero = 1; /* tp x dp + sp: the norms' dp reduce-scatters, then their tp all-reduces */
  ck_assert_int_ge(expect_buckets("gpt2.mm", "GPT2Tiny", 2, true, 0.05, true), 4);
  expect_buckets("internvl2.mm", "InternVL2Tiny", -1, false, 0.1, false);
  bucket_zero = 0;
}
END_TEST

/* bucket_mb = 0: no buckets, the pass leaves the IR as it was; the default
 * is MM_BUCKET_MB_DEFAULT; the bucketed program holds the same collectives
 * with the same placements, only moved and marked. */
START_TEST(test_buckets_off) {
  Run a, b, c;
  run_model(&a, stdlib_path("gpt2.mm"), NULL, "GPT2Tiny", bucket_flags(-1, false, 0),
            "collectives");
  run_model(&b, stdlib_path("gpt2.mm"), NULL, "GPT2Tiny", bucket_flags(-1, false, 0), "bucket");
  run_model(&c, stdlib_path("gpt2.mm"), NULL, "GPT2Tiny", bucket_flags(-1, false, -1), "bucket");
  ck_assert(a.ok && b.ok && c.ok);
  ck_assert(b.r.plan.bucket_mb == 0 && c.r.plan.bucket_mb == MM_BUCKET_MB_DEFAULT);
  a.r.ir->passes_run.len = b.r.ir->passes_run.len = 0; /* the IR, not the passes(...) line */
  char *sa = print_str(a.r.ir, -1), *sb = print_str(b.r.ir, -1);
  ck_assert_str_eq(sa, sb);
  free(sa);
  free(sb);
  IrFunc *fa = ir_module_func(a.r.ir, "train"), *fc = ir_module_func(c.r.ir, "train");
  int na = 0, nc = 0, waits = 0; /* overlapped: one bucket_wait per bucket besides */
  for (int i = 0; i < fa->nodes.len; i++) na += bucket_id(fa->nodes.items[i]) >= 0;
  for (int i = 0; i < fc->nodes.len; i++) {
    IrNode *u = fc->nodes.items[i];
    nc += bucket_id(u) >= 0;
    waits += u->op == IR_OP_BUCKET_WAIT;
  }
  ck_assert_int_eq(fa->nodes.len + waits, fc->nodes.len);
  ck_assert_int_eq(na, 0);
  ck_assert_int_eq(nc, 36);
  ck_assert_int_eq(waits, 2);
  run_free(&a);
  run_free(&b);
  run_free(&c);
}
END_TEST

/* All axes 1: the three passes leave the IR as the optimizer left it. */
START_TEST(test_serial_unchanged) {
  const char *models[][2] = {
      {"gpt2.mm", "GPT2Tiny"}, {"vit_fashion.mm", "ViTFashion"}, {"internvl2.mm", "InternVL2Tiny"}};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    Run a, b;
    MmPlanFlags f = flags(1, 1, false, 0);
    run_model(&a, stdlib_path(models[i][0]), NULL, models[i][1], f, "optimizer");
    run_model(&b, stdlib_path(models[i][0]), NULL, models[i][1], f, "collectives");
    ck_assert(a.ok && b.ok);
    a.r.ir->passes_run.len = b.r.ir->passes_run.len = 0; /* the IR, not the passes(...) line */
    char *sa = print_str(a.r.ir, -1), *sb = print_str(b.r.ir, -1);
    ck_assert_str_eq(sa, sb);
    free(sa);
    free(sb);
    run_free(&a);
    run_free(&b);
  }
}
END_TEST

/* Every stdlib plan of the acceptance list shards and verifies. */
START_TEST(test_plans_verify) {
  const char *models[][2] = {
      {"gpt2.mm", "GPT2Tiny"}, {"vit_fashion.mm", "ViTFashion"}, {"internvl2.mm", "InternVL2Tiny"}};
  MmPlanFlags plans[] = {flags(2, -1, false, -1), flags(2, -1, true, -1), flags(4, -1, true, -1),
                         flags(-1, 2, false, 0),  flags(-1, 2, false, 1), flags(-1, 2, false, 2),
                         flags(-1, 2, false, 3),  flags(2, 2, true, 1)};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
      if (i == 2 && plans[k].plan.tp == 4)
        continue; /* InternVL2Tiny has 2 KV heads: a plan error */
      Run x;
      run_model(&x, stdlib_path(models[i][0]), NULL, models[i][1], plans[k], NULL);
      ck_assert_msg(x.ok, "%s plan %zu: %s", models[i][1], k, x.dbuf ? x.dbuf : "");
      run_free(&x);
    }
}
END_TEST

/* bf16 under dp (issue 32): `fuse` folds the f32 cast of the tied
 * embedding's bf16 head gradient into the add of its two gradients, a
 * fused node whose operands are partial sums on dp. The verifier judged a
 * cast inside a fused program without the rule that lets a standalone
 * gradient cast pass them ("no sharding of fused explains its placements
 * on dp"), so the debug build refused what the release build compiled.
 * Every pass's output is verified here, as MMC_VERIFY_EACH_PASS does. */
START_TEST(test_bf16_dp_verify) {
  const char *bf16 = "import \"gpt2.mm\"\n"
                     "model G extends GPT2Tiny { train { precision = bf16 } }\n";
  MmPlanFlags plans[] = {flags(-1, 2, false, -1), flags(-1, 2, false, 1), flags(-1, 2, false, 3),
                         flags(2, 2, true, 2)};
  char path[1024];
  snprintf(path, sizeof path, "%s", stdlib_path("bf16.mm"));
  for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
    Run x;
    run_model(&x, path, bf16, "G", plans[k], NULL);
    ck_assert_msg(x.ok, "bf16 plan %zu: %s", k, x.dbuf ? x.dbuf : "");
    /* the fused node is there: the test covers the case */
    IrFunc *f = ir_module_func(x.r.ir, "train");
    bool cast_in_fused = false;
    for (int i = 0; f && i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      cast_in_fused |= n->op == IR_OP_FUSED && n->out[0]->pl[IR_AX_DP].kind == IR_PL_P &&
                       strstr(n->attrs.v[IR_ATTR_PROG].s, "cast(") != NULL;
    }
    ck_assert_msg(cast_in_fused, "bf16 plan %zu: no fused cast of a partial gradient", k);
    run_free(&x);
  }
  /* the same node as IR text: parsed, it is checked by the same rule */
  const char *text =
      "module @m mesh(dp = 2)\n"
      "func @f(%x : f32[4, 6]{dp:S(0)}, %dy : f32[4, 8]{dp:S(0)}, %e : f32[8, 6]{dp:P}) {\n"
      "  %0 = cast(%x) {dtype = bf16} : bf16[4, 6]{dp:S(0)}\n"
      "  %1 = cast(%dy) {dtype = bf16} : bf16[4, 8]{dp:S(0)}\n"
      "  %2 = linear_grad_w(%1, %0) : bf16[8, 6]{dp:P}\n"
      "  %3 = fused(%2, %e) {prog = \"t0 = cast(i0) {dtype = f32}; t1 = add(t0, i1)\"} : "
      "f32[8, 6]{dp:P}\n"
      "  return %3\n"
      "}\n";
  Parsed ps;
  parsed_init(&ps);
  ir_module_free(parse_ok(&ps, "cast.ir", text));
  /* a cast of a partial sum that is no gradient's stays refused */
  const char *bad =
      "module @m mesh(dp = 2)\n"
      "func @f(%e : bf16[8, 6]{dp:P}, %g : f32[8, 6]{dp:P}) {\n"
      "  %0 = fused(%e, %g) {prog = \"t0 = cast(i0) {dtype = f32}; t1 = add(t0, i1)\"} "
      ": f32[8, 6]{dp:P}\n"
      "  return %0\n"
      "}\n";
  ck_assert_ptr_null(parse_text(&ps, "nocast.ir", bad));
  ck_assert_msg(strstr(ps.buf, "no sharding of fused explains its placements on dp"), "%s", ps.buf);
  parsed_free(&ps);
}
END_TEST

/* ---- plans that cannot be sharded ---- */

static const char *small_model = "import \"nn.mm\"\n"
                                 "model Small {\n"
                                 "  let B = 4\n"
                                 "  fc1 = Linear(6, 8)\n"
                                 "  fc2 = Linear(8, 6)\n"
                                 "  head = Linear(6, 5)\n"
                                 "  forward(x: f32[B, 6], y: i32[B]) -> loss {\n"
                                 "    return cross_entropy(head(fc2(gelu(fc1(x)))), y)\n"
                                 "  }\n"
                                 "  parallel { tp = 3 }\n"
                                 "}\n";

START_TEST(test_errors) {
  Run x;
  char path[1024];
  snprintf(path, sizeof path, "%s", stdlib_path("small.mm"));
  run_model(&x, path, small_model, "Small", flags(-1, -1, false, -1), NULL);
  ck_assert(!x.ok);
  ck_assert_msg(
      strstr(
          x.dbuf,
          "nn.mm:18:14: error: tensor parallel: tp = 3 does not divide dim 0 (8) of @fc1.weight, "
          "which the column-parallel 'fc1' splits"),
      "%s", x.dbuf);
  ck_assert_msg(strstr(x.dbuf, "small.mm:10:14: note: tp set here"), "%s", x.dbuf);
  run_free(&x);
  /* the rest on IR text: tests/passes/shard/indivisible.mmir (tp = 3, dp = 3,
   * tp = 2 with the head replicated) and cp_no_attention.mmir */
}
END_TEST

static Suite *shard_suite(void) {
  Suite *s = suite_create("shard");
  TCase *tc = tcase_create("rules");
  tcase_add_test(tc, test_rule_linear);
  tcase_add_test(tc, test_rule_elementwise);
  tcase_add_test(tc, test_rule_layout);
  tcase_add_test(tc, test_rule_transformer);
  tcase_add_test(tc, test_rule_backward);
  tcase_add_test(tc, test_rule_fused);
  tcase_add_test(tc, test_rule_collectives);
  tcase_add_test(tc, test_rule_more);
  tcase_add_test(tc, test_rule_haar);
  tcase_add_test(tc, test_grad_collectives);
  tcase_add_test(tc, test_text_roundtrip);
  suite_add_tcase(s, tc);
  tc = tcase_create("passes");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_megatron_tp);
  tcase_add_test(tc, test_megatron_tp_sp);
  tcase_add_test(tc, test_megatron_other_models);
  tcase_add_test(tc, test_conv_pairs);
  tcase_add_test(tc, test_dp);
  tcase_add_test(tc, test_zero1);
  tcase_add_test(tc, test_zero2);
  tcase_add_test(tc, test_zero3);
  tcase_add_test(tc, test_tp_dp_sp_zero1);
  tcase_add_test(tc, test_buckets);
  tcase_add_test(tc, test_buckets_off);
  tcase_add_test(tc, test_buckets_zero);
  tcase_add_test(tc, test_serial_unchanged);
  tcase_add_test(tc, test_plans_verify);
  tcase_add_test(tc, test_bf16_dp_verify);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(shard_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
