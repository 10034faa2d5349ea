/* The IR core: builder and shape rules, text form (print -> parse -> print
 * byte-identical), parser errors, verifier and FLOP counts. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* ---- fixture ---- */

typedef struct T {
  Diag d;
  char *dbuf; /* what the Diag printed */
  size_t dlen;
  IrModule *m;
  IrFunc *f;
  IrBuilder b;
  uint32_t src; /* a fake source file for locs */
} T;

static void t_init(T *t, const char *name) {
  memset(t, 0, sizeof *t);
  diag_init(&t->d);
  t->d.out = open_memstream(&t->dbuf, &t->dlen);
  t->m = ir_module_new(&t->d, name);
  t->f = ir_func_new(t->m, "forward");
  t->b = (IrBuilder){.m = t->m, .f = t->f, .scope = NULL, .group = -1, .layer = -1};
  t->src = diag_add_buffer(&t->d, "model.mm", "", 0);
}

static void t_free(T *t) {
  ir_module_free(t->m);
  fclose(t->d.out);
  free(t->dbuf);
  diag_free(&t->d);
}

static const char *t_diag(T *t) {
  fflush(t->d.out);
  return t->dbuf ? t->dbuf : "";
}

static SrcLoc L(T *t, uint32_t line, uint32_t col) {
  return (SrcLoc){t->src, line, col, 0};
}

static IrShape shp(const int64_t *d, int n) {
  IrShape s = {.rank = n};
  for (int i = 0; i < n; i++) s.d[i] = d[i];
  return s;
}
#define SHP(...)                                                                                   \
  shp((const int64_t[]){__VA_ARGS__},                                                              \
      (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define PSHP(...) ((IrShape[]){SHP(__VA_ARGS__)})
#define INTS(...)                                                                                  \
  (const int64_t[]){__VA_ARGS__}, (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define VS(...)                                                                                    \
  (IrValue *[]){__VA_ARGS__}, (int)(sizeof((IrValue *[]){__VA_ARGS__}) / sizeof(IrValue *))

static IrValue *in(T *t, const char *name, IrDType dt, IrShape s) {
  return ir_add_input(t->m, t->f, name, dt, &s, (SrcLoc){0});
}

static IrValue *param(T *t, const char *name, IrDType dt, IrShape s) {
  return ir_add_param(t->m, name, dt, &s, (IrInit){IR_INIT_NORMAL, 0.02, 0}, (SrcLoc){0});
}

static IrValue *build_at(T *t, SrcLoc loc, IrOp op, IrValue **ins, int nin, const IrAttrs *a) {
  char err[512];
  int bad;
  IrNode *n = ir_build(&t->b, op, ins, nin, a, loc, err, sizeof err, &bad);
  ck_assert_msg(n != NULL, "ir_build failed: %s", err);
  return n->out[0];
}

static IrValue *build(T *t, IrOp op, IrValue **ins, int nin, const IrAttrs *a) {
  return build_at(t, (SrcLoc){0}, op, ins, nin, a);
}

static void expect_fail(T *t, IrOp op, IrValue **ins, int nin, const IrAttrs *a, const char *msg,
                        int bad_want) {
  char err[512];
  int bad = 99;
  int before = t->f->nodes.len;
  IrNode *n = ir_build(&t->b, op, ins, nin, a, (SrcLoc){0}, err, sizeof err, &bad);
  ck_assert_msg(n == NULL, "expected failure '%s'", msg);
  ck_assert_str_eq(err, msg);
  ck_assert_int_eq(bad, bad_want);
  ck_assert_int_eq(t->f->nodes.len, before);
}

static void assert_shape(const IrValue *v, IrDType dt, IrShape s) {
  char a[200], b[200];
  ck_assert_msg(v->dtype == dt && ir_shape_eq(&v->shape, &s), "got %s%s, want %s%s",
                ir_dtype_name(v->dtype), ir_shape_str(a, sizeof a, &v->shape), ir_dtype_name(dt),
                ir_shape_str(b, sizeof b, &s));
}

static char *print_str(const IrModule *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print_module(f, m);
  fclose(f);
  return buf;
}

static IrModule *parse_str(Diag *d, const char *name, const char *text) {
  uint32_t id = diag_add_buffer(d, name, text, strlen(text));
  return ir_parse(d, id);
}

/* print -> parse -> print is byte-identical, and the parsed copy verifies */
static void assert_roundtrip(T *t) {
  ck_assert_msg(ir_verify(t->m), "verify: %s", t_diag(t));
  char *a = print_str(t->m);
  IrModule *m2 = parse_str(&t->d, "roundtrip.ir", a);
  ck_assert_msg(m2 != NULL, "parse failed: %s\n--- text ---\n%s", t_diag(t), a);
  ck_assert_msg(ir_verify(m2), "verify (parsed): %s", t_diag(t));
  char *b = print_str(m2);
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  ir_module_free(m2);
}

/* ---- models ---- */

/* Two linear+gelu layers in the group "h", a frozen head and the loss. */
static void build_mlp(T *t) {
  IrModule *m = t->m;
  int g = ir_module_group(m, "h", 2);
  IrValue *x = ir_add_input(m, t->f, "x", IR_F32, PSHP(4, 32), L(t, 10, 9));
  IrValue *labels = ir_add_input(m, t->f, "labels", IR_I32, PSHP(4), L(t, 10, 20));
  IrValue *h = x;
  for (int l = 0; l < 2; l++) {
    char name[64];
    snprintf(name, sizeof name, "h.%d.fc.weight", l);
    IrValue *w =
        ir_add_param(m, name, IR_F32, PSHP(32, 32), (IrInit){IR_INIT_NORMAL, 0.02, 0}, L(t, 3, 5));
    snprintf(name, sizeof name, "h.%d.fc.bias", l);
    IrValue *bias =
        ir_add_param(m, name, IR_F32, PSHP(32), (IrInit){IR_INIT_ZEROS, 0, 0}, L(t, 4, 5));
    w->group = bias->group = g;
    w->layer = bias->layer = l;
    snprintf(name, sizeof name, "h.%d.fc", l);
    t->b.scope = name;
    t->b.group = g;
    t->b.layer = l;
    h = build_at(t, L(t, 5, 7), IR_OP_LINEAR, VS(h, w), NULL);
    h = build_at(t, L(t, 5, 7), IR_OP_ADD, VS(h, bias), NULL);
    h = build_at(t, L(t, 5, 7), IR_OP_GELU, VS(h), NULL);
  }
  IrValue *head = ir_add_param(m, "head.weight", IR_F32, PSHP(10, 32),
                               (IrInit){IR_INIT_FAN_IN, 1, 0}, L(t, 6, 3));
  head->frozen = true;
  t->b = (IrBuilder){.m = m, .f = t->f, .scope = "head", .group = -1, .layer = -1};
  IrValue *logits = build_at(t, L(t, 12, 5), IR_OP_LINEAR, VS(h, head), NULL);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_IGNORE, -100);
  IrValue *loss = build_at(t, L(t, 13, 10), IR_OP_CROSS_ENTROPY, VS(logits, labels), &a);
  ir_func_add_result(m, t->f, loss);
}

static const char mlp_text[] =
    "module @Mlp mesh(dp = 1, cp = 1, tp = 1)\n"
    "group \"h\" layers 2\n"
    "param @h.0.fc.weight : f32[32, 32]{dp:B, cp:B, tp:B} init(normal, 0.02) layer(\"h\", 0) "
    "loc(\"model.mm\":3:5)\n"
    "param @h.0.fc.bias : f32[32]{dp:B, cp:B, tp:B} init(zeros) layer(\"h\", 0) "
    "loc(\"model.mm\":4:5)\n"
    "param @h.1.fc.weight : f32[32, 32]{dp:B, cp:B, tp:B} init(normal, 0.02) layer(\"h\", 1) "
    "loc(\"model.mm\":3:5)\n"
    "param @h.1.fc.bias : f32[32]{dp:B, cp:B, tp:B} init(zeros) layer(\"h\", 1) "
    "loc(\"model.mm\":4:5)\n"
    "param @head.weight : f32[10, 32]{dp:B, cp:B, tp:B} init(fan_in, 1) frozen "
    "loc(\"model.mm\":6:3)\n"
    "func @forward(%x : f32[4, 32]{dp:B, cp:B, tp:B} loc(\"model.mm\":10:9), "
    "%labels : i32[4]{dp:B, cp:B, tp:B} loc(\"model.mm\":10:20)) {\n"
    "  %0 = linear(%x, @h.0.fc.weight) : f32[4, 32]{dp:B, cp:B, tp:B} layer(\"h\", 0) "
    "scope(\"h.0.fc\") "
    "loc(\"model.mm\":5:7)\n"
    "  %1 = add(%0, @h.0.fc.bias) : f32[4, 32]{dp:B, cp:B, tp:B} layer(\"h\", 0) scope(\"h.0.fc\") "
    "loc(\"model.mm\":5:7)\n"
    "  %2 = gelu(%1) : f32[4, 32]{dp:B, cp:B, tp:B} layer(\"h\", 0) scope(\"h.0.fc\") "
    "loc(\"model.mm\":5:7)\n"
    "  %3 = linear(%2, @h.1.fc.weight) : f32[4, 32]{dp:B, cp:B, tp:B} layer(\"h\", 1) "
    "scope(\"h.1.fc\") "
    "loc(\"model.mm\":5:7)\n"
    "  %4 = add(%3, @h.1.fc.bias) : f32[4, 32]{dp:B, cp:B, tp:B} layer(\"h\", 1) scope(\"h.1.fc\") "
    "loc(\"model.mm\":5:7)\n"
    "  %5 = gelu(%4) : f32[4, 32]{dp:B, cp:B, tp:B} layer(\"h\", 1) scope(\"h.1.fc\") "
    "loc(\"model.mm\":5:7)\n"
    "  %6 = linear(%5, @head.weight) : f32[4, 10]{dp:B, cp:B, tp:B} scope(\"head\") "
    "loc(\"model.mm\":12:5)\n"
    "  %7, %8 = cross_entropy(%6, %labels) {ignore = -100} : f32[]{dp:B, cp:B, tp:B}, f32[4]{dp:B, "
    "cp:B, tp:B} "
    "scope(\"head\") "
    "loc(\"model.mm\":13:10)\n"
    "  return %7\n"
    "}\n";

/* A GQA attention block on a tp = 2 mesh with hand-set placements. */
static IrValue *build_attention(T *t) {
  IrModule *m = t->m;
  m->mesh[IR_AX_TP] = 2;
  IrValue *x = in(t, "x", IR_F32, SHP(2, 16, 64));
  IrValue *wq = param(t, "attn.q.weight", IR_F32, SHP(64, 64)); /* 8 heads of 8 */
  IrValue *wk = param(t, "attn.k.weight", IR_F32, SHP(16, 64)); /* 2 kv heads */
  IrValue *wv = param(t, "attn.v.weight", IR_F32, SHP(16, 64));
  IrValue *wo = param(t, "attn.o.weight", IR_F32, SHP(64, 64));
  wq->pl[IR_AX_TP] = wk->pl[IR_AX_TP] = wv->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 0};
  wo->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 1};
  t->b.scope = "blocks.0.attn";
  IrAttrs a = {0};
  IrValue *q = build(t, IR_OP_LINEAR, VS(x, wq), NULL);
  IrValue *k = build(t, IR_OP_LINEAR, VS(x, wk), NULL);
  IrValue *v = build(t, IR_OP_LINEAR, VS(x, wv), NULL);
  q->pl[IR_AX_TP] = k->pl[IR_AX_TP] = v->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 2};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(2, 16, -1, 8));
  q = build(t, IR_OP_RESHAPE, VS(q), &a);
  assert_shape(q, IR_F32, SHP(2, 16, 8, 8));
  k = build(t, IR_OP_RESHAPE, VS(k), &a);
  v = build(t, IR_OP_RESHAPE, VS(v), &a);
  q->pl[IR_AX_TP] = k->pl[IR_AX_TP] = v->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 2}; /* heads */
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_THETA, 10000);
  q = build(t, IR_OP_ROPE, VS(q), &a);
  k = build(t, IR_OP_ROPE, VS(k), &a);
  q->pl[IR_AX_TP] = k->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 2};
  a = (IrAttrs){0};
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, true);
  ir_attrs_set_float(&a, IR_ATTR_SCALE, 1 / sqrt(8.0));
  IrNode *an = ir_build(&t->b, IR_OP_ATTENTION, VS(q, k, v), &a, (SrcLoc){0}, NULL, 0, NULL);
  IrValue *o = an->out[0];
  o->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 2};
  an->out[1]->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 1}; /* lse [B, H, T] */
  assert_shape(o, IR_F32, SHP(2, 16, 8, 8));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(2, 16, 64));
  o = build(t, IR_OP_RESHAPE, VS(o), &a);
  o->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 2};
  o = build(t, IR_OP_LINEAR, VS(o, wo), NULL);
  o->pl[IR_AX_TP] = (IrPlacement){IR_PL_P, 0};
  ir_func_add_result(m, t->f, o);
  return o;
}

/* ---- tests: the text form ---- */

START_TEST(test_mlp_text) {
  T t;
  t_init(&t, "Mlp");
  build_mlp(&t);
  ck_assert(ir_verify(t.m));
  char *s = print_str(t.m);
  ck_assert_str_eq(s, mlp_text);
  free(s);
  assert_roundtrip(&t);
  t_free(&t);
}
END_TEST

START_TEST(test_mlp_parse_text) {
  /* the golden text itself parses and prints back */
  Diag d;
  diag_init(&d);
  d.out = fopen("/dev/null", "w");
  IrModule *m = parse_str(&d, "mlp.ir", mlp_text);
  ck_assert_ptr_nonnull(m);
  ck_assert(ir_verify(m));
  char *s = print_str(m);
  ck_assert_str_eq(s, mlp_text);
  ck_assert_int_eq(m->groups.len, 1);
  IrValue *w = ir_module_param(m, "head.weight");
  ck_assert(w && w->frozen && w->init.kind == IR_INIT_FAN_IN);
  IrFunc *f = ir_module_func(m, "forward");
  ck_assert_int_eq(f->nodes.len, 8);
  IrNode *n = f->nodes.items[3];
  ck_assert_int_eq(n->group, 0);
  ck_assert_int_eq(n->layer, 1);
  ck_assert_str_eq(n->scope, "h.1.fc");
  ck_assert_str_eq(diag_path(&d, n->loc), "model.mm");
  ck_assert_int_eq(n->loc.line, 5);
  free(s);
  ir_module_free(m);
  fclose(d.out);
  diag_free(&d);
}
END_TEST

START_TEST(test_attention_roundtrip) {
  T t;
  t_init(&t, "Attn");
  IrValue *o = build_attention(&t);
  assert_shape(o, IR_F32, SHP(2, 16, 64));
  char *s = print_str(t.m);
  ck_assert_ptr_nonnull(strstr(s, "module @Attn mesh(dp = 1, cp = 1, tp = 2)\n"));
  ck_assert_ptr_nonnull(
      strstr(s, "param @attn.o.weight : f32[64, 64]{dp:B, cp:B, tp:S(1)} init(normal, 0.02)\n"));
  ck_assert_ptr_nonnull(strstr(s, "%6 = rope(%3) {theta = 10000} : "));
  ck_assert_ptr_nonnull(strstr(
      s, "%3 = reshape(%0) {shape = [2, 16, 8, 8]} : f32[2, 16, 8, 8]{dp:B, cp:B, tp:S(2)}"));
  ck_assert_msg(
      strstr(s, "%8, %9 = attention(%6, %7, %5) {causal = true, scale = 0.35355339059327373} : "),
      "%s", s);
  ck_assert_ptr_nonnull(
      strstr(s, "%11 = linear(%10, @attn.o.weight) : f32[2, 16, 64]{dp:B, cp:B, tp:P} "
                "scope(\"blocks.0.attn\")\n  return %11\n}\n"));
  free(s);
  assert_roundtrip(&t);
  t_free(&t);
}
END_TEST

START_TEST(test_conv_layout_roundtrip) {
  T t;
  t_init(&t, "Layout");
  IrValue *x = in(&t, "x", IR_F32, SHP(2, 3, 32, 32));
  IrValue *w = param(&t, "conv.weight", IR_F32, SHP(16, 3, 3, 3));
  IrValue *bias = param(&t, "conv.bias", IR_F32, SHP(16));
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(2, 2));
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, INTS(1, 1));
  IrValue *y = build(&t, IR_OP_CONV2D, VS(x, w, bias), &a);
  assert_shape(y, IR_F32, SHP(2, 16, 16, 16));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, INTS(0, 2, 3, 1));
  IrValue *tr = build(&t, IR_OP_TRANSPOSE, VS(y), &a);
  assert_shape(tr, IR_F32, SHP(2, 16, 16, 16));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(2, -1, 16));
  IrValue *r = build(&t, IR_OP_RESHAPE, VS(tr), &a);
  assert_shape(r, IR_F32, SHP(2, 256, 16));
  /* the stored attribute is the resolved shape */
  IrNode *rn = r->def;
  ck_assert_int_eq(rn->attrs.v[IR_ATTR_SHAPE].nints, 3);
  ck_assert_int_eq(rn->attrs.v[IR_ATTR_SHAPE].ints[1], 256);
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, -2);
  ir_attrs_set_int(&a, IR_ATTR_START, 0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 10);
  ir_attrs_set_int(&a, IR_ATTR_STEP, 3);
  IrValue *sl = build(&t, IR_OP_SLICE, VS(r), &a);
  assert_shape(sl, IR_F32, SHP(2, 4, 16));
  ck_assert_int_eq(((IrNode *)sl->def)->attrs.v[IR_ATTR_AXIS].i, 1); /* normalised */
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  IrValue *cat = build(&t, IR_OP_CONCAT, VS(sl, r, sl), &a);
  assert_shape(cat, IR_F32, SHP(2, 264, 16));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(-1));
  ir_attrs_set_bool(&a, IR_ATTR_KEEPDIM, true);
  IrValue *mean = build(&t, IR_OP_MEAN, VS(cat), &a);
  assert_shape(mean, IR_F32, SHP(2, 264, 1));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(3, 2, 264, 16));
  IrValue *ex = build(&t, IR_OP_EXPAND, VS(mean), &a);
  assert_shape(ex, IR_F32, SHP(3, 2, 264, 16));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(0, 2));
  IrValue *sum = build(&t, IR_OP_SUM, VS(ex), &a);
  assert_shape(sum, IR_F32, SHP(2, 16));
  a = (IrAttrs){0};
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_BF16);
  IrValue *c = build(&t, IR_OP_CAST, VS(sum), &a);
  assert_shape(c, IR_BF16, SHP(2, 16));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(2, 16));
  ir_attrs_set_float(&a, IR_ATTR_VALUE, 0.5);
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_BF16);
  IrValue *full = build(&t, IR_OP_FULL, NULL, 0, &a);
  IrValue *mse = build(&t, IR_OP_MSE, VS(c, full), NULL);
  assert_shape(mse, IR_F32, SHP());
  ir_func_add_result(t.m, t.f, mse);
  ir_func_add_result(t.m, t.f, cat);
  char *s = print_str(t.m);
  ck_assert_ptr_nonnull(
      strstr(s, "= conv2d(%x, @conv.weight, @conv.bias) {stride = [2, 2], padding = [1, 1]} : "
                "f32[2, 16, 16, 16]"));
  ck_assert_ptr_nonnull(
      strstr(s, "= slice(%2) {axis = 1, start = 0, stop = 10, step = 3} : f32[2, 4, 16]"));
  ck_assert_ptr_nonnull(strstr(s, "{axes = [2], keepdim = true}"));
  ck_assert_ptr_nonnull(
      strstr(s, "= full() {shape = [2, 16], value = 0.5, dtype = bf16} : bf16[2, 16]"));
  ck_assert_ptr_nonnull(strstr(s, ": f32[]{dp:B, cp:B, tp:B}\n  return %10, %4\n}\n"));
  free(s);
  assert_roundtrip(&t);
  t_free(&t);
}
END_TEST

/* Names, strings and floats that need care to print and read back. */
START_TEST(test_roundtrip_edge_cases) {
  T t;
  t_init(&t, "odd name");
  t.m->mesh[IR_AX_DP] = 4;
  ir_module_group(t.m, "vision \"blocks\"", 3);
  IrValue *x = in(&t, "3", IR_BF16, SHP(8));
  IrValue *y = in(&t, "", IR_BF16, SHP(8));
  y->role = IR_ROLE_ACT;
  x->pl[IR_AX_DP] = (IrPlacement){IR_PL_S, 0};
  IrValue *p = ir_add_param(t.m, "w\\eird\nname", IR_BF16, PSHP(8),
                            (IrInit){IR_INIT_UNIFORM, -0.1, 1.0 / 3}, L(&t, 1, 1));
  p->role = IR_ROLE_OPT;
  p->group = 0;
  p->layer = 2;
  ir_add_param(t.m, "fill", IR_F32, PSHP(1), (IrInit){IR_INIT_FILL, 5e-324, 0}, (SrcLoc){0});
  ir_add_param(t.m, "none", IR_U8, PSHP(1), (IrInit){IR_INIT_NONE, 0, 0}, (SrcLoc){0});
  ir_add_param(t.m, "ones", IR_BOOL, PSHP(1), (IrInit){IR_INIT_ONES, 0, 0}, (SrcLoc){0});
  SrcLoc odd = {diag_add_buffer(&t.d, "dir/with \"quote\".mm", "", 0), 7, 3, 0};
  t.b.scope = "a\tb";
  double vals[] = {0.1,   1.0 / 3, 1e-5, -INFINITY,   INFINITY, NAN,
                   1e300, 5e-324,  -0.0, 123456789.0, 2.5e-7};
  IrValue *h = x;
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    IrAttrs a = {0};
    ir_attrs_set_float(&a, IR_ATTR_VALUE, vals[i]);
    h = build_at(&t, odd, IR_OP_ADD_SCALAR, VS(h), &a);
    h->pl[IR_AX_DP] = x->pl[IR_AX_DP];
  }
  IrAttrs g = {0}; /* the pieces gathered: a mesh-axis attribute */
  ir_attrs_set_mesh(&g, IR_ATTR_MESH, IR_AX_DP);
  ir_attrs_set_int(&g, IR_ATTR_DIM, 0);
  h = build(&t, IR_OP_ALL_GATHER, VS(h), &g);
  h = build(&t, IR_OP_MUL, VS(h, y), NULL);
  h = build(&t, IR_OP_ADD, VS(h, p), NULL);
  h->role = IR_ROLE_GRAD;
  ir_func_add_result(t.m, t.f, h);
  ir_func_new(t.m, "empty");
  char *s = print_str(t.m);
  ck_assert_ptr_nonnull(strstr(s, "module @\"odd name\" mesh(dp = 4, cp = 1, tp = 1)\n"));
  ck_assert_ptr_nonnull(strstr(s, "group \"vision \\\"blocks\\\"\" layers 3\n"));
  ck_assert_ptr_nonnull(
      strstr(s, "param @\"w\\\\eird\\0Aname\" : bf16[8]{dp:B, cp:B, tp:B} role(opt) "
                "init(uniform, -0.1, 0.3333333333333333) layer(\"vision \\\"blocks\\\"\", 2)"));
  ck_assert_ptr_nonnull(strstr(s, "init(fill, 5e-324)"));
  ck_assert_ptr_nonnull(strstr(s, "param @none : u8[1]{dp:B, cp:B, tp:B}\n"));
  ck_assert_ptr_nonnull(
      strstr(s, "func @forward(%\"3\" : bf16[8]{dp:S(0), cp:B, tp:B}, %\"\" : bf16[8]{dp:B, cp:B, "
                "tp:B} role(act)) {\n"));
  ck_assert_ptr_nonnull(strstr(s, "%0 = add_scalar(%\"3\") {value = 0.1}"));
  ck_assert_ptr_nonnull(strstr(s, "{value = -inf}"));
  ck_assert_ptr_nonnull(strstr(s, "{value = nan}"));
  ck_assert_ptr_nonnull(strstr(s, "{value = 1e-05}"));
  ck_assert_ptr_nonnull(strstr(s, "{value = -0}"));
  ck_assert_ptr_nonnull(strstr(s, "{value = 123456789}"));
  ck_assert_ptr_nonnull(strstr(s, "{value = 1e+300}"));
  ck_assert_ptr_nonnull(strstr(s, "scope(\"a\\09b\") loc(\"dir/with \\\"quote\\\".mm\":7:3)"));
  ck_assert_ptr_nonnull(strstr(s, " role(grad)"));
  ck_assert_ptr_nonnull(
      strstr(s, " = all_gather(%10) {mesh = dp, dim = 0} : bf16[8]{dp:B, cp:B, tp:B}"));
  ck_assert_ptr_nonnull(strstr(s, "func @empty() {\n  return\n}\n"));
  free(s);
  assert_roundtrip(&t);
  t_free(&t);
}
END_TEST

START_TEST(test_parse_hand_written) {
  /* comments, placements given in part, a float attribute written as an
   * integer, negative axes normalised */
  const char *text = "// a hand-written module\n"
                     "module @m mesh(tp = 2)\n"
                     "func @f(%x : f32[4, 6]{tp:S(0)}) {\n"
                     "  %a = softmax(%x) {axis = -1} : f32[4, 6]{tp:S(0)}\n"
                     "  %b = mul_scalar(%a) {value = 2} : f32[4, 6]{tp:S(0)} // twice\n"
                     "  return %b\n"
                     "}\n";
  Diag d;
  diag_init(&d);
  d.out = fopen("/dev/null", "w");
  IrModule *m = parse_str(&d, "hand.ir", text);
  ck_assert_ptr_nonnull(m);
  ck_assert(ir_verify(m));
  char *s = print_str(m);
  ck_assert_str_eq(s, "module @m mesh(dp = 1, cp = 1, tp = 2)\n"
                      "func @f(%x : f32[4, 6]{dp:B, cp:B, tp:S(0)}) {\n"
                      "  %0 = softmax(%x) {axis = 1} : f32[4, 6]{dp:B, cp:B, tp:S(0)}\n"
                      "  %1 = mul_scalar(%0) {value = 2} : f32[4, 6]{dp:B, cp:B, tp:S(0)}\n"
                      "  return %1\n"
                      "}\n");
  free(s);
  ir_module_free(m);
  fclose(d.out);
  diag_free(&d);
}
END_TEST

START_TEST(test_dot) {
  T t;
  t_init(&t, "Mlp");
  build_mlp(&t);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print_dot(f, t.m);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "digraph \"Mlp\" {"));
  ck_assert_ptr_nonnull(strstr(buf, "p0 [shape=box, label=\"@h.0.fc.weight\\nf32[32, 32]\"];"));
  ck_assert_ptr_nonnull(strstr(buf, "label=\"h\";"));
  ck_assert_ptr_nonnull(strstr(buf, "label=\"h.0\";"));
  ck_assert_ptr_nonnull(strstr(buf, "label=\"h.1\";"));
  ck_assert_ptr_nonnull(strstr(buf, "label=\"head\";"));
  ck_assert_ptr_nonnull(strstr(buf, "f0_n0 [label=\"linear\\nf32[4, 32]\"];"));
  ck_assert_ptr_nonnull(strstr(buf, "p0 -> f0_n0;"));
  ck_assert_ptr_nonnull(strstr(buf, "f0_i0 -> f0_n0;"));
  ck_assert_ptr_nonnull(strstr(buf, "f0_n7 -> f0_ret;"));
  /* clusters nest: "h" holds "h.0" and "h.1" */
  char *h = strstr(buf, "label=\"h\";"), *h0 = strstr(buf, "label=\"h.0\";"),
       *head = strstr(buf, "label=\"head\";");
  ck_assert(h < h0 && h0 < head);
  free(buf);
  t_free(&t);
}
END_TEST

START_TEST(test_print_node_and_renumber) {
  T t;
  t_init(&t, "m");
  IrValue *x = in(&t, "x", IR_F32, SHP(2, 3));
  IrValue *w = param(&t, "w", IR_F32, SHP(3));
  IrValue *a = build(&t, IR_OP_MUL, VS(x, w), NULL);
  IrValue *b = build(&t, IR_OP_TANH, VS(a), NULL);
  /* a rewrite drops the first node: the printer renumbers, ids lag until renumbered */
  b->def->in[0] = x;
  t.f->nodes.items[0] = t.f->nodes.items[1];
  t.f->nodes.len = 1;
  ir_func_add_result(t.m, t.f, b);
  char *s = print_str(t.m);
  ck_assert_ptr_nonnull(strstr(s, "  %0 = tanh(%x) : f32[2, 3]{dp:B, cp:B, tp:B}\n  return %0\n"));
  free(s);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print_node(f, t.m, b->def);
  ir_func_renumber(t.f);
  ir_print_node(f, t.m, b->def);
  fclose(f);
  ck_assert_str_eq(
      buf,
      "%1 = tanh(%x) : f32[2, 3]{dp:B, cp:B, tp:B}\n%0 = tanh(%x) : f32[2, 3]{dp:B, cp:B, tp:B}\n");
  free(buf);
  ck_assert_int_eq(t.f->next_id, 1);
  t_free(&t);
}
END_TEST

START_TEST(test_map) {
  Arena a;
  arena_init(&a);
  IrMap pm, sm;
  ir_map_init(&pm, &a, false);
  ir_map_init(&sm, &a, true);
  static int objs[1000];
  char *names[1000];
  for (int i = 0; i < 1000; i++) {
    ir_map_put(&pm, &objs[i])->i = i;
    names[i] = arena_printf(&a, "v.%d", i);
    ir_map_put(&sm, names[i])->p = &objs[i];
  }
  ck_assert_int_eq(pm.len, 1000);
  ck_assert_int_eq(sm.len, 1000);
  for (int i = 0; i < 1000; i++) {
    ck_assert_int_eq(ir_map_get(&pm, &objs[i])->i, i);
    char key[32];
    snprintf(key, sizeof key, "v.%d", i);
    ck_assert_ptr_eq(ir_map_get(&sm, key)->p, &objs[i]);
  }
  ck_assert_ptr_null(ir_map_get(&sm, "v.1000"));
  ck_assert_ptr_null(ir_map_get(&pm, &a));
  ck_assert_ptr_eq(ir_map_put(&sm, "v.7"), ir_map_get(&sm, "v.7")); /* put finds an existing key */
  ck_assert_int_eq(sm.len, 1000);
  arena_free(&a);
}
END_TEST

/* ---- tests: the builder and shape rules ---- */

START_TEST(test_build_checks) {
  T t;
  t_init(&t, "m");
  IrValue *x = in(&t, "x", IR_F32, SHP(4, 8));
  IrAttrs a = {0};
  expect_fail(&t, IR_OP_ADD, VS(x), NULL, "add: expects 2 operands, got 1", -1);
  expect_fail(&t, IR_OP_CONV2D, VS(x), NULL, "conv2d: expects 2 to 3 operands, got 1", -1);
  expect_fail(&t, IR_OP_SOFTMAX, VS(x), NULL, "softmax: missing attribute 'axis'", -1);
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 0);
  expect_fail(&t, IR_OP_ADD, VS(x, x), &a, "add: unexpected attribute 'axis'", -1);
  t.b.group = 3;
  t.b.layer = 0;
  expect_fail(&t, IR_OP_NEG, VS(x), NULL, "neg: invalid layer group #3", -1);
  t.b.group = ir_module_group(t.m, "h", 2);
  t.b.layer = 2;
  expect_fail(&t, IR_OP_NEG, VS(x), NULL,
              "neg: layer 2 is out of range for group \"h\" of 2 layers", -1);
  t.b.layer = 1;
  t.b.scope = "h.1";
  IrValue *y = build(&t, IR_OP_NEG, VS(x), NULL);
  ck_assert_int_eq(y->def->group, t.b.group);
  ck_assert_int_eq(y->def->layer, 1);
  ck_assert_str_eq(y->def->scope, "h.1");
  ck_assert_int_eq(y->role, IR_ROLE_ACT);
  ck_assert_int_eq(y->pl[IR_AX_TP].kind, IR_PL_B);
  /* ints are copied at build time */
  int64_t shape[] = {8, 4};
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, shape, 2);
  IrValue *r = build(&t, IR_OP_RESHAPE, VS(y), &a);
  shape[0] = 99;
  ck_assert_int_eq(r->def->attrs.v[IR_ATTR_SHAPE].ints[0], 8);
  t_free(&t);
}
END_TEST

START_TEST(test_shape_errors) {
  T t;
  t_init(&t, "m");
  IrValue *x3 = in(&t, "x3", IR_F32, SHP(4, 64, 768));
  IrValue *y3 = in(&t, "y3", IR_F32, SHP(4, 64, 512));
  IrValue *i3 = in(&t, "i3", IR_I32, SHP(4, 64, 768));
  IrValue *v768 = in(&t, "v768", IR_F32, SHP(768));
  IrValue *w = in(&t, "w", IR_F32, SHP(2304, 768));
  IrValue *x2 = in(&t, "x2", IR_F32, SHP(4, 64));
  IrValue *ids = in(&t, "ids", IR_I32, SHP(4, 63));
  IrAttrs a = {0};

  /* elementwise */
  expect_fail(&t, IR_OP_ADD, VS(x3, i3), NULL, "add: operand dtypes differ: f32 and i32", 1);
  expect_fail(&t, IR_OP_ADD, VS(x3, y3), NULL,
              "add: shapes [4, 64, 768] and [4, 64, 512] do not broadcast (dim 2: 768 vs 512)", 1);
  IrValue *bc = build(&t, IR_OP_MUL, VS(x3, v768), NULL);
  assert_shape(bc, IR_F32, SHP(4, 64, 768));
  expect_fail(&t, IR_OP_EXP, VS(i3), NULL, "exp: expected a floating-point dtype, got i32", 0);
  expect_fail(&t, IR_OP_POW, VS(i3, i3), NULL,
              "pow: operand 0: expected a floating-point dtype, got i32", 0);
  ck_assert_ptr_nonnull(build(&t, IR_OP_RELU, VS(i3), NULL));
  ir_attrs_set_float(&a, IR_ATTR_P, 1.5);
  expect_fail(&t, IR_OP_DROPOUT, VS(x3), &a, "dropout: p must be in [0, 1), got 1.5", -1);

  /* contractions */
  expect_fail(&t, IR_OP_MATMUL, VS(x3, w), NULL, "matmul: inner dimensions differ: 768 vs 2304", 1);
  expect_fail(&t, IR_OP_MATMUL, VS(x3, v768), NULL,
              "matmul: operand 1 must have rank >= 2, got [768]", 1);
  IrValue *ba = in(&t, "ba", IR_F32, SHP(2, 4, 8)), *bb = in(&t, "bb", IR_F32, SHP(3, 8, 5));
  expect_fail(&t, IR_OP_MATMUL, VS(ba, bb), NULL,
              "matmul: shapes [2] and [3] do not broadcast (dim 0: 2 vs 3)", 1);
  IrValue *bc1 = in(&t, "bc1", IR_F32, SHP(5, 1, 8, 3));
  assert_shape(build(&t, IR_OP_MATMUL, VS(ba, bc1), NULL), IR_F32, SHP(5, 2, 4, 3));
  expect_fail(&t, IR_OP_LINEAR, VS(x2, w), NULL,
              "linear: input features differ: input [4, 64] has 64, weight [2304, 768] expects 768",
              1);
  assert_shape(build(&t, IR_OP_LINEAR, VS(x3, w), NULL), IR_F32, SHP(4, 64, 2304));

  /* conv */
  IrValue *img = in(&t, "img", IR_F32, SHP(2, 3, 32, 32));
  IrValue *k4 = in(&t, "k4", IR_F32, SHP(16, 4, 3, 3)),
          *k3 = in(&t, "k3", IR_F32, SHP(16, 3, 5, 5));
  IrValue *b8 = in(&t, "b8", IR_F32, SHP(8));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(1, 1));
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, INTS(0, 0));
  expect_fail(
      &t, IR_OP_CONV2D, VS(img, k4), &a,
      "conv2d: input channels differ: input [2, 3, 32, 32] has 3, weight [16, 4, 3, 3] expects 4",
      1);
  expect_fail(&t, IR_OP_CONV2D, VS(img, k3, b8), &a, "conv2d: bias must have shape [16], got [8]",
              2);
  expect_fail(&t, IR_OP_CONV3D, VS(img, k3), &a,
              "conv3d: input must have rank 5, got [2, 3, 32, 32]", 0);
  IrValue *tiny = in(&t, "tiny", IR_F32, SHP(1, 3, 2, 2));
  expect_fail(&t, IR_OP_CONV2D, VS(tiny, k3), &a,
              "conv2d: kernel 5 is larger than input dim 2 of size 2 with padding 0", 1);
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(1, 1, 1));
  expect_fail(&t, IR_OP_CONV2D, VS(img, k3), &a, "conv2d: stride needs 2 values, got 3", -1);
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(0, 1));
  expect_fail(&t, IR_OP_CONV2D, VS(img, k3), &a, "conv2d: stride 0 must be in [1, 2^31)", -1);
  IrValue *vid = in(&t, "vid", IR_F32, SHP(1, 3, 9, 32, 32)),
          *k5 = in(&t, "k5", IR_F32, SHP(8, 3, 3, 4, 4));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_STRIDE, INTS(1, 4, 4));
  ir_attrs_set_ints(&a, IR_ATTR_PADDING, INTS(1, 0, 0));
  assert_shape(build(&t, IR_OP_CONV3D, VS(vid, k5), &a), IR_F32, SHP(1, 8, 9, 8, 8));

  /* norms */
  IrValue *v512 = in(&t, "v512", IR_F32, SHP(512));
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-5);
  expect_fail(&t, IR_OP_LAYER_NORM, VS(x3, v512), &a,
              "layer_norm: weight must have shape [768], got [512]", 1);
  expect_fail(&t, IR_OP_LAYER_NORM, VS(x3, v768, v512), &a,
              "layer_norm: bias must have shape [768], got [512]", 2);
  expect_fail(&t, IR_OP_RMS_NORM, VS(x3, v512), &a,
              "rms_norm: weight must have shape [768], got [512]", 1);
  assert_shape(build(&t, IR_OP_LAYER_NORM, VS(x3, v768, v768), &a), IR_F32, SHP(4, 64, 768));
  /* {axis}: over a dim before the last, weight and bias of its size, stats of the rest */
  IrValue *v64 = in(&t, "v64", IR_F32, SHP(64));
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  IrNode *lna = build(&t, IR_OP_LAYER_NORM, VS(x3, v64, v64), &a)->def;
  ck_assert_int_eq(lna->out[1]->shape.d[0], 4 * 768);
  expect_fail(&t, IR_OP_LAYER_NORM, VS(x3, v768), &a,
              "layer_norm: weight must have shape [64], got [768]", 1);
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 2);
  expect_fail(&t, IR_OP_LAYER_NORM, VS(x3, v768), &a,
              "layer_norm: axis 2 must be a dim before the last of [4, 64, 768] (the last is the "
              "default)",
              0);
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_EPS, 1e-5);
  IrValue *gn = in(&t, "gn", IR_F32, SHP(2, 30, 8, 8));
  ir_attrs_set_int(&a, IR_ATTR_GROUPS, 4);
  expect_fail(&t, IR_OP_GROUP_NORM, VS(gn), &a,
              "group_norm: 30 channels do not divide into 4 groups", 0);
  ir_attrs_set_int(&a, IR_ATTR_GROUPS, 5);
  expect_fail(&t, IR_OP_GROUP_NORM, VS(gn, v512), &a,
              "group_norm: weight must have shape [30], got [512]", 1);
  ck_assert_ptr_nonnull(build(&t, IR_OP_GROUP_NORM, VS(gn), &a));
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 3);
  expect_fail(&t, IR_OP_SOFTMAX, VS(x3), &a, "softmax: axis 3 is out of range for rank 3", 0);
  ir_attrs_set_int(&a, IR_ATTR_AXIS, -4);
  expect_fail(&t, IR_OP_LOG_SOFTMAX, VS(x3), &a, "log_softmax: axis -4 is out of range for rank 3",
              0);

  /* reductions */
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(1, -2));
  expect_fail(&t, IR_OP_SUM, VS(x3), &a, "sum: axis 1 is listed twice", -1);
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(0, 5));
  expect_fail(&t, IR_OP_MEAN, VS(x3), &a, "mean: axis 5 is out of range for rank 3", 0);
  expect_fail(&t, IR_OP_MEAN, VS(i3), &a, "mean: expected a floating-point dtype, got i32", 0);
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(0, 1, 2));
  assert_shape(build(&t, IR_OP_SUM, VS(i3), &a), IR_I32, SHP());

  /* layout */
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(3, -1));
  expect_fail(&t, IR_OP_RESHAPE, VS(x2), &a,
              "reshape: cannot reshape [4, 64] (256 elements) into [3, -1]", 0);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(-1, -1));
  expect_fail(&t, IR_OP_RESHAPE, VS(x2), &a, "reshape: shape has more than one -1", -1);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(16, 17));
  expect_fail(&t, IR_OP_RESHAPE, VS(x2), &a,
              "reshape: cannot reshape [4, 64] (256 elements) into [16, 17]", 0);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(16, 0));
  expect_fail(&t, IR_OP_RESHAPE, VS(x2), &a,
              "reshape: shape dim 1 is 0; dims must be >= 1 (or one -1)", -1);
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, INTS(0, 0, 1));
  expect_fail(&t, IR_OP_TRANSPOSE, VS(x3), &a,
              "transpose: perm [0, 0, 1] is not a permutation of 0..2", -1);
  ir_attrs_set_ints(&a, IR_ATTR_PERM, INTS(1, 0));
  expect_fail(&t, IR_OP_TRANSPOSE, VS(x3), &a,
              "transpose: perm [1, 0] is not a permutation of 0..2", -1);
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  ir_attrs_set_int(&a, IR_ATTR_START, 5);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 3);
  expect_fail(&t, IR_OP_SLICE, VS(x2), &a,
              "slice: range [5:3] is not within dim 1 of size 64 (need 0 <= start < stop <= 64)",
              0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 65);
  expect_fail(&t, IR_OP_SLICE, VS(x2), &a,
              "slice: range [5:65] is not within dim 1 of size 64 (need 0 <= start < stop <= 64)",
              0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 64);
  ir_attrs_set_int(&a, IR_ATTR_STEP, 0);
  expect_fail(&t, IR_OP_SLICE, VS(x2), &a, "slice: step must be >= 1, got 0", -1);
  ir_attrs_set_int(&a, IR_ATTR_STEP, INT64_MAX);
  assert_shape(build(&t, IR_OP_SLICE, VS(x2), &a), IR_F32, SHP(4, 1));
  IrValue *c1 = in(&t, "c1", IR_F32, SHP(3, 6)), *c2 = in(&t, "c2", IR_F32, SHP(4, 5));
  IrValue *c3 = in(&t, "c3", IR_I32, SHP(3, 6)), *c4 = in(&t, "c4", IR_F32, SHP(3, 6, 1));
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 0);
  expect_fail(&t, IR_OP_CONCAT, VS(c1, c2), &a,
              "concat: operand 1 [4, 5] differs from operand 0 [3, 6] in dim 1 (concatenating "
              "along axis 0)",
              1);
  expect_fail(&t, IR_OP_CONCAT, VS(c1, c1, c3), &a, "concat: operand dtypes differ: f32 and i32",
              2);
  expect_fail(&t, IR_OP_CONCAT, VS(c1, c4), &a,
              "concat: operand 1 has rank 3, operand 0 has rank 2", 1);
  assert_shape(build(&t, IR_OP_CONCAT, VS(c1, c1, c1), &a), IR_F32, SHP(9, 6));
  IrValue *e = in(&t, "e", IR_F32, SHP(4, 3));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(4, 5));
  expect_fail(&t, IR_OP_EXPAND, VS(e), &a, "expand: cannot expand [4, 3] to [4, 5] (dim 1: 3 vs 5)",
              0);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(3));
  expect_fail(&t, IR_OP_EXPAND, VS(e), &a, "expand: cannot expand [4, 3] to the lower rank [3]", 0);

  /* transformer pieces */
  IrValue *table = in(&t, "table", IR_F32, SHP(100, 16));
  expect_fail(&t, IR_OP_EMBEDDING, VS(x2, table), NULL,
              "embedding: ids must have an integer dtype, got f32", 0);
  expect_fail(&t, IR_OP_EMBEDDING, VS(ids, v768), NULL,
              "embedding: table must have rank 2, got [768]", 1);
  assert_shape(build(&t, IR_OP_EMBEDDING, VS(ids, table), NULL), IR_F32, SHP(4, 63, 16));
  IrValue *odd = in(&t, "odd", IR_F32, SHP(2, 8, 4, 33));
  a = (IrAttrs){0};
  ir_attrs_set_float(&a, IR_ATTR_THETA, 10000);
  expect_fail(&t, IR_OP_ROPE, VS(odd), &a, "rope: head dim 33 must be even", 0);
  expect_fail(&t, IR_OP_ROPE, VS(x3), &a,
              "rope: input [B, T, H, D] must have rank 4, got [4, 64, 768]", 0);
  IrValue *q = in(&t, "q", IR_F32, SHP(2, 8, 14, 16)), *k = in(&t, "k", IR_F32, SHP(2, 8, 4, 16));
  a = (IrAttrs){0};
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, true);
  ir_attrs_set_float(&a, IR_ATTR_SCALE, 0.25);
  expect_fail(&t, IR_OP_ATTENTION, VS(q, k, k), &a,
              "attention: 14 query heads are not a multiple of 4 key/value heads", 1);
  IrValue *q2 = in(&t, "q2", IR_F32, SHP(2, 8, 12, 32));
  expect_fail(&t, IR_OP_ATTENTION, VS(q2, k, k), &a,
              "attention: head dims differ: q has 32, k has 16", 1);
  IrValue *vv = in(&t, "vv", IR_F32, SHP(2, 8, 4, 24)),
          *q3 = in(&t, "q3", IR_F32, SHP(2, 5, 12, 16));
  assert_shape(build(&t, IR_OP_ATTENTION, VS(q3, k, vv), &a), IR_F32, SHP(2, 5, 12, 24));

  /* losses */
  IrValue *logits = in(&t, "logits", IR_F32, SHP(4, 64, 100));
  IrValue *fl = in(&t, "fl", IR_F32, SHP(4, 64));
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_IGNORE, -1);
  expect_fail(&t, IR_OP_CROSS_ENTROPY, VS(logits, ids), &a,
              "cross_entropy: labels [4, 63] must have the shape of logits [4, 64, 100] without "
              "its last dim, "
              "[4, 64]",
              1);
  expect_fail(&t, IR_OP_CROSS_ENTROPY, VS(logits, fl), &a,
              "cross_entropy: labels must have an integer dtype, got f32", 1);
  expect_fail(&t, IR_OP_MSE, VS(x2, c2), NULL, "mse: shapes differ: [4, 64] and [4, 5]", 1);
  t_free(&t);
}
END_TEST

START_TEST(test_shape_overflow) {
  T t;
  t_init(&t, "m");
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(1 << 20, 1 << 20, 1 << 20));
  ir_attrs_set_float(&a, IR_ATTR_VALUE, 0);
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_F32);
  expect_fail(&t, IR_OP_FULL, NULL, 0, &a,
              "full: shape [1048576, 1048576, 1048576] has too many elements", -1);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(INT64_MAX, INT64_MAX));
  expect_fail(&t, IR_OP_FULL, NULL, 0, &a,
              "full: shape [9223372036854775807, 9223372036854775807] has too many elements", -1);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(1, 2, 3, 4, 5, 6, 7, 8, 9));
  expect_fail(&t, IR_OP_FULL, NULL, 0, &a, "full: shape has rank 9, more than the maximum 8", -1);
  IrValue *x = in(&t, "x", IR_F32, SHP(1, 1));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(INT64_MAX / 2, 4));
  expect_fail(&t, IR_OP_EXPAND, VS(x), &a,
              "expand: shape [4611686018427387903, 4] has too many elements", -1);
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(INT64_MAX / 2, 4, -1));
  expect_fail(&t, IR_OP_RESHAPE, VS(x), &a,
              "reshape: cannot reshape [1, 1] (1 elements) into [4611686018427387903, 4, -1]", 0);
  t_free(&t);
}
END_TEST

/* ---- tests: FLOPs ---- */

START_TEST(test_flops) {
  T t;
  t_init(&t, "m");
  IrValue *a3 = in(&t, "a", IR_F32, SHP(3, 8, 16)), *b3 = in(&t, "b", IR_F32, SHP(3, 16, 32));
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_MATMUL, VS(a3, b3), NULL)->def), 2 * 3 * 8 * 16 * 32);
  IrValue *b2 = in(&t, "b2", IR_F32, SHP(16, 32));
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_MATMUL, VS(a3, b2), NULL)->def), 2 * 3 * 8 * 16 * 32);
  IrValue *x = in(&t, "x", IR_F32, SHP(4, 10, 64)), *w = in(&t, "w", IR_F32, SHP(128, 64));
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_LINEAR, VS(x, w), NULL)->def), 2 * 40 * 64 * 128);
  IrValue *img = in(&t, "img", IR_F32, SHP(2, 3, 32, 32)),
          *k = in(&t, "k", IR_F32, SHP(16, 3, 3, 3));
  IrAttrs at = {0};
  ir_attrs_set_ints(&at, IR_ATTR_STRIDE, INTS(2, 2));
  ir_attrs_set_ints(&at, IR_ATTR_PADDING, INTS(1, 1));
  /* 2 * B * Cout * (16 * 16) * Cin * 3 * 3 */
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_CONV2D, VS(img, k), &at)->def),
                   2 * 2 * 16 * 256 * 3 * 9);
  IrValue *q = in(&t, "q", IR_F32, SHP(2, 16, 8, 32)),
          *kk = in(&t, "kk", IR_F32, SHP(2, 24, 2, 32));
  at = (IrAttrs){0};
  ir_attrs_set_bool(&at, IR_ATTR_CAUSAL, true);
  ir_attrs_set_float(&at, IR_ATTR_SCALE, 0.125);
  /* 4 * B * H * T * S * D, causal not halved */
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_ATTENTION, VS(q, kk, kk), &at)->def),
                   4LL * 2 * 8 * 16 * 24 * 32);
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_GELU, VS(x), NULL)->def), 4 * 10 * 64);
  at = (IrAttrs){0};
  ir_attrs_set_float(&at, IR_ATTR_EPS, 1e-5);
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_LAYER_NORM, VS(x), &at)->def), 8 * 4 * 10 * 64);
  at = (IrAttrs){0};
  ir_attrs_set_ints(&at, IR_ATTR_AXES, INTS(2));
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_SUM, VS(x), &at)->def),
                   4 * 10 * 64); /* counts the input */
  IrValue *v1 = in(&t, "v1", IR_F32, SHP(64));
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_MUL, VS(v1, x), NULL)->def),
                   4 * 10 * 64); /* the broadcast result */
  IrValue *labels = in(&t, "labels", IR_I64, SHP(4, 10));
  at = (IrAttrs){0};
  ir_attrs_set_int(&at, IR_ATTR_IGNORE, -100);
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_CROSS_ENTROPY, VS(x, labels), &at)->def),
                   4 * 4 * 10 * 64);
  at = (IrAttrs){0};
  ir_attrs_set_ints(&at, IR_ATTR_PERM, INTS(1, 0, 2));
  ck_assert_int_eq(ir_flops(build(&t, IR_OP_TRANSPOSE, VS(x), &at)->def), 0);
  t_free(&t);
}
END_TEST

/* ---- tests: the verifier ---- */

START_TEST(test_verify_use_before_def) {
  T t;
  t_init(&t, "Mlp");
  build_mlp(&t);
  void **items = t.f->nodes.items;
  void *tmp = items[0];
  items[0] = items[1];
  items[1] = tmp;
  ck_assert(!ir_verify(t.m));
  ck_assert_ptr_nonnull(strstr(
      t_diag(&t), "model.mm:5:7: error: %0 = add: operand 0 (%1) is used before its definition"));
  t_free(&t);
}
END_TEST

START_TEST(test_verify_wrong_shape) {
  T t;
  t_init(&t, "Mlp");
  build_mlp(&t);
  IrNode *gelu = t.f->nodes.items[2];
  gelu->out[0]->shape.d[1] = 31;
  ck_assert(!ir_verify(t.m));
  const char *d = t_diag(&t);
  ck_assert_ptr_nonnull(strstr(
      d, "error: %2 = gelu: stored type f32[4, 31] of %2 differs from the inferred f32[4, 32]"));
  ck_assert_ptr_nonnull(
      strstr(d, "error: %3 = linear: input features differ: input [4, 31] has 31"));
  t_free(&t);
}
END_TEST

START_TEST(test_verify_other_breaks) {
  T t;
  t_init(&t, "Mlp");
  build_mlp(&t);
  IrFunc *g = ir_func_new(t.m, "other");
  IrValue *z = ir_add_input(t.m, g, "z", IR_F32, PSHP(4, 32), (SrcLoc){0});
  IrNode *n1 = t.f->nodes.items[1];
  n1->in[0] = z; /* a value of another function */
  IrValue *w = ir_module_param(t.m, "h.0.fc.weight");
  w->role = IR_ROLE_ACT;
  IrNode *n5 = t.f->nodes.items[5];
  n5->attrs.set |= 1ull << IR_ATTR_AXIS; /* gelu takes no attributes */
  w->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 5};
  ck_assert(!ir_verify(t.m));
  const char *d = t_diag(&t);
  ck_assert_ptr_nonnull(
      strstr(d, "%1 = add: operand 0 (%z) is not a parameter, an input or a result of @forward"));
  ck_assert_ptr_nonnull(strstr(d, "param @h.0.fc.weight has role act"));
  ck_assert_ptr_nonnull(
      strstr(d, "param @h.0.fc.weight: placement S(5) on tp is out of range for shape [32, 32]"));
  ck_assert_ptr_nonnull(strstr(d, "%5 = gelu: unexpected attribute 'axis'"));
  t_free(&t);
}
END_TEST

START_TEST(test_verify_divisibility) {
  T t;
  t_init(&t, "m");
  t.m->mesh[IR_AX_TP] = 4;
  t.m->mesh[IR_AX_CP] = 2;
  IrValue *x = in(&t, "x", IR_F32, SHP(6, 8));
  x->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 0};
  x->pl[IR_AX_CP] = (IrPlacement){IR_PL_S, 0};
  ck_assert(!ir_verify(t.m));
  ck_assert_ptr_nonnull(strstr(
      t_diag(&t), "@forward: input %x: dim 0 of [6, 8] is split 8 ways, which does not divide it"));
  t_free(&t);
}
END_TEST

/* ---- tests: parser errors ---- */

static void expect_parse_error(const char *text, const char *want) {
  Diag d;
  diag_init(&d);
  char *buf = NULL;
  size_t len = 0;
  d.out = open_memstream(&buf, &len);
  IrModule *m = parse_str(&d, "t.ir", text);
  fflush(d.out);
  ck_assert_msg(m == NULL, "parsed, expected error '%s'", want);
  ck_assert_msg(buf && strstr(buf, want), "got '%s', want '%s'", buf ? buf : "", want);
  ck_assert_int_eq(d.errors, 1);
  fclose(d.out);
  free(buf);
  diag_free(&d);
}

#define HEAD "module @m mesh(dp = 1, cp = 1, tp = 1)\n"

START_TEST(test_parse_errors) {
  expect_parse_error(HEAD "func @f(%x : f32[4]) {\n  %0 = neg(%7) : f32[4]\n  return %0\n}\n",
                     "t.ir:3:12: error: use of undefined value %7");
  expect_parse_error(HEAD
                     "func @f(%x : f32[4]) {\n  %0 = matmull(%x, %x) : f32[4]\n  return %0\n}\n",
                     "t.ir:3:8: error: unknown op 'matmull'");
  expect_parse_error(
      HEAD "func @f(%x : f32[4], %y : f32[5]) {\n  %0 = add(%x, %y) : f32[4]\n  return %0\n}\n",
      "t.ir:3:16: error: add: shapes [4] and [5] do not broadcast (dim 0: 4 vs 5)");
  expect_parse_error(
      HEAD "func @f(%x : f32[4]) {\n  %0 = neg(%x) : f32[5]\n  return %0\n}\n",
      "t.ir:3:18: error: declared type f32[5] of %0 differs from the inferred f32[4]");
  expect_parse_error(HEAD "func @f(%x : f32[4]) {\n  %0 = softmax(%x) : f32[4]\n  return %0\n}\n",
                     "t.ir:3:8: error: softmax: missing attribute 'axis'");
  expect_parse_error(HEAD
                     "func @f(%x : f32[4]) {\n  %0 = neg(%x) {axsi = 1} : f32[4]\n  return %0\n}\n",
                     "t.ir:3:17: error: unknown attribute 'axsi'");
  expect_parse_error(
      HEAD
      "func @f(%x : f32[4]) {\n  %0 = neg(%x) : f32[4]\n  %0 = neg(%x) : f32[4]\n  return %0\n}\n",
      "t.ir:4:3: error: redefinition of %0");
  expect_parse_error(HEAD "func @f(%x : f32[4]) {\n  %0 = neg(%x) : f32[4]\n  return %0\n",
                     "t.ir:5:1: error: expected '}' (to close the one at 2:22), found end of file");
  expect_parse_error(
      HEAD "param @w : f32[4] layer(\"h\", 0)\n",
      "t.ir:2:25: error: unknown layer group \"h\" (declare it with a 'group' line)");
  expect_parse_error(HEAD "group \"h\" layers 2\nparam @w : f32[4] layer(\"h\", 2)\n",
                     "t.ir:3:30: error: layer 2 is out of range for group \"h\" of 2 layers");
  expect_parse_error(HEAD "param @w : f32[4, 12abc]\n", "t.ir:2:19: error: invalid number");
  expect_parse_error(HEAD "param @w : f32[4, 0]\n",
                     "t.ir:2:19: error: dim 0 is out of range [1, 9223372036854775807]");
  expect_parse_error(HEAD "param @w : f32[99999999999999999999]\n",
                     "t.ir:2:16: error: integer 99999999999999999999 is out of range");
  expect_parse_error(HEAD "param @w : f32[1048576, 1048576, 1048576]\n",
                     "t.ir:2:12: error: shape [1048576, 1048576, 1048576] has too many elements");
  expect_parse_error(HEAD "param @w : f32[4]{tp:S(1)}\n",
                     "t.ir:2:24: error: split dim 1 is out of range for rank 1");
  expect_parse_error(HEAD "param @w : f32[4] loc(\"x.mm:3:4)\n",
                     "t.ir:2:23: error: unterminated string");
  expect_parse_error(HEAD "param @w : f32[4]\nparam @w : f32[4]\n",
                     "t.ir:3:7: error: redefinition of parameter @w");
  expect_parse_error(HEAD "func @f() {\n  %0 = neg(@w) : f32[4]\n  return %0\n}\n",
                     "t.ir:3:12: error: use of undefined parameter @w");
  expect_parse_error(HEAD "func @f(%0 : f32[4]) {\n  return\n}\n",
                     "t.ir:2:9: error: function input %0 needs a name, not a number");
  expect_parse_error(HEAD "func @f(%x : f32[4]) {\n  %0, %1 = neg(%x) : f32[4]\n  return %0\n}\n",
                     "t.ir:3:3: error: neg has 1 result, but 2 are named");
  expect_parse_error(HEAD "func @f(%x : f32[4]) {\n  %0 = neg(%x, %x) : f32[4]\n  return %0\n}\n",
                     "t.ir:3:16: error: neg takes at most 1 operand");
  expect_parse_error(HEAD "func @f(%x : f32[4]) {\n  %0 = neg(%x) : f32[4]\n}\n",
                     "t.ir:4:1: error: expected a node or 'return' in @f, found '}'");
  expect_parse_error(HEAD "func @f() {\n  return\n}\nfunc @f() {\n  return\n}\n",
                     "t.ir:5:6: error: redefinition of function @f");
  expect_parse_error("module @m mesh(dp = 0)\n",
                     "t.ir:1:21: error: mesh size 0 is out of range [1, 1048576]");
  expect_parse_error("modul @m\n", "t.ir:1:1: error: expected 'module', found 'modul'");
  expect_parse_error(HEAD "param @w : f32[4] # x\n", "t.ir:2:19: error: unexpected character '#'");
  expect_parse_error(HEAD "param @w : f32[4] init(normal)\n",
                     "t.ir:2:30: error: expected ',' after the init kind, found ')'");
  expect_parse_error(HEAD "param @w : f32[4] role(act)\n",
                     "t.ir:2:24: error: a parameter cannot have role act");
  expect_parse_error("module @m mesh(tp = 4)\nparam @w : f32[6, 8]{tp:S(0)}\n",
                     "t.ir:2:12: error: dim 0 of [6, 8] is split 4 ways, which does not divide it");
  expect_parse_error(
      HEAD "param @w : f32[4] loc(\"a\\q\":1:1)\n",
      "t.ir:2:25: error: invalid escape in string (use \\\\, \\\" or two hex digits)");
}
END_TEST

/* ---- tests: robustness (a small fuzzer over the printed text) ---- */

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

/* Parses text; whatever parses must verify and print -> parse -> print
 * identically. */
static void fuzz_one(const char *text, size_t len) {
  Diag d;
  diag_init(&d);
  d.out = fopen("/dev/null", "w");
  uint32_t id = diag_add_buffer(&d, "fuzz.ir", text, len);
  IrModule *m = ir_parse(&d, id);
  if (m) {
    ck_assert(ir_verify(m));
    char *a = print_str(m);
    IrModule *m2 = parse_str(&d, "fuzz2.ir", a);
    ck_assert_msg(m2 != NULL, "reparse failed:\n%s", a);
    char *b = print_str(m2);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    ir_module_free(m2);
    ir_module_free(m);
  }
  fclose(d.out);
  diag_free(&d);
}

START_TEST(test_fuzz_mutations) {
  T t;
  t_init(&t, "Attn");
  build_attention(&t);
  char *base = print_str(t.m);
  size_t n = strlen(base);
  for (size_t cut = 0; cut <= n; cut += 3) fuzz_one(base, cut);
  static const char alphabet[] = "%@\"\\(){}[],:=-0123456789.eE abBSPf_\n\x01\x7f\xff";
  char *buf = malloc(n + 64);
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(buf, base, n + 1);
    size_t len = n;
    int edits = 1 + (int)(rnd() % 3);
    for (int e = 0; e < edits; e++) {
      size_t at = rnd() % (len ? len : 1);
      char c = alphabet[rnd() % (sizeof alphabet - 1)];
      switch (rnd() % 3) {
        case 0: buf[at] = c; break;
        case 1: /* insert */
          memmove(buf + at + 1, buf + at, len - at + 1);
          buf[at] = c;
          len++;
          break;
        default: /* delete */
          memmove(buf + at, buf + at + 1, len - at);
          len--;
          break;
      }
    }
    fuzz_one(buf, len);
  }
  free(buf);
  free(base);
  t_free(&t);
}
END_TEST

static Suite *ir_suite(void) {
  Suite *s = suite_create("ir");
  TCase *tc = tcase_create("text");
  tcase_add_test(tc, test_mlp_text);
  tcase_add_test(tc, test_mlp_parse_text);
  tcase_add_test(tc, test_attention_roundtrip);
  tcase_add_test(tc, test_conv_layout_roundtrip);
  tcase_add_test(tc, test_roundtrip_edge_cases);
  tcase_add_test(tc, test_parse_hand_written);
  tcase_add_test(tc, test_dot);
  tcase_add_test(tc, test_print_node_and_renumber);
  tcase_add_test(tc, test_map);
  suite_add_tcase(s, tc);
  tc = tcase_create("shapes");
  tcase_add_test(tc, test_build_checks);
  tcase_add_test(tc, test_shape_errors);
  tcase_add_test(tc, test_shape_overflow);
  tcase_add_test(tc, test_flops);
  suite_add_tcase(s, tc);
  tc = tcase_create("verify");
  tcase_add_test(tc, test_verify_use_before_def);
  tcase_add_test(tc, test_verify_wrong_shape);
  tcase_add_test(tc, test_verify_other_breaks);
  tcase_add_test(tc, test_verify_divisibility);
  suite_add_tcase(s, tc);
  tc = tcase_create("parse");
  tcase_add_test(tc, test_parse_errors);
  tcase_add_test(tc, test_fuzz_mutations);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(ir_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
