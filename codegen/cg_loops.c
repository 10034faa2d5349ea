/* Loop nests in LLVM IR, for what runs as a loop rather than a kernel call:
 * fused elementwise programs (one pass over memory for a whole chain),
 * elementwise ops the runtime lacks, layout ops (transpose, slice, concat,
 * expand, pad_slice), reductions, row-wise softmax variants, mse and fill.
 *
 * Each nest is an internal function `loop.N(ptr..., i64...)` called from
 * the step function with arena pointers. Its iteration space has the dims
 * merged wherever every access stays affine (a bias add over [B, T, C]
 * becomes rows x C, a same-shape chain one flat loop), so the innermost
 * loop is a unit-stride or invariant access that LLVM's loop vectoriser
 * turns into host-width vector code. Pointers are `noalias`: the memory
 * plan guarantees that a result and its operands either are the same
 * storage (in place, passed as one pointer) or do not overlap. */
#include <math.h>
#include <string.h>

#include "../ir/ir_fused.h"
#include "cg_internal.h"

void cg_strides(const IrShape *s, int64_t *st) {
  int64_t k = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    st[d] = k;
    k *= s->d[d];
  }
}

void cg_bcast_strides(const IrShape *in, const IrShape *out, int64_t *st) {
  int64_t c[IR_MAX_RANK];
  cg_strides(in, c);
  for (int d = 0; d < out->rank; d++) {
    int i = d - (out->rank - in->rank);
    st[d] = i < 0 || in->d[i] == 1 ? 0 : c[i];
  }
}

/* ---- one access pattern per pointer ---- */

typedef struct Access {
  const IrValue *v;     /* the storage (arena, offset) */
  int64_t byte_off;     /* added to the value's offset */
  LLVMValueRef dyn_off; /* i64 bytes known only when the step runs (this rank's part), or NULL */
  int64_t stride[IR_MAX_RANK];
  IrDType dt;
  int param; /* index of the helper function's pointer parameter */
} Access;

typedef enum MapKind { MAP_PROG, MAP_COPY, MAP_ACCUM, MAP_STORE_CONST } MapKind;

typedef struct Map {
  const IrNode *node;
  MapKind kind;
  int rank;
  int64_t dims[IR_MAX_RANK];
  int nacc;
  Access acc[CG_MAX_PTRS]; /* 0: the result; 1 + K: operand K */
  const IrFusedProg *prog; /* MAP_PROG */
  double value;            /* MAP_STORE_CONST */
  bool dropout;            /* the program has an active dropout: extra params seed, stream */
} Map;

/* Drop size-1 dims and merge neighbours that stay affine for every access
 * and for the flat element index. */
static void collapse(Map *m) {
  int r = 0;
  for (int d = 0; d < m->rank; d++) {
    if (m->dims[d] == 1) continue;
    if (r > 0) {
      bool merge = true;
      for (int k = 0; k < m->nacc && merge; k++)
        if (m->acc[k].stride[r - 1] != m->acc[k].stride[d] * m->dims[d]) merge = false;
      if (merge) { /* flat strides are contiguous by construction */
        m->dims[r - 1] *= m->dims[d];
        for (int k = 0; k < m->nacc; k++) m->acc[k].stride[r - 1] = m->acc[k].stride[d];
        continue;
      }
    }
    m->dims[r] = m->dims[d];
    for (int k = 0; k < m->nacc; k++) m->acc[k].stride[r] = m->acc[k].stride[d];
    r++;
  }
  m->rank = r;
}

/* ---- loops with an optional accumulator ---- */

typedef struct Loop {
  LLVMBasicBlockRef header;
  LLVMValueRef i, acc;
} Loop;

static Loop loop_begin_at(Cg *cg, LLVMValueRef acc_init, LLVMValueRef start) {
  Loop l;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
  LLVMValueRef fn = LLVMGetBasicBlockParent(pre);
  l.header = LLVMAppendBasicBlockInContext(cg->ctx, fn, "loop");
  LLVMBuildBr(cg->b, l.header);
  LLVMPositionBuilderAtEnd(cg->b, l.header);
  l.i = LLVMBuildPhi(cg->b, cg->t_i64, "i");
  LLVMAddIncoming(l.i, &start, &pre, 1);
  l.acc = NULL;
  if (acc_init) {
    l.acc = LLVMBuildPhi(cg->b, LLVMTypeOf(acc_init), "acc");
    LLVMAddIncoming(l.acc, &acc_init, &pre, 1);
  }
  return l;
}

static Loop loop_begin(Cg *cg, LLVMValueRef acc_init) {
  return loop_begin_at(cg, acc_init, cg_i64(cg, 0));
}

/* Closes a do-while loop that runs while i + 1 < end (start < end); returns
 * the accumulator's last value (acc_next) or NULL. */
static LLVMValueRef loop_end_at(Cg *cg, Loop *l, LLVMValueRef end, LLVMValueRef acc_next) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
  LLVMValueRef fn = LLVMGetBasicBlockParent(latch);
  LLVMValueRef next = LLVMBuildNUWAdd(cg->b, l->i, cg_i64(cg, 1), "");
  LLVMAddIncoming(l->i, &next, &latch, 1);
  if (l->acc) LLVMAddIncoming(l->acc, &acc_next, &latch, 1);
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->ctx, fn, "done");
  LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, next, end, ""), l->header, exit);
  LLVMPositionBuilderAtEnd(cg->b, exit);
  return acc_next;
}

/* A do-while loop of `count` (>= 1) iterations. */
static LLVMValueRef loop_end(Cg *cg, Loop *l, int64_t count, LLVMValueRef acc_next) {
  return loop_end_at(cg, l, cg_i64(cg, count), acc_next);
}

static LLVMValueRef elem_ptr(Cg *cg, LLVMValueRef base, IrDType dt, LLVMValueRef off) {
  return LLVMBuildInBoundsGEP2(cg->b, cg_dtype(cg, dt), base, &off, 1, "");
}

/* ---- scalar semantics of the elementwise ops ---- */

static LLVMValueRef xfconst(Cg *cg, double v) {
  return cg_f32(cg, v);
}
static LLVMValueRef xfmul(Cg *cg, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(cg->b, a, b, "");
}
static LLVMValueRef xfadd(Cg *cg, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(cg->b, a, b, "");
}
static LLVMValueRef xfsub(Cg *cg, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFSub(cg->b, a, b, "");
}
static LLVMValueRef xfdiv(Cg *cg, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFDiv(cg->b, a, b, "");
}
/* exp, tanh and erf as straight-line float arithmetic (no libm calls), so
 * that loops using them vectorise: Cephes' expf (range reduction by ln 2,
 * a degree-6 polynomial, the exponent set by bits; about 1 ulp), Cephes'
 * tanhf (a polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above) and
 * Abramowitz & Stegun 7.1.26 for erf (absolute error below 1.5e-7). */
static LLVMValueRef fmin_max(Cg *cg, const char *f, LLVMValueRef x, double c) {
  LLVMValueRef a[2] = {x, xfconst(cg, c)};
  return cg_intrinsic(cg, f, cg->t_f32, a, 2);
}

static LLVMValueRef poly(Cg *cg, LLVMValueRef x, const double *c,
                         int n) { /* c[0] x^(n-1) + ... + c[n-1] */
  LLVMValueRef p = xfconst(cg, c[0]);
  for (int i = 1; i < n; i++) p = xfadd(cg, xfmul(cg, p, x), xfconst(cg, c[i]));
  return p;
}

static LLVMValueRef xfexp(Cg *cg, LLVMValueRef x) {
  static const double P[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  x = fmin_max(cg, "llvm.maxnum", fmin_max(cg, "llvm.minnum", x, 88.3762626647949),
               -87.3365447504019);
  LLVMValueRef t = xfadd(cg, xfmul(cg, x, xfconst(cg, 1.44269504088896341)), xfconst(cg, 0.5));
  LLVMValueRef n = cg_intrinsic(cg, "llvm.floor", cg->t_f32, &t, 1);
  LLVMValueRef r = xfsub(cg, xfsub(cg, x, xfmul(cg, n, xfconst(cg, 0.693359375))),
                         xfmul(cg, n, xfconst(cg, -2.12194440e-4)));
  LLVMValueRef r2 = xfmul(cg, r, r);
  LLVMValueRef p = xfadd(cg, xfadd(cg, xfmul(cg, poly(cg, r, P, 6), r2), r), xfconst(cg, 1));
  LLVMValueRef e =
      LLVMBuildAdd(cg->b, LLVMBuildFPToSI(cg->b, n, cg->t_i32, ""), cg_i32(cg, 127), "");
  LLVMValueRef scale =
      LLVMBuildBitCast(cg->b, LLVMBuildShl(cg->b, e, cg_i32(cg, 23), ""), cg->t_f32, "");
  return xfmul(cg, p, scale);
}

static LLVMValueRef xfabs(Cg *cg, LLVMValueRef x) {
  return cg_intrinsic(cg, "llvm.fabs", cg->t_f32, &x, 1);
}
static LLVMValueRef xfcopysign(Cg *cg, LLVMValueRef mag, LLVMValueRef sgn) {
  LLVMValueRef a[2] = {mag, sgn};
  return cg_intrinsic(cg, "llvm.copysign", cg->t_f32, a, 2);
}

static LLVMValueRef xftanh(Cg *cg, LLVMValueRef x) {
  static const double P[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                             1.33314422036E-1, -3.33332819422E-1};
  LLVMValueRef ax = xfabs(cg, x), z = xfmul(cg, x, x);
  LLVMValueRef small = xfadd(cg, x, xfmul(cg, xfmul(cg, x, z), poly(cg, z, P, 5)));
  LLVMValueRef e = xfexp(cg, xfmul(cg, ax, xfconst(cg, 2)));
  LLVMValueRef big = xfcopysign(
      cg, xfsub(cg, xfconst(cg, 1), xfdiv(cg, xfconst(cg, 2), xfadd(cg, e, xfconst(cg, 1)))), x);
  return LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOLT, ax, xfconst(cg, 0.625), ""),
                         small, big, "");
}

static LLVMValueRef xferf(Cg *cg, LLVMValueRef x) {
  static const double A[] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592, 0};
  LLVMValueRef ax = xfabs(cg, x);
  LLVMValueRef t =
      xfdiv(cg, xfconst(cg, 1), xfadd(cg, xfconst(cg, 1), xfmul(cg, ax, xfconst(cg, 0.3275911))));
  LLVMValueRef y =
      xfsub(cg, xfconst(cg, 1),
            xfmul(cg, poly(cg, t, A, 6), xfexp(cg, LLVMBuildFNeg(cg->b, xfmul(cg, x, x), ""))));
  return xfcopysign(cg, y, x);
}
static LLVMValueRef xfsqrt(Cg *cg, LLVMValueRef x) {
  return cg_intrinsic(cg, "llvm.sqrt", cg->t_f32, &x, 1);
}
static LLVMValueRef sigmoid(Cg *cg, LLVMValueRef x) {
  return xfdiv(cg, xfconst(cg, 1),
               xfadd(cg, xfconst(cg, 1), xfexp(cg, LLVMBuildFNeg(cg->b, x, ""))));
}

#define SQRT1_2      0.70710678118654752440
#define SQRT_2_PI    0.79788456080286535588 /* sqrt(2 / pi) */
#define INV_SQRT_2PI 0.39894228040143267794
#define GELU_C       0.044715

/* gelu(x) = x Phi(x);  gelu'(x) = Phi(x) + x phi(x) */
static LLVMValueRef gelu(Cg *cg, LLVMValueRef x, bool grad) {
  LLVMValueRef phi_cdf =
      xfmul(cg, xfconst(cg, 0.5),
            xfadd(cg, xfconst(cg, 1), xferf(cg, xfmul(cg, x, xfconst(cg, SQRT1_2)))));
  if (!grad) return xfmul(cg, x, phi_cdf);
  LLVMValueRef pdf = xfmul(cg, xfconst(cg, INV_SQRT_2PI),
                           xfexp(cg, xfmul(cg, xfconst(cg, -0.5), xfmul(cg, x, x))));
  return xfadd(cg, phi_cdf, xfmul(cg, x, pdf));
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + c x^3) */
static LLVMValueRef gelu_tanh(Cg *cg, LLVMValueRef x, bool grad) {
  LLVMValueRef x2 = xfmul(cg, x, x);
  LLVMValueRef u = xfmul(cg, xfconst(cg, SQRT_2_PI),
                         xfadd(cg, x, xfmul(cg, xfconst(cg, GELU_C), xfmul(cg, x2, x))));
  LLVMValueRef t = xftanh(cg, u);
  LLVMValueRef half1t = xfmul(cg, xfconst(cg, 0.5), xfadd(cg, xfconst(cg, 1), t));
  if (!grad) return xfmul(cg, x, half1t);
  LLVMValueRef du = xfmul(cg, xfconst(cg, SQRT_2_PI),
                          xfadd(cg, xfconst(cg, 1), xfmul(cg, xfconst(cg, 3 * GELU_C), x2)));
  LLVMValueRef sech2 = xfsub(cg, xfconst(cg, 1), xfmul(cg, t, t));
  return xfadd(cg, half1t, xfmul(cg, xfmul(cg, xfconst(cg, 0.5), x), xfmul(cg, sech2, du)));
}

/* bf16 in loops: a bf16 element is loaded into an f32 (its 16 bits are the
 * high half of the f32's), every op on it computes in f32, and a bf16
 * result is rounded to the nearest bf16 (ties to even; a NaN stays a quiet
 * NaN) and kept as that f32 until it is stored as its high 16 bits. */
static LLVMValueRef bf16_load(Cg *cg, LLVMValueRef h) {
  LLVMValueRef u = LLVMBuildShl(cg->b, LLVMBuildZExt(cg->b, h, cg->t_i32, ""), cg_i32(cg, 16), "");
  return LLVMBuildBitCast(cg->b, u, cg->t_f32, "");
}

static LLVMValueRef bf16_round(Cg *cg, LLVMValueRef x) {
  LLVMValueRef u = LLVMBuildBitCast(cg->b, x, cg->t_i32, "");
  LLVMValueRef lsb =
      LLVMBuildAnd(cg->b, LLVMBuildLShr(cg->b, u, cg_i32(cg, 16), ""), cg_i32(cg, 1), "");
  LLVMValueRef r = LLVMBuildAdd(cg->b, LLVMBuildAdd(cg->b, u, cg_i32(cg, 0x7fff), ""), lsb, "");
  LLVMValueRef hi = LLVMConstInt(cg->t_i32, 0xffff0000u, false);
  r = LLVMBuildAnd(cg->b, r, hi, "");
  LLVMValueRef qnan = LLVMBuildAnd(
      cg->b, LLVMBuildOr(cg->b, u, LLVMConstInt(cg->t_i32, 0x00400000u, false), ""), hi, "");
  LLVMValueRef isnan = LLVMBuildFCmp(cg->b, LLVMRealUNO, x, x, "");
  return LLVMBuildBitCast(cg->b, LLVMBuildSelect(cg->b, isnan, qnan, r, ""), cg->t_f32, "");
}

static LLVMValueRef bf16_bits(Cg *cg, LLVMValueRef x) { /* x: a bf16 value held in an f32 */
  LLVMValueRef u = LLVMBuildBitCast(cg->b, x, cg->t_i32, "");
  return LLVMBuildTrunc(cg->b, LLVMBuildLShr(cg->b, u, cg_i32(cg, 16), ""), cg->t_i16, "");
}

static LLVMValueRef cast(Cg *cg, LLVMValueRef x, IrDType from, IrDType to) {
  if (from == IR_BF16) from = IR_F32; /* held in an f32 */
  if (to == IR_BF16) return bf16_round(cg, cast(cg, x, from, IR_F32));
  if (from == to) return x;
  LLVMTypeRef t = cg_dtype(cg, to);
  bool ff = ir_dtype_is_float(from), tf = ir_dtype_is_float(to);
  if (ff && tf) return LLVMBuildFPCast(cg->b, x, t, "");
  if (ff)
    return to == IR_BOOL
               ? LLVMBuildZExt(
                     cg->b, LLVMBuildFCmp(cg->b, LLVMRealUNE, x, LLVMConstNull(LLVMTypeOf(x)), ""),
                     t, "")
               : LLVMBuildFPToSI(cg->b, x, t, "");
  if (tf)
    return from == IR_U8 || from == IR_BOOL ? LLVMBuildUIToFP(cg->b, x, t, "")
                                            : LLVMBuildSIToFP(cg->b, x, t, "");
  if (to == IR_BOOL)
    return LLVMBuildZExt(
        cg->b, LLVMBuildICmp(cg->b, LLVMIntNE, x, LLVMConstNull(LLVMTypeOf(x)), ""), t, "");
  return LLVMBuildIntCast2(cg->b, x, t, from != IR_U8 && from != IR_BOOL, "");
}

/* One instruction at one element. a: the argument values; dt: their dtypes;
 * flat: the element's index in the result (dropout masks). */
static LLVMValueRef eval_op(Cg *cg, const IrFusedInstr *in, LLVMValueRef *a, const IrDType *dt,
                            LLVMValueRef flat, LLVMValueRef seed, LLVMValueRef stream) {
  const IrAttrs *at = &in->attrs;
  bool fl = ir_dtype_is_float(in->dtype);
  IrDType t = in->dtype == IR_BF16 && in->op != IR_OP_CAST ? IR_F32 : in->dtype;
  LLVMTypeRef ty = cg_dtype(cg, t);
  switch (in->op) {
    case IR_OP_ADD: return fl ? xfadd(cg, a[0], a[1]) : LLVMBuildAdd(cg->b, a[0], a[1], "");
    case IR_OP_SUB: return fl ? xfsub(cg, a[0], a[1]) : LLVMBuildSub(cg->b, a[0], a[1], "");
    case IR_OP_MUL: return fl ? xfmul(cg, a[0], a[1]) : LLVMBuildMul(cg->b, a[0], a[1], "");
    case IR_OP_DIV: return fl ? xfdiv(cg, a[0], a[1]) : LLVMBuildSDiv(cg->b, a[0], a[1], "");
    case IR_OP_POW: return cg_intrinsic(cg, "llvm.pow", ty, a, 2);
    case IR_OP_ADD_SCALAR:
      return fl ? xfadd(cg, a[0], LLVMConstReal(ty, at->v[IR_ATTR_VALUE].f))
                : LLVMBuildAdd(
                      cg->b, a[0],
                      LLVMConstInt(ty, (unsigned long long)(int64_t)at->v[IR_ATTR_VALUE].f, true),
                      "");
    case IR_OP_MUL_SCALAR:
      return fl ? xfmul(cg, a[0], LLVMConstReal(ty, at->v[IR_ATTR_VALUE].f))
                : LLVMBuildMul(
                      cg->b, a[0],
                      LLVMConstInt(ty, (unsigned long long)(int64_t)at->v[IR_ATTR_VALUE].f, true),
                      "");
    case IR_OP_POW_SCALAR: {
      double p = at->v[IR_ATTR_VALUE].f;
      if (p == 2) return xfmul(cg, a[0], a[0]);
      if (p == 1) return a[0];
      if (p == 0.5) return xfsqrt(cg, a[0]);
      LLVMValueRef args[2] = {a[0], xfconst(cg, p)};
      return cg_intrinsic(cg, "llvm.pow", ty, args, 2);
    }
    case IR_OP_NEG: return fl ? LLVMBuildFNeg(cg->b, a[0], "") : LLVMBuildNeg(cg->b, a[0], "");
    case IR_OP_EXP: return xfexp(cg, a[0]);
    case IR_OP_LOG: return cg_intrinsic(cg, "llvm.log", ty, a, 1);
    case IR_OP_SQRT: return xfsqrt(cg, a[0]);
    case IR_OP_RSQRT: return xfdiv(cg, xfconst(cg, 1), xfsqrt(cg, a[0]));
    case IR_OP_TANH: return xftanh(cg, a[0]);
    case IR_OP_SIGMOID: return sigmoid(cg, a[0]);
    case IR_OP_RELU:
      return fl ? LLVMBuildSelect(cg->b,
                                  LLVMBuildFCmp(cg->b, LLVMRealOGT, a[0], xfconst(cg, 0), ""), a[0],
                                  xfconst(cg, 0), "")
                : LLVMBuildSelect(cg->b,
                                  LLVMBuildICmp(cg->b, LLVMIntSGT, a[0], LLVMConstNull(ty), ""),
                                  a[0], LLVMConstNull(ty), "");
    case IR_OP_ABS: return xfabs(cg, a[0]);
    case IR_OP_GELU: return gelu(cg, a[0], false);
    case IR_OP_GELU_TANH: return gelu_tanh(cg, a[0], false);
    case IR_OP_SILU: return xfmul(cg, a[0], sigmoid(cg, a[0]));
    case IR_OP_CAST: return cast(cg, a[0], dt[0], t);
    case IR_OP_DETACH: return a[0];
    case IR_OP_DROPOUT: {
      double p = at->v[IR_ATTR_P].f;
      if (!cg->training || p == 0 || !stream) return a[0];
      LLVMValueRef args[3] = {seed, stream, flat};
      LLVMValueRef u = cg_call(cg, "mmrt_rng_uniform_at", args, 3);
      LLVMValueRef keep = LLVMBuildFCmp(cg->b, LLVMRealOGE, u, xfconst(cg, p), "");
      return LLVMBuildSelect(cg->b, keep, xfmul(cg, a[0], xfconst(cg, 1.0 / (1.0 - p))),
                             xfconst(cg, 0), "");
    }
    /* gradients: a[0] = dy, a[1] = x (the activation's input) */
    case IR_OP_GELU_GRAD: return xfmul(cg, a[0], gelu(cg, a[1], true));
    case IR_OP_GELU_TANH_GRAD: return xfmul(cg, a[0], gelu_tanh(cg, a[1], true));
    case IR_OP_SILU_GRAD: {
      LLVMValueRef s = sigmoid(cg, a[1]);
      return xfmul(
          cg, a[0],
          xfmul(cg, s, xfadd(cg, xfconst(cg, 1), xfmul(cg, a[1], xfsub(cg, xfconst(cg, 1), s)))));
    }
    case IR_OP_ABS_GRAD: /* dy * sign(x), 0 at x = 0 */
      return LLVMBuildSelect(
          cg->b, LLVMBuildFCmp(cg->b, LLVMRealOGT, a[1], xfconst(cg, 0), ""), a[0],
          LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOLT, a[1], xfconst(cg, 0), ""),
                          LLVMBuildFNeg(cg->b, a[0], ""), xfconst(cg, 0), ""),
          "");
    case IR_OP_RELU_GRAD:
      return LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOGT, a[1], xfconst(cg, 0), ""),
                             a[0], xfconst(cg, 0), "");
    case IR_OP_SIGMOID_GRAD: {
      LLVMValueRef s = sigmoid(cg, a[1]);
      return xfmul(cg, a[0], xfmul(cg, s, xfsub(cg, xfconst(cg, 1), s)));
    }
    case IR_OP_TANH_GRAD: {
      LLVMValueRef th = xftanh(cg, a[1]);
      return xfmul(cg, a[0], xfsub(cg, xfconst(cg, 1), xfmul(cg, th, th)));
    }
    default: MM_UNREACHABLE();
  }
}

/* eval_op, with a bf16 result rounded (a cast rounds by itself) */
static LLVMValueRef eval(Cg *cg, const IrFusedInstr *in, LLVMValueRef *a, const IrDType *dt,
                         LLVMValueRef flat, LLVMValueRef seed, LLVMValueRef stream) {
  LLVMValueRef v = eval_op(cg, in, a, dt, flat, seed, stream);
  return in->dtype == IR_BF16 && in->op != IR_OP_CAST ? bf16_round(cg, v) : v;
}

/* Float ops on non-float dtypes, and dtypes without an LLVM type, are refused. */
static bool check_prog(Cg *cg, const IrNode *n, const IrFusedProg *p) {
  for (int i = 0; i < p->n; i++) {
    const IrFusedInstr *in = &p->ins[i];
    if (!cg_dtype(cg, in->dtype))
      return cg_error(cg, n, "dtype %s is not supported yet", ir_dtype_name(in->dtype));
    bool int_ok = in->op == IR_OP_ADD || in->op == IR_OP_SUB || in->op == IR_OP_MUL ||
                  in->op == IR_OP_DIV || in->op == IR_OP_ADD_SCALAR || in->op == IR_OP_MUL_SCALAR ||
                  in->op == IR_OP_NEG || in->op == IR_OP_RELU || in->op == IR_OP_CAST;
    if (!ir_dtype_is_float(in->dtype) && !int_ok)
      return cg_error(cg, n, "%s on %s is not supported", ir_ops[in->op].name,
                      ir_dtype_name(in->dtype));
    if (ir_dtype_is_float(in->dtype) && in->dtype != IR_F32 && in->dtype != IR_BF16)
      return cg_error(cg, n, "%s is not supported yet (f32 and bf16 only)",
                      ir_dtype_name(in->dtype));
  }
  return true;
}

/* ---- emitting one map ---- */

static bool same_place(const Access *a, const Access *b) {
  return a->v->mem_arena == b->v->mem_arena &&
         a->v->mem_offset + a->byte_off == b->v->mem_offset + b->byte_off &&
         a->dyn_off == b->dyn_off;
}

static int64_t extent_bytes(const Map *m, const Access *a) {
  int64_t last = 0;
  for (int d = 0; d < m->rank; d++) last += (m->dims[d] - 1) * a->stride[d];
  return (last + 1) * ir_dtype_size(a->dt);
}

/* The body at one element: offsets of every access, the flat index. */
static void body(Cg *cg, Map *m, LLVMValueRef *params, LLVMValueRef *idx, LLVMValueRef seed,
                 LLVMValueRef stream) {
  LLVMValueRef off[CG_MAX_PTRS];
  IrShape s = {.rank = m->rank};
  memcpy(s.d, m->dims, sizeof s.d);
  int64_t fst[IR_MAX_RANK];
  cg_strides(&s, fst);
  LLVMValueRef flat = cg_i64(cg, 0);
  for (int k = 0; k < m->nacc; k++) off[k] = cg_i64(cg, 0);
  for (int d = 0; d < m->rank; d++) {
    flat = LLVMBuildAdd(cg->b, flat, LLVMBuildMul(cg->b, idx[d], cg_i64(cg, fst[d]), ""), "");
    for (int k = 0; k < m->nacc; k++)
      if (m->acc[k].stride[d])
        off[k] = LLVMBuildAdd(cg->b, off[k],
                              LLVMBuildMul(cg->b, idx[d], cg_i64(cg, m->acc[k].stride[d]), ""), "");
  }
  const Access *o = &m->acc[0];
  LLVMValueRef optr = elem_ptr(cg, params[o->param], o->dt, off[0]);
  LLVMValueRef val;
  if (m->kind == MAP_STORE_CONST) {
    val = ir_dtype_is_float(o->dt)
              ? LLVMConstReal(cg_dtype(cg, o->dt), m->value)
              : LLVMConstInt(cg_dtype(cg, o->dt), (unsigned long long)(int64_t)m->value, true);
  } else if (m->kind == MAP_COPY || m->kind == MAP_ACCUM) {
    const Access *a = &m->acc[1];
    val = LLVMBuildLoad2(cg->b, cg_dtype(cg, a->dt), elem_ptr(cg, params[a->param], a->dt, off[1]),
                         "");
    if (m->kind == MAP_ACCUM)
      val = xfadd(cg, LLVMBuildLoad2(cg->b, cg_dtype(cg, o->dt), optr, ""), val);
  } else {
    const IrFusedProg *p = m->prog;
    LLVMValueRef in[CG_MAX_PTRS], *t = ARENA_ARRAY(cg->a, LLVMValueRef, p->n);
    for (int k = 1; k < m->nacc; k++) {
      const Access *a = &m->acc[k];
      in[k] = LLVMBuildLoad2(cg->b, cg_dtype(cg, a->dt),
                             elem_ptr(cg, params[a->param], a->dt, off[k]), "");
      if (a->dt == IR_BF16) in[k] = bf16_load(cg, in[k]);
    }
    for (int i = 0; i < p->n; i++) {
      const IrFusedInstr *ins = &p->ins[i];
      LLVMValueRef args[IR_FUSED_MAX_ARGS];
      IrDType dts[IR_FUSED_MAX_ARGS];
      for (int k = 0; k < ins->nargs; k++) {
        int r = ins->arg[k];
        args[k] = r >= 0 ? t[r] : in[-r]; /* operand K = -1 - r is access K + 1 */
        dts[k] = r >= 0 ? p->ins[r].dtype : m->acc[-r].dt;
      }
      t[i] = eval(cg, ins, args, dts, flat, seed, stream);
    }
    val = t[p->n - 1];
    if (o->dt == IR_BF16) val = bf16_bits(cg, val);
  }
  LLVMBuildStore(cg->b, val, optr);
}

/* The loops from dim d in; range (begin, end) or NULL: the outermost loop
 * runs over [begin, end) instead of its whole extent. */
static void nest(Cg *cg, Map *m, LLVMValueRef *params, int d, LLVMValueRef *idx, LLVMValueRef seed,
                 LLVMValueRef stream, LLVMValueRef *range) {
  if (d == m->rank) {
    body(cg, m, params, idx, seed, stream);
    return;
  }
  Loop l = loop_begin_at(cg, NULL, range && d == 0 ? range[0] : cg_i64(cg, 0));
  idx[d] = l.i;
  nest(cg, m, params, d + 1, idx, seed, stream, range);
  loop_end_at(cg, &l, range && d == 0 ? range[1] : cg_i64(cg, m->dims[d]), NULL);
}

/* Maps of at least IR_PAR_LOOP_MIN elements split their outermost loop
 * across the threads (mmrt_parallel_for); below, a parallel region's start
 * costs more than it saves. */

/* void par(ptr ctx, i64 begin, i64 end): loads the n arguments of fn (the
 * pointers, then i64s) from the slots of ctx and calls fn(args, begin, end). */
static LLVMValueRef trampoline(Cg *cg, LLVMValueRef fn, int nptr, int nextra) {
  LLVMBasicBlockRef saved;
  LLVMValueRef par = cg_begin_fn(cg, "par", 1, 2, &saved);
  LLVMValueRef args[CG_MAX_PTRS + 4], ctx = LLVMGetParam(par, 0);
  for (int k = 0; k < nptr + nextra; k++) {
    LLVMValueRef i = cg_i64(cg, k);
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, ctx, &i, 1, "");
    args[k] = LLVMBuildLoad2(cg->b, k < nptr ? cg->t_ptr : cg->t_i64, slot, "");
  }
  args[nptr + nextra] = LLVMGetParam(par, 1);
  args[nptr + nextra + 1] = LLVMGetParam(par, 2);
  LLVMBuildCall2(cg->b, LLVMGlobalGetValueType(fn), fn, args, (unsigned)(nptr + nextra + 2), "");
  cg_end_fn(cg, saved);
  return par;
}

/* The helper function of map m and its call from the step function. */
static bool emit_map(Cg *cg, Map *m, LLVMValueRef stream) {
  collapse(m);
  /* one parameter per distinct place */
  const Access *place[CG_MAX_PTRS];
  int np = 0;
  for (int k = 0; k < m->nacc; k++) {
    int p = 0;
    while (p < np && !same_place(place[p], &m->acc[k])) p++;
    if (p == np) place[np++] = &m->acc[k];
    m->acc[k].param = p;
  }
  /* noalias holds unless the result partly overlaps an operand */
  bool noalias = true;
  const Access *o = &m->acc[0];
  for (int k = 1; k < m->nacc; k++) {
    const Access *a = &m->acc[k];
    if (a->param == o->param || a->v->mem_arena != o->v->mem_arena) continue;
    int64_t lo1 = o->v->mem_offset + o->byte_off, hi1 = lo1 + extent_bytes(m, o);
    int64_t lo2 = a->v->mem_offset + a->byte_off, hi2 = lo2 + extent_bytes(m, a);
    if (lo1 < hi2 && lo2 < hi1) noalias = false;
  }
  bool dropout = stream != NULL;
  int64_t total = 1;
  for (int d = 0; d < m->rank; d++) total *= m->dims[d];
  /* split the outer loop only where each thread writes its own elements: not
   * an accumulation (y[kept] += x sums over dims, the outer one among them:
   * threads would add into the same y), not a result overlapping an operand */
  bool par =
      m->rank > 0 && total >= IR_PAR_LOOP_MIN && m->dims[0] > 1 && noalias && m->kind != MAP_ACCUM;
  int nextra = dropout ? 2 : 0;
  LLVMBasicBlockRef saved;
  LLVMValueRef fn = cg_begin_fn(cg, "loop", np, nextra + (par ? 2 : 0), &saved);
  LLVMValueRef params[CG_MAX_PTRS];
  unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (int p = 0; p < np; p++) {
    params[p] = LLVMGetParam(fn, (unsigned)p);
    if (noalias)
      LLVMAddAttributeAtIndex(fn, (unsigned)p + 1, LLVMCreateEnumAttribute(cg->ctx, kind, 0));
  }
  LLVMValueRef idx[IR_MAX_RANK];
  LLVMValueRef range[2] = {par ? LLVMGetParam(fn, (unsigned)(np + nextra)) : NULL,
                           par ? LLVMGetParam(fn, (unsigned)(np + nextra + 1)) : NULL};
  nest(cg, m, params, 0, idx, dropout ? LLVMGetParam(fn, (unsigned)np) : NULL,
       dropout ? LLVMGetParam(fn, (unsigned)np + 1) : NULL, par ? range : NULL);
  cg_end_fn(cg, saved);
  LLVMValueRef args[CG_MAX_PTRS + 2];
  for (int p = 0; p < np; p++) {
    LLVMValueRef base = cg_ptr(cg, place[p]->v);
    if (place[p]->byte_off) {
      LLVMValueRef off = cg_i64(cg, place[p]->byte_off);
      base = LLVMBuildInBoundsGEP2(cg->b, cg->t_i8, base, &off, 1, "");
    }
    if (place[p]->dyn_off) {
      LLVMValueRef off = place[p]->dyn_off;
      base = LLVMBuildInBoundsGEP2(cg->b, cg->t_i8, base, &off, 1, "");
    }
    args[p] = base;
  }
  int na = np;
  if (dropout) {
    args[na++] = cg->seed;
    args[na++] = stream;
  }
  if (par) { /* the arguments in slots of a stack array, the range split by the runtime */
    LLVMValueRef tramp = trampoline(cg, fn, np, nextra);
    LLVMValueRef ctx = LLVMBuildArrayAlloca(cg->b, cg->t_i64, cg_i64(cg, na), "ctx");
    for (int k = 0; k < na; k++) {
      LLVMValueRef i = cg_i64(cg, k);
      LLVMBuildStore(cg->b, args[k], LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, ctx, &i, 1, ""));
    }
    cg_call(cg, "mmrt_parallel_for", (LLVMValueRef[]){tramp, ctx, cg_i64(cg, m->dims[0])}, 3);
    return true;
  }
  LLVMTypeRef ft = LLVMGlobalGetValueType(fn);
  LLVMBuildCall2(cg->b, ft, fn, args, (unsigned)na, "");
  return true;
}

static void init_map(Map *m, const IrNode *n, MapKind kind, const IrShape *space) {
  memset(m, 0, sizeof *m);
  m->node = n;
  m->kind = kind;
  m->rank = space->rank;
  memcpy(m->dims, space->d, sizeof m->dims);
}

static Access *add_access(Map *m, const IrValue *v, int64_t byte_off) {
  Access *a = &m->acc[m->nacc++];
  a->v = v;
  a->byte_off = byte_off;
  a->dt = v->dtype;
  return a;
}

/* ---- elementwise ---- */

bool cg_loop_elementwise(Cg *cg, const IrNode *n) {
  IrFusedProg one, *p = &one;
  if (n->op == IR_OP_FUSED) {
    ir_fused_of(n, p, cg->a);
  } else { /* a single op: t0 = op(i0, i1, ...) */
    one.n = 1;
    one.ins = ARENA_NEW(cg->a, IrFusedInstr);
    one.ins->op = n->op;
    one.ins->attrs = n->attrs;
    one.ins->nargs = n->nin;
    one.ins->dtype = n->out[0]->dtype;
    one.ins->shape = n->out[0]->shape;
    for (int k = 0; k < n->nin; k++) one.ins->arg[k] = -1 - k;
  }
  if (!check_prog(cg, n, p)) return false;
  if (n->nin + 1 > CG_MAX_PTRS) return cg_error(cg, n, "too many operands");
  Map m;
  init_map(&m, n, MAP_PROG, &n->out[0]->shape);
  m.prog = p;
  cg_strides(&n->out[0]->shape, add_access(&m, n->out[0], 0)->stride);
  for (int k = 0; k < n->nin; k++)
    cg_bcast_strides(&n->in[k]->shape, &n->out[0]->shape, add_access(&m, n->in[k], 0)->stride);
  LLVMValueRef stream = NULL;
  for (int i = 0; i < p->n && cg->training; i++)
    if (p->ins[i].op == IR_OP_DROPOUT && p->ins[i].attrs.v[IR_ATTR_P].f > 0) {
      /* one mask stream per dropout site and step: "dropout/<seed>" mixed with the step */
      int64_t site =
          ir_attrs_has(&p->ins[i].attrs, IR_ATTR_SEED) ? p->ins[i].attrs.v[IR_ATTR_SEED].i : 0;
      LLVMValueRef name = LLVMBuildGlobalStringPtr(
          cg->b, arena_printf(cg->a, "dropout/%lld", (long long)site), "site");
      LLVMValueRef step =
          cg->step ? LLVMBuildFPToUI(cg->b, cg->step, cg->t_i64, "") : cg_i64(cg, 0);
      LLVMValueRef args[2] = {name, step};
      stream = cg_call(cg, "mmrt_rng_stream", args, 2);
      break; /* all dropouts of one program share the stream (one site) */
    }
  return emit_map(cg, &m, stream);
}

/* ---- layout ---- */

bool cg_loop_copy(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  if (!cg_dtype(cg, y->dtype))
    return cg_error(cg, n, "dtype %s is not supported yet", ir_dtype_name(y->dtype));
  int64_t es = ir_dtype_size(y->dtype);
  int64_t xs[IR_MAX_RANK], ys[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  cg_strides(&y->shape, ys);
  Map m;
  switch (n->op) {
    case IR_OP_TRANSPOSE: { /* y[i0, i1, ...] = x[i_perm^-1 ...]: dim d of y is dim perm[d] of x */
      init_map(&m, n, MAP_COPY, &y->shape);
      memcpy(add_access(&m, y, 0)->stride, ys, sizeof ys);
      Access *a = add_access(&m, x, 0);
      for (int d = 0; d < y->shape.rank; d++) a->stride[d] = xs[n->attrs.v[IR_ATTR_PERM].ints[d]];
      return emit_map(cg, &m, NULL);
    }
    case IR_OP_SLICE: {
      int axis = (int)n->attrs.v[IR_ATTR_AXIS].i;
      int64_t start = n->attrs.v[IR_ATTR_START].i,
              step = ir_attrs_has(&n->attrs, IR_ATTR_STEP) ? n->attrs.v[IR_ATTR_STEP].i : 1;
      if (start < 0) start += x->shape.d[axis];
      init_map(&m, n, MAP_COPY, &y->shape);
      memcpy(add_access(&m, y, 0)->stride, ys, sizeof ys);
      Access *a = add_access(&m, x, start * xs[axis] * es);
      memcpy(a->stride, xs, sizeof xs);
      a->stride[axis] *= step;
      return emit_map(cg, &m, NULL);
    }
    case IR_OP_EXPAND:
      init_map(&m, n, MAP_COPY, &y->shape);
      memcpy(add_access(&m, y, 0)->stride, ys, sizeof ys);
      cg_bcast_strides(&x->shape, &y->shape, add_access(&m, x, 0)->stride);
      return emit_map(cg, &m, NULL);
    case IR_OP_RESHAPE: /* a copy when the plan did not make it a view */
    case IR_OP_CONCAT:
      if (n->op == IR_OP_RESHAPE) {
        IrShape flat = {.rank = 1, .d = {ir_numel(&y->shape)}};
        init_map(&m, n, MAP_COPY, &flat);
        add_access(&m, y, 0)->stride[0] = 1;
        add_access(&m, x, 0)->stride[0] = 1;
        return emit_map(cg, &m, NULL);
      } else {
        int axis = (int)n->attrs.v[IR_ATTR_AXIS].i;
        int64_t at = 0;
        for (int k = 0; k < n->nin; k++) { /* operand k into y[..., at:at + its dim, ...] */
          const IrValue *xk = n->in[k];
          int64_t ks[IR_MAX_RANK];
          cg_strides(&xk->shape, ks);
          init_map(&m, n, MAP_COPY, &xk->shape);
          memcpy(add_access(&m, y, at * ys[axis] * es)->stride, ys, sizeof ys);
          memcpy(add_access(&m, xk, 0)->stride, ks, sizeof ks);
          if (!emit_map(cg, &m, NULL)) return false;
          at += xk->shape.d[axis];
        }
        return true;
      }
    case IR_OP_PAD_SLICE: { /* zeros, then dy at start:stop:step along axis */
      int axis = (int)n->attrs.v[IR_ATTR_AXIS].i;
      int64_t start = n->attrs.v[IR_ATTR_START].i,
              step = ir_attrs_has(&n->attrs, IR_ATTR_STEP) ? n->attrs.v[IR_ATTR_STEP].i : 1;
      if (start < 0) start += y->shape.d[axis];
      init_map(&m, n, MAP_STORE_CONST, &y->shape);
      memcpy(add_access(&m, y, 0)->stride, ys, sizeof ys);
      if (!emit_map(cg, &m, NULL)) return false;
      init_map(&m, n, MAP_COPY, &x->shape);
      Access *o = add_access(&m, y, start * ys[axis] * es);
      memcpy(o->stride, ys, sizeof ys);
      o->stride[axis] *= step;
      memcpy(add_access(&m, x, 0)->stride, xs, sizeof xs);
      return emit_map(cg, &m, NULL);
    }
    default: return cg_error(cg, n, "not a layout op");
  }
}

/* all_slice(x) {mesh, dim}: this rank's part of x along dim (coord: its
 * coordinate on the axis, an i32 known when the step runs) */
bool cg_loop_all_slice(Cg *cg, const IrNode *n, LLVMValueRef coord) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int d = (int)n->attrs.v[IR_ATTR_DIM].i;
  int64_t xs[IR_MAX_RANK], ys[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  cg_strides(&y->shape, ys);
  Map m;
  init_map(&m, n, MAP_COPY, &y->shape);
  memcpy(add_access(&m, y, 0)->stride, ys, sizeof ys);
  Access *a = add_access(&m, x, 0);
  memcpy(a->stride, xs, sizeof xs);
  LLVMValueRef c = LLVMBuildSExt(cg->b, coord, cg->t_i64, "");
  a->dyn_off =
      LLVMBuildMul(cg->b, c, cg_i64(cg, y->shape.d[d] * xs[d] * ir_dtype_size(x->dtype)), "");
  return emit_map(cg, &m, NULL);
}

/* ---- reductions ---- */

bool cg_loop_reduce(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  if (x->dtype != IR_F32)
    return cg_error(cg, n, "reductions take f32, not %s", ir_dtype_name(x->dtype));
  int r = x->shape.rank;
  bool red[IR_MAX_RANK] = {0};
  if (n->op == IR_OP_SUM_TO) { /* the target broadcasts to x: reduce where it has 1 (or no dim) */
    const IrAttrVal *s = &n->attrs.v[IR_ATTR_SHAPE];
    for (int d = 0; d < r; d++) {
      int i = d - (r - s->nints);
      red[d] = (i < 0 || s->ints[i] == 1) && x->shape.d[d] != 1;
    }
  } else {
    const IrAttrVal *ax = &n->attrs.v[IR_ATTR_AXES];
    for (int i = 0; i < ax->nints; i++)
      if (ax->ints[i] >= 0 && ax->ints[i] < r) red[ax->ints[i]] = true;
  }
  int64_t count = 1;
  int first = -1, last = -1;
  for (int d = 0; d < r; d++)
    if (red[d] && x->shape.d[d] != 1) {
      count *= x->shape.d[d];
      if (first < 0) first = d;
      last = d;
    }
  bool mean = n->op == IR_OP_MEAN;
  /* a mean over a split dim: this rank's share of the global mean, (local
   * sum) / (global count), a partial sum the shard pass all-reduces */
  const CgOrig *og = cg_orig(cg, x);
  int64_t gcount = 1;
  for (int d = 0; d < r; d++)
    if (red[d] && og->shape.rank == r) gcount *= og->shape.d[d];
  bool rescale = mean && gcount != count;
  bool contiguous = true; /* the reduced dims (ignoring size 1) form one block */
  for (int d = first; d >= 0 && d <= last; d++)
    if (!red[d] && x->shape.d[d] != 1) contiguous = false;
  if (contiguous) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < first; d++) outer *= x->shape.d[d];
    for (int d = last + 1; d < r; d++) inner *= x->shape.d[d];
    if (first < 0) outer = ir_numel(&x->shape), count = 1, inner = 1; /* reduces nothing: a copy */
    LLVMValueRef args[7] = {cg_ptr(cg, y),     cg_ptr(cg, x),     cg_i32(cg, outer),
                            cg_i32(cg, count), cg_i32(cg, inner), cg_i32(cg, mean && !rescale),
                            cg_i32(cg, 0)};
    cg_call(cg, "mmrt_reduce_sum", args, 7);
    if (!rescale) return true;
  }
  /* zeros, then y[kept dims] += x over the whole input, then the mean's scale */
  Map m;
  IrShape ysh = {.rank = 1, .d = {ir_numel(&y->shape)}};
  if (!contiguous) {
    init_map(&m, n, MAP_STORE_CONST, &ysh);
    add_access(&m, y, 0)->stride[0] = 1;
    if (!emit_map(cg, &m, NULL)) return false;
    int64_t xs[IR_MAX_RANK], k = 1;
    cg_strides(&x->shape, xs);
    init_map(&m, n, MAP_ACCUM, &x->shape);
    Access *o = add_access(&m, y, 0);
    for (int d = r - 1; d >= 0; d--) { /* y's layout: x's kept dims in order */
      o->stride[d] = red[d] ? 0 : k;
      if (!red[d]) k *= x->shape.d[d];
    }
    memcpy(add_access(&m, x, 0)->stride, xs, sizeof xs);
    if (!emit_map(cg, &m, NULL)) return false;
  }
  if (mean) {
    IrFusedProg p = {1, ARENA_NEW(cg->a, IrFusedInstr)};
    p.ins->op = IR_OP_MUL_SCALAR;
    ir_attrs_set_float(&p.ins->attrs, IR_ATTR_VALUE, 1.0 / (double)gcount);
    p.ins->nargs = 1;
    p.ins->arg[0] = -1;
    p.ins->dtype = IR_F32;
    init_map(&m, n, MAP_PROG, &ysh);
    m.prog = &p;
    add_access(&m, y, 0)->stride[0] = 1;
    add_access(&m, y, 0)->stride[0] = 1;
    return emit_map(cg, &m, NULL);
  }
  return true;
}

/* ---- fill ---- */

bool cg_loop_fill(Cg *cg, const IrNode *n) {
  const IrValue *y = n->out[0];
  double v = n->attrs.v[IR_ATTR_VALUE].f;
  if (y->dtype == IR_F32) {
    LLVMValueRef args[3] = {cg_ptr(cg, y), cg_f32(cg, v), cg_i64(cg, ir_numel(&y->shape))};
    cg_call(cg, "mmrt_fill", args, 3);
    return true;
  }
  if (!cg_dtype(cg, y->dtype) || ir_dtype_is_float(y->dtype))
    return cg_error(cg, n, "dtype %s is not supported yet", ir_dtype_name(y->dtype));
  Map m;
  IrShape sh = {.rank = 1, .d = {ir_numel(&y->shape)}};
  init_map(&m, n, MAP_STORE_CONST, &sh);
  m.value = v;
  add_access(&m, y, 0)->stride[0] = 1;
  return emit_map(cg, &m, NULL);
}

/* ---- row-wise: softmax family and mse ---- */

static LLVMValueRef load_at(Cg *cg, LLVMValueRef base, LLVMValueRef off) {
  return LLVMBuildLoad2(cg->b, cg->t_f32, elem_ptr(cg, base, IR_F32, off), "");
}

/* (outer, n, inner) rows along `axis`; softmax(x), log_softmax(x),
 * softmax_grad(dy, y), log_softmax_grad(dy, y). */
bool cg_loop_rowwise(Cg *cg, const IrNode *n) {
  const IrValue *x = n->in[n->nin - 1], *y = n->out[0];
  int axis = (int)n->attrs.v[IR_ATTR_AXIS].i;
  int64_t outer = 1, len = x->shape.d[axis], inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->shape.d[d];
  for (int d = axis + 1; d < x->shape.rank; d++) inner *= x->shape.d[d];
  bool grad = n->op == IR_OP_SOFTMAX_GRAD || n->op == IR_OP_LOG_SOFTMAX_GRAD;
  bool logv = n->op == IR_OP_LOG_SOFTMAX || n->op == IR_OP_LOG_SOFTMAX_GRAD;
  LLVMBasicBlockRef saved;
  LLVMValueRef fn = cg_begin_fn(cg, "rows", grad ? 3 : 2, 0, &saved);
  LLVMValueRef out = LLVMGetParam(fn, 0), in = LLVMGetParam(fn, 1),
               dy = grad ? LLVMGetParam(fn, 2) : NULL;
  Loop lo = loop_begin(cg, NULL);
  Loop li = loop_begin(cg, NULL);
  /* the row starts at o * len * inner + i, step inner */
  LLVMValueRef base =
      LLVMBuildAdd(cg->b, LLVMBuildMul(cg->b, lo.i, cg_i64(cg, len * inner), ""), li.i, "");
#define AT(l) LLVMBuildAdd(cg->b, base, LLVMBuildMul(cg->b, (l).i, cg_i64(cg, inner), ""), "")
  if (!grad) {
    Loop l1 = loop_begin(cg, cg_f32(cg, -INFINITY));
    LLVMValueRef v = load_at(cg, in, AT(l1));
    LLVMValueRef mx = loop_end(
        cg, &l1, len,
        LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOGT, v, l1.acc, ""), v, l1.acc, ""));
    Loop l2 = loop_begin(cg, cg_f32(cg, 0));
    LLVMValueRef e = xfexp(cg, xfsub(cg, load_at(cg, in, AT(l2)), mx));
    LLVMValueRef sum = loop_end(cg, &l2, len, xfadd(cg, l2.acc, e));
    LLVMValueRef lsum = cg_intrinsic(cg, "llvm.log", cg->t_f32, &sum, 1);
    Loop l3 = loop_begin(cg, NULL);
    LLVMValueRef off = AT(l3), z = xfsub(cg, load_at(cg, in, off), mx);
    LLVMValueRef r = logv ? xfsub(cg, z, lsum) : xfdiv(cg, xfexp(cg, z), sum);
    LLVMBuildStore(cg->b, r, elem_ptr(cg, out, IR_F32, off));
    loop_end(cg, &l3, len, NULL);
  } else { /* in = y, dy: softmax: y (dy - sum(dy y)); log_softmax: dy - exp(y) sum(dy) */
    Loop l1 = loop_begin(cg, cg_f32(cg, 0));
    LLVMValueRef off = AT(l1), g = load_at(cg, dy, off);
    LLVMValueRef s =
        loop_end(cg, &l1, len, xfadd(cg, l1.acc, logv ? g : xfmul(cg, g, load_at(cg, in, off))));
    Loop l2 = loop_begin(cg, NULL);
    off = AT(l2);
    g = load_at(cg, dy, off);
    LLVMValueRef yv = load_at(cg, in, off);
    LLVMValueRef r =
        logv ? xfsub(cg, g, xfmul(cg, xfexp(cg, yv), s)) : xfmul(cg, yv, xfsub(cg, g, s));
    LLVMBuildStore(cg->b, r, elem_ptr(cg, out, IR_F32, off));
    loop_end(cg, &l2, len, NULL);
  }
#undef AT
  loop_end(cg, &li, inner, NULL);
  loop_end(cg, &lo, outer, NULL);
  cg_end_fn(cg, saved);
  LLVMValueRef args[3] = {cg_ptr(cg, y), cg_ptr(cg, x), grad ? cg_ptr(cg, n->in[0]) : NULL};
  LLVMBuildCall2(cg->b, LLVMGlobalGetValueType(fn), fn, args, grad ? 3 : 2, "");
  return true;
}

/* mse(a, b) = mean((a - b)^2), accumulated in double */
bool cg_loop_mse(Cg *cg, const IrNode *n) {
  if (!ir_shape_eq(&n->in[0]->shape, &n->in[1]->shape))
    return cg_error(cg, n, "mse of broadcast operands is not supported");
  int64_t len = ir_numel(&n->in[0]->shape);
  LLVMBasicBlockRef saved;
  LLVMValueRef fn = cg_begin_fn(cg, "mse", 3, 0, &saved);
  LLVMValueRef out = LLVMGetParam(fn, 0), a = LLVMGetParam(fn, 1), b = LLVMGetParam(fn, 2);
  Loop l = loop_begin(cg, cg_f64(cg, 0));
  LLVMValueRef d = xfsub(cg, load_at(cg, a, l.i), load_at(cg, b, l.i));
  LLVMValueRef d2 = LLVMBuildFPExt(cg->b, xfmul(cg, d, d), cg->t_f64, "");
  LLVMValueRef s = loop_end(cg, &l, len, LLVMBuildFAdd(cg->b, l.acc, d2, ""));
  LLVMValueRef mean = LLVMBuildFDiv(cg->b, s, cg_f64(cg, (double)len), "");
  LLVMBuildStore(cg->b, LLVMBuildFPTrunc(cg->b, mean, cg->t_f32, ""), out);
  cg_end_fn(cg, saved);
  LLVMValueRef args[3] = {cg_ptr(cg, n->out[0]), cg_ptr(cg, n->in[0]), cg_ptr(cg, n->in[1])};
  LLVMBuildCall2(cg->b, LLVMGlobalGetValueType(fn), fn, args, 3, "");
  return true;
}

/* ---- matmul with broadcast batch dims: one call per result batch ---- */

bool cg_loop_matmul(Cg *cg, const IrNode *n, int64_t M, int64_t N, int64_t K) {
  const IrShape *c = &n->out[0]->shape;
  int rb = c->rank - 2; /* batch dims of the result */
  IrShape bs = {.rank = rb}, as = {.rank = n->in[0]->shape.rank - 2},
          bbs = {.rank = n->in[1]->shape.rank - 2};
  memcpy(bs.d, c->d, sizeof(int64_t) * (size_t)rb);
  memcpy(as.d, n->in[0]->shape.d, sizeof(int64_t) * (size_t)as.rank);
  memcpy(bbs.d, n->in[1]->shape.d, sizeof(int64_t) * (size_t)bbs.rank);
  int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK], sc[IR_MAX_RANK];
  cg_bcast_strides(&as, &bs, sa);
  cg_bcast_strides(&bbs, &bs, sb);
  cg_strides(&bs, sc);
  LLVMBasicBlockRef saved;
  LLVMValueRef fn = cg_begin_fn(cg, "bmm", 3, 0, &saved);
  LLVMValueRef idx[IR_MAX_RANK];
  Loop loops[IR_MAX_RANK];
  for (int d = 0; d < rb; d++) {
    loops[d] = loop_begin(cg, NULL);
    idx[d] = loops[d].i;
  }
  LLVMValueRef off[3] = {cg_i64(cg, 0), cg_i64(cg, 0), cg_i64(cg, 0)};
  const int64_t *st[3] = {sc, sa, sb};
  const int64_t mat[3] = {M * N, M * K, K * N};
  LLVMValueRef p[3];
  for (int k = 0; k < 3; k++) {
    for (int d = 0; d < rb; d++)
      off[k] = LLVMBuildAdd(cg->b, off[k],
                            LLVMBuildMul(cg->b, idx[d], cg_i64(cg, st[k][d] * mat[k]), ""), "");
    p[k] = elem_ptr(cg, LLVMGetParam(fn, (unsigned)k), IR_F32, off[k]);
  }
  LLVMValueRef args[10] = {cg_i32(cg, 0), p[0],          p[1],          p[2],
                           cg_i32(cg, 1), cg_i32(cg, M), cg_i32(cg, N), cg_i32(cg, K),
                           cg_f32(cg, 1), cg_i32(cg, 0)};
  cg_call(cg, "mmrt_matmul", args, 10);
  for (int d = rb - 1; d >= 0; d--) loop_end(cg, &loops[d], bs.d[d], NULL);
  cg_end_fn(cg, saved);
  LLVMValueRef cargs[3] = {cg_ptr(cg, n->out[0]), cg_ptr(cg, n->in[0]), cg_ptr(cg, n->in[1])};
  LLVMBuildCall2(cg->b, LLVMGlobalGetValueType(fn), fn, cargs, 3, "");
  return true;
}
