/* The reference interpreter (ir/ir_eval.c) against the runtime's kernels
 * (runtime/kernels/mmrt_kernels.h): for each op, one node built with ir_build and
 * run by ir_eval_node on random inputs of odd sizes, and the same inputs
 * (as fp32) through the kernel the backend binds it to. This pins down
 * that both sides agree on every convention (layouts, RoPE's rotate-half,
 * causal masking with S > T, GQA head mapping, ignored labels, bias
 * correction), so that trainers can be checked against the interpreter.
 *
 * Error metric: max |kernel - interpreter| / max(1, max |interpreter|);
 * tolerance 2e-5 (fp32 kernels against double). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/ir_eval.h"
#include "mmrt_kernels.h"

#define TOL 2e-5

typedef struct R {
  Diag d;
  IrModule *m;
  IrFunc *f;
  IrBuilder b;
  IrTensorStore st;
  uint64_t rng;
  void *allocs[64];
  int nallocs;
} R;

static void r_init(R *r, uint64_t seed) {
  memset(r, 0, sizeof *r);
  diag_init(&r->d);
  r->m = ir_module_new(&r->d, "K");
  r->f = ir_func_new(r->m, "f");
  r->b = (IrBuilder){.m = r->m, .f = r->f, .group = -1, .layer = -1};
  ir_store_init(&r->st);
  r->rng = seed * 0x9E3779B97F4A7C15ull + 7;
}

static void r_free(R *r) {
  for (int i = 0; i < r->nallocs; i++) free(r->allocs[i]);
  ir_store_free(&r->st);
  ir_module_free(r->m);
  diag_free(&r->d);
  mmrt_kernels_shutdown();
}

static double urand(R *r) {
  r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(r->rng >> 11) / 9007199254740992.0;
}

static IrShape shp(const int64_t *d, int n) {
  IrShape s = {.rank = n};
  for (int i = 0; i < n; i++) s.d[i] = d[i];
  return s;
}
#define SHP(...)                                                                                   \
  shp((const int64_t[]){__VA_ARGS__},                                                              \
      (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define VS(...)                                                                                    \
  (IrValue *[]){__VA_ARGS__}, (int)(sizeof((IrValue *[]){__VA_ARGS__}) / sizeof(IrValue *))

/* An f32 input with values in [lo, hi), rounded to float so that both
 * sides see the same numbers. */
static IrValue *rin(R *r, IrShape s, double lo, double hi) {
  char name[16];
  snprintf(name, sizeof name, "x%d", r->f->inputs.len);
  IrValue *v = ir_add_input(r->m, r->f, name, IR_F32, &s, (SrcLoc){0});
  IrTensor *t = ir_store_put(&r->st, v);
  for (int64_t i = 0; i < t->n; i++) t->d[i] = (float)(lo + (hi - lo) * urand(r));
  return v;
}

static IrValue *iin(R *r, IrShape s, const int *vals) {
  char name[16];
  snprintf(name, sizeof name, "i%d", r->f->inputs.len);
  IrValue *v = ir_add_input(r->m, r->f, name, IR_I32, &s, (SrcLoc){0});
  IrTensor *t = ir_store_put(&r->st, v);
  for (int64_t i = 0; i < t->n; i++) t->d[i] = vals[i];
  return v;
}

static IrNode *run(R *r, IrOp op, IrValue **in, int nin, const IrAttrs *a) {
  char err[512];
  IrAttrs none = {0};
  IrNode *n = ir_build(&r->b, op, in, nin, a ? a : &none, (SrcLoc){0}, err, sizeof err, NULL);
  ck_assert_msg(n != NULL, "ir_build %s: %s", ir_ops[op].name, err);
  ck_assert_msg(ir_eval_node(r->m, n, &r->st, err, sizeof err), "ir_eval %s: %s", ir_ops[op].name,
                err);
  return n;
}

static void *ralloc(R *r, size_t bytes) {
  ck_assert_int_lt(r->nallocs, 64);
  void *p = calloc(1, bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  r->allocs[r->nallocs++] = p;
  return p;
}

/* fp32 copy of a value's tensor */
static float *fl(R *r, const IrValue *v) {
  const IrTensor *t = ir_store_get(&r->st, v);
  float *f = ralloc(r, sizeof(float) * (size_t)t->n);
  for (int64_t i = 0; i < t->n; i++) f[i] = (float)t->d[i];
  return f;
}

static float *fzeros(R *r, const IrValue *v) {
  return ralloc(r, sizeof(float) * (size_t)ir_numel(&v->shape));
}

static int32_t *ints(R *r, const IrValue *v) {
  const IrTensor *t = ir_store_get(&r->st, v);
  int32_t *p = ralloc(r, sizeof(int32_t) * (size_t)t->n);
  for (int64_t i = 0; i < t->n; i++) p[i] = (int32_t)t->d[i];
  return p;
}

static void cmp(R *r, const char *what, const IrValue *v, const float *got) {
  const IrTensor *t = ir_store_get(&r->st, v);
  double err = 0, scale = 1;
  for (int64_t i = 0; i < t->n; i++) {
    if (isinf(t->d[i]) && isinf(got[i]) && (t->d[i] > 0) == (got[i] > 0)) continue;
    err = fmax(err, fabs(got[i] - t->d[i]));
    scale = fmax(scale, fabs(t->d[i]));
  }
  ck_assert_msg(err / scale <= TOL, "%s: kernel and interpreter differ by %g (scale %g)", what, err,
                scale);
}

static IrAttrs attrs_f(IrAttrId id, double v) {
  IrAttrs a = {0};
  ir_attrs_set_float(&a, id, v);
  return a;
}

/* ---- contractions ---- */

START_TEST(test_linear) {
  R r;
  r_init(&r, 1);
  IrValue *x = rin(&r, SHP(3, 5, 7), -1, 1), *w = rin(&r, SHP(4, 7), -1, 1),
          *dy = rin(&r, SHP(3, 5, 4), -1, 1);
  IrNode *y = run(&r, IR_OP_LINEAR, VS(x, w), NULL);
  IrNode *dx = run(&r, IR_OP_LINEAR_GRAD_X, VS(dy, w), NULL),
         *dw = run(&r, IR_OP_LINEAR_GRAD_W, VS(dy, x), NULL);
  float *ky = fzeros(&r, y->out[0]), *kdx = fzeros(&r, dx->out[0]), *kdw = fzeros(&r, dw->out[0]);
  mmrt_linear_fwd(MMRT_F32, ky, fl(&r, x), fl(&r, w), NULL, 15, 7, 4);
  mmrt_linear_bwd_data(MMRT_F32, kdx, fl(&r, dy), fl(&r, w), 15, 7, 4, 0);
  mmrt_linear_bwd_weights(MMRT_F32, kdw, NULL, fl(&r, dy), fl(&r, x), 15, 7, 4, 0);
  cmp(&r, "linear", y->out[0], ky);
  cmp(&r, "linear_grad_x", dx->out[0], kdx);
  cmp(&r, "linear_grad_w", dw->out[0], kdw);
  r_free(&r);
}
END_TEST

START_TEST(test_matmul) {
  R r;
  r_init(&r, 2);
  IrValue *a = rin(&r, SHP(3, 5, 7), -1, 1), *b = rin(&r, SHP(3, 7, 4), -1, 1);
  IrNode *y = run(&r, IR_OP_MATMUL, VS(a, b), NULL);
  float *k = fzeros(&r, y->out[0]);
  mmrt_matmul(MMRT_F32, k, fl(&r, a), fl(&r, b), 3, 5, 4, 7, 1.0f, 0);
  cmp(&r, "matmul", y->out[0], k);
  r_free(&r);
}
END_TEST

START_TEST(test_conv2d) {
  R r;
  r_init(&r, 3);
  IrValue *x = rin(&r, SHP(2, 3, 7, 6), -1, 1), *w = rin(&r, SHP(4, 3, 3, 2), -1, 1),
          *b = rin(&r, SHP(4), -1, 1);
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, (int64_t[]){2, 1}, 2);
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, (int64_t[]){1, 0}, 2);
  IrNode *y = run(&r, IR_OP_CONV2D, VS(x, w, b), &a);
  IrValue *dy = rin(&r, y->out[0]->shape, -1, 1);
  IrAttrs ax = a, aw = a;
  ir_attrs_set_ints(&ax, IR_ATTR_SHAPE, x->shape.d, 4);
  ir_attrs_set_ints(&aw, IR_ATTR_SHAPE, w->shape.d, 4);
  IrNode *dx = run(&r, IR_OP_CONV2D_GRAD_X, VS(dy, w), &ax),
         *dw = run(&r, IR_OP_CONV2D_GRAD_W, VS(dy, x), &aw);
  MmrtConv cv = {.N = 2,
                 .C = 3,
                 .OC = 4,
                 .in = {7, 6},
                 .k = {3, 2},
                 .stride = {2, 1},
                 .pad_lo = {1, 0},
                 .pad_hi = {1, 0}};
  float *ky = fzeros(&r, y->out[0]), *kdx = fzeros(&r, dx->out[0]), *kdw = fzeros(&r, dw->out[0]);
  mmrt_conv2d_fwd(MMRT_F32, &cv, ky, fl(&r, x), fl(&r, w), fl(&r, b));
  mmrt_conv2d_bwd_data(MMRT_F32, &cv, kdx, fl(&r, dy), fl(&r, w), 0);
  mmrt_conv2d_bwd_weights(MMRT_F32, &cv, kdw, NULL, fl(&r, dy), fl(&r, x), 0);
  cmp(&r, "conv2d", y->out[0], ky);
  cmp(&r, "conv2d_grad_x", dx->out[0], kdx);
  cmp(&r, "conv2d_grad_w", dw->out[0], kdw);
  r_free(&r);
}
END_TEST

START_TEST(test_conv3d) {
  R r;
  r_init(&r, 4);
  IrValue *x = rin(&r, SHP(1, 2, 5, 4, 6), -1, 1), *w = rin(&r, SHP(3, 2, 2, 3, 2), -1, 1);
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, (int64_t[]){1, 2, 1}, 3);
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, (int64_t[]){1, 0, 1}, 3);
  IrNode *y = run(&r, IR_OP_CONV3D, VS(x, w), &a);
  MmrtConv cv = {.N = 1,
                 .C = 2,
                 .OC = 3,
                 .in = {5, 4, 6},
                 .k = {2, 3, 2},
                 .stride = {1, 2, 1},
                 .pad_lo = {1, 0, 1},
                 .pad_hi = {1, 0, 1}};
  float *ky = fzeros(&r, y->out[0]);
  mmrt_conv3d_fwd(MMRT_F32, &cv, ky, fl(&r, x), fl(&r, w), NULL);
  cmp(&r, "conv3d", y->out[0], ky);
  r_free(&r);
}
END_TEST

/* ---- Haar wavelet transforms ---- */

/* each transform: the interpreter against the kernel */
static const struct {
  IrOp op;
  int64_t d[5];
  int rank;
} haars[] = {
    {IR_OP_HAAR2D, {2, 3, 6, 4}, 4},
    {IR_OP_IHAAR2D, {2, 12, 3, 5}, 4},
    {IR_OP_HAAR3D, {1, 3, 4, 6, 2}, 5},
    {IR_OP_IHAAR3D, {2, 16, 3, 1, 2}, 5},
};

START_TEST(test_haar) {
  R r;
  r_init(&r, 40 + (uint64_t)_i);
  IrOp op = haars[_i].op;
  bool three = op == IR_OP_HAAR3D || op == IR_OP_IHAAR3D;
  bool inv = op == IR_OP_IHAAR2D || op == IR_OP_IHAAR3D;
  IrValue *x = rin(&r, shp(haars[_i].d, haars[_i].rank), -1, 1);
  IrNode *y = run(&r, op, &x, 1, NULL);
  const IrShape *f = inv ? &y->out[0]->shape : &x->shape;
  float *ky = fzeros(&r, y->out[0]);
  ck_assert_int_eq(mmrt_haar(ky, fl(&r, x), (int32_t)f->d[0], (int32_t)f->d[1],
                             three ? (int32_t)f->d[2] : 1, (int32_t)f->d[three ? 3 : 2],
                             (int32_t)f->d[three ? 4 : 3], three ? 3 : 2, inv),
                   0);
  cmp(&r, ir_ops[op].name, y->out[0], ky);
  r_free(&r);
}
END_TEST

/* The tables of text and video diffusion (runtime/kernels/mmrt_dit.c) against the
 * interpreter: T5's relative-position buckets (exact, 40 positions, so the
 * log-spaced buckets and the cap at max_distance 20 are reached), the
 * timestep embedding and the DDPM table with and without the zero-terminal-
 * SNR rescale (1e-6: both in double); its last row under zero_snr is
 * (0, 1, 0), the SNR there being 0. */
START_TEST(test_dit_tables) {
  R r;
  r_init(&r, 70);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_LEN, 40);
  ir_attrs_set_int(&a, IR_ATTR_BUCKETS, 32);
  ir_attrs_set_int(&a, IR_ATTR_MAX_DISTANCE, 20);
  IrNode *b = run(&r, IR_OP_REL_BUCKETS, NULL, 0, &a);
  int32_t *kb = ralloc(&r, sizeof(int32_t) * 40 * 40), *ib = ints(&r, b->out[0]);
  mmrt_rel_buckets(kb, 40, 32, 20);
  for (int i = 0; i < 40 * 40; i++) ck_assert_int_eq(kb[i], ib[i]);
  ck_assert_int_eq(kb[0 * 40 + 39], 31); /* far right: the last bucket */
  ck_assert_int_eq(kb[39 * 40 + 0], 15); /* far left */
  ck_assert_int_eq(kb[5 * 40 + 3], 2);   /* exact below 8 */
  IrValue *t = rin(&r, SHP(3, 2), 0, 999);
  IrAttrs e = {0};
  ir_attrs_set_int(&e, IR_ATTR_DIM, 16);
  ir_attrs_set_float(&e, IR_ATTR_THETA, 10000);
  IrNode *y = run(&r, IR_OP_TIMESTEP_EMBEDDING, &t, 1, &e);
  float *ky = fzeros(&r, y->out[0]);
  mmrt_timestep_embed(ky, fl(&r, t), 6, 16, 10000);
  cmp(&r, "timestep_embedding", y->out[0], ky);
  for (int zero = 0; zero < 2; zero++) {
    IrAttrs d = {0};
    ir_attrs_set_int(&d, IR_ATTR_STEPS, 1000);
    ir_attrs_set_float(&d, IR_ATTR_BETA_START, 1e-4);
    ir_attrs_set_float(&d, IR_ATTR_BETA_END, 0.02);
    ir_attrs_set_int(&d, IR_ATTR_ZERO_SNR, zero);
    ir_attrs_set_float(&d, IR_ATTR_GAMMA, 5);
    IrNode *n = run(&r, IR_OP_DDPM_TABLE, NULL, 0, &d);
    float *kd = fzeros(&r, n->out[0]);
    mmrt_ddpm_table(kd, 1000, 1e-4, 0.02, zero, 5);
    const IrTensor *it = ir_store_get(&r.st, n->out[0]);
    for (int i = 0; i < 3000; i++) ck_assert_double_eq_tol(kd[i], it->d[i], 1e-6);
    if (zero) {
      ck_assert_float_eq(kd[2997], 0);
      ck_assert_float_eq(kd[2998], 1);
      ck_assert_float_eq(kd[2999], 0);
    }
  }
  r_free(&r);
}
END_TEST

/* The sub-band order on one 2x2 block (a b / c d) = (1 2 / 3 4): LL =
 * (a+b+c+d)/2 = 5, rows differ (a+b-c-d)/2 = -2, columns (a-b+c-d)/2 = -1,
 * both (a-b-c+d)/2 = 0; and in 3D the frame difference of a block whose
 * second frame is the first plus 1 is -4/sqrt 8 (LLL 4/sqrt 8). */
START_TEST(test_haar_order) {
  float x2[4] = {1, 2, 3, 4}, y2[4];
  ck_assert_int_eq(mmrt_haar(y2, x2, 1, 1, 1, 2, 2, 2, 0), 0);
  static const float want2[4] = {5, -2, -1, 0};
  for (int k = 0; k < 4; k++) ck_assert_float_eq_tol(y2[k], want2[k], 1e-6);
  float x3[8], y3[8];
  for (int p = 0; p < 8; p++) x3[p] = (float)(p >> 2); /* frame 0 zeros, frame 1 ones */
  ck_assert_int_eq(mmrt_haar(y3, x3, 1, 1, 2, 2, 2, 3, 0), 0);
  for (int k = 0; k < 8; k++)
    ck_assert_float_eq_tol(y3[k], k == 0 ? 4 / sqrt(8) : k == 4 ? -4 / sqrt(8) : 0, 1e-6);
  ck_assert_int_eq(mmrt_haar(y2, x2, 1, 1, 1, 3, 2, 2, 0), -1); /* odd H */
}
END_TEST

/* WF-VAE's causal form on 1 + 2k frames (lang/REFERENCE.md): the first
 * frame put in front once more, haar3d, ihaar3d, the first frame dropped
 * again gives the input back; the first output frame's time-difference
 * sub-bands (k >= 4) are zero, its block being (x0, x0). */
START_TEST(test_haar3d_causal_form) {
  R r;
  r_init(&r, 60);
  IrValue *x = rin(&r, SHP(2, 3, 5, 4, 2), -1, 1);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 2);
  ir_attrs_set_int(&a, IR_ATTR_START, 0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 1);
  IrNode *first = run(&r, IR_OP_SLICE, &x, 1, &a);
  IrAttrs ax = {0};
  ir_attrs_set_int(&ax, IR_ATTR_AXIS, 2);
  IrNode *padded = run(&r, IR_OP_CONCAT, VS(first->out[0], x), &ax);
  IrNode *c = run(&r, IR_OP_HAAR3D, padded->out, 1, NULL);
  ck_assert_int_eq(c->out[0]->shape.d[2], 3); /* (5 + 1) / 2 latent frames */
  IrNode *back = run(&r, IR_OP_IHAAR3D, c->out, 1, NULL);
  ir_attrs_set_int(&a, IR_ATTR_START, 1);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 6);
  IrNode *y = run(&r, IR_OP_SLICE, back->out, 1, &a);
  const IrTensor *xt = ir_store_get(&r.st, x), *yt = ir_store_get(&r.st, y->out[0]),
                 *ct = ir_store_get(&r.st, c->out[0]);
  ck_assert(ir_shape_eq(&y->out[0]->shape, &x->shape));
  for (int64_t i = 0; i < xt->n; i++) ck_assert(fabs(yt->d[i] - xt->d[i]) < 1e-12);
  double hi0 = 0, hi1 = 0; /* time-difference bands at latent frame 0 and 1 */
  for (int64_t b = 0; b < 2; b++)
    for (int64_t ch = 0; ch < 24; ch++)
      for (int64_t t = 0; t < 2; t++)
        for (int64_t k = 0; k < 2 * 1; k++) {
          double v = fabs(ct->d[((b * 24 + ch) * 3 + t) * 2 + k]);
          if (ch % 8 >= 4) *(t ? &hi1 : &hi0) = fmax(t ? hi1 : hi0, v);
        }
  ck_assert_msg(hi0 < 1e-12 && hi1 > 1e-3, "time-difference bands: frame 0 %g, frame 1 %g", hi0,
                hi1);
  r_free(&r);
}
END_TEST

/* What the sharding rule says (ir_shard.c rule_HAAR): a rank holding
 * channels [C/2, C) of x computes result channels [S*C/2, S*C) with the
 * kernel on its piece alone, 2D and 3D, forward and inverse. */
START_TEST(test_haar_channel_split) {
  for (int three = 0; three < 2; three++)
    for (int inv = 0; inv < 2; inv++) {
      int32_t B = 2, C = 4, T = three ? 2 : 1, H = 4, W = 6;
      int64_t n = (int64_t)B * C * T * H * W, half = n / B / 2; /* per sample */
      float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n),
            *px = malloc(sizeof(float) * (size_t)n / 2),
            *py = malloc(sizeof(float) * (size_t)n / 2);
      for (int64_t i = 0; i < n; i++) x[i] = (float)sin(0.37 * (double)i + three + 2 * inv);
      ck_assert_int_eq(mmrt_haar(y, x, B, C, T, H, W, three ? 3 : 2, inv), 0);
      for (int32_t b = 0; b < B; b++) /* the second half of each sample's channels */
        memcpy(px + b * half, x + b * 2 * half + half, sizeof(float) * (size_t)half);
      ck_assert_int_eq(mmrt_haar(py, px, B, C / 2, T, H, W, three ? 3 : 2, inv), 0);
      for (int32_t b = 0; b < B; b++)
        for (int64_t i = 0; i < half; i++)
          ck_assert_msg(py[b * half + i] == y[b * 2 * half + half + i],
                        "%dD%s: sample %d element %lld of the channel piece differs", three ? 3 : 2,
                        inv ? " inverse" : "", b, (long long)i);
      free(x), free(y), free(px), free(py);
    }
}
END_TEST

/* On random data: the inverse of the transform is the input (1e-6), and
 * the transform keeps the energy (sum of squares), 2D and 3D, through the
 * kernels and through the interpreter; odd sizes are refused by the shape
 * rule with a message naming the axis. */
START_TEST(test_haar_inverse_energy) {
  R r;
  r_init(&r, 50);
  for (int three = 0; three < 2; three++) {
    IrShape s = three ? SHP(2, 3, 4, 6, 8) : SHP(2, 3, 6, 8);
    IrValue *x = rin(&r, s, -1, 1);
    IrNode *y = run(&r, three ? IR_OP_HAAR3D : IR_OP_HAAR2D, &x, 1, NULL);
    IrNode *z = run(&r, three ? IR_OP_IHAAR3D : IR_OP_IHAAR2D, y->out, 1, NULL);
    const IrTensor *xt = ir_store_get(&r.st, x), *yt = ir_store_get(&r.st, y->out[0]),
                   *zt = ir_store_get(&r.st, z->out[0]);
    ck_assert(ir_shape_eq(&z->out[0]->shape, &x->shape));
    int64_t n = xt->n;
    float *kx = fl(&r, x), *ky = fzeros(&r, y->out[0]), *kz = fzeros(&r, x);
    int32_t T = three ? 4 : 1, H = three ? 6 : 6, W = 8, dims = three ? 3 : 2;
    ck_assert_int_eq(mmrt_haar(ky, kx, 2, 3, T, H, W, dims, 0), 0);
    ck_assert_int_eq(mmrt_haar(kz, ky, 2, 3, T, H, W, dims, 1), 0);
    double ex = 0, ey = 0, eky = 0, dz = 0, dkz = 0;
    for (int64_t i = 0; i < n; i++) {
      ex += xt->d[i] * xt->d[i], ey += yt->d[i] * yt->d[i], eky += (double)ky[i] * ky[i];
      dz = fmax(dz, fabs(zt->d[i] - xt->d[i])), dkz = fmax(dkz, fabs(kz[i] - xt->d[i]));
    }
    ck_assert_msg(dz < 1e-12 && dkz < 1e-6, "%dD: inverse off by %g (interpreter), %g (kernel)",
                  three ? 3 : 2, dz, dkz);
    ck_assert_msg(fabs(ey - ex) < 1e-9 * ex && fabs(eky - ex) < 1e-5 * ex,
                  "%dD: energy %g in, %g / %g out", three ? 3 : 2, ex, ey, eky);
    ck_assert(ex > 10); /* a random field, not zeros */
  }
  struct {
    IrOp op;
    IrShape s;
    const char *msg;
  } bad[] = {
      {IR_OP_HAAR2D, SHP(1, 2, 5, 4), "H = 5"},
      {IR_OP_HAAR2D, SHP(1, 2, 4, 3), "W = 3"},
      {IR_OP_HAAR3D, SHP(1, 2, 17, 4, 4), "T = 17"},
      {IR_OP_IHAAR2D, SHP(1, 6, 4, 4), "multiple of 4"},
      {IR_OP_IHAAR3D, SHP(1, 12, 2, 4, 4), "multiple of 8"},
      {IR_OP_HAAR3D, SHP(1, 2, 4, 4), "[B, C, T, H, W]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    IrValue *x = rin(&r, bad[i].s, -1, 1);
    char err[512];
    IrAttrs none = {0};
    IrNode *n = ir_build(&r.b, bad[i].op, &x, 1, &none, (SrcLoc){0}, err, sizeof err, NULL);
    ck_assert_ptr_null(n);
    ck_assert_msg(strstr(err, bad[i].msg), "%s: message \"%s\" lacks \"%s\"",
                  ir_ops[bad[i].op].name, err, bad[i].msg);
  }
  r_free(&r);
}
END_TEST

/* ---- normalisation ---- */

START_TEST(test_layer_norm) {
  R r;
  r_init(&r, 5);
  IrValue *x = rin(&r, SHP(3, 5, 7), -2, 2), *w = rin(&r, SHP(7), 0.5, 1.5),
          *b = rin(&r, SHP(7), -1, 1);
  IrAttrs a = attrs_f(IR_ATTR_EPS, 1e-5);
  IrNode *y = run(&r, IR_OP_LAYER_NORM, VS(x, w, b), &a);
  IrValue *dy = rin(&r, x->shape, -1, 1);
  IrNode *g = run(&r, IR_OP_LAYER_NORM_GRAD, VS(dy, x, y->out[1], y->out[2], w), &a);
  float *ky = fzeros(&r, x), *km = fzeros(&r, y->out[1]), *kr = fzeros(&r, y->out[2]);
  mmrt_layernorm_fwd(ky, km, kr, fl(&r, x), fl(&r, w), fl(&r, b), 15, 7, 1e-5f);
  cmp(&r, "layer_norm y", y->out[0], ky);
  cmp(&r, "layer_norm mean", y->out[1], km);
  cmp(&r, "layer_norm rstd", y->out[2], kr);
  float *kdx = fzeros(&r, x), *kdw = fzeros(&r, w), *kdb = fzeros(&r, b);
  mmrt_layernorm_bwd(kdx, kdw, kdb, fl(&r, dy), fl(&r, x), km, kr, fl(&r, w), 15, 7, 0);
  cmp(&r, "layer_norm_grad dx", g->out[0], kdx);
  cmp(&r, "layer_norm_grad dw", g->out[1], kdw);
  cmp(&r, "layer_norm_grad db", g->out[2], kdb);
  r_free(&r);
}
END_TEST

/* over dim 1 of [B, C, T, H, W] (layer_norm {axis = 1}) against the
 * runtime's strided kernels; 700 positions: more than one of their blocks */
START_TEST(test_layer_norm_axis) {
  R r;
  r_init(&r, 6);
  IrValue *x = rin(&r, SHP(2, 6, 5, 10, 14), -2, 2), *w = rin(&r, SHP(6), 0.5, 1.5),
          *b = rin(&r, SHP(6), -1, 1);
  IrAttrs a = attrs_f(IR_ATTR_EPS, 1e-5);
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  IrNode *y = run(&r, IR_OP_LAYER_NORM, VS(x, w, b), &a);
  IrValue *dy = rin(&r, x->shape, -1, 1);
  IrNode *g = run(&r, IR_OP_LAYER_NORM_GRAD, VS(dy, x, y->out[1], y->out[2], w), &a);
  float *ky = fzeros(&r, x), *km = fzeros(&r, y->out[1]), *kr = fzeros(&r, y->out[2]);
  mmrt_layernorm_axis_fwd(ky, km, kr, fl(&r, x), fl(&r, w), fl(&r, b), 2, 6, 700, 1e-5f);
  cmp(&r, "layer_norm axis y", y->out[0], ky);
  cmp(&r, "layer_norm axis mean", y->out[1], km);
  cmp(&r, "layer_norm axis rstd", y->out[2], kr);
  float *kdx = fzeros(&r, x), *kdw = fzeros(&r, w), *kdb = fzeros(&r, b);
  mmrt_layernorm_axis_bwd(kdx, kdw, kdb, fl(&r, dy), fl(&r, x), km, kr, fl(&r, w), 2, 6, 700, 0);
  cmp(&r, "layer_norm_grad axis dx", g->out[0], kdx);
  cmp(&r, "layer_norm_grad axis dw", g->out[1], kdw);
  cmp(&r, "layer_norm_grad axis db", g->out[2], kdb);
  r_free(&r);
}
END_TEST

START_TEST(test_rms_norm) {
  R r;
  r_init(&r, 6);
  IrValue *x = rin(&r, SHP(3, 5, 7), -2, 2), *w = rin(&r, SHP(7), 0.5, 1.5);
  IrAttrs a = attrs_f(IR_ATTR_EPS, 1e-6);
  IrNode *y = run(&r, IR_OP_RMS_NORM, VS(x, w), &a);
  IrValue *dy = rin(&r, x->shape, -1, 1);
  IrNode *g = run(&r, IR_OP_RMS_NORM_GRAD, VS(dy, x, y->out[1], w), &a);
  float *ky = fzeros(&r, x), *kr = fzeros(&r, y->out[1]), *kdx = fzeros(&r, x),
        *kdw = fzeros(&r, w);
  mmrt_rmsnorm_fwd(ky, kr, fl(&r, x), fl(&r, w), 15, 7, 1e-6f);
  mmrt_rmsnorm_bwd(kdx, kdw, fl(&r, dy), fl(&r, x), kr, fl(&r, w), 15, 7, 0);
  cmp(&r, "rms_norm y", y->out[0], ky);
  cmp(&r, "rms_norm rstd", y->out[1], kr);
  cmp(&r, "rms_norm_grad dx", g->out[0], kdx);
  cmp(&r, "rms_norm_grad dw", g->out[1], kdw);
  r_free(&r);
}
END_TEST

START_TEST(test_group_norm) {
  R r;
  r_init(&r, 7);
  IrValue *x = rin(&r, SHP(2, 6, 5, 3), -2, 2), *w = rin(&r, SHP(6), 0.5, 1.5),
          *b = rin(&r, SHP(6), -1, 1);
  IrAttrs a = attrs_f(IR_ATTR_EPS, 1e-5);
  ir_attrs_set_int(&a, IR_ATTR_GROUPS, 3);
  IrNode *y = run(&r, IR_OP_GROUP_NORM, VS(x, w, b), &a);
  IrValue *dy = rin(&r, x->shape, -1, 1);
  IrNode *g = run(&r, IR_OP_GROUP_NORM_GRAD, VS(dy, x, y->out[1], y->out[2], w), &a);
  float *ky = fzeros(&r, x), *km = fzeros(&r, y->out[1]), *kr = fzeros(&r, y->out[2]);
  mmrt_groupnorm_fwd(ky, km, kr, fl(&r, x), fl(&r, w), fl(&r, b), 2, 6, 15, 3, 1e-5f);
  float *kdx = fzeros(&r, x), *kdw = fzeros(&r, w), *kdb = fzeros(&r, b);
  mmrt_groupnorm_bwd(kdx, kdw, kdb, fl(&r, dy), fl(&r, x), km, kr, fl(&r, w), 2, 6, 15, 3, 0);
  cmp(&r, "group_norm y", y->out[0], ky);
  cmp(&r, "group_norm mean", y->out[1], km);
  cmp(&r, "group_norm rstd", y->out[2], kr);
  cmp(&r, "group_norm_grad dx", g->out[0], kdx);
  cmp(&r, "group_norm_grad dw", g->out[1], kdw);
  cmp(&r, "group_norm_grad db", g->out[2], kdb);
  r_free(&r);
}
END_TEST

START_TEST(test_softmax) {
  R r;
  r_init(&r, 8);
  IrValue *x = rin(&r, SHP(3, 5, 7), -3, 3), *dy = rin(&r, SHP(3, 5, 7), -1, 1);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, -1);
  IrNode *y = run(&r, IR_OP_SOFTMAX, &x, 1, &a);
  IrNode *g = run(&r, IR_OP_SOFTMAX_GRAD, VS(dy, y->out[0]), &a);
  float *ky = fzeros(&r, x), *kdx = fzeros(&r, x);
  mmrt_softmax_fwd(MMRT_F32, ky, fl(&r, x), 15, 7);
  mmrt_softmax_bwd(MMRT_F32, kdx, fl(&r, dy), fl(&r, y->out[0]), 15, 7, 0);
  cmp(&r, "softmax", y->out[0], ky);
  cmp(&r, "softmax_grad", g->out[0], kdx);
  r_free(&r);
}
END_TEST

/* ---- elementwise ---- */

static const struct {
  IrOp op, grad;
  MmrtAct act;
  double lo, hi;
} acts[] = {
    {IR_OP_GELU, IR_OP_GELU_GRAD, MMRT_ACT_GELU, -3, 3},
    {IR_OP_GELU_TANH, IR_OP_GELU_TANH_GRAD, MMRT_ACT_GELU_TANH, -3, 3},
    {IR_OP_SILU, IR_OP_SILU_GRAD, MMRT_ACT_SILU, -3, 3},
    {IR_OP_RELU, IR_OP_RELU_GRAD, MMRT_ACT_RELU, -3, 3},
    {IR_OP_TANH, IR_OP_TANH_GRAD, MMRT_ACT_TANH, -3, 3},
    {IR_OP_SIGMOID, IR_OP_SIGMOID_GRAD, MMRT_ACT_SIGMOID, -3, 3},
    {IR_OP_EXP, IR_OP_COUNT, MMRT_ACT_EXP, -3, 3},
    {IR_OP_LOG, IR_OP_COUNT, MMRT_ACT_LOG, 0.5, 3},
    {IR_OP_SQRT, IR_OP_COUNT, MMRT_ACT_SQRT, 0.5, 3},
    {IR_OP_ABS, IR_OP_ABS_GRAD, MMRT_ACT_ABS, -3, 3},
};

START_TEST(test_activation) {
  R r;
  r_init(&r, 20 + (uint64_t)_i);
  IrValue *x = rin(&r, SHP(3, 5, 7), acts[_i].lo, acts[_i].hi), *dy = rin(&r, SHP(3, 5, 7), -1, 1);
  IrNode *y = run(&r, acts[_i].op, &x, 1, NULL);
  float *ky = fzeros(&r, x);
  mmrt_eltwise_fwd(MMRT_F32, acts[_i].act, ky, fl(&r, x), 105);
  cmp(&r, ir_ops[acts[_i].op].name, y->out[0], ky);
  if (acts[_i].grad != IR_OP_COUNT) {
    IrNode *g = run(&r, acts[_i].grad, VS(dy, x), NULL);
    float *kdx = fzeros(&r, x);
    mmrt_eltwise_bwd(MMRT_F32, acts[_i].act, kdx, fl(&r, dy), fl(&r, x), 105, 0);
    cmp(&r, ir_ops[acts[_i].grad].name, g->out[0], kdx);
  }
  r_free(&r);
}
END_TEST

START_TEST(test_binary_broadcast) {
  static const struct {
    IrOp op;
    MmrtBinop k;
  } ops[] = {{IR_OP_ADD, MMRT_BIN_ADD},
             {IR_OP_SUB, MMRT_BIN_SUB},
             {IR_OP_MUL, MMRT_BIN_MUL},
             {IR_OP_DIV, MMRT_BIN_DIV}};
  for (int i = 0; i < 4; i++) {
    R r;
    r_init(&r, 30 + (uint64_t)i);
    IrValue *a = rin(&r, SHP(3, 1, 7), -1, 1), *b = rin(&r, SHP(5, 1), 0.5, 2);
    IrNode *y = run(&r, ops[i].op, VS(a, b), NULL);
    float *ky = fzeros(&r, y->out[0]);
    int ys[3] = {3, 5, 7}, as[3] = {3, 1, 7}, bs[3] = {1, 5, 1};
    mmrt_binary_fwd(ops[i].k, ky, ys, fl(&r, a), as, fl(&r, b), bs, 3);
    cmp(&r, ir_ops[ops[i].op].name, y->out[0], ky);
    /* and the gradients: sum_to of what the rules emit equals the kernel's reduce */
    IrValue *dy = rin(&r, y->out[0]->shape, -1, 1);
    float *kda = fzeros(&r, a), *kdb = fzeros(&r, b);
    mmrt_binary_bwd(ops[i].k, kda, kdb, fl(&r, dy), ys, fl(&r, a), as, fl(&r, b), bs, 3, 0);
    IrAttrs sa = {0}, sb = {0};
    ir_attrs_set_ints(&sa, IR_ATTR_SHAPE, a->shape.d, a->shape.rank);
    ir_attrs_set_ints(&sb, IR_ATTR_SHAPE, b->shape.d, b->shape.rank);
    if (ops[i].op == IR_OP_ADD) {
      cmp(&r, "sum_to (add, a)", run(&r, IR_OP_SUM_TO, &dy, 1, &sa)->out[0], kda);
      cmp(&r, "sum_to (add, b)", run(&r, IR_OP_SUM_TO, &dy, 1, &sb)->out[0], kdb);
    } else if (ops[i].op == IR_OP_MUL) {
      IrValue *ga = run(&r, IR_OP_MUL, VS(dy, b), NULL)->out[0],
              *gb = run(&r, IR_OP_MUL, VS(dy, a), NULL)->out[0];
      cmp(&r, "sum_to (mul, a)", run(&r, IR_OP_SUM_TO, &ga, 1, &sa)->out[0], kda);
      cmp(&r, "sum_to (mul, b)", run(&r, IR_OP_SUM_TO, &gb, 1, &sb)->out[0], kdb);
    }
    r_free(&r);
  }
}
END_TEST

/* ---- transformer pieces ---- */

START_TEST(test_rope) {
  R r;
  r_init(&r, 40);
  IrValue *x = rin(&r, SHP(2, 5, 3, 6), -1, 1);
  IrAttrs a = attrs_f(IR_ATTR_THETA, 100);
  ir_attrs_set_int(&a, IR_ATTR_OFFSET, 2);
  IrNode *y = run(&r, IR_OP_ROPE, &x, 1, &a), *g = run(&r, IR_OP_ROPE_GRAD, &x, 1, &a);
  float *ky = fzeros(&r, x), *kg = fzeros(&r, x);
  mmrt_rope_fwd(ky, fl(&r, x), 2, 5, 3, 6, 100, 2);
  mmrt_rope_bwd(kg, fl(&r, x), 2, 5, 3, 6, 100, 2, 0);
  cmp(&r, "rope", y->out[0], ky);
  cmp(&r, "rope_grad", g->out[0], kg);
  r_free(&r);
}
END_TEST

static void attention_case(uint64_t seed, int causal, int T, int S) {
  R r;
  r_init(&r, seed);
  const int B = 2, H = 6, KVH = 2, D = 4;
  IrValue *q = rin(&r, SHP(B, T, H, D), -1, 1), *k = rin(&r, SHP(B, S, KVH, D), -1, 1),
          *v = rin(&r, SHP(B, S, KVH, D), -1, 1);
  IrAttrs a = attrs_f(IR_ATTR_SCALE, 0.5);
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, causal);
  IrNode *y = run(&r, IR_OP_ATTENTION, VS(q, k, v), &a);
  IrValue *dy = rin(&r, y->out[0]->shape, -1, 1);
  IrNode *g = run(&r, IR_OP_ATTENTION_GRAD, VS(dy, q, k, v, y->out[0], y->out[1]), &a);
  float *ko = fzeros(&r, y->out[0]), *kl = fzeros(&r, y->out[1]);
  mmrt_attention_fwd(ko, kl, fl(&r, q), fl(&r, k), fl(&r, v), B, T, S, H, KVH, D, causal, 0.5f);
  cmp(&r, "attention out", y->out[0], ko);
  cmp(&r, "attention lse", y->out[1], kl);
  float *kdq = fzeros(&r, q), *kdk = fzeros(&r, k), *kdv = fzeros(&r, v);
  mmrt_attention_bwd(kdq, kdk, kdv, fl(&r, dy), fl(&r, q), fl(&r, k), fl(&r, v), ko, kl, B, T, S, H,
                     KVH, D, causal, 0.5f, 0);
  cmp(&r, "attention_grad dq", g->out[0], kdq);
  cmp(&r, "attention_grad dk", g->out[1], kdk);
  cmp(&r, "attention_grad dv", g->out[2], kdv);
  r_free(&r);
}

START_TEST(test_attention) {
  attention_case(41, 1, 5, 5);
  attention_case(42, 1, 5, 7);
  attention_case(43, 0, 5, 7);
}
END_TEST

START_TEST(test_cross_entropy) {
  R r;
  r_init(&r, 44);
  static const int labels[15] = {0, 6, -100, 3, 2, 1, 1, 5, -100, 4, 0, 2, 6, 3, 3};
  IrValue *x = rin(&r, SHP(3, 5, 7), -3, 3), *l = iin(&r, SHP(3, 5), labels),
          *dl = rin(&r, (IrShape){0}, 0.5, 2);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_IGNORE, -100);
  IrNode *y = run(&r, IR_OP_CROSS_ENTROPY, VS(x, l), &a);
  IrNode *g = run(&r, IR_OP_CROSS_ENTROPY_GRAD, VS(dl, x, l, y->out[1]), &a);
  float loss = 0, *klse = fzeros(&r, y->out[1]), *kdx = fzeros(&r, x);
  ck_assert_int_eq(mmrt_cross_entropy_fwd(&loss, klse, fl(&r, x), ints(&r, l), 15, 7, -100), 13);
  mmrt_cross_entropy_bwd(kdx, fl(&r, x), klse, ints(&r, l), fl(&r, dl)[0], 15, 7, -100, 0);
  cmp(&r, "cross_entropy loss", y->out[0], &loss);
  cmp(&r, "cross_entropy lse", y->out[1], klse);
  cmp(&r, "cross_entropy_grad", g->out[0], kdx);
  r_free(&r);
}
END_TEST

START_TEST(test_embedding) {
  R r;
  r_init(&r, 45);
  static const int ids[15] = {0, 3, 6, 3, 1, 1, 5, 2, 0, 6, 4, 4, 4, 2, 5};
  IrValue *i = iin(&r, SHP(3, 5), ids), *t = rin(&r, SHP(7, 6), -1, 1),
          *dy = rin(&r, SHP(3, 5, 6), -1, 1);
  IrNode *y = run(&r, IR_OP_EMBEDDING, VS(i, t), NULL);
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, t->shape.d, 2);
  IrNode *g = run(&r, IR_OP_EMBEDDING_GRAD, VS(dy, i), &a);
  float *ky = fzeros(&r, y->out[0]), *kg = fzeros(&r, t);
  ck_assert_int_eq(mmrt_embedding_fwd(ky, fl(&r, t), ints(&r, i), 15, 7, 6), 0);
  mmrt_embedding_bwd(kg, fl(&r, dy), ints(&r, i), 15, 7, 6, 0);
  cmp(&r, "embedding", y->out[0], ky);
  cmp(&r, "embedding_grad", g->out[0], kg);
  r_free(&r);
}
END_TEST

/* ---- optimizer ---- */

START_TEST(test_adamw) {
  R r;
  r_init(&r, 50);
  IrShape s = SHP(13);
  IrValue *p = ir_add_param(r.m, "p", IR_F32, &s, (IrInit){IR_INIT_NONE, 0, 0}, (SrcLoc){0});
  IrValue *m =
      ir_add_param(r.m, "adamw.m.p", IR_F32, &s, (IrInit){IR_INIT_ZEROS, 0, 0}, (SrcLoc){0});
  IrValue *v =
      ir_add_param(r.m, "adamw.v.p", IR_F32, &s, (IrInit){IR_INIT_ZEROS, 0, 0}, (SrcLoc){0});
  m->role = v->role = IR_ROLE_OPT;
  IrValue *lr = rin(&r, (IrShape){0}, 0.01, 0.02), *step = rin(&r, (IrShape){0}, 0, 0),
          *scale = rin(&r, (IrShape){0}, 0.5, 0.9);
  IrTensor *pt = ir_store_put(&r.st, p);
  ir_store_put(&r.st, m), ir_store_put(&r.st, v);
  for (int i = 0; i < 13; i++) pt->d[i] = (float)(urand(&r) - 0.5);
  float *kp = fl(&r, p), *km = fzeros(&r, p), *kv = fzeros(&r, p);
  IrAttrs a = attrs_f(IR_ATTR_BETA1, 0.9);
  ir_attrs_set_float(&a, IR_ATTR_BETA2, 0.95);
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-8);
  ir_attrs_set_float(&a, IR_ATTR_WEIGHT_DECAY, 0.1);
  IrNode *n = NULL;
  for (int t = 1; t <= 3; t++) {
    IrValue *g = rin(&r, s, -1, 1);
    ir_store_get(&r.st, step)->d[0] = t;
    char err[256];
    if (!n)
      n = run(&r, IR_OP_ADAMW, VS(p, g, m, v, lr, step, scale), &a);
    else { /* the same node, new gradient values */
      IrTensor *gt = ir_store_get(&r.st, n->in[1]);
      memcpy(gt->d, ir_store_get(&r.st, g)->d, sizeof(double) * 13);
      ck_assert(ir_eval_node(r.m, n, &r.st, err, sizeof err));
    }
    mmrt_adamw_step(kp, fl(&r, n->in[1]), km, kv, 13, (float)ir_store_get(&r.st, lr)->d[0], 0.9f,
                    0.95f, 1e-8f, 0.1f, (float)ir_store_get(&r.st, scale)->d[0], t);
  }
  cmp(&r, "adamw param", p, kp);
  cmp(&r, "adamw m", m, km);
  cmp(&r, "adamw v", v, kv);
  r_free(&r);
}
END_TEST

START_TEST(test_sgd_and_norm) {
  R r;
  r_init(&r, 51);
  IrShape s = SHP(11);
  IrValue *p = ir_add_param(r.m, "p", IR_F32, &s, (IrInit){IR_INIT_NONE, 0, 0}, (SrcLoc){0});
  IrValue *mom =
      ir_add_param(r.m, "sgd.momentum.p", IR_F32, &s, (IrInit){IR_INIT_ZEROS, 0, 0}, (SrcLoc){0});
  mom->role = IR_ROLE_OPT;
  IrTensor *pt = ir_store_put(&r.st, p);
  ir_store_put(&r.st, mom);
  for (int i = 0; i < 11; i++) pt->d[i] = (float)(urand(&r) - 0.5);
  IrValue *g = rin(&r, s, -1, 1), *g2 = rin(&r, SHP(3, 2), -1, 1),
          *lr = rin(&r, (IrShape){0}, 0.1, 0.2);
  IrNode *norm = run(&r, IR_OP_GRAD_NORM, VS(g, g2), NULL);
  IrAttrs c = attrs_f(IR_ATTR_VALUE, 0.5); /* the norm of 17 values in [-1, 1) is well above 0.5 */
  IrNode *scale = run(&r, IR_OP_CLIP_SCALE, norm->out, 1, &c);
  const float *bufs[2] = {fl(&r, g), fl(&r, g2)};
  size_t sizes[2] = {11, 6};
  double kn = mmrt_grad_norm(bufs, sizes, 2);
  float knf = (float)kn, ks = mmrt_clip_scale(kn, 0.5);
  cmp(&r, "grad_norm", norm->out[0], &knf);
  cmp(&r, "clip_scale", scale->out[0], &ks);
  IrAttrs a = attrs_f(IR_ATTR_MOMENTUM, 0.9);
  ir_attrs_set_float(&a, IR_ATTR_WEIGHT_DECAY, 0.01);
  float *kp = fl(&r, p), *km = fzeros(&r, p);
  IrNode *n = run(&r, IR_OP_SGD, VS(p, g, mom, lr, scale->out[0]), &a);
  mmrt_sgd_step(kp, bufs[0], km, 11, (float)ir_store_get(&r.st, lr)->d[0], 0.9f, 0.01f, ks, 0);
  char err[256];
  ck_assert(ir_eval_node(r.m, n, &r.st, err, sizeof err)); /* a second step */
  mmrt_sgd_step(kp, bufs[0], km, 11, (float)ir_store_get(&r.st, lr)->d[0], 0.9f, 0.01f, ks, 0);
  cmp(&r, "sgd param", p, kp);
  cmp(&r, "sgd momentum", mom, km);
  r_free(&r);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("rt_ir_eval");
  TCase *tc = tcase_create("kernels");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_linear);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_conv2d);
  tcase_add_test(tc, test_conv3d);
  tcase_add_loop_test(tc, test_haar, 0, (int)(sizeof haars / sizeof haars[0]));
  tcase_add_test(tc, test_haar_order);
  tcase_add_test(tc, test_dit_tables);
  tcase_add_test(tc, test_haar_channel_split);
  tcase_add_test(tc, test_haar3d_causal_form);
  tcase_add_test(tc, test_haar_inverse_energy);
  tcase_add_test(tc, test_layer_norm);
  tcase_add_test(tc, test_layer_norm_axis);
  tcase_add_test(tc, test_rms_norm);
  tcase_add_test(tc, test_group_norm);
  tcase_add_test(tc, test_softmax);
  tcase_add_loop_test(tc, test_activation, 0, (int)(sizeof acts / sizeof acts[0]));
  tcase_add_test(tc, test_binary_broadcast);
  tcase_add_test(tc, test_rope);
  tcase_add_test(tc, test_attention);
  tcase_add_test(tc, test_cross_entropy);
  tcase_add_test(tc, test_embedding);
  tcase_add_test(tc, test_adamw);
  tcase_add_test(tc, test_sgd_and_norm);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
