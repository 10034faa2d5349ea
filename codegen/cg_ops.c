/* One lowering per op: a call into the runtime kernel ABI
 * (runtime/kernels/mmrt_kernels.h) with arena pointers and constant shapes, or a
 * loop nest from cg_loops.c for what the runtime has no kernel for. Every
 * kernel writes its result (accumulate = 0): sums of gradients are explicit
 * add nodes in the IR. */
#include <string.h>

#include "../ir/ir_fused.h"
#include "../ir/ir_merge.h"
#include "../passes/bucket.h"
#include "mmrt_main.h"
#include "cg_internal.h"

#define V(i)   cg_ptr(cg, n->in[i])  /* operand i's storage */
#define O(j)   cg_ptr(cg, n->out[j]) /* result j's storage */
#define I32(x) cg_i32(cg, x)
#define F32(x) cg_f32(cg, x)
#define CALL(name, ...)                                                                            \
  cg_call(cg, name, (LLVMValueRef[]){__VA_ARGS__},                                                 \
          (int)(sizeof((LLVMValueRef[]){__VA_ARGS__}) / sizeof(LLVMValueRef)))

static const IrAttrVal *attr(const IrNode *n, IrAttrId id) {
  return &n->attrs.v[id];
}
static int64_t last_dim(const IrValue *v) {
  return v->shape.rank ? v->shape.d[v->shape.rank - 1] : 1;
}
static int64_t rows(const IrValue *v) {
  return ir_numel(&v->shape) / last_dim(v);
}

/* The kernels that also take bf16 (passes/precision.c): every operand and
 * result bf16 but attention's lse (f32). */
static bool bf16_kernel(const IrNode *n) {
  switch (n->op) {
    case IR_OP_LINEAR:
    case IR_OP_LINEAR_GRAD_X:
    case IR_OP_LINEAR_GRAD_W:
    case IR_OP_MATMUL:
    case IR_OP_CONV2D:
    case IR_OP_CONV3D:
    case IR_OP_CONV2D_GRAD_X:
    case IR_OP_CONV2D_GRAD_W:
    case IR_OP_CONV3D_GRAD_X:
    case IR_OP_CONV3D_GRAD_W:
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_GRAD: return n->nin > 0 && n->in[0]->dtype == IR_BF16;
    default: return false;
  }
}

/* The dtype operand i (result j: in = false) of n must have. */
static IrDType want_dtype(const IrNode *n, int k, bool in) {
  bool seg = in && ((n->op == IR_OP_ATTENTION && k == 3) ||
                    (n->op == IR_OP_ATTENTION_GRAD && k == 6)); /* the key mask, or segments */
  if (seg && n->in[k]->dtype == IR_I32) return IR_I32;
  if (!bf16_kernel(n)) return IR_F32;
  if (n->op == IR_OP_ATTENTION && !in && k == 1) return IR_F32;     /* lse */
  if (n->op == IR_OP_ATTENTION_GRAD && in && k == 5) return IR_F32; /* lse */
  if (n->op == IR_OP_ATTENTION && in && k == 3) return IR_F32;      /* the key mask */
  if (n->op == IR_OP_ATTENTION_GRAD && in && k == 6) return IR_F32;
  return IR_BF16;
}

/* The kernel's MmrtDtype: bf16 when the precision pass made the node bf16. */
static int kdt(const IrNode *n) {
  return bf16_kernel(n) ? MMRT_BF16 : MMRT_F32;
}

/* Every operand and result f32 (bf16 for the kernels that take it), and
 * every size a kernel takes as int fits. */
static bool need_f32(Cg *cg, const IrNode *n, int first, int count) {
  for (int i = first; i < first + count && i < n->nin; i++)
    if (n->in[i]->dtype != want_dtype(n, i, true))
      return cg_error(cg, n, "operand %d is %s; this kernel takes %s", i,
                      ir_dtype_name(n->in[i]->dtype), ir_dtype_name(want_dtype(n, i, true)));
  for (int j = 0; j < n->nout; j++)
    if (n->out[j]->dtype != want_dtype(n, j, false))
      return cg_error(cg, n, "result %d is %s, not %s", j, ir_dtype_name(n->out[j]->dtype),
                      ir_dtype_name(want_dtype(n, j, false)));
  return true;
}

static bool fits(Cg *cg, const IrNode *n) {
  for (int i = 0; i < n->nin; i++)
    if (ir_numel(&n->in[i]->shape) > INT32_MAX)
      return cg_error(cg, n, "operand %d has more than 2^31 elements", i);
  for (int j = 0; j < n->nout; j++)
    if (ir_numel(&n->out[j]->shape) > INT32_MAX)
      return cg_error(cg, n, "result %d has more than 2^31 elements", j);
  return true;
}

/* ---- contractions ---- */

static bool lower_matmul(Cg *cg, const IrNode *n) {
  const IrShape *a = &n->in[0]->shape, *b = &n->in[1]->shape, *c = &n->out[0]->shape;
  if (a->rank < 2 || b->rank < 2)
    return cg_error(cg, n, "matmul of a vector is not supported; reshape it to a matrix");
  int64_t M = a->d[a->rank - 2], K = a->d[a->rank - 1], N = b->d[b->rank - 1];
  int64_t batch = ir_numel(c) / (M * N), ba = ir_numel(a) / (M * K), bb = ir_numel(b) / (K * N);
  if (ba == batch && bb == batch) { /* same batch shape (broadcasting never shrinks) */
    CALL("mmrt_matmul", I32(kdt(n)), O(0), V(0), V(1), I32(batch), I32(M), I32(N), I32(K), F32(1),
         I32(0));
  } else if (bb == 1 && ba == batch) { /* one B for every batch: fold the batch into M */
    CALL("mmrt_matmul", I32(kdt(n)), O(0), V(0), V(1), I32(1), I32(batch * M), I32(N), I32(K),
         F32(1), I32(0));
  } else if (kdt(n) == MMRT_BF16) {
    return cg_error(cg, n, "a bf16 matmul with broadcast batch dims is not supported");
  } else {
    return cg_loop_matmul(cg, n, M, N, K);
  }
  return true;
}

static bool overlaps(const IrValue *a, const IrValue *b) {
  if (a->mem_arena != b->mem_arena) return false;
  int64_t ea = a->mem_offset + ir_numel(&a->shape) * ir_dtype_size(a->dtype);
  int64_t eb = b->mem_offset + ir_numel(&b->shape) * ir_dtype_size(b->dtype);
  return a->mem_offset < eb && b->mem_offset < ea;
}

/* done (a value the current node's call writes for the next node, which
 * is done with it: ir/ir_merge.h), the next node skipped; NULL: nothing. */
static const IrValue *skip_next(Cg *cg, const IrValue *done) {
  if (done) cg->skip = cg->f->nodes.items[cg->cur + 1];
  return done;
}

/* The bias add the next node makes of the result, when the kernel can do
 * it instead (ir_linear_bias_next), is skipped. */
static bool lower_linear(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[0], *w = n->in[1],
                *bias = skip_next(cg, ir_linear_bias_next(cg->m, cg->f, cg->cur, &cg->uses));
  int64_t K = last_dim(x), N = w->shape.d[0];
  const IrValue *f32y = NULL;
  if (kdt(n) == MMRT_BF16)
    f32y = skip_next(cg, ir_f32_dest_next(cg->m, cg->f, cg->cur, &cg->uses, &bias));
  CALL("mmrt_linear_fwd", I32(f32y ? MMRT_BF16_F32 : kdt(n)), f32y ? cg_ptr(cg, f32y) : O(0), V(0),
       V(1), bias ? cg_ptr(cg, bias) : cg_null(cg), I32(rows(x)), I32(K), I32(N));
  return true;
}

/* linear_grad_x(dy[..., N], w[N, K]) -> dx[..., K] */
static bool lower_linear_grad_x(Cg *cg, const IrNode *n) {
  const IrValue *dy = n->in[0], *w = n->in[1];
  int64_t N = w->shape.d[0], K = w->shape.d[1];
  const IrValue *bias,
      *f32y = skip_next(cg, ir_f32_dest_next(cg->m, cg->f, cg->cur, &cg->uses, &bias));
  CALL("mmrt_linear_bwd_data", I32(f32y ? MMRT_BF16_F32 : kdt(n)), f32y ? cg_ptr(cg, f32y) : O(0),
       V(0), V(1), I32(rows(dy)), I32(K), I32(N), I32(0));
  return true;
}

/* linear_grad_w(dy[..., N], x[..., K]) -> dw[N, K] */
static bool lower_linear_grad_w(Cg *cg, const IrNode *n) {
  const IrValue *dy = n->in[0], *x = n->in[1];
  /* a deferred root's operand (n's f32 result, or the f32 cast of its bf16
   * one right after it, folded in): written into its micro-batch sum
   * (cg_pp.c); on the last micro-batch into the operand, through the sum
   * when the operand's storage overlaps n's operands */
  const IrNode *c = cg->cur + 1 < cg->f->nodes.len ? cg->f->nodes.items[cg->cur + 1] : NULL;
  IrMapSlot *u = ir_map_get(&cg->uses, n->out[0]);
  bool cast = kdt(n) == MMRT_BF16 && c && c->op == IR_OP_CAST && c->nin == 1 &&
              c->in[0] == n->out[0] && c->nout == 1 && c->out[0]->dtype == IR_F32 && u && u->i == 1;
  const IrValue *dw = cast ? c->out[0] : kdt(n) == MMRT_F32 ? n->out[0] : NULL;
  if (dw && cg_mb_linear_w(cg, n, dw, I32(cast ? MMRT_BF16_F32 : MMRT_F32), V(0), V(1),
                           I32(rows(dy)), I32(last_dim(x)), I32(last_dim(dy)),
                           I32(overlaps(dw, dy) || overlaps(dw, x)))) {
    if (cast) cg->skip = c;
    return true;
  }
  const IrValue *bias,
      *f32y = skip_next(cg, ir_f32_dest_next(cg->m, cg->f, cg->cur, &cg->uses, &bias));
  CALL("mmrt_linear_bwd_weights", I32(f32y ? MMRT_BF16_F32 : kdt(n)),
       f32y ? cg_ptr(cg, f32y) : O(0), cg_null(cg), V(0), V(1), I32(rows(dy)), I32(last_dim(x)),
       I32(last_dim(dy)), I32(0));
  return true;
}

/* The geometry of a convolution of x over w (shapes), as the runtime takes it. */
static LLVMValueRef conv_geom(Cg *cg, const IrNode *n, const IrShape *x, const IrShape *w) {
  int nsp = x->rank - 2;
  int32_t g[19] = {0}; /* N, C, OC, groups, in[3], k[3], stride[3], pad_lo[3], pad_hi[3] */
  g[0] = (int32_t)x->d[0];
  g[1] = (int32_t)x->d[1];
  g[2] = (int32_t)w->d[0];
  g[3] = 1;
  for (int i = 0; i < nsp && i < 3; i++) {
    g[4 + i] = (int32_t)x->d[2 + i];
    g[7 + i] = (int32_t)w->d[2 + i];
    g[10 + i] = (int32_t)attr(n, IR_ATTR_STRIDE)->ints[i];
    g[13 + i] = g[16 + i] = (int32_t)attr(n, IR_ATTR_PADDING)->ints[i];
  }
  LLVMValueRef e[19];
  for (int i = 0; i < 19; i++) e[i] = I32(g[i]);
  return cg_const_global(cg, LLVMConstArray2(cg->t_i32, e, 19), "conv");
}

static int split_axis(const Cg *cg, const IrValue *v, int d);

/* Row-parallel (x split over its channels): the result is a partial sum,
 * so only rank 0 of the axis adds the bias. */
static bool lower_conv(Cg *cg, const IrNode *n) {
  bool is3 = n->op == IR_OP_CONV3D;
  LLVMValueRef cv = conv_geom(cg, n, &n->in[0]->shape, &n->in[1]->shape);
  LLVMValueRef bias = n->nin > 2 ? V(2) : cg_null(cg);
  int ax = n->nin > 2 ? split_axis(cg, n->in[0], 1) : -1;
  if (ax == -2) return cg_error(cg, n, "the input channels are split over two mesh axes");
  if (ax >= 0) {
    LLVMValueRef first =
        LLVMBuildICmp(cg->b, LLVMIntEQ, CALL("mmrt_step_coord", cg->mesh, I32(ax)), I32(0), "");
    bias = LLVMBuildSelect(cg->b, first, bias, cg_null(cg), "");
  }
  CALL(is3 ? "mmrt_conv3d_fwd" : "mmrt_conv2d_fwd", I32(kdt(n)), cv, O(0), V(0), V(1), bias);
  return true;
}

static IrShape shape_attr(const IrNode *n) {
  IrShape s = {.rank = attr(n, IR_ATTR_SHAPE)->nints};
  for (int i = 0; i < s.rank; i++) s.d[i] = attr(n, IR_ATTR_SHAPE)->ints[i];
  return s;
}

/* convND_grad_x(dy, w) {shape = x} and convND_grad_w(dy, x) {shape = w} */
static bool lower_conv_grad(Cg *cg, const IrNode *n) {
  bool is3 = n->op == IR_OP_CONV3D_GRAD_X || n->op == IR_OP_CONV3D_GRAD_W;
  bool wrt_x = n->op == IR_OP_CONV2D_GRAD_X || n->op == IR_OP_CONV3D_GRAD_X;
  IrShape given = shape_attr(n);
  const IrShape *x = wrt_x ? &given : &n->in[1]->shape, *w = wrt_x ? &n->in[1]->shape : &given;
  LLVMValueRef cv = conv_geom(cg, n, x, w);
  if (wrt_x)
    CALL(is3 ? "mmrt_conv3d_bwd_data" : "mmrt_conv2d_bwd_data", I32(kdt(n)), cv, O(0), V(0), V(1),
         I32(0));
  else
    CALL(is3 ? "mmrt_conv3d_bwd_weights" : "mmrt_conv2d_bwd_weights", I32(kdt(n)), cv, O(0),
         cg_null(cg), V(0), V(1), I32(0));
  return true;
}

/* ---- normalisation ---- */

/* A saved statistic: result j, or a slice of the node's scratch. */
static LLVMValueRef stat(Cg *cg, const IrNode *n, int j, int64_t ws_off) {
  return j < n->nout ? O(j) : cg_ws(cg, n, ws_off);
}

/* A layer norm's x as (outer, C, inner): C its normalised dim (the last,
 * or its axis attribute), inner the product of the dims after it. */
typedef struct LnDims {
  int cd;
  int64_t outer, C, inner, rows;
} LnDims;
static LnDims ln_dims(const IrNode *n, const IrValue *x) {
  LnDims l = {.cd = ir_norm_dim(&n->attrs, &x->shape), .inner = 1};
  l.C = x->shape.d[l.cd];
  for (int d = l.cd + 1; d < x->shape.rank; d++) l.inner *= x->shape.d[d];
  l.rows = ir_numel(&x->shape) / l.C;
  l.outer = l.rows / l.inner;
  return l;
}

/* Over channels split on a mesh axis (split statistics): the runtime
 * all-reduces the rows' partial sums over the axis (mmrt_split.c). Over
 * a dim before the last ({axis}), the runtime's strided kernels. */
static bool lower_layer_norm(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[0];
  LnDims l = ln_dims(n, x);
  int64_t N = l.rows, C = l.C;
  int ax = split_axis(cg, x, l.cd);
  if (ax == -2) return cg_error(cg, n, "the normalised dim is split over two mesh axes");
  if (ax >= 0) {
    cg_check_status(cg, CALL("mmrt_split_layernorm_fwd", cg->mesh, I32(ax), O(0), stat(cg, n, 1, 0),
                             stat(cg, n, 2, 4 * N), V(0), n->nin > 1 ? V(1) : cg_null(cg),
                             n->nin > 2 ? V(2) : cg_null(cg), cg_i64(cg, N), cg_i64(cg, C),
                             cg_i64(cg, C * cg->m->mesh[ax]), cg_i64(cg, l.inner),
                             F32(attr(n, IR_ATTR_EPS)->f)));
    return true;
  }
  if (l.inner > 1) {
    CALL("mmrt_layernorm_axis_fwd", O(0), stat(cg, n, 1, 0), stat(cg, n, 2, 4 * N), V(0),
         n->nin > 1 ? V(1) : cg_null(cg), n->nin > 2 ? V(2) : cg_null(cg), cg_i64(cg, l.outer),
         cg_i64(cg, C), cg_i64(cg, l.inner), F32(attr(n, IR_ATTR_EPS)->f));
    return true;
  }
  CALL("mmrt_layernorm_fwd", O(0), stat(cg, n, 1, 0), stat(cg, n, 2, 4 * N), V(0),
       n->nin > 1 ? V(1) : cg_null(cg), n->nin > 2 ? V(2) : cg_null(cg), I32(N), I32(C),
       F32(attr(n, IR_ATTR_EPS)->f));
  return true;
}

static bool lower_rms_norm(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[0];
  CALL("mmrt_rmsnorm_fwd", O(0), stat(cg, n, 1, 0), V(0), n->nin > 1 ? V(1) : cg_null(cg),
       I32(rows(x)), I32(last_dim(x)), F32(attr(n, IR_ATTR_EPS)->f));
  return true;
}

/* x[B, C, *spatial] */
static void group_dims(const IrValue *x, int64_t *B, int64_t *C, int64_t *S) {
  *B = x->shape.d[0];
  *C = x->shape.d[1];
  *S = ir_numel(&x->shape) / (*B * *C);
}

/* The groups of this rank: all of them, or its block when the channels
 * (whole groups) are split on a mesh axis; 0 and an error when they are
 * split in a way the kernel cannot take. */
static int64_t local_groups(Cg *cg, const IrNode *n, const IrValue *x) {
  int64_t G = attr(n, IR_ATTR_GROUPS)->i;
  int ax = split_axis(cg, x, 1);
  if (ax == -1) return G;
  if (ax == -2 || G % cg->m->mesh[ax]) {
    cg_error(cg, n, "group norm: the channels are split other than by whole groups");
    return 0;
  }
  return G / cg->m->mesh[ax];
}

static bool lower_group_norm(Cg *cg, const IrNode *n) {
  int64_t B, C, S, G = local_groups(cg, n, n->in[0]);
  if (!G) return false;
  group_dims(n->in[0], &B, &C, &S);
  CALL("mmrt_groupnorm_fwd", O(0), stat(cg, n, 1, 0), stat(cg, n, 2, 4 * B * G), V(0),
       n->nin > 1 ? V(1) : cg_null(cg), n->nin > 2 ? V(2) : cg_null(cg), I32(B), I32(C), I32(S),
       I32(G), F32(attr(n, IR_ATTR_EPS)->f));
  return true;
}

/* layer_norm_grad(dy, x, mean, rstd, w?) -> dx, dw, db */
static bool lower_layer_norm_grad(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[1];
  LnDims l = ln_dims(n, x);
  int ax = split_axis(cg, x, l.cd);
  if (ax == -2) return cg_error(cg, n, "the normalised dim is split over two mesh axes");
  if (ax >= 0) {
    cg_check_status(cg,
                    CALL("mmrt_split_layernorm_bwd", cg->mesh, I32(ax), O(0), O(1), O(2), V(0),
                         V(1), V(2), V(3), n->nin > 4 ? V(4) : cg_null(cg), cg_i64(cg, l.rows),
                         cg_i64(cg, l.C), cg_i64(cg, l.C * cg->m->mesh[ax]), cg_i64(cg, l.inner)));
    return true;
  }
  const IrValue *res = skip_next(cg, ir_residual_next(cg->m, cg->f, cg->cur, &cg->uses));
  if (l.inner > 1) {
    CALL("mmrt_layernorm_axis_bwd", res ? cg_ptr(cg, res) : O(0), O(1), O(2), V(0), V(1), V(2),
         V(3), n->nin > 4 ? V(4) : cg_null(cg), cg_i64(cg, l.outer), cg_i64(cg, l.C),
         cg_i64(cg, l.inner), I32(res ? 2 : 0));
    return true;
  }
  CALL("mmrt_layernorm_bwd", res ? cg_ptr(cg, res) : O(0), O(1), O(2), V(0), V(1), V(2), V(3),
       n->nin > 4 ? V(4) : cg_null(cg), I32(l.rows), I32(l.C), I32(res ? 2 : 0));
  return true;
}

/* rms_norm_grad(dy, x, rstd, w?) -> dx, dw */
static bool lower_rms_norm_grad(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[1];
  CALL("mmrt_rmsnorm_bwd", O(0), O(1), V(0), V(1), V(2), n->nin > 3 ? V(3) : cg_null(cg),
       I32(rows(x)), I32(last_dim(x)), I32(0));
  return true;
}

/* group_norm_grad(dy, x, mean, rstd, w?) {groups} -> dx, dw, db */
static bool lower_group_norm_grad(Cg *cg, const IrNode *n) {
  int64_t B, C, S, G = local_groups(cg, n, n->in[1]);
  if (!G) return false;
  group_dims(n->in[1], &B, &C, &S);
  CALL("mmrt_groupnorm_bwd", O(0), O(1), O(2), V(0), V(1), V(2), V(3),
       n->nin > 4 ? V(4) : cg_null(cg), I32(B), I32(C), I32(S), I32(G), I32(0));
  return true;
}

/* softmax along the last axis goes to the runtime, any other to a loop */
static bool last_axis(const IrNode *n) {
  return attr(n, IR_ATTR_AXIS)->i == n->in[0]->shape.rank - 1;
}

static bool lower_softmax(Cg *cg, const IrNode *n) {
  if (!last_axis(n)) return cg_loop_rowwise(cg, n);
  const IrValue *x = n->in[0];
  CALL("mmrt_softmax_fwd", I32(MMRT_F32), O(0), V(0), I32(rows(x)), I32(last_dim(x)));
  return true;
}

static bool lower_softmax_grad(Cg *cg, const IrNode *n) {
  if (!last_axis(n)) return cg_loop_rowwise(cg, n);
  const IrValue *y = n->in[1];
  CALL("mmrt_softmax_bwd", I32(MMRT_F32), O(0), V(0), V(1), I32(rows(y)), I32(last_dim(y)), I32(0));
  return true;
}

/* ---- transformer pieces ---- */

/* The mesh axis that split dim d of v (before localize), -1 for none, -2
 * for several. */
static int split_axis(const Cg *cg, const IrValue *v, int d) {
  const CgOrig *o = cg_orig(cg, v);
  int axis = -1;
  for (int a = 0; a < IR_NAXES; a++)
    if (o->pl[a].kind == IR_PL_S && o->pl[a].dim == d && cg->m->mesh[a] > 1)
      axis = axis == -1 ? a : -2;
  return axis;
}

static bool need_i32_ids(Cg *cg, const IrNode *n, int i) {
  if (n->in[i]->dtype == IR_I32) return true;
  return cg_error(cg, n, "ids are %s; the runtime takes i32", ir_dtype_name(n->in[i]->dtype));
}

static bool lower_embedding(Cg *cg, const IrNode *n) {
  const IrValue *ids = n->in[0], *table = n->in[1];
  if (!need_i32_ids(cg, n, 0)) return false;
  int ax = split_axis(cg, table, 0);
  if (ax >= 0) { /* vocabulary parallel: this rank's rows of the table */
    CALL("mmrt_split_embedding_fwd", cg->mesh, I32(ax), O(0), V(1), V(0),
         cg_i64(cg, ir_numel(&ids->shape)), cg_i64(cg, table->shape.d[0]),
         cg_i64(cg, table->shape.d[1]));
    return true;
  }
  LLVMValueRef r = CALL("mmrt_embedding_fwd", O(0), V(1), V(0), I32(ir_numel(&ids->shape)),
                        I32(table->shape.d[0]), I32(table->shape.d[1]));
  cg_check_status(cg, r);
  return true;
}

/* embedding_grad(dy[..., C], ids[...]) {shape = [V, C]} */
static bool lower_embedding_grad(Cg *cg, const IrNode *n) {
  if (!need_i32_ids(cg, n, 1)) return false;
  IrShape t = shape_attr(n);
  int ax = split_axis(cg, n->out[0], 0);
  if (ax >= 0) {
    CALL("mmrt_split_embedding_bwd", cg->mesh, I32(ax), O(0), V(0), V(1),
         cg_i64(cg, ir_numel(&n->in[1]->shape)), cg_i64(cg, t.d[0]), cg_i64(cg, t.d[1]));
    return true;
  }
  const IrValue *base,
      *y = skip_next(cg, ir_grad_sum_next(cg->m, cg->f, cg->cur, &cg->uses, &base));
  if (y)
    CALL("mmrt_embedding_bwd_add", cg_ptr(cg, y), cg_ptr(cg, base), I32(base->dtype == IR_BF16),
         V(0), V(1), I32(ir_numel(&n->in[1]->shape)), I32(t.d[0]), I32(t.d[1]));
  else
    CALL("mmrt_embedding_bwd", O(0), V(0), V(1), I32(ir_numel(&n->in[1]->shape)), I32(t.d[0]),
         I32(t.d[1]), I32(0));
  return true;
}

/* USP's Ulysses degree inside the ring (1: a plain ring). */
static int cp_ulysses(const Cg *cg) {
  return cg->m->plan.cp_ulysses > 1 ? cg->m->plan.cp_ulysses : 1;
}

static bool lower_rope(Cg *cg, const IrNode *n) {
  const IrShape *s = &n->in[0]->shape;
  if (s->rank != 4) return cg_error(cg, n, "rope takes x[B, T, H, D]");
  int64_t off = ir_attrs_has(&n->attrs, IR_ATTR_OFFSET) ? attr(n, IR_ATTR_OFFSET)->i : 0;
  float theta = (float)attr(n, IR_ATTR_THETA)->f;
  LLVMValueRef pos = I32(off);
  int ax = split_axis(cg, n->in[0], 1);
  if (ax == -2) return cg_error(cg, n, "rope on a sequence split by several axes is not supported");
  if (ax == IR_AX_CP && n->nin == 1 && ir_cp_balanced(cg->m)) { /* two chunks per rank */
    CALL("mmrt_cp_rope_balanced", cg->mesh, O(0), V(0), I32(s->d[0]), I32(s->d[1]), I32(s->d[2]),
         I32(s->d[3]), F32(theta), pos, I32(n->op != IR_OP_ROPE), I32(cp_ulysses(cg)));
    return true;
  }
  if (ax >= 0) /* a split sequence: this rank's first position */
    pos = LLVMBuildAdd(
        cg->b, pos,
        LLVMBuildMul(cg->b, CALL("mmrt_step_coord", cg->mesh, I32(ax)), I32(s->d[1]), ""), "");
  if (n->nin > 1) { /* a start position per row (decoding) */
    if (ax >= 0)
      return cg_error(cg, n, "rope at per-row positions on a split sequence is not supported");
    cg_check_status(cg, CALL(n->op == IR_OP_ROPE ? "mmrt_rope_pos_fwd" : "mmrt_rope_pos_bwd", O(0),
                             V(0), I32(s->d[0]), I32(s->d[1]), I32(s->d[2]), I32(s->d[3]),
                             F32(theta), V(1)));
    return true;
  }
  if (n->op == IR_OP_ROPE)
    CALL("mmrt_rope_fwd", O(0), V(0), I32(s->d[0]), I32(s->d[1]), I32(s->d[2]), I32(s->d[3]),
         F32(theta), pos);
  else
    CALL("mmrt_rope_bwd", O(0), V(0), I32(s->d[0]), I32(s->d[1]), I32(s->d[2]), I32(s->d[3]),
         F32(theta), pos, I32(0));
  return true;
}

/* q[B, T, H, D], k/v[B, S, KVH, D] */
static bool attention_dims(Cg *cg, const IrNode *n, int q, int64_t *d) {
  const IrShape *qs = &n->in[q]->shape, *ks = &n->in[q + 1]->shape, *vs = &n->in[q + 2]->shape;
  if (qs->rank != 4 || ks->rank != 4 || vs->rank != 4 || vs->d[3] != qs->d[3])
    return cg_error(cg, n, "the runtime's attention takes q, k, v of rank 4 with one head size");
  d[0] = qs->d[0], d[1] = qs->d[1], d[2] = ks->d[1], d[3] = qs->d[2], d[4] = ks->d[2],
  d[5] = qs->d[3];
  return true;
}

static bool is_ring(const IrNode *n) {
  return ir_attrs_has(&n->attrs, IR_ATTR_RING) && attr(n, IR_ATTR_RING)->i;
}

/* A ring attention's workspace (support/ring_ws.h): after the saved statistics
 * in the node's planned scratch; a null pointer when it needs none. */
static LLVMValueRef ring_ws(Cg *cg, const IrNode *n) {
  int64_t ring = mp_ring_ws_bytes(cg->m, n);
  if (!ring) return cg_null(cg);
  return cg_ws(cg, n, n->ws_bytes - ring);
}

static bool lower_attention(Cg *cg, const IrNode *n) {
  int64_t d[6] = {0};
  if (!attention_dims(cg, n, 0, d)) return false;
  int64_t lse_off = 0;
  if (is_ring(n)) { /* ring attention over cp (runtime/comm/mmrt_ring.c) */
    if (n->nin > 3)
      return cg_error(cg, n, "ring attention (cp_kind = ring) does not take a key mask");
    if (kdt(n) == MMRT_BF16)
      return cg_error(cg, n, "ring attention (cp_kind = ring) does not take bf16 yet");
    cg_check_status(cg, CALL("mmrt_ring_attention_fwd", cg->mesh, O(0), stat(cg, n, 1, lse_off),
                             V(0), V(1), V(2), I32(d[0]), I32(d[1]), I32(d[3]), I32(d[4]),
                             I32(d[5]), I32(attr(n, IR_ATTR_CAUSAL)->i), I32(cp_ulysses(cg)),
                             F32(attr(n, IR_ATTR_SCALE)->f), ring_ws(cg, n)));
    return true;
  }
  if (n->nin > 3 && n->in[3]->dtype == IR_I32) { /* the segments of packed documents */
    CALL("mmrt_attention_seg_fwd", O(0), stat(cg, n, 1, lse_off), V(0), V(1), V(2), V(3), I32(d[0]),
         I32(d[1]), I32(d[3]), I32(d[4]), I32(d[5]), I32(attr(n, IR_ATTR_CAUSAL)->i),
         F32(attr(n, IR_ATTR_SCALE)->f), I32(kdt(n) == MMRT_BF16));
    return true;
  }
  if (n->nin > 3) { /* the key mask */
    CALL("mmrt_attention_masked_fwd", O(0), stat(cg, n, 1, lse_off), V(0), V(1), V(2), V(3),
         I32(d[0]), I32(d[1]), I32(d[2]), I32(d[3]), I32(d[4]), I32(d[5]),
         I32(attr(n, IR_ATTR_CAUSAL)->i), F32(attr(n, IR_ATTR_SCALE)->f), I32(kdt(n) == MMRT_BF16));
    return true;
  }
  CALL(kdt(n) == MMRT_BF16 ? "mmrt_attention_bf16_fwd" : "mmrt_attention_fwd", O(0),
       stat(cg, n, 1, lse_off), V(0), V(1), V(2), I32(d[0]), I32(d[1]), I32(d[2]), I32(d[3]),
       I32(d[4]), I32(d[5]), I32(attr(n, IR_ATTR_CAUSAL)->i), F32(attr(n, IR_ATTR_SCALE)->f));
  return true;
}

/* place(x, src, ids) {token}; place_grad(dy, ids) {token, size} -> dx, dsrc */
static bool lower_place(Cg *cg, const IrNode *n) {
  const IrShape *x = &n->in[0]->shape;
  int64_t tok = attr(n, IR_ATTR_TOKEN)->i, B = x->d[0], T = x->d[1];
  int64_t N = n->op == IR_OP_PLACE ? n->in[1]->shape.d[1] : attr(n, IR_ATTR_SIZE)->i;
  if (ir_attrs_has(&n->attrs, IR_ATTR_FLAT) && attr(n, IR_ATTR_FLAT)->i)
    T *= B, N *= B, B = 1; /* one pool (this rank's share): the batch as one row */
  if (n->op == IR_OP_PLACE)
    cg_check_status(cg, CALL("mmrt_place_fwd", O(0), V(0), V(1), V(2), I32(B), I32(T), I32(N),
                             I32(x->d[2]), I32(tok)));
  else
    cg_check_status(cg, CALL("mmrt_place_bwd", O(0), O(1), V(0), V(1), I32(B), I32(T), I32(N),
                             I32(x->d[2]), I32(tok)));
  return true;
}

/* haar2d, haar3d and their inverses: the full-resolution side's sizes */
static bool lower_haar(Cg *cg, const IrNode *n) {
  bool three = n->op == IR_OP_HAAR3D || n->op == IR_OP_IHAAR3D;
  bool inv = n->op == IR_OP_IHAAR2D || n->op == IR_OP_IHAAR3D;
  const IrShape *f = inv ? &n->out[0]->shape : &n->in[0]->shape;
  int r = three ? 1 : 0;
  cg_check_status(cg, CALL("mmrt_haar", O(0), V(0), I32(f->d[0]), I32(f->d[1]),
                           I32(three ? f->d[2] : 1), I32(f->d[2 + r]), I32(f->d[3 + r]),
                           I32(three ? 3 : 2), I32(inv)));
  return true;
}

/* rel_buckets, timestep_embedding, ddpm_table: runtime/kernels/mmrt_dit.c */
static bool lower_table(Cg *cg, const IrNode *n) {
  if (n->op == IR_OP_REL_BUCKETS)
    CALL("mmrt_rel_buckets", O(0), I32(n->out[0]->shape.d[0]), I32(attr(n, IR_ATTR_BUCKETS)->i),
         I32(attr(n, IR_ATTR_MAX_DISTANCE)->i));
  else if (n->op == IR_OP_TIMESTEP_EMBEDDING)
    CALL("mmrt_timestep_embed", O(0), V(0), cg_i64(cg, ir_numel(&n->in[0]->shape)),
         I32(attr(n, IR_ATTR_DIM)->i), cg_f64(cg, attr(n, IR_ATTR_THETA)->f));
  else
    CALL("mmrt_ddpm_table", O(0), I32(attr(n, IR_ATTR_STEPS)->i),
         cg_f64(cg, attr(n, IR_ATTR_BETA_START)->f), cg_f64(cg, attr(n, IR_ATTR_BETA_END)->f),
         I32(attr(n, IR_ATTR_ZERO_SNR)->i), cg_f64(cg, attr(n, IR_ATTR_GAMMA)->f));
  return true;
}

/* randn {shape, seed = site}: the run's Philox noise when training, zeros
 * otherwise (ops.def) */
static bool lower_randn(Cg *cg, const IrNode *n) {
  LLVMValueRef count = cg_i64(cg, ir_numel(&n->out[0]->shape));
  if (!cg->training) {
    CALL("mmrt_fill", O(0), cg_f32(cg, 0.0), count);
    return true;
  }
  int64_t site = ir_attrs_has(&n->attrs, IR_ATTR_SEED) ? n->attrs.v[IR_ATTR_SEED].i : 0;
  LLVMValueRef step = cg->step ? LLVMBuildFPToUI(cg->b, cg->step, cg->t_i64, "") : cg_i64(cg, 0);
  CALL("mmrt_randn", O(0), count, cg->seed, step, I32((int32_t)site));
  return true;
}

/* kv_write(cache[B, S, KVH, D], x[B, n, KVH, D], pos) */
static bool lower_kv_write(Cg *cg, const IrNode *n) {
  const IrShape *c = &n->in[0]->shape;
  cg_check_status(cg, CALL("mmrt_kv_write", V(0), V(1), V(2), I32(c->d[0]), I32(c->d[1]),
                           I32(n->in[1]->shape.d[1]), I32(c->d[2]), I32(c->d[3])));
  return true;
}

/* attention_cached(q[B, n, H, D], k_cache, v_cache [B, S, KVH, D], pos) {scale} */
static bool lower_attention_cached(Cg *cg, const IrNode *n) {
  const IrShape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
  cg_check_status(cg, CALL("mmrt_attention_cached_fwd", O(0), V(0), V(1), V(2), V(3), I32(q->d[0]),
                           I32(q->d[1]), I32(k->d[1]), I32(q->d[2]), I32(k->d[2]), I32(q->d[3]),
                           F32(attr(n, IR_ATTR_SCALE)->f)));
  return true;
}

/* attention_grad(dy, q, k, v, out, lse) -> dq, dk, dv */
static bool lower_attention_grad(Cg *cg, const IrNode *n) {
  int64_t d[6] = {0};
  if (!attention_dims(cg, n, 1, d)) return false;
  if (is_ring(n)) {
    if (n->nin > 6)
      return cg_error(cg, n, "ring attention (cp_kind = ring) does not take a key mask");
    if (kdt(n) == MMRT_BF16)
      return cg_error(cg, n, "ring attention (cp_kind = ring) does not take bf16 yet");
    cg_check_status(cg, CALL("mmrt_ring_attention_bwd", cg->mesh, O(0), O(1), O(2), V(0), V(1),
                             V(2), V(3), V(4), V(5), I32(d[0]), I32(d[1]), I32(d[3]), I32(d[4]),
                             I32(d[5]), I32(attr(n, IR_ATTR_CAUSAL)->i), I32(cp_ulysses(cg)),
                             F32(attr(n, IR_ATTR_SCALE)->f), ring_ws(cg, n)));
    return true;
  }
  if (n->nin > 6 && n->in[6]->dtype == IR_I32) {
    CALL("mmrt_attention_seg_bwd", O(0), O(1), O(2), V(0), V(1), V(2), V(3), V(4), V(5), V(6),
         I32(d[0]), I32(d[1]), I32(d[3]), I32(d[4]), I32(d[5]), I32(attr(n, IR_ATTR_CAUSAL)->i),
         F32(attr(n, IR_ATTR_SCALE)->f), I32(0), I32(kdt(n) == MMRT_BF16));
    return true;
  }
  if (n->nin > 6) {
    CALL("mmrt_attention_masked_bwd", O(0), O(1), O(2), V(0), V(1), V(2), V(3), V(4), V(5), V(6),
         I32(d[0]), I32(d[1]), I32(d[2]), I32(d[3]), I32(d[4]), I32(d[5]),
         I32(attr(n, IR_ATTR_CAUSAL)->i), F32(attr(n, IR_ATTR_SCALE)->f), I32(0),
         I32(kdt(n) == MMRT_BF16));
    return true;
  }
  CALL(kdt(n) == MMRT_BF16 ? "mmrt_attention_bf16_bwd" : "mmrt_attention_bwd", O(0), O(1), O(2),
       V(0), V(1), V(2), V(3), V(4), V(5), I32(d[0]), I32(d[1]), I32(d[2]), I32(d[3]), I32(d[4]),
       I32(d[5]), I32(attr(n, IR_ATTR_CAUSAL)->i), F32(attr(n, IR_ATTR_SCALE)->f), I32(0));
  return true;
}

/* Rows split over mesh axes: the loss is the rank's share of the global
 * mean, (local sum) / (global count), so that the partial sums add up to
 * the mean. count_local (i32) -> count_local / count_global (f32). */
static LLVMValueRef share(Cg *cg, LLVMValueRef count_local, int axes) {
  LLVMValueRef c = LLVMBuildSIToFP(cg->b, count_local, cg->t_f32, "");
  LLVMValueRef slot = LLVMBuildAlloca(cg->b, cg->t_f32, "count");
  LLVMBuildStore(cg->b, c, slot);
  cg_check_status(cg, CALL("mmrt_step_all_reduce", cg->mesh, I32(axes), slot, cg_i64(cg, 1)));
  LLVMValueRef g = LLVMBuildLoad2(cg->b, cg->t_f32, slot, "");
  LLVMValueRef zero = LLVMBuildFCmp(cg->b, LLVMRealOEQ, g, F32(0), "");
  return LLVMBuildSelect(cg->b, zero, F32(0), LLVMBuildFDiv(cg->b, c, g, ""), "");
}

/* The real classes of the whole vocabulary of a cross entropy's logits lg
 * (the `vocab` of padded logits, passes/vocabpad.c); 0 and an error when
 * the logits are padded but not split over the vocabulary. */
static int64_t real_vocab(Cg *cg, const IrNode *n, const IrValue *lg, int vax) {
  int64_t whole = last_dim(lg) * (vax >= 0 ? cg->m->mesh[vax] : 1);
  if (!ir_attrs_has(&n->attrs, IR_ATTR_VOCAB)) return whole;
  if (vax < 0) {
    cg_error(cg, n, "padded logits (vocab = %lld) must be split over the vocabulary",
             (long long)attr(n, IR_ATTR_VOCAB)->i);
    return 0;
  }
  return attr(n, IR_ATTR_VOCAB)->i;
}

/* cross_entropy(logits[..., V], labels[...]) -> loss, lse[N] */
static bool lower_cross_entropy(Cg *cg, const IrNode *n) {
  if (n->in[1]->dtype != IR_I32)
    return cg_error(cg, n, "labels are %s; the runtime takes i32", ir_dtype_name(n->in[1]->dtype));
  const IrValue *lg = n->in[0];
  int vax = split_axis(cg, lg, lg->shape.rank - 1);
  if (vax == -2 ||
      (cg_split_axes(cg, lg) & ~cg_split_axes(cg, n->in[1]) & ~(vax >= 0 ? 1 << vax : 0)))
    return cg_error(cg, n, "the logits are split in a way the cross entropy does not support");
  if (vax >= 0 && n->nout < 2)
    return cg_error(cg, n, "vocabulary-parallel cross entropy needs the lse result");
  int64_t vocab = real_vocab(cg, n, lg, vax);
  if (!vocab) return false;
  LLVMValueRef r = vax >= 0
                       ? CALL("mmrt_split_cross_entropy_fwd", cg->mesh, I32(vax), O(0), O(1), V(0),
                              V(1), cg_i64(cg, rows(lg)), cg_i64(cg, last_dim(lg)),
                              cg_i64(cg, vocab), I32(attr(n, IR_ATTR_IGNORE)->i))
                       : CALL("mmrt_cross_entropy_fwd", O(0), stat(cg, n, 1, 0), V(0), V(1),
                              I32(rows(lg)), I32(last_dim(lg)), I32(attr(n, IR_ATTR_IGNORE)->i));
  cg_check_status(cg, r);
  int axes = cg_split_axes(cg, n->in[1]);
  if (cg->training && cg->m->plan.micro_batches > 1) /* its share of the step (cg_pp.c) */
    cg_check_status(cg, CALL("mmrt_mb_count", cg->mesh, I32(axes), r));
  if (axes) {
    LLVMValueRef loss = LLVMBuildFMul(cg->b, cg_load_f32(cg, n->out[0]), share(cg, r, axes), "");
    LLVMBuildStore(cg->b, loss, O(0));
  }
  return true;
}

/* cross_entropy_grad(dloss f32[], logits, labels, lse) -> dlogits */
static bool lower_cross_entropy_grad(Cg *cg, const IrNode *n) {
  if (!need_f32(cg, n, 3, 1)) return false; /* lse; dloss and logits by the table */
  const IrValue *lg = n->in[1];
  int axes = cg_split_axes(cg, n->in[2]), vax = split_axis(cg, lg, lg->shape.rank - 1);
  if (vax == -2 || (cg_split_axes(cg, lg) & ~axes & ~(vax >= 0 ? 1 << vax : 0)))
    return cg_error(cg, n, "the logits are split in a way the cross entropy does not support");
  int64_t vocab = real_vocab(cg, n, lg, vax);
  if (!vocab) return false;
  LLVMValueRef dloss = cg_load_f32(cg, n->in[0]);
  if (axes) { /* the runtime divides by the local count */
    LLVMValueRef c = CALL("mmrt_step_count_labels", V(2), cg_i64(cg, ir_numel(&n->in[2]->shape)),
                          I32(attr(n, IR_ATTR_IGNORE)->i));
    dloss = LLVMBuildFMul(cg->b, dloss, share(cg, c, axes), "");
  }
  if (vax >= 0)
    CALL("mmrt_split_cross_entropy_bwd", cg->mesh, I32(vax), O(0), V(1), V(3), V(2), dloss,
         cg_i64(cg, rows(lg)), cg_i64(cg, last_dim(lg)), cg_i64(cg, vocab),
         I32(attr(n, IR_ATTR_IGNORE)->i));
  else
    CALL("mmrt_cross_entropy_bwd", O(0), V(1), V(3), V(2), dloss, I32(rows(lg)), I32(last_dim(lg)),
         I32(attr(n, IR_ATTR_IGNORE)->i), I32(0));
  return true;
}

/* ---- collectives (mmrt_comm.h) ---- */

/* (outer, dim, inner) of shape s around dim d */
static void around(const IrShape *s, int d, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < d; i++) *outer *= s->d[i];
  for (int i = d + 1; i < s->rank; i++) *inner *= s->d[i];
}

/* A gradient bucket (passes/bucket.c): the `run` consecutive all_reduce
 * nodes from this one, in one call. Each operand is copied into its result
 * (in order: memplan may give a result the storage of an earlier member's
 * operand, which dies before it, never of a later one's), then the results
 * are all-reduced in place as one concatenation (one bucket of all their
 * bytes: one MPI all-reduce, counted as one call). */
static bool lower_bucket(Cg *cg, const IrNode *n, int run) {
  LLVMValueRef ptrs = LLVMBuildArrayAlloca(cg->b, cg->t_ptr, I32(run), "bucket");
  LLVMValueRef sizes = LLVMBuildArrayAlloca(cg->b, cg->t_i64, I32(run), "counts");
  int64_t total = 0;
  for (int k = 0; k < run; k++) {
    const IrNode *u = cg->f->nodes.items[cg->cur + k];
    const IrValue *x = u->in[0], *y = u->out[0];
    if (x->dtype != IR_F32)
      return cg_error(cg, u, "collectives of %s are not supported", ir_dtype_name(x->dtype));
    int64_t count = ir_numel(&x->shape);
    if (x->mem_arena != y->mem_arena || x->mem_offset != y->mem_offset)
      LLVMBuildMemCpy(cg->b, cg_ptr(cg, y), 4, cg_ptr(cg, x), 4, cg_i64(cg, count * 4));
    LLVMValueRef idx = cg_i64(cg, k);
    LLVMBuildStore(cg->b, cg_ptr(cg, y),
                   LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, ptrs, &idx, 1, ""));
    LLVMBuildStore(cg->b, cg_i64(cg, count),
                   LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, sizes, &idx, 1, ""));
    total += count;
  }
  if (bucket_wait_index(cg->f, bucket_id(n)) > cg->cur) /* overlapped: started here */
    cg_check_status(cg, CALL("mmrt_all_reduce_bucket_start", cg->mesh,
                             I32((int)attr(n, IR_ATTR_MESH)->i), I32((int)bucket_id(n)), ptrs,
                             sizes, I32(run), I32(MMRT_F32), F32(1)));
  else
    cg_check_status(cg, CALL("mmrt_all_reduce_buckets", cg->mesh,
                             I32((int)attr(n, IR_ATTR_MESH)->i), ptrs, sizes, I32(run),
                             I32(MMRT_F32), cg_i64(cg, total > 0 ? total * 4 : 4), F32(1)));
  return true;
}

/* A reduce-scatter bucket (ZeRO): one mmrt_reduce_scatter_bucket call over
 * the `run` consecutive reduce_scatter nodes from this one; the runtime
 * packs every operand before it writes any result. */
static bool lower_rs_bucket(Cg *cg, const IrNode *n, int run) {
  LLVMValueRef sends = LLVMBuildArrayAlloca(cg->b, cg->t_ptr, I32(run), "sends");
  LLVMValueRef recvs = LLVMBuildArrayAlloca(cg->b, cg->t_ptr, I32(run), "recvs");
  LLVMValueRef dims = LLVMBuildArrayAlloca(cg->b, cg->t_i64, I32(3 * run), "dims");
  for (int k = 0; k < run; k++) {
    const IrNode *u = cg->f->nodes.items[cg->cur + k];
    const IrValue *x = u->in[0];
    if (x->dtype != IR_F32)
      return cg_error(cg, u, "collectives of %s are not supported", ir_dtype_name(x->dtype));
    int d = (int)attr(u, IR_ATTR_DIM)->i;
    int64_t g[3];
    around(&x->shape, d, &g[0], &g[2]);
    g[1] = x->shape.d[d];
    LLVMValueRef idx = cg_i64(cg, k);
    LLVMBuildStore(cg->b, cg_ptr(cg, x),
                   LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, sends, &idx, 1, ""));
    LLVMBuildStore(cg->b, cg_ptr(cg, u->out[0]),
                   LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, recvs, &idx, 1, ""));
    for (int j = 0; j < 3; j++) {
      LLVMValueRef at = cg_i64(cg, 3 * k + j);
      LLVMBuildStore(cg->b, cg_i64(cg, g[j]),
                     LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, dims, &at, 1, ""));
    }
  }
  if (bucket_wait_index(cg->f, bucket_id(n)) > cg->cur) /* overlapped: started here */
    cg_check_status(cg, CALL("mmrt_reduce_scatter_bucket_start", cg->mesh,
                             I32((int)attr(n, IR_ATTR_MESH)->i), I32((int)bucket_id(n)), sends,
                             recvs, dims, I32(run), I32(MMRT_F32)));
  else
    cg_check_status(cg,
                    CALL("mmrt_reduce_scatter_bucket", cg->mesh, I32((int)attr(n, IR_ATTR_MESH)->i),
                         sends, recvs, dims, I32(run), I32(MMRT_F32)));
  return true;
}

/* The end of an overlapped bucket (passes/bucket.c): its results are
 * complete after the runtime's wait. */
static bool lower_bucket_wait(Cg *cg, const IrNode *n) {
  int64_t id = attr(n, IR_ATTR_BUCKET)->i;
  bool started = false;
  for (int i = 0; i < cg->cur && !started; i++) started = async_slot(cg->f->nodes.items[i]) == id;
  if (!started)
    return cg_error(cg, n, "bucket_wait of bucket %lld, which no collective before it starts",
                    (long long)id);
  if (!cg->mesh) return cg_error(cg, n, "bucket_wait outside a multi-rank program");
  cg_check_status(cg, CALL("mmrt_bucket_wait", cg->mesh, I32((int)id)));
  return true;
}

/* Node n (the current one) is part of a bucket call: a run of several, or
 * one overlapped (started here, waited for later); a blocking bucket of
 * one gradient is an ordinary collective. */
static bool in_bucket(const Cg *cg, const IrNode *n) {
  return bucket_run(cg->f, cg->cur) != 1 ||
         (bucket_id(n) >= 0 && bucket_wait_index(cg->f, bucket_id(n)) > cg->cur);
}

/* A collective over cp in the balanced layout (ir_cp_balanced; runtime/comm/mmrt_ring.c). */
static bool lower_cp_balanced(Cg *cg, const IrNode *n, int d) {
  const IrValue *x = n->in[0], *y = n->out[0];
  const IrValue *whole = n->op == IR_OP_ALL_GATHER ? y : x; /* the side whole along d */
  int64_t outer, inner, dim = whole->shape.d[d];
  around(&whole->shape, d, &outer, &inner);
  if (n->op == IR_OP_ALL_SLICE) {
    CALL("mmrt_cp_slice_balanced", cg->mesh, O(0), V(0), cg_i64(cg, outer), cg_i64(cg, dim),
         cg_i64(cg, inner), cg_i64(cg, ir_dtype_size(x->dtype)), I32(cp_ulysses(cg)));
    return true;
  }
  if (x->dtype != IR_F32)
    return cg_error(cg, n, "collectives of %s are not supported", ir_dtype_name(x->dtype));
  if (n->op != IR_OP_ALL_GATHER && n->op != IR_OP_REDUCE_SCATTER)
    return cg_error(cg, n,
                    "%s over cp in the balanced layout of a causal ring attention is not "
                    "supported",
                    ir_ops[n->op].name);
  cg_check_status(cg, CALL(n->op == IR_OP_ALL_GATHER ? "mmrt_cp_gather_balanced"
                                                     : "mmrt_cp_reduce_scatter_balanced",
                           cg->mesh, O(0), V(0), cg_i64(cg, outer), cg_i64(cg, dim),
                           cg_i64(cg, inner), I32(cp_ulysses(cg))));
  return true;
}

static bool lower_collective(Cg *cg, const IrNode *n) {
  int ax = (int)attr(n, IR_ATTR_MESH)->i, d = (int)attr(n, IR_ATTR_DIM)->i;
  const IrValue *x = n->in[0], *y = n->out[0];
  if (ax == IR_AX_CP && n->op != IR_OP_ALL_REDUCE && ir_cp_balanced(cg->m))
    return lower_cp_balanced(cg, n, d);
  if (n->op ==
      IR_OP_ALL_SLICE) /* no communication: this rank's part of x along d (any dtype: a copy) */
    return cg_loop_all_slice(cg, n, CALL("mmrt_step_coord", cg->mesh, I32(ax)));
  if (x->dtype != IR_F32 && x->dtype != IR_BF16)
    return cg_error(cg, n, "collectives of %s are not supported", ir_dtype_name(x->dtype));
  int cdt = x->dtype == IR_BF16 ? MMRT_BF16 : MMRT_F32; /* bf16: activations (precision pass) */
  int64_t outer, inner;
  LLVMValueRef r;
  switch (n->op) {
    case IR_OP_ALL_REDUCE:
      if (in_bucket(cg, n)) /* a bucket: lowered at its first node */
        return bucket_run(cg->f, cg->cur) == 0 || lower_bucket(cg, n, bucket_run(cg->f, cg->cur));
      r = CALL("mmrt_all_reduce", cg->mesh, I32(ax), V(0), O(0), cg_i64(cg, ir_numel(&x->shape)),
               I32(cdt));
      break;
    case IR_OP_ALL_GATHER: /* x: this rank's part of y along d */
      around(&y->shape, d, &outer, &inner);
      /* a ZeRO-3 prefetch (passes/bucket.c) posts it, its bucket_wait ends it */
      if (prefetch_id(n) >= 0 && bucket_wait_index(cg->f, prefetch_id(n)) > cg->cur)
        r = CALL("mmrt_all_gather_start", cg->mesh, I32(ax), I32((int)prefetch_id(n)), V(0), O(0),
                 cg_i64(cg, outer), cg_i64(cg, y->shape.d[d]), cg_i64(cg, inner), I32(cdt));
      else
        r = CALL("mmrt_all_gather", cg->mesh, I32(ax), V(0), O(0), cg_i64(cg, outer),
                 cg_i64(cg, y->shape.d[d]), cg_i64(cg, inner), I32(cdt));
      break;
    case IR_OP_REDUCE_SCATTER: /* y: this rank's part of the sum of x along d */
      if (in_bucket(cg, n))    /* a bucket: lowered at its first node */
        return bucket_run(cg->f, cg->cur) == 0 ||
               lower_rs_bucket(cg, n, bucket_run(cg->f, cg->cur));
      around(&x->shape, d, &outer, &inner);
      r = CALL("mmrt_reduce_scatter", cg->mesh, I32(ax), V(0), O(0), cg_i64(cg, outer),
               cg_i64(cg, x->shape.d[d]), cg_i64(cg, inner), I32(cdt));
      break;
    case IR_OP_ALL_TO_ALL: { /* the tensor on the axis' group: x's local shape, whole along d */
      int64_t sh[IR_MAX_RANK];
      LLVMValueRef e[IR_MAX_RANK];
      for (int i = 0; i < x->shape.rank; i++) {
        sh[i] = x->shape.d[i] * (i == d ? cg->m->mesh[ax] : 1);
        e[i] = cg_i64(cg, sh[i]);
      }
      LLVMValueRef shape =
          cg_const_global(cg, LLVMConstArray2(cg->t_i64, e, (uint64_t)x->shape.rank), "shape");
      r = CALL("mmrt_all_to_all", cg->mesh, I32(ax), V(0), O(0), shape, I32(x->shape.rank), I32(d),
               I32(attr(n, IR_ATTR_TO)->i), I32(cdt));
      break;
    }
    default: return cg_error(cg, n, "not a collective");
  }
  cg_check_status(cg, r);
  return true;
}

/* ---- elementwise: binary arithmetic through the runtime when alone ----
 * Every other elementwise op, alone or fused, is a generated loop, so that
 * an op computes the same bits whether fusion merged it or not (recompute's
 * clones fuse differently from the forward they repeat). */

static bool all_f32(const IrNode *n) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i]->dtype != IR_F32) return false;
  return n->out[0]->dtype == IR_F32;
}

static bool lower_elementwise(Cg *cg, const IrNode *n) {
  int bin = n->op == IR_OP_ADD   ? MMRT_BIN_ADD
            : n->op == IR_OP_SUB ? MMRT_BIN_SUB
            : n->op == IR_OP_MUL ? MMRT_BIN_MUL
            : n->op == IR_OP_DIV ? MMRT_BIN_DIV
                                 : -1;
  if (bin >= 0 && all_f32(n) && n->out[0]->shape.rank <= MMRT_MAX_DIMS && fits(cg, n)) {
    int r = n->out[0]->shape.rank ? n->out[0]->shape.rank : 1;
    int32_t sh[3][MMRT_MAX_DIMS];
    const IrShape *s[3] = {&n->out[0]->shape, &n->in[0]->shape, &n->in[1]->shape};
    for (int k = 0; k < 3; k++)
      for (int d = 0; d < r; d++) {
        int i = d - (r - s[k]->rank);
        sh[k][d] = i >= 0 ? (int32_t)s[k]->d[i] : 1;
      }
    CALL("mmrt_binary_fwd", I32(bin), O(0), cg_i32_array(cg, sh[0], r), V(0),
         cg_i32_array(cg, sh[1], r), V(1), cg_i32_array(cg, sh[2], r), I32(r));
    return true;
  }
  return cg_loop_elementwise(cg, n);
}

/* ---- optimizer ---- */

/* A grad_norm whose result no other grad_norm reads: the norm of them all. */
static bool last_norm(const Cg *cg, const IrNode *n) {
  for (int i = 0; i < cg->f->nodes.len; i++) {
    const IrNode *c = cg->f->nodes.items[i];
    for (int k = 0; c->op == IR_OP_GRAD_NORM && k < c->nin; k++)
      if (c->in[k] == n->out[0]) return false;
  }
  return true;
}

/* sqrt of the sum of squares of every operand; the operands split over
 * mesh axes are summed per set of axes and that partial sum all-reduced.
 * In a pipeline rank's update: of the gradients its stages make, the last
 * norm's sum of squares summed over pp (every rank's own part once). */
static bool lower_grad_norm(Cg *cg, const IrNode *n) {
  LLVMValueRef ptrs = LLVMBuildArrayAlloca(cg->b, cg->t_ptr, cg_i32(cg, n->nin), "bufs");
  LLVMValueRef sizes = LLVMBuildArrayAlloca(cg->b, cg->t_i64, cg_i32(cg, n->nin), "sizes");
  LLVMValueRef total = cg_f64(cg, 0);
  for (int axes = 0; axes < 1 << IR_NAXES; axes++) {
    int k = 0;
    for (int i = 0; i < n->nin; i++) {
      if (cg_split_axes(cg, n->in[i]) != axes || !cg_pp_keeps_grad(cg, n->in[i])) continue;
      LLVMValueRef idx = cg_i64(cg, k++);
      LLVMBuildStore(cg->b, V(i), LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, ptrs, &idx, 1, ""));
      LLVMBuildStore(cg->b, cg_i64(cg, ir_numel(&n->in[i]->shape)),
                     LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, sizes, &idx, 1, ""));
    }
    if (!k) continue;
    LLVMValueRef part = CALL("mmrt_sum_squares", ptrs, sizes, I32(k));
    if (axes) {
      LLVMValueRef slot = LLVMBuildAlloca(cg->b, cg->t_f32, "part");
      LLVMBuildStore(cg->b, LLVMBuildFPTrunc(cg->b, part, cg->t_f32, ""), slot);
      cg_check_status(cg, CALL("mmrt_step_all_reduce", cg->mesh, I32(axes), slot, cg_i64(cg, 1)));
      part = LLVMBuildFPExt(cg->b, LLVMBuildLoad2(cg->b, cg->t_f32, slot, ""), cg->t_f64, "");
    }
    total = LLVMBuildFAdd(cg->b, total, part, "");
  }
  if (cg->pp_rank1 && last_norm(cg, n)) {
    LLVMValueRef slot = LLVMBuildAlloca(cg->b, cg->t_f64, "pp_sum");
    LLVMBuildStore(cg->b, total, slot);
    cg_check_status(cg, CALL("mmrt_pp_sum_f64", cg->mesh, slot));
    total = LLVMBuildLoad2(cg->b, cg->t_f64, slot, "");
  }
  LLVMValueRef norm = cg_intrinsic(cg, "llvm.sqrt", cg->t_f64, &total, 1);
  LLVMBuildStore(cg->b, LLVMBuildFPTrunc(cg->b, norm, cg->t_f32, ""), O(0));
  return true;
}

/* What the kernels cannot do on split values yet (docs/design/parallelism.md,
 * "Kernels on split values"): a message instead of wrong numbers. */
static bool split_ok(Cg *cg, const IrNode *n) {
  int any = 0;
  for (int i = 0; i < n->nin; i++) any |= cg_split_axes(cg, n->in[i]);
  if (!any) return true;
  const CgOrig *x = cg_orig(cg, n->in[0]);
  switch (n->op) {
    case IR_OP_EMBEDDING:
    case IR_OP_EMBEDDING_GRAD: {
      const IrValue *table = n->op == IR_OP_EMBEDDING ? n->in[1] : n->out[0];
      if (split_axis(cg, table, 0) == -2)
        return cg_error(cg, n, "a table split by several axes is not supported");
      return true;
    }
    case IR_OP_MSE: return cg_error(cg, n, "a mean over split values is not supported yet");
    case IR_OP_SLICE:
    case IR_OP_PAD_SLICE:
    case IR_OP_CONCAT:
      for (int a = 0; a < IR_NAXES; a++)
        if (x->pl[a].kind == IR_PL_S && x->pl[a].dim == attr(n, IR_ATTR_AXIS)->i &&
            cg->m->mesh[a] > 1)
          return cg_error(cg, n, "%s along a split dim is not supported", ir_ops[n->op].name);
      return true;
    default: return true;
  }
}

static bool lower_clip_scale(Cg *cg, const IrNode *n) {
  LLVMValueRef norm = LLVMBuildFPExt(cg->b, cg_load_f32(cg, n->in[0]), cg->t_f64, "");
  LLVMValueRef s = CALL("mmrt_clip_scale", norm, cg_f64(cg, attr(n, IR_ATTR_VALUE)->f));
  LLVMBuildStore(cg->b, s, O(0));
  return true;
}

/* adamw(param, grad, m, v, lr, step, scale): with the adamw nodes that
 * follow it and join its call (ir_adamw_run_end), one call of
 * mmrt_adamw_steps (one parallel region for the whole update, not one per
 * tensor); the later nodes are skipped (cg->skip_to) */
static bool lower_adamw(Cg *cg, const IrNode *n) {
  int last = ir_adamw_run_end(cg->f, cg->cur, cg->keep);
  int count = last - cg->cur + 1;
  LLVMValueRef arr[4], sizes = LLVMBuildArrayAlloca(cg->b, cg->t_i64, I32(count), "sizes"),
                       wds = LLVMBuildArrayAlloca(cg->b, cg->t_f32, I32(count), "wds");
  for (int k = 0; k < 4; k++) arr[k] = LLVMBuildArrayAlloca(cg->b, cg->t_ptr, I32(count), "opt");
  for (int j = 0; j < count; j++) {
    const IrNode *m = cg->f->nodes.items[cg->cur + j];
    LLVMValueRef idx = cg_i64(cg, j);
    for (int k = 0; k < 4; k++)
      LLVMBuildStore(cg->b, cg_ptr(cg, m->in[k]),
                     LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, arr[k], &idx, 1, ""));
    LLVMBuildStore(cg->b, cg_i64(cg, ir_numel(&m->in[0]->shape)),
                   LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, sizes, &idx, 1, ""));
    LLVMBuildStore(cg->b, F32(attr(m, IR_ATTR_WEIGHT_DECAY)->f),
                   LLVMBuildInBoundsGEP2(cg->b, cg->t_f32, wds, &idx, 1, ""));
  }
  LLVMValueRef step = LLVMBuildFPToSI(cg->b, cg_load_f32(cg, n->in[5]), cg->t_i32, "");
  CALL("mmrt_adamw_steps", arr[0], arr[1], arr[2], arr[3], sizes, wds, I32(count),
       cg_load_f32(cg, n->in[4]), F32(attr(n, IR_ATTR_BETA1)->f), F32(attr(n, IR_ATTR_BETA2)->f),
       F32(attr(n, IR_ATTR_EPS)->f), cg_load_f32(cg, n->in[6]), step);
  cg->skip_to = last;
  return true;
}

/* sgd(param, grad, mom, lr, scale) */
static bool lower_sgd(Cg *cg, const IrNode *n) {
  CALL("mmrt_sgd_step", V(0), V(1), V(2), cg_i64(cg, ir_numel(&n->in[0]->shape)),
       cg_load_f32(cg, n->in[3]), F32(attr(n, IR_ATTR_MOMENTUM)->f),
       F32(attr(n, IR_ATTR_WEIGHT_DECAY)->f), cg_load_f32(cg, n->in[4]), I32(0));
  return true;
}

/* ---- layout ---- */

/* A view's storage is its operand's (memplan put it there): nothing to do;
 * otherwise a copy. */
static bool lower_view(Cg *cg, const IrNode *n) {
  int64_t off = mp_view_offset(cg->m, n);
  const IrValue *x = n->in[0], *y = n->out[0];
  if (off >= 0 && x->mem_arena == y->mem_arena && x->mem_offset + off == y->mem_offset) return true;
  return cg_loop_copy(cg, n);
}

static bool lower_reshard(Cg *cg, const IrNode *n) {
  return cg_error(cg, n, "a reshard left after the collectives pass");
}

/* Each op's lowering, as its CG(fn, first, count) column names it: fn, after
 * operands first .. first + count - 1 (ALL: every operand) and the results
 * were checked to be f32. */
typedef struct CgLowering {
  bool (*fn)(Cg *cg, const IrNode *n);
  int f32_first, f32_count;
} CgLowering;
#define ALL                  (-1)
#define CG(fn, first, count) {fn, first, count}
#define NOCG                 {NULL, 0, 0}
static const CgLowering lowerings[IR_OP_COUNT] = {
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, G, SHARD, E, L, ...) [IR_OP_##N] = L,
#include "../ir/ops.def"
#undef OP
};
#undef ALL
#undef CG
#undef NOCG

bool cg_lower_node(Cg *cg, const IrNode *n) {
  if (!fits(cg, n) || !split_ok(cg, n)) return false;
  const CgLowering *l = &lowerings[n->op];
  if (!l->fn) return cg_error(cg, n, "the backend has no lowering for this op yet");
  if (l->f32_count && !need_f32(cg, n, l->f32_first, l->f32_count < 0 ? n->nin : l->f32_count))
    return false;
  return l->fn(cg, n);
}
