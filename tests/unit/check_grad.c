/* Every op with a gradient rule against central finite differences: a tiny
 * graph (the op on random trainable operands of odd sizes, loss = sum of
 * its result times a frozen random projection), autodiff, the reference
 * interpreter, and each operand's gradient compared element by element
 * (tolerance: train_fixture.h). Each graph also round-trips as text. */
#include "train_fixture.h"

/* autodiff, text round trip, random values, finite differences */
static void run(G *g) {
  g_autodiff(g, NULL);
  assert_roundtrip(g);
  g_fill(g);
  g_check(g, 0);
  ck_assert_int_gt(g->checked, 0);
}

static IrValue *pos(G *g, const char *name, IrShape s) {
  return g_param_in(g, name, s, 0.5, 2);
}

/* ---- elementwise binary, with broadcasting on either side ---- */

START_TEST(test_add) {
  G g;
  g_init(&g, 1);
  IrValue *a = g_param(&g, "a", SHP(3, 5, 7)), *b = g_param(&g, "b", SHP(5, 1));
  g_loss(&g, g_op(&g, IR_OP_ADD, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_add_same_shape) { /* both operands' gradient is dy itself: copies */
  G g;
  g_init(&g, 2);
  IrValue *a = g_param(&g, "a", SHP(3, 5)), *b = g_param(&g, "b", SHP(3, 5));
  g_loss(&g, g_op(&g, IR_OP_ADD, VS(a, b), NULL));
  run(&g);
  IrFunc *t = ir_module_func(g.m, "train");
  ck_assert_ptr_ne(grad_of(t, a), grad_of(t, b));
  g_free(&g);
}
END_TEST

START_TEST(test_sub) {
  G g;
  g_init(&g, 3);
  IrValue *a = g_param(&g, "a", SHP(7)), *b = g_param(&g, "b", SHP(3, 5, 7));
  g_loss(&g, g_op(&g, IR_OP_SUB, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_mul) {
  G g;
  g_init(&g, 4);
  IrValue *a = g_param(&g, "a", SHP(3, 5, 7)), *b = g_param(&g, "b", SHP(3, 1, 7));
  g_loss(&g, g_op(&g, IR_OP_MUL, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_mul_self) { /* one value as both operands: cotangents accumulate */
  G g;
  g_init(&g, 5);
  IrValue *a = g_param(&g, "a", SHP(3, 5));
  g_loss(&g, g_op(&g, IR_OP_MUL, VS(a, a), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_div) {
  G g;
  g_init(&g, 6);
  IrValue *a = g_param(&g, "a", SHP(1, 5, 7)), *b = pos(&g, "b", SHP(3, 5, 1));
  g_loss(&g, g_op(&g, IR_OP_DIV, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_pow) {
  G g;
  g_init(&g, 7);
  IrValue *a = pos(&g, "a", SHP(3, 5, 7)), *b = g_param_in(&g, "b", SHP(7), -1.5, 1.5);
  g_loss(&g, g_op(&g, IR_OP_POW, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

/* ---- elementwise unary (a table) ---- */

static const struct {
  IrOp op;
  double lo, hi, value; /* value: the VALUE (or P) attribute when the op takes one */
} unary[] = {
    {IR_OP_NEG, -1, 1, 0},           {IR_OP_EXP, -1, 1, 0},
    {IR_OP_LOG, 0.5, 2, 0},          {IR_OP_SQRT, 0.5, 2, 0},
    {IR_OP_RSQRT, 0.5, 2, 0},        {IR_OP_TANH, -2, 2, 0},
    {IR_OP_SIGMOID, -2, 2, 0},       {IR_OP_RELU, -1, 1, 0},
    {IR_OP_GELU, -2, 2, 0},          {IR_OP_GELU_TANH, -2, 2, 0},
    {IR_OP_SILU, -2, 2, 0},          {IR_OP_ADD_SCALAR, -1, 1, 0.3},
    {IR_OP_MUL_SCALAR, -1, 1, -1.7}, {IR_OP_POW_SCALAR, 0.5, 2, 2.5},
    {IR_OP_POW_SCALAR, -1, 1, 2},    {IR_OP_POW_SCALAR, 0.5, 2, -1},
    {IR_OP_POW_SCALAR, -1, 1, 1},    {IR_OP_POW_SCALAR, -1, 1, 3},
    {IR_OP_DROPOUT, -1, 1, 0.3},     {IR_OP_ABS, -1, 1, 0},
};

START_TEST(test_unary) {
  G g;
  g_init(&g, 100 + (uint64_t)_i);
  IrValue *x = g_param_in(&g, "x", SHP(3, 5, 7), unary[_i].lo, unary[_i].hi);
  IrAttrs a = {0};
  if (unary[_i].op == IR_OP_DROPOUT) {
    ir_attrs_set_float(&a, IR_ATTR_P, unary[_i].value);
    ir_attrs_set_int(&a, IR_ATTR_SEED, 7);
  } else if (ir_ops[unary[_i].op].req_attrs) {
    ir_attrs_set_float(&a, IR_ATTR_VALUE, unary[_i].value);
  }
  g_loss(&g, g_op(&g, unary[_i].op, &x, 1, &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_cast) { /* f32 -> bf16 -> f32 */
  G g;
  g_init(&g, 8);
  IrValue *x = g_param(&g, "x", SHP(3, 5));
  IrAttrs a = {0};
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_BF16);
  IrValue *y = g_op(&g, IR_OP_CAST, &x, 1, &a);
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_F32);
  g_loss(&g, g_op(&g, IR_OP_CAST, &y, 1, &a));
  run(&g);
  g_free(&g);
}
END_TEST

/* ---- contractions ---- */

START_TEST(test_matmul) {
  G g;
  g_init(&g, 9);
  IrValue *a = g_param(&g, "a", SHP(2, 3, 5, 7)), *b = g_param(&g, "b", SHP(7, 4));
  g_loss(&g, g_op(&g, IR_OP_MATMUL, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_matmul_batch_broadcast) {
  G g;
  g_init(&g, 10);
  IrValue *a = g_param(&g, "a", SHP(3, 5, 7)), *b = g_param(&g, "b", SHP(2, 1, 7, 4));
  IrValue *y = g_op(&g, IR_OP_MATMUL, VS(a, b), NULL);
  ck_assert_int_eq(y->shape.rank, 4);
  g_loss(&g, y);
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_linear) {
  G g;
  g_init(&g, 11);
  IrValue *x = g_param(&g, "x", SHP(3, 5, 7)), *w = g_param(&g, "w", SHP(4, 7));
  g_loss(&g, g_op(&g, IR_OP_LINEAR, VS(x, w), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

static void conv_attrs(IrAttrs *a, const int64_t *stride, const int64_t *pad, int n) {
  memset(a, 0, sizeof *a);
  ir_attrs_set_ints(a, IR_ATTR_STRIDE, stride, n);
  ir_attrs_set_ints(a, IR_ATTR_PADDING, pad, n);
}

START_TEST(test_conv2d) {
  G g;
  g_init(&g, 12);
  IrValue *x = g_param(&g, "x", SHP(2, 3, 7, 6)), *w = g_param(&g, "w", SHP(4, 3, 3, 2)),
          *b = g_param(&g, "b", SHP(4));
  IrAttrs a;
  conv_attrs(&a, (int64_t[]){2, 1}, (int64_t[]){1, 0}, 2);
  g_loss(&g, g_op(&g, IR_OP_CONV2D, VS(x, w, b), &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_conv2d_no_bias) {
  G g;
  g_init(&g, 13);
  IrValue *x = g_param(&g, "x", SHP(1, 2, 5, 5)), *w = g_param(&g, "w", SHP(3, 2, 3, 3));
  IrAttrs a;
  conv_attrs(&a, (int64_t[]){2, 2}, (int64_t[]){1, 1}, 2);
  g_loss(&g, g_op(&g, IR_OP_CONV2D, VS(x, w), &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_conv3d) {
  G g;
  g_init(&g, 14);
  IrValue *x = g_param(&g, "x", SHP(1, 2, 5, 4, 6)), *w = g_param(&g, "w", SHP(3, 2, 2, 3, 2)),
          *b = g_param(&g, "b", SHP(3));
  IrAttrs a;
  conv_attrs(&a, (int64_t[]){1, 2, 1}, (int64_t[]){1, 0, 1}, 3);
  g_loss(&g, g_op(&g, IR_OP_CONV3D, VS(x, w, b), &a));
  run(&g);
  g_free(&g);
}
END_TEST

/* ---- normalisation ---- */

static IrAttrs eps_attrs(double eps, int groups) {
  IrAttrs a = {0};
  ir_attrs_set_float(&a, IR_ATTR_EPS, eps);
  if (groups) ir_attrs_set_int(&a, IR_ATTR_GROUPS, groups);
  return a;
}

START_TEST(test_layer_norm) {
  G g;
  g_init(&g, 15);
  IrValue *x = g_param(&g, "x", SHP(3, 5, 7)), *w = g_param(&g, "w", SHP(7)),
          *b = g_param(&g, "b", SHP(7));
  IrAttrs a = eps_attrs(1e-5, 0);
  IrNode *n = g_node(&g, IR_OP_LAYER_NORM, VS(x, w, b), &a);
  ck_assert_int_eq(n->nout, 3);
  ck_assert_int_eq(n->out[1]->shape.rank, 1);
  ck_assert_int_eq(n->out[1]->shape.d[0], 15);
  g_loss(&g, n->out[0]);
  run(&g);
  g_free(&g);
}
END_TEST

/* over dim 1 of [B, C, T, H] (layer_norm {axis = 1}: WF-VAE's channel norm) */
START_TEST(test_layer_norm_axis) {
  G g;
  g_init(&g, 18);
  IrValue *x = g_param(&g, "x", SHP(2, 5, 3, 4)), *w = g_param(&g, "w", SHP(5)),
          *b = g_param(&g, "b", SHP(5));
  IrAttrs a = eps_attrs(1e-5, 0);
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  IrNode *n = g_node(&g, IR_OP_LAYER_NORM, VS(x, w, b), &a);
  ck_assert_int_eq(n->out[1]->shape.d[0], 24);
  g_loss(&g, n->out[0]);
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_layer_norm_plain) {
  G g;
  g_init(&g, 16);
  IrValue *x = g_param(&g, "x", SHP(3, 5, 7));
  IrAttrs a = eps_attrs(1e-5, 0);
  g_loss(&g, g_op(&g, IR_OP_LAYER_NORM, &x, 1, &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_rms_norm) {
  G g;
  g_init(&g, 17);
  IrValue *x = g_param(&g, "x", SHP(3, 5, 7)), *w = g_param(&g, "w", SHP(7));
  IrAttrs a = eps_attrs(1e-6, 0);
  g_loss(&g, g_op(&g, IR_OP_RMS_NORM, VS(x, w), &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_rms_norm_plain) {
  G g;
  g_init(&g, 18);
  IrValue *x = g_param(&g, "x", SHP(5, 7));
  IrAttrs a = eps_attrs(1e-6, 0);
  g_loss(&g, g_op(&g, IR_OP_RMS_NORM, &x, 1, &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_group_norm) {
  G g;
  g_init(&g, 19);
  IrValue *x = g_param(&g, "x", SHP(2, 6, 5, 3)), *w = g_param(&g, "w", SHP(6)),
          *b = g_param(&g, "b", SHP(6));
  IrAttrs a = eps_attrs(1e-5, 3);
  IrNode *n = g_node(&g, IR_OP_GROUP_NORM, VS(x, w, b), &a);
  ck_assert_int_eq(n->out[2]->shape.d[0], 6); /* B * G */
  g_loss(&g, n->out[0]);
  run(&g);
  g_free(&g);
}
END_TEST

static void softmax_case(IrOp op, int axis, uint64_t seed) {
  G g;
  g_init(&g, seed);
  IrValue *x = g_param_in(&g, "x", SHP(3, 5, 7), -2, 2);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, axis);
  g_loss(&g, g_op(&g, op, &x, 1, &a));
  run(&g);
  g_free(&g);
}

START_TEST(test_softmax) {
  softmax_case(IR_OP_SOFTMAX, 1, 20);
}
END_TEST
START_TEST(test_log_softmax) {
  softmax_case(IR_OP_LOG_SOFTMAX, -1, 21);
}
END_TEST

/* ---- reductions and layout ---- */

static void reduce_case(IrOp op, const int64_t *axes, int n, bool keep, uint64_t seed) {
  G g;
  g_init(&g, seed);
  IrValue *x = g_param(&g, "x", SHP(3, 5, 7));
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_AXES, axes, n);
  if (keep) ir_attrs_set_bool(&a, IR_ATTR_KEEPDIM, true);
  g_loss(&g, g_op(&g, op, &x, 1, &a));
  run(&g);
  g_free(&g);
}

START_TEST(test_sum) {
  reduce_case(IR_OP_SUM, INTS(0, 2), false, 22);
}
END_TEST
START_TEST(test_sum_keepdim) {
  reduce_case(IR_OP_SUM, INTS(1), true, 23);
}
END_TEST
START_TEST(test_mean) {
  reduce_case(IR_OP_MEAN, INTS(2), false, 24);
}
END_TEST
START_TEST(test_mean_keepdim) {
  reduce_case(IR_OP_MEAN, INTS(0, 1), true, 25);
}
END_TEST

START_TEST(test_reshape_transpose) {
  G g;
  g_init(&g, 26);
  IrValue *x = g_param(&g, "x", SHP(3, 5, 7));
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(7, -1));
  IrValue *y = g_op(&g, IR_OP_RESHAPE, &x, 1, &a);
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, INTS(1, 0));
  y = g_op(&g, IR_OP_TRANSPOSE, &y, 1, &a);
  IrValue *z = g_param(&g, "z", SHP(3, 5, 7));
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, INTS(2, 0, 1));
  z = g_op(&g, IR_OP_TRANSPOSE, &z, 1, &a);
  a = (IrAttrs){0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(15, 7));
  z = g_op(&g, IR_OP_RESHAPE, &z, 1, &a);
  g_loss(&g, g_op(&g, IR_OP_ADD, VS(y, z), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_slice) {
  G g;
  g_init(&g, 27);
  IrValue *x = g_param(&g, "x", SHP(3, 7, 5));
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 1);
  ir_attrs_set_int(&a, IR_ATTR_START, 1);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 6);
  ir_attrs_set_int(&a, IR_ATTR_STEP, 2);
  IrValue *y = g_op(&g, IR_OP_SLICE, &x, 1, &a);
  ck_assert_int_eq(y->shape.d[1], 3);
  a = (IrAttrs){0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, -1);
  ir_attrs_set_int(&a, IR_ATTR_START, 0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, 3);
  g_loss(&g, g_op(&g, IR_OP_SLICE, &y, 1, &a));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_concat) {
  G g;
  g_init(&g, 28);
  IrValue *a = g_param(&g, "a", SHP(3, 2, 7)), *b = g_param(&g, "b", SHP(3, 5, 7)),
          *c = g_param(&g, "c", SHP(3, 1, 7));
  IrAttrs at = {0};
  ir_attrs_set_int(&at, IR_ATTR_AXIS, 1);
  g_loss(&g, g_op(&g, IR_OP_CONCAT, VS(a, b, c, a), &at));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_expand) {
  G g;
  g_init(&g, 29);
  IrValue *x = g_param(&g, "x", SHP(1, 5, 1)), *y = g_param(&g, "y", SHP(5, 1));
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, INTS(3, 5, 7));
  IrValue *ex = g_op(&g, IR_OP_EXPAND, &x, 1, &a), *ey = g_op(&g, IR_OP_EXPAND, &y, 1, &a);
  g_loss(&g, g_op(&g, IR_OP_MUL, VS(ex, ey), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

/* ---- transformer pieces ---- */

START_TEST(test_embedding) {
  G g;
  g_init(&g, 30);
  static const int ids[15] = {0, 3, 6, 3, 1, 1, 5, 2, 0, 6, 4, 4, 4, 2, 5};
  IrValue *i = g_ints(&g, "ids", SHP(3, 5), ids), *t = g_param(&g, "table", SHP(7, 6));
  g_loss(&g, g_op(&g, IR_OP_EMBEDDING, VS(i, t), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

/* GPT-2's tied head: one table read by embedding and by linear, so its
 * cotangents from embedding_grad and linear_grad_w accumulate. */
START_TEST(test_tied_embedding) {
  G g;
  g_init(&g, 37);
  static const int ids[10] = {0, 3, 6, 3, 1, 1, 5, 2, 0, 6};
  IrValue *i = g_ints(&g, "ids", SHP(2, 5), ids), *t = g_param(&g, "table", SHP(7, 6));
  IrValue *x = g_op(&g, IR_OP_EMBEDDING, VS(i, t), NULL);
  x = g_op(&g, IR_OP_TANH, &x, 1, NULL);
  g_loss(&g, g_op(&g, IR_OP_LINEAR, VS(x, t), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_rope) {
  G g;
  g_init(&g, 31);
  IrValue *x = g_param(&g, "x", SHP(2, 5, 3, 6));
  IrAttrs a = {0};
  ir_attrs_set_float(&a, IR_ATTR_THETA, 100);
  ir_attrs_set_int(&a, IR_ATTR_OFFSET, 2);
  g_loss(&g, g_op(&g, IR_OP_ROPE, &x, 1, &a));
  run(&g);
  g_free(&g);
}
END_TEST

/* rope with a start position per row (incremental decoding) */
START_TEST(test_rope_pos) {
  G g;
  g_init(&g, 38);
  static const int pos[2] = {3, 0};
  IrValue *x = g_param(&g, "x", SHP(2, 4, 3, 6)), *p = g_ints(&g, "pos", SHP(2), pos);
  IrAttrs a = {0};
  ir_attrs_set_float(&a, IR_ATTR_THETA, 100);
  g_loss(&g, g_op(&g, IR_OP_ROPE, VS(x, p), &a));
  run(&g);
  g_free(&g);
}
END_TEST

/* image rows placed at the <img> tokens (id 3), in order, of src's 3 a row */
static void place_case(uint64_t seed, const int *ids) {
  G g;
  g_init(&g, seed);
  IrValue *x = g_param(&g, "x", SHP(2, 6, 5)), *src = g_param(&g, "src", SHP(2, 3, 5)),
          *i = g_ints(&g, "ids", SHP(2, 6), ids);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_TOKEN, 3);
  IrValue *y = g_op(&g, IR_OP_PLACE, VS(x, src, i), &a);
  g_loss(&g, g_op(&g, IR_OP_TANH, &y, 1, NULL));
  run(&g);
  g_free(&g);
}

/* three tokens a row: every row placed */
START_TEST(test_place) {
  static const int ids[12] = {1, 3, 3, 3, 7, 2, 3, 5, 3, 6, 3, 0};
  place_case(39, ids);
}
END_TEST

/* fewer tokens than rows (a sample with fewer tiles than the most: 1 and 0
 * of 3): the first rows placed, the others get no gradient */
START_TEST(test_place_fewer) {
  static const int ids[12] = {1, 4, 3, 4, 7, 2, 5, 5, 6, 6, 0, 0};
  place_case(40, ids);
}
END_TEST

/* the wavelet transforms: each one's gradient is the other's forward */
static void haar_case(uint64_t seed, IrOp op, IrShape s) {
  G g;
  g_init(&g, seed);
  IrValue *x = g_param(&g, "x", s);
  g_loss(&g, g_op(&g, op, &x, 1, NULL));
  run(&g);
  g_free(&g);
}

START_TEST(test_haar2d) {
  haar_case(60, IR_OP_HAAR2D, SHP(2, 3, 4, 6));
}
END_TEST

START_TEST(test_ihaar2d) {
  haar_case(61, IR_OP_IHAAR2D, SHP(2, 8, 3, 2));
}
END_TEST

START_TEST(test_haar3d) {
  haar_case(62, IR_OP_HAAR3D, SHP(1, 3, 4, 2, 6));
}
END_TEST

START_TEST(test_ihaar3d) {
  haar_case(63, IR_OP_IHAAR3D, SHP(2, 16, 1, 3, 2));
}
END_TEST

static void attention_case(uint64_t seed, bool causal, int64_t T, int64_t S, int64_t D,
                           int64_t Dv) {
  G g;
  g_init(&g, seed);
  IrValue *q = g_param(&g, "q", SHP(2, T, 6, D)), *k = g_param(&g, "k", SHP(2, S, 2, D)),
          *v = g_param(&g, "v", SHP(2, S, 2, Dv));
  IrAttrs a = {0};
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, causal);
  ir_attrs_set_float(&a, IR_ATTR_SCALE, 1 / sqrt((double)D));
  IrNode *n = g_node(&g, IR_OP_ATTENTION, VS(q, k, v), &a);
  ck_assert_int_eq(n->nout, 2);
  ck_assert_int_eq(n->out[1]->shape.d[1], 6); /* lse [B, H, T] */
  ck_assert_int_eq(n->out[1]->shape.d[2], T);
  g_loss(&g, n->out[0]);
  run(&g);
  g_free(&g);
}

START_TEST(test_attention_causal) {
  attention_case(32, true, 5, 5, 4, 4);
}
END_TEST
START_TEST(test_attention_cross) {
  attention_case(33, false, 5, 7, 4, 3);
}
END_TEST
START_TEST(test_attention_causal_longer_keys) {
  attention_case(34, true, 5, 7, 4, 4);
}
END_TEST

/* attention with a key mask f32[B, S] (an input: data, no gradient): the
 * dropped keys get neither probability nor gradient; with causal, query 0 of
 * row 1 sees only key 0, which is dropped (out 0). */
static void attention_mask_case(uint64_t seed, bool causal, int64_t T, int64_t S) {
  G g;
  g_init(&g, seed);
  IrValue *q = g_param(&g, "q", SHP(2, T, 4, 3)), *k = g_param(&g, "k", SHP(2, S, 2, 3)),
          *v = g_param(&g, "v", SHP(2, S, 2, 3));
  IrShape ms = SHP(2, S);
  IrValue *mask = ir_add_input(g.m, g.f, "mask", IR_F32, &ms, (SrcLoc){0});
  IrTensor *mt = ir_store_put(&g.st, mask);
  for (int64_t s = 0; s < S; s++) {
    mt->d[s] = s % 3 != 1;     /* row 0: keys 1, 4, ... dropped */
    mt->d[S + s] = s >= S - 2; /* row 1: only the last two kept */
  }
  IrAttrs a = {0};
  ir_attrs_set_bool(&a, IR_ATTR_CAUSAL, causal);
  ir_attrs_set_float(&a, IR_ATTR_SCALE, 0.8);
  g_loss(&g, g_op(&g, IR_OP_ATTENTION, VS(q, k, v, mask), &a));
  run(&g);
  IrFunc *t = ir_module_func(g.m, "train");
  bool masked_grad = false;
  for (int i = 0; i < t->nodes.len; i++) {
    const IrNode *n = t->nodes.items[i];
    if (n->op == IR_OP_ATTENTION_GRAD) masked_grad = n->nin == 7;
  }
  ck_assert_msg(masked_grad, "attention_grad does not take the key mask");
  g_free(&g);
}

START_TEST(test_attention_mask) {
  attention_mask_case(36, false, 4, 7);
}
END_TEST
START_TEST(test_attention_mask_causal) {
  attention_mask_case(37, true, 5, 5);
}
END_TEST

START_TEST(test_cross_entropy) {
  G g;
  g_init(&g, 35);
  static const int labels[15] = {0, 6, -100, 3, 2, 1, 1, 5, -100, 4, 0, 2, 6, 3, 3};
  IrValue *x = g_param_in(&g, "logits", SHP(3, 5, 7), -3, 3),
          *l = g_ints(&g, "labels", SHP(3, 5), labels);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_IGNORE, -100);
  IrNode *n = g_node(&g, IR_OP_CROSS_ENTROPY, VS(x, l), &a);
  ck_assert_int_eq(n->out[1]->shape.d[0], 15);
  g_loss(&g, n->out[0]);
  run(&g);
  g_free(&g);
}
END_TEST

START_TEST(test_mse) {
  G g;
  g_init(&g, 36);
  IrValue *a = g_param(&g, "a", SHP(3, 5, 7)), *b = g_param(&g, "b", SHP(3, 5, 7));
  g_loss(&g, g_op(&g, IR_OP_MSE, VS(a, b), NULL));
  run(&g);
  g_free(&g);
}
END_TEST

/* detach: a reaches the loss only through detach(a), so it gets no
 * gradient; b's gradient (the detached value) against finite differences
 * with a held fixed */
START_TEST(test_detach) {
  G g;
  g_init(&g, 37);
  IrValue *a = g_param(&g, "a", SHP(3, 5)), *b = g_param(&g, "b", SHP(3, 5));
  IrValue *d = g_op(&g, IR_OP_DETACH, VS(a), NULL);
  g_loss(&g, g_op(&g, IR_OP_MUL, VS(d, b), NULL));
  g_autodiff(&g, NULL);
  IrFunc *t = ir_module_func(g.m, "train");
  ck_assert_ptr_null(grad_of(t, a));
  ck_assert_ptr_nonnull(grad_of(t, b));
  assert_roundtrip(&g);
  a->frozen = true; /* held fixed by the finite differences */
  g_fill(&g);
  g_check(&g, 0);
  ck_assert_int_gt(g.checked, 0);
  g_free(&g);
}
END_TEST

/* The tests registered in grad_suite, recorded as they are added (a test
 * written but not registered covers nothing); the loop test over unary[]
 * with its index range. */
static const char *registered[128];
static int nregistered, unary_lo, unary_hi;
#define ADD(tc, fn)                                                                                \
  do {                                                                                             \
    tcase_add_test(tc, fn);                                                                        \
    if (nregistered < 128) registered[nregistered++] = #fn;                                        \
  } while (0)

/* Whether `name` ("test_attention_causal") names op `op`: the op's name is a
 * run of whole '_'-separated words of the rest ("attention"; "transpose" in
 * "reshape_transpose"; not "mul" in "mul_scalar"... of another op's test). */
static bool names_op(const char *name, const char *op) {
  const char *s = name + strlen("test_");
  size_t n = strlen(op);
  for (const char *p = s; (p = strstr(p, op)) != NULL; p++)
    if ((p == s || p[-1] == '_') && (p[n] == 0 || p[n] == '_')) return true;
  return false;
}

/* Every GRAD op of the table has a finite-difference test that is
 * registered: one named after it (test_<op>, test_<op>_<case>, or a test of
 * several ops naming each), or an entry of unary[] inside the registered
 * loop range of test_unary. */
START_TEST(test_every_rule_covered) {
  ck_assert_int_gt(nregistered, 10);
  ck_assert_int_lt(nregistered, 128);
  for (int op = 0; op < IR_OP_COUNT; op++) {
    if (!ir_ops[op].grad) continue;
    /* placement changes (collectives, reshard) are the identity on global
     * tensors: their rules are checked in check_shard.c */
    if (ir_ops[op].shard == IR_SHR_COLLECTIVE || ir_ops[op].shard == IR_SHR_RESHARD) continue;
    bool found = false;
    for (int i = 0; i < nregistered && !found; i++)
      found = strcmp(registered[i], "test_every_rule_covered") != 0 &&
              names_op(registered[i], ir_ops[op].name);
    for (int i = unary_lo; i < unary_hi && !found; i++) found = unary[i].op == (IrOp)op;
    ck_assert_msg(found, "the gradient rule of %s has no registered finite-difference test",
                  ir_ops[op].name);
  }
}
END_TEST

static Suite *grad_suite(void) {
  Suite *s = suite_create("grad");
  TCase *tc = tcase_create("binary");
  ADD(tc, test_add);
  ADD(tc, test_add_same_shape);
  ADD(tc, test_sub);
  ADD(tc, test_mul);
  ADD(tc, test_mul_self);
  ADD(tc, test_div);
  ADD(tc, test_pow);
  suite_add_tcase(s, tc);
  tc = tcase_create("unary");
  unary_lo = 0;
  unary_hi = (int)(sizeof unary / sizeof unary[0]);
  tcase_add_loop_test(tc, test_unary, unary_lo, unary_hi);
  ADD(tc, test_cast);
  suite_add_tcase(s, tc);
  tc = tcase_create("contractions");
  tcase_set_timeout(tc, 60);
  ADD(tc, test_matmul);
  ADD(tc, test_matmul_batch_broadcast);
  ADD(tc, test_linear);
  ADD(tc, test_conv2d);
  ADD(tc, test_conv2d_no_bias);
  ADD(tc, test_conv3d);
  ADD(tc, test_haar2d);
  ADD(tc, test_ihaar2d);
  ADD(tc, test_haar3d);
  ADD(tc, test_ihaar3d);
  suite_add_tcase(s, tc);
  tc = tcase_create("norms");
  ADD(tc, test_layer_norm);
  ADD(tc, test_layer_norm_plain);
  ADD(tc, test_layer_norm_axis);
  ADD(tc, test_rms_norm);
  ADD(tc, test_rms_norm_plain);
  ADD(tc, test_group_norm);
  ADD(tc, test_softmax);
  ADD(tc, test_log_softmax);
  suite_add_tcase(s, tc);
  tc = tcase_create("layout");
  ADD(tc, test_sum);
  ADD(tc, test_sum_keepdim);
  ADD(tc, test_mean);
  ADD(tc, test_mean_keepdim);
  ADD(tc, test_reshape_transpose);
  ADD(tc, test_slice);
  ADD(tc, test_concat);
  ADD(tc, test_expand);
  suite_add_tcase(s, tc);
  tc = tcase_create("transformer");
  tcase_set_timeout(tc, 60);
  ADD(tc, test_embedding);
  ADD(tc, test_tied_embedding);
  ADD(tc, test_rope);
  ADD(tc, test_rope_pos);
  ADD(tc, test_place);
  ADD(tc, test_place_fewer);
  ADD(tc, test_attention_causal);
  ADD(tc, test_attention_mask);
  ADD(tc, test_attention_mask_causal);
  ADD(tc, test_attention_cross);
  ADD(tc, test_attention_causal_longer_keys);
  ADD(tc, test_cross_entropy);
  ADD(tc, test_mse);
  ADD(tc, test_detach);
  ADD(tc, test_every_rule_covered);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(grad_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
