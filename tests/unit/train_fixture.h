/* Shared fixture of the training tests (check_grad.c, check_train.c): a
 * module built op by op, autodiff, the reference interpreter, and the
 * finite-difference check of every gradient.
 *
 * Finite differences: central, (L(x + h) - L(x - h)) / 2h with h = 1e-6,
 * everything in double (the interpreter). A gradient element passes when
 * |analytic - numeric| <= FD_TOL * (1 + |numeric|), FD_TOL = 1e-6: the
 * truncation error is O(h^2) and the rounding error about 1e-16 * |L| / h,
 * both far below it, while a wrong rule is off by orders of magnitude more. */
#ifndef MM_TESTS_TRAIN_FIXTURE_H
#define MM_TESTS_TRAIN_FIXTURE_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/ir_eval.h"
#include "passes/pass.h"

#define FD_H   1e-6
#define FD_TOL 1e-6

typedef struct G {
  Diag d;
  char *dbuf;
  size_t dlen;
  IrModule *m;
  IrFunc *f;
  IrBuilder b;
  IrTensorStore st;
  uint64_t rng;
  double lo[256], hi[256]; /* value range per param index (default [-1, 1]) */
  int checked;             /* gradient elements compared */
} G;

static inline double g_rand(G *g) { /* [0, 1) */
  g->rng = g->rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g->rng >> 11) * (1.0 / 9007199254740992.0);
}

static inline void g_init(G *g, uint64_t seed) {
  memset(g, 0, sizeof *g);
  diag_init(&g->d);
  g->d.out = open_memstream(&g->dbuf, &g->dlen);
  g->m = ir_module_new(&g->d, "T");
  g->f = ir_func_new(g->m, "forward");
  g->b = (IrBuilder){.m = g->m, .f = g->f, .scope = NULL, .group = -1, .layer = -1};
  ir_store_init(&g->st);
  g->rng = seed * 2654435761u + 1;
  for (int i = 0; i < 256; i++) g->lo[i] = -1, g->hi[i] = 1;
}

static inline void g_free(G *g) {
  ir_store_free(&g->st);
  if (g->m) ir_module_free(g->m);
  fclose(g->d.out);
  free(g->dbuf);
  diag_free(&g->d);
}

static inline const char *g_diag(G *g) {
  fflush(g->d.out);
  return g->dbuf ? g->dbuf : "";
}

static inline IrShape shp(const int64_t *d, int n) {
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

/* A trainable f32 parameter with values in [lo, hi). */
static inline IrValue *g_param_in(G *g, const char *name, IrShape s, double lo, double hi) {
  int k = g->m->params.len;
  ck_assert_int_lt(k, 256);
  g->lo[k] = lo, g->hi[k] = hi;
  return ir_add_param(g->m, name, IR_F32, &s, (IrInit){IR_INIT_NORMAL, 1, 0}, (SrcLoc){0});
}
static inline IrValue *g_param(G *g, const char *name, IrShape s) {
  return g_param_in(g, name, s, -1, 1);
}

/* An integer input of @forward with the given values. */
static inline IrValue *g_ints(G *g, const char *name, IrShape s, const int *vals) {
  IrValue *v = ir_add_input(g->m, g->f, name, IR_I32, &s, (SrcLoc){0});
  IrTensor *t = ir_store_put(&g->st, v);
  for (int64_t i = 0; i < t->n; i++) t->d[i] = vals[i];
  return v;
}

static inline IrNode *g_node(G *g, IrOp op, IrValue **ins, int nin, const IrAttrs *a) {
  char err[512];
  IrNode *n = ir_build(&g->b, op, ins, nin, a, (SrcLoc){0}, err, sizeof err, NULL);
  ck_assert_msg(n != NULL, "ir_build %s failed: %s", ir_ops[op].name, err);
  return n;
}

static inline IrValue *g_op(G *g, IrOp op, IrValue **ins, int nin, const IrAttrs *a) {
  return g_node(g, op, ins, nin, a)->out[0];
}

/* loss = sum(y * proj) with a frozen random proj, returned by @forward */
static inline void g_loss(G *g, IrValue *y) {
  IrValue *proj =
      ir_add_param(g->m, "proj", y->dtype, &y->shape, (IrInit){IR_INIT_NORMAL, 1, 0}, (SrcLoc){0});
  proj->frozen = true;
  IrValue *prod = g_op(g, IR_OP_MUL, VS(y, proj), NULL);
  if (prod->shape.rank) {
    IrAttrs a = {0};
    int64_t axes[IR_MAX_RANK];
    for (int i = 0; i < prod->shape.rank; i++) axes[i] = i;
    ir_attrs_set_ints(&a, IR_ATTR_AXES, axes, prod->shape.rank);
    prod = g_op(g, IR_OP_SUM, &prod, 1, &a);
  }
  ir_func_add_result(g->m, g->f, prod);
}

static inline char *print_str(const IrModule *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print_module(f, m);
  fclose(f);
  return buf;
}

/* print -> parse -> print is byte-identical */
static inline void assert_roundtrip(G *g) {
  char *a = print_str(g->m);
  uint32_t id = diag_add_buffer(&g->d, "rt.mmir", a, strlen(a));
  IrModule *m2 = ir_parse(&g->d, id);
  ck_assert_msg(m2 != NULL, "parse failed: %s\n%s", g_diag(g), a);
  ck_assert_msg(ir_verify(m2), "verify failed: %s", g_diag(g));
  char *b = print_str(m2);
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  ir_module_free(m2);
}

/* Random values for every trainable or frozen param (per-index range),
 * zeros for optimizer state. */
static inline void g_fill(G *g) {
  for (int i = 0; i < g->m->params.len; i++) {
    IrValue *p = g->m->params.items[i];
    IrTensor *t = ir_store_put(&g->st, p);
    if (p->role != IR_ROLE_PARAM) continue; /* optimizer state: zeros */
    double lo = i < 256 ? g->lo[i] : -1, hi = i < 256 ? g->hi[i] : 1;
    for (int64_t k = 0; k < t->n; k++) t->d[k] = lo + (hi - lo) * g_rand(g);
  }
}

/* @train's inputs: @forward's by name, then %lr and %step. */
static inline void g_copy_inputs(G *g, IrFunc *train, double lr, double step) {
  IrFunc *fwd = ir_module_func(g->m, "forward");
  for (int i = 0; i < train->inputs.len; i++) {
    IrValue *v = train->inputs.items[i];
    IrTensor *t = ir_store_put(&g->st, v);
    if (!strcmp(v->name, "lr")) {
      t->d[0] = lr;
      continue;
    }
    if (!strcmp(v->name, "step")) {
      t->d[0] = step;
      continue;
    }
    for (int k = 0; k < fwd->inputs.len; k++) {
      IrValue *u = fwd->inputs.items[k];
      if (!strcmp(u->name, v->name))
        memcpy(t->d, ir_store_get(&g->st, u)->d, sizeof(double) * (size_t)t->n);
    }
  }
}

static inline double g_forward_loss(G *g) {
  char err[512];
  IrFunc *fwd = ir_module_func(g->m, "forward");
  ck_assert_msg(ir_eval_func(g->m, fwd, &g->st, err, sizeof err), "%s", err);
  return ir_store_get(&g->st, fwd->results.items[0])->d[0];
}

/* The gradient value of p in f, or NULL. */
static inline IrValue *grad_of(IrFunc *f, const IrValue *p) {
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++)
      if (n->out[j]->grad_of == p) return n->out[j];
  }
  return NULL;
}

static inline void g_autodiff(G *g, const MmTrain *train) {
  if (train) ir_module_set_settings(g->m, NULL, train);
  PassCtx cx = {.d = &g->d};
  ck_assert_msg(pass_autodiff(g->m, &cx), "autodiff failed: %s", g_diag(g));
  ck_assert_msg(ir_verify(g->m), "verify failed: %s", g_diag(g));
}

/* Runs @train, then compares every trainable param's gradient (`sample`
 * elements of each when > 0, else all) with central differences of the
 * forward loss. Every trainable float param must have a gradient. */
static inline void g_check(G *g, int sample) {
  char err[512];
  IrFunc *train = ir_module_func(g->m, "train");
  ck_assert_ptr_nonnull(train);
  g_copy_inputs(g, train, 0, 1);
  ck_assert_msg(ir_eval_func(g->m, train, &g->st, err, sizeof err), "%s", err);
  double l_train = ir_store_get(&g->st, train->results.items[0])->d[0], l_fwd = g_forward_loss(g);
  ck_assert_msg(fabs(l_train - l_fwd) <= 1e-12 * (1 + fabs(l_fwd)), "@train loss %g, @forward %g",
                l_train, l_fwd);
  for (int i = 0; i < g->m->params.len; i++) {
    IrValue *p = g->m->params.items[i];
    if (p->role != IR_ROLE_PARAM || p->frozen) continue;
    IrValue *gv = grad_of(train, p);
    ck_assert_msg(gv != NULL, "@%s has no gradient", p->name);
    const IrTensor *ga = ir_store_get(&g->st, gv);
    IrTensor *pt = ir_store_get(&g->st, p);
    int64_t n = pt->n, count = sample > 0 && sample < n ? sample : n;
    for (int64_t s = 0; s < count; s++) {
      int64_t k = count == n ? s : (int64_t)(g_rand(g) * (double)n);
      double x = pt->d[k];
      pt->d[k] = x + FD_H;
      double lp = g_forward_loss(g);
      pt->d[k] = x - FD_H;
      double lm = g_forward_loss(g);
      pt->d[k] = x;
      double num = (lp - lm) / (2 * FD_H), ana = ga->d[k];
      ck_assert_msg(fabs(ana - num) <= FD_TOL * (1 + fabs(num)),
                    "@%s[%lld]: autodiff %.10g, finite differences %.10g", p->name, (long long)k,
                    ana, num);
      g->checked++;
    }
  }
}

#endif
