/* The `precision` pass: bf16 mixed precision (train { precision = bf16 },
 * --precision bf16), as PyTorch's autocast and Megatron's --bf16 do it.
 *
 * Every linear, matmul, convolution and attention whose operands are f32
 * gets them through `cast {dtype = bf16}` and computes in bf16 (the kernels
 * accumulate in fp32: oneDNN's bf16 primitives, or fp32 on the bf16 values
 * where the CPU has no bf16 instructions), and its result goes back to f32
 * through a cast right after it:
 *
 *   %3 = cast(%2) {dtype = bf16} : bf16[4, 32, 64]
 *   %4 = cast(@h.0.attn.q_proj.weight) {dtype = bf16} : bf16[64, 64]
 *   %5 = linear(%3, %4) : bf16[4, 32, 64]
 *   %6 = cast(%5) {dtype = f32} : f32[4, 32, 64]          later uses of the linear read %6
 *
 * A value is cast once per function (the cast sits before its first such
 * use), so the bf16 copy of an activation that several projections read is
 * one tensor, and it is what the backward keeps. Attention's lse stays f32.
 * A convolution's bias is added after the cast back, in f32 (the bf16
 * kernels take no f32 bias here, and its gradient is then an f32 sum).
 *
 * Runs before autodiff: autodiff differentiates the casts (the gradient of
 * a cast is the cast back), so the backward's products run in bf16 too and
 * each parameter's gradient is the f32 cast of its bf16 gradient: the master
 * weights, their gradients, the gradient norm and the optimizer state are
 * f32, and so are norms, softmax, the loss, reductions and every
 * elementwise op between the products (they read the f32 casts). Sharding
 * then moves the bf16 values where they are split: a row-parallel linear's
 * partial sums are all-reduced in bf16 (the cast back passes no partial
 * sum), the dp gradient reductions stay f32. */
#include <string.h>

#include "pass.h"

typedef struct Prec {
  IrModule *m;
  Diag *d;
  Arena scratch;
  IrMap repl; /* old value -> p: the value that replaces it */
  IrMap memo; /* f32 value -> p: its bf16 cast in this function */
  char err[400];
  int nconverted;
} Prec;

static bool computes_bf16(const IrNode *n) {
  switch (n->op) {
    case IR_OP_LINEAR:
    case IR_OP_MATMUL:
    case IR_OP_CONV2D:
    case IR_OP_CONV3D:
    case IR_OP_ATTENTION: break;
    default: return false;
  }
  for (int i = 0; i < n->nin; i++)
    if (n->in[i]->dtype != IR_F32) return false;
  return n->out[0]->dtype == IR_F32;
}

static IrNode *build(Prec *p, IrBuilder *b, const IrNode *at, IrOp op, IrValue **in, int nin,
                     const IrAttrs *attrs) {
  IrNode *n = ir_build(b, op, in, nin, attrs, at->loc, p->err, sizeof p->err, NULL);
  if (!n)
    diag_error(p->d, at->loc, "precision: cannot compute this %s in bf16: %s", ir_ops[at->op].name,
               p->err);
  return n;
}

static IrValue *cast_to(Prec *p, IrBuilder *b, const IrNode *at, IrValue *v, IrDType t) {
  IrAttrs a = {0};
  ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, t);
  IrNode *c = build(p, b, at, IR_OP_CAST, &v, 1, &a);
  return c ? c->out[0] : NULL;
}

/* v's bf16 copy: the one made earlier in this function, else a new cast. */
static IrValue *to_bf16(Prec *p, IrBuilder *b, const IrNode *at, IrValue *v) {
  IrMapSlot *s = ir_map_get(&p->memo, v);
  if (s) return s->p;
  IrValue *c = cast_to(p, b, at, v, IR_BF16);
  if (c) ir_map_put(&p->memo, v)->p = c;
  return c;
}

/* Emits n in bf16 (casts in, the node, casts out) and records what replaces
 * its results. */
static bool convert(Prec *p, IrFunc *f, IrNode *n) {
  IrBuilder b = {.m = p->m, .f = f, .scope = n->scope, .group = n->group, .layer = n->layer};
  bool conv = n->op == IR_OP_CONV2D || n->op == IR_OP_CONV3D;
  int nin = conv ? 2 : n->nin; /* a convolution's bias is added after, in f32 */
  IrValue *in[4];
  for (int i = 0; i < nin; i++) /* attention's key mask stays f32 */
    if (!(in[i] = i == 3 && n->op == IR_OP_ATTENTION ? n->in[i] : to_bf16(p, &b, n, n->in[i])))
      return false;
  IrNode *c = build(p, &b, n, n->op, in, nin, &n->attrs);
  if (!c) return false;
  IrValue *y = cast_to(p, &b, n, c->out[0], IR_F32);
  if (!y) return false;
  if (conv && n->nin == 3) { /* y + bias as [C, 1, ...] */
    IrValue *bias = n->in[2];
    int64_t shp[IR_MAX_RANK];
    int r = y->shape.rank - 1;
    shp[0] = bias->shape.d[0];
    for (int i = 1; i < r; i++) shp[i] = 1;
    IrAttrs a = {0};
    ir_attrs_set_ints(&a, IR_ATTR_SHAPE, shp, r);
    IrNode *rs = build(p, &b, n, IR_OP_RESHAPE, &bias, 1, &a);
    if (!rs) return false;
    IrValue *pair[2] = {y, rs->out[0]};
    IrNode *add = build(p, &b, n, IR_OP_ADD, pair, 2, NULL);
    if (!add) return false;
    y = add->out[0];
  }
  ir_map_put(&p->repl, n->out[0])->p = y;
  for (int j = 1; j < n->nout; j++) ir_map_put(&p->repl, n->out[j])->p = c->out[j];
  p->nconverted++;
  return true;
}

static bool rewrite(Prec *p, IrFunc *f) {
  int nn = f->nodes.len;
  if (nn == 0) return true;
  IrNode **orig = ARENA_ARRAY(&p->scratch, IrNode *, nn);
  memcpy(orig, f->nodes.items, sizeof(IrNode *) * (size_t)nn);
  ir_map_init(&p->repl, &p->scratch, false);
  ir_map_init(&p->memo, &p->scratch, false);
  f->nodes.len = 0;
  for (int i = 0; i < nn; i++) {
    IrNode *n = orig[i];
    for (int k = 0; k < n->nin; k++) {
      IrMapSlot *s = ir_map_get(&p->repl, n->in[k]);
      if (s) n->in[k] = s->p;
    }
    if (computes_bf16(n)) {
      if (!convert(p, f, n)) return false;
    } else {
      ptrvec_push(&p->m->arena, &f->nodes, n);
    }
  }
  for (int i = 0; i < f->results.len; i++) {
    IrMapSlot *s = ir_map_get(&p->repl, f->results.items[i]);
    if (s) f->results.items[i] = s->p;
  }
  ir_func_renumber(f);
  return true;
}

bool pass_precision(IrModule *m, PassCtx *cx) {
  if (m->train.precision != MM_PREC_BF16) return true;
  Prec p = {.m = m, .d = cx->d ? cx->d : m->diag};
  arena_init(&p.scratch);
  bool ok = true;
  for (int i = 0; i < m->funcs.len && ok; i++) ok = rewrite(&p, m->funcs.items[i]);
  if (ok && p.nconverted == 0) { /* a setting is never accepted and ignored */
    diag_error_plain(
        p.d,
        "precision = bf16: model %s has no linear, matmul, convolution or attention on "
        "f32 values to compute in bf16",
        m->name);
    ok = false;
  }
  arena_free(&p.scratch);
  return ok;
}
