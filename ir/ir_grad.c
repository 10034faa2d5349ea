/* Gradient rules (vector-Jacobian products), one per GRAD op of ops.def.
 *
 * A rule reads the forward node (operands and results as they are in
 * @train), the cotangents of its results (cx->dout, NULL for zero) and which
 * operands need one (cx->need), and emits ordinary IR ops through cx->b to
 * set cx->din[i]. Broadcasting operands get their cotangent summed back with
 * sum_to. Saved statistics (the extra results of the norms, attention and
 * cross_entropy) are not differentiable: a cotangent reaching one is an
 * error. A rule fails only on an internal inconsistency (ir_build refusing
 * what the rule built), with the message in cx->err. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

/* ---- emitting ---- */

static IrNode *node(IrGradCtx *cx, IrOp op, IrValue **in, int nin, const IrAttrs *a) {
  char err[400];
  IrAttrs none = {0};
  IrNode *n = ir_build(cx->b, op, in, nin, a ? a : &none, cx->node->loc, err, sizeof err, NULL);
  if (!n && cx->err[0] == 0)
    snprintf(cx->err, cx->errlen, "gradient of %s: %s", ir_ops[cx->node->op].name, err);
  return n;
}

static IrValue *emit(IrGradCtx *cx, IrOp op, IrValue **in, int nin, const IrAttrs *a) {
  IrNode *n = node(cx, op, in, nin, a);
  return n ? n->out[0] : NULL;
}

static IrValue *un(IrGradCtx *cx, IrOp op, IrValue *x) {
  return x ? emit(cx, op, &x, 1, NULL) : NULL;
}

static IrValue *bin(IrGradCtx *cx, IrOp op, IrValue *a, IrValue *b) {
  if (!a || !b) return NULL;
  IrValue *in[2] = {a, b};
  return emit(cx, op, in, 2, NULL);
}

static IrValue *scal(IrGradCtx *cx, IrOp op, IrValue *x, double c) {
  if (!x) return NULL;
  IrAttrs a = {0};
  ir_attrs_set_float(&a, IR_ATTR_VALUE, c);
  return emit(cx, op, &x, 1, &a);
}

static IrValue *with_shape(IrGradCtx *cx, IrOp op, IrValue *x, const IrShape *s) {
  if (!x) return NULL;
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, s->d, s->rank);
  return emit(cx, op, &x, 1, &a);
}

/* x summed down to the shape of `like` (the inverse of broadcasting) */
static IrValue *sum_to(IrGradCtx *cx, IrValue *x, const IrValue *like) {
  if (!x || ir_shape_eq(&x->shape, &like->shape)) return x;
  return with_shape(cx, IR_OP_SUM_TO, x, &like->shape);
}

/* copies attribute `id` of the forward node into a */
static void copy_attr(IrAttrs *a, const IrNode *n, IrAttrId id) {
  if (!ir_attrs_has(&n->attrs, id)) return;
  a->set |= 1ull << id;
  a->v[id] = n->attrs.v[id];
}

static IrValue *in(const IrGradCtx *cx, int i) {
  return cx->node->in[i];
}
static IrValue *out(const IrGradCtx *cx, int j) {
  return cx->node->out[j];
}

/* Only result 0 is differentiable. */
static bool only_first(IrGradCtx *cx) {
  for (int j = 1; j < cx->node->nout; j++)
    if (cx->dout[j]) {
      snprintf(cx->err, cx->errlen, "the saved statistics (result %d) of %s are not differentiable",
               j, ir_ops[cx->node->op].name);
      return false;
    }
  return true;
}

/* Sets din[i] when needed and checks that every needed cotangent that the
 * rule computed was built. */
#define SET(i, expr)                                                                               \
  do {                                                                                             \
    if (cx->need[i]) {                                                                             \
      cx->din[i] = (expr);                                                                         \
      if (!cx->din[i] && cx->err[0]) return false;                                                 \
    }                                                                                              \
  } while (0)

#define DY (cx->dout[0])

/* ---- elementwise binary ---- */

bool ir_grad_ADD(IrGradCtx *cx) {
  SET(0, sum_to(cx, DY, in(cx, 0)));
  SET(1, sum_to(cx, DY, in(cx, 1)));
  return true;
}

bool ir_grad_SUB(IrGradCtx *cx) {
  SET(0, sum_to(cx, DY, in(cx, 0)));
  SET(1, un(cx, IR_OP_NEG, sum_to(cx, DY, in(cx, 1))));
  return true;
}

bool ir_grad_MUL(IrGradCtx *cx) {
  SET(0, sum_to(cx, bin(cx, IR_OP_MUL, DY, in(cx, 1)), in(cx, 0)));
  SET(1, sum_to(cx, bin(cx, IR_OP_MUL, DY, in(cx, 0)), in(cx, 1)));
  return true;
}

/* y = a / b: da = dy / b, db = -dy * y / b */
bool ir_grad_DIV(IrGradCtx *cx) {
  SET(0, sum_to(cx, bin(cx, IR_OP_DIV, DY, in(cx, 1)), in(cx, 0)));
  SET(1,
      un(cx, IR_OP_NEG,
         sum_to(cx, bin(cx, IR_OP_MUL, DY, bin(cx, IR_OP_DIV, out(cx, 0), in(cx, 1))), in(cx, 1))));
  return true;
}

/* y = a ** b: da = dy * b * a ** (b - 1), db = dy * y * log(a) */
bool ir_grad_POW(IrGradCtx *cx) {
  IrValue *a = in(cx, 0), *b = in(cx, 1);
  SET(0,
      sum_to(cx,
             bin(cx, IR_OP_MUL, DY,
                 bin(cx, IR_OP_MUL, b, bin(cx, IR_OP_POW, a, scal(cx, IR_OP_ADD_SCALAR, b, -1)))),
             a));
  SET(1,
      sum_to(cx, bin(cx, IR_OP_MUL, DY, bin(cx, IR_OP_MUL, out(cx, 0), un(cx, IR_OP_LOG, a))), b));
  return true;
}

/* ---- elementwise with a constant ---- */

static double value(const IrGradCtx *cx) {
  return cx->node->attrs.v[IR_ATTR_VALUE].f;
}

bool ir_grad_ADD_SCALAR(IrGradCtx *cx) {
  SET(0, DY);
  return true;
}

bool ir_grad_MUL_SCALAR(IrGradCtx *cx) {
  SET(0, scal(cx, IR_OP_MUL_SCALAR, DY, value(cx)));
  return true;
}

/* y = x ** c: dx = dy * c * x ** (c - 1) */
bool ir_grad_POW_SCALAR(IrGradCtx *cx) {
  double c = value(cx);
  if (c == 0) return true; /* constant 1 */
  if (c == 1) {
    SET(0, DY);
  } else if (c == 2) {
    SET(0, bin(cx, IR_OP_MUL, DY, scal(cx, IR_OP_MUL_SCALAR, in(cx, 0), 2)));
  } else {
    SET(0, bin(cx, IR_OP_MUL, DY,
               scal(cx, IR_OP_MUL_SCALAR, scal(cx, IR_OP_POW_SCALAR, in(cx, 0), c - 1), c)));
  }
  return true;
}

/* ---- elementwise unary ---- */

bool ir_grad_NEG(IrGradCtx *cx) {
  SET(0, un(cx, IR_OP_NEG, DY));
  return true;
}

bool ir_grad_EXP(IrGradCtx *cx) {
  SET(0, bin(cx, IR_OP_MUL, DY, out(cx, 0)));
  return true;
}

bool ir_grad_LOG(IrGradCtx *cx) {
  SET(0, bin(cx, IR_OP_DIV, DY, in(cx, 0)));
  return true;
}

/* y = sqrt(x): dx = 0.5 dy / y */
bool ir_grad_SQRT(IrGradCtx *cx) {
  SET(0, bin(cx, IR_OP_DIV, scal(cx, IR_OP_MUL_SCALAR, DY, 0.5), out(cx, 0)));
  return true;
}

/* y = x ** -1/2: dx = -0.5 dy y^3 */
bool ir_grad_RSQRT(IrGradCtx *cx) {
  SET(0, bin(cx, IR_OP_MUL, DY,
             scal(cx, IR_OP_MUL_SCALAR, scal(cx, IR_OP_POW_SCALAR, out(cx, 0), 3), -0.5)));
  return true;
}

static bool act(IrGradCtx *cx, IrOp grad_op) {
  SET(0, bin(cx, grad_op, DY, in(cx, 0)));
  return true;
}

/* an activation: its ACT_grad op (ops.def: GRAD_VIA(ACT, ...)) */
bool ir_grad_ACT(IrGradCtx *cx) {
  return act(cx, ir_ops[cx->node->op].grad_op);
}

/* the cotangent goes back to the operand's dtype; integer operands get none */
bool ir_grad_CAST(IrGradCtx *cx) {
  if (!ir_dtype_is_float(in(cx, 0)->dtype)) return true;
  if (DY->dtype == in(cx, 0)->dtype) {
    SET(0, DY);
    return true;
  }
  IrAttrs a = {0};
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, in(cx, 0)->dtype);
  IrValue *dy = DY;
  SET(0, emit(cx, IR_OP_CAST, &dy, 1, &a));
  return true;
}

/* detach: no cotangent for the operand (the gradient stops here) */
bool ir_grad_DETACH(IrGradCtx *cx) {
  (void)cx;
  return true;
}

/* the same mask: dropout(dy) with the node's p and seed (the mask is a
 * function of seed, step and element index) */
bool ir_grad_DROPOUT(IrGradCtx *cx) {
  IrValue *dy = DY;
  SET(0, emit(cx, IR_OP_DROPOUT, &dy, 1, &cx->node->attrs));
  return true;
}

/* ---- contractions ---- */

/* x with its last two dims swapped */
static IrValue *swap_last(IrGradCtx *cx, IrValue *x) {
  int r = x->shape.rank;
  int64_t perm[IR_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, perm, r);
  return emit(cx, IR_OP_TRANSPOSE, &x, 1, &a);
}

/* y = a @ b (batch dims broadcast): da = dy @ b^T, db = a^T @ dy, summed
 * over broadcast batch dims */
bool ir_grad_MATMUL(IrGradCtx *cx) {
  SET(0, sum_to(cx, bin(cx, IR_OP_MATMUL, DY, swap_last(cx, in(cx, 1))), in(cx, 0)));
  SET(1, sum_to(cx, bin(cx, IR_OP_MATMUL, swap_last(cx, in(cx, 0)), DY), in(cx, 1)));
  return true;
}

bool ir_grad_LINEAR(IrGradCtx *cx) {
  SET(0, bin(cx, IR_OP_LINEAR_GRAD_X, DY, in(cx, 1)));
  SET(1, bin(cx, IR_OP_LINEAR_GRAD_W, DY, in(cx, 0)));
  return true;
}

static bool conv(IrGradCtx *cx, IrOp gx, IrOp gw) {
  IrValue *pair[2];
  IrAttrs a = {0};
  copy_attr(&a, cx->node, IR_ATTR_STRIDE);
  copy_attr(&a, cx->node, IR_ATTR_PADDING);
  if (cx->need[0]) {
    ir_attrs_set_ints(&a, IR_ATTR_SHAPE, in(cx, 0)->shape.d, in(cx, 0)->shape.rank);
    pair[0] = DY, pair[1] = in(cx, 1);
    SET(0, emit(cx, gx, pair, 2, &a));
  }
  if (cx->need[1]) {
    ir_attrs_set_ints(&a, IR_ATTR_SHAPE, in(cx, 1)->shape.d, in(cx, 1)->shape.rank);
    pair[0] = DY, pair[1] = in(cx, 0);
    SET(1, emit(cx, gw, pair, 2, &a));
  }
  if (cx->node->nin == 3 && cx->need[2]) { /* bias: sum over batch and space */
    int64_t axes[IR_MAX_RANK];
    int n = 0;
    for (int i = 0; i < DY->shape.rank; i++)
      if (i != 1) axes[n++] = i;
    IrAttrs s = {0};
    ir_attrs_set_ints(&s, IR_ATTR_AXES, axes, n);
    IrValue *dy = DY;
    SET(2, emit(cx, IR_OP_SUM, &dy, 1, &s));
  }
  return true;
}

bool ir_grad_CONV2D(IrGradCtx *cx) {
  return conv(cx, IR_OP_CONV2D_GRAD_X, IR_OP_CONV2D_GRAD_W);
}
bool ir_grad_CONV3D(IrGradCtx *cx) {
  return conv(cx, IR_OP_CONV3D_GRAD_X, IR_OP_CONV3D_GRAD_W);
}

/* ---- normalisation ---- */

/* op(dy, x, stats (results 1..nstats), w?) {attrs} -> dx, dw, (db) */
static bool norm(IrGradCtx *cx, IrOp op, int nstats) {
  if (!only_first(cx)) return false;
  IrValue *ops[5];
  int n = 0;
  ops[n++] = DY;
  ops[n++] = in(cx, 0);
  for (int j = 1; j <= nstats; j++) ops[n++] = out(cx, j);
  if (cx->node->nin >= 2) ops[n++] = in(cx, 1);
  IrAttrs a = {0};
  copy_attr(&a, cx->node, IR_ATTR_EPS);
  copy_attr(&a, cx->node, IR_ATTR_GROUPS);
  copy_attr(&a, cx->node, IR_ATTR_AXIS);
  IrNode *g = node(cx, op, ops, n, &a);
  if (!g) return false;
  for (int i = 0; i < cx->node->nin; i++) SET(i, g->out[i]);
  return true;
}

/* a norm with saved statistics (every result after y): its _grad op
 * (ops.def: GRAD_VIA(NORM, ...)) */
bool ir_grad_NORM(IrGradCtx *cx) {
  return norm(cx, ir_ops[cx->node->op].grad_op, ir_ops[cx->node->op].nout - 1);
}

static bool softmax_like(IrGradCtx *cx, IrOp op) {
  IrAttrs a = {0};
  copy_attr(&a, cx->node, IR_ATTR_AXIS);
  IrValue *pair[2] = {DY, out(cx, 0)};
  SET(0, emit(cx, op, pair, 2, &a));
  return true;
}

bool ir_grad_SOFTMAX(IrGradCtx *cx) {
  return softmax_like(cx, IR_OP_SOFTMAX_GRAD);
}
bool ir_grad_LOG_SOFTMAX(IrGradCtx *cx) {
  return softmax_like(cx, IR_OP_LOG_SOFTMAX_GRAD);
}

/* ---- reductions ---- */

/* dy broadcast back over the reduced axes, times `scale` */
static bool reduce(IrGradCtx *cx, bool mean) {
  const IrNode *n = cx->node;
  const IrShape *xs = &in(cx, 0)->shape;
  const IrAttrVal *ax = &n->attrs.v[IR_ATTR_AXES];
  IrShape kept = *xs; /* the result's shape with keepdim */
  int64_t count = 1;
  for (int i = 0; i < ax->nints; i++) {
    count *= xs->d[ax->ints[i]];
    kept.d[ax->ints[i]] = 1;
  }
  IrValue *dy = DY;
  if (!ir_shape_eq(&dy->shape, &kept)) dy = with_shape(cx, IR_OP_RESHAPE, dy, &kept);
  if (mean) dy = scal(cx, IR_OP_MUL_SCALAR, dy, 1.0 / (double)count);
  if (dy && !ir_shape_eq(&dy->shape, xs)) dy = with_shape(cx, IR_OP_EXPAND, dy, xs);
  SET(0, dy);
  return true;
}

bool ir_grad_SUM(IrGradCtx *cx) {
  return reduce(cx, false);
}
bool ir_grad_MEAN(IrGradCtx *cx) {
  return reduce(cx, true);
}

/* ---- layout ---- */

bool ir_grad_RESHAPE(IrGradCtx *cx) {
  SET(0, with_shape(cx, IR_OP_RESHAPE, DY, &in(cx, 0)->shape));
  return true;
}

bool ir_grad_TRANSPOSE(IrGradCtx *cx) {
  const IrAttrVal *p = &cx->node->attrs.v[IR_ATTR_PERM];
  int64_t inv[IR_MAX_RANK];
  for (int i = 0; i < p->nints; i++) inv[p->ints[i]] = i;
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_PERM, inv, p->nints);
  IrValue *dy = DY;
  SET(0, emit(cx, IR_OP_TRANSPOSE, &dy, 1, &a));
  return true;
}

bool ir_grad_SLICE(IrGradCtx *cx) {
  IrAttrs a = {0};
  copy_attr(&a, cx->node, IR_ATTR_AXIS);
  copy_attr(&a, cx->node, IR_ATTR_START);
  copy_attr(&a, cx->node, IR_ATTR_STOP);
  copy_attr(&a, cx->node, IR_ATTR_STEP);
  ir_attrs_set_int(&a, IR_ATTR_SIZE, in(cx, 0)->shape.d[cx->node->attrs.v[IR_ATTR_AXIS].i]);
  IrValue *dy = DY;
  SET(0, emit(cx, IR_OP_PAD_SLICE, &dy, 1, &a));
  return true;
}

bool ir_grad_CONCAT(IrGradCtx *cx) {
  int64_t ax = cx->node->attrs.v[IR_ATTR_AXIS].i, off = 0;
  for (int i = 0; i < cx->node->nin; i++) {
    int64_t len = in(cx, i)->shape.d[ax];
    IrAttrs a = {0};
    ir_attrs_set_int(&a, IR_ATTR_AXIS, ax);
    ir_attrs_set_int(&a, IR_ATTR_START, off);
    ir_attrs_set_int(&a, IR_ATTR_STOP, off + len);
    IrValue *dy = DY;
    SET(i, emit(cx, IR_OP_SLICE, &dy, 1, &a));
    off += len;
  }
  return true;
}

bool ir_grad_EXPAND(IrGradCtx *cx) {
  SET(0, sum_to(cx, DY, in(cx, 0)));
  return true;
}

/* ---- transformer pieces ---- */

bool ir_grad_EMBEDDING(IrGradCtx *cx) {
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_SHAPE, in(cx, 1)->shape.d, in(cx, 1)->shape.rank);
  IrValue *pair[2] = {DY, in(cx, 0)};
  SET(1, emit(cx, IR_OP_EMBEDDING_GRAD, pair, 2, &a));
  return true;
}

bool ir_grad_ROPE(IrGradCtx *cx) {
  IrValue *ops[2] = {DY, cx->node->nin > 1 ? in(cx, 1) : NULL};
  SET(0, emit(cx, IR_OP_ROPE_GRAD, ops, cx->node->nin, &cx->node->attrs));
  return true;
}

/* the transforms are orthonormal: the adjoint of each is its inverse */
bool ir_grad_HAAR(IrGradCtx *cx) {
  static const IrOp inverse[] = {[IR_OP_HAAR2D] = IR_OP_IHAAR2D,
                                 [IR_OP_IHAAR2D] = IR_OP_HAAR2D,
                                 [IR_OP_HAAR3D] = IR_OP_IHAAR3D,
                                 [IR_OP_IHAAR3D] = IR_OP_HAAR3D};
  SET(0, un(cx, inverse[cx->node->op], DY));
  return true;
}

bool ir_grad_PLACE(IrGradCtx *cx) {
  IrAttrs a = {0};
  copy_attr(&a, cx->node, IR_ATTR_TOKEN);
  copy_attr(&a, cx->node, IR_ATTR_FLAT);
  ir_attrs_set_int(&a, IR_ATTR_SIZE, in(cx, 1)->shape.d[1]);
  IrValue *ops[2] = {DY, in(cx, 2)};
  IrNode *g = node(cx, IR_OP_PLACE_GRAD, ops, 2, &a);
  if (!g) return false;
  SET(0, g->out[0]);
  SET(1, g->out[1]);
  return true;
}

bool ir_grad_ATTENTION(IrGradCtx *cx) {
  if (!only_first(cx)) return false;
  /* the key mask is data: no gradient */
  IrValue *ops[7] = {DY, in(cx, 0), in(cx, 1), in(cx, 2), out(cx, 0), out(cx, 1), NULL};
  int nops = 6;
  if (cx->node->nin > 3) ops[nops++] = in(cx, 3);
  IrNode *g = node(cx, IR_OP_ATTENTION_GRAD, ops, nops, &cx->node->attrs);
  if (!g) return false;
  for (int i = 0; i < 3; i++) SET(i, g->out[i]);
  return true;
}

/* ---- losses ---- */

bool ir_grad_CROSS_ENTROPY(IrGradCtx *cx) {
  if (!only_first(cx)) return false;
  IrValue *ops[4] = {DY, in(cx, 0), in(cx, 1), out(cx, 1)};
  SET(0, emit(cx, IR_OP_CROSS_ENTROPY_GRAD, ops, 4, &cx->node->attrs));
  return true;
}

/* loss = mean((a - b)^2): da = dloss * 2 (a - b) / N, db = -da */
bool ir_grad_MSE(IrGradCtx *cx) {
  IrValue *a = in(cx, 0), *dl = DY;
  if (dl->dtype != a->dtype) {
    IrAttrs c = {0};
    ir_attrs_set_dtype(&c, IR_ATTR_DTYPE, a->dtype);
    dl = emit(cx, IR_OP_CAST, &dl, 1, &c);
  }
  IrValue *g = bin(cx, IR_OP_MUL, bin(cx, IR_OP_SUB, a, in(cx, 1)),
                   scal(cx, IR_OP_MUL_SCALAR, dl, 2.0 / (double)ir_numel(&a->shape)));
  SET(0, g);
  SET(1, un(cx, IR_OP_NEG, g));
  return true;
}
