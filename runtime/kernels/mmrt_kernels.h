/* mmrt_kernels.h: the compute-kernel ABI of libmmrt.
 *
 * A generated trainer calls these plain C functions with pointers into its
 * planned arenas. Every buffer is row-major and contiguous; its shape is
 * written beside it in the llm.c way, with the dimension letters of the
 * argument list. Nothing here knows about the compiler.
 *
 * Two families:
 *   - oneDNN-backed (mmrt_dnnl.c): matmul, linear, conv2d/3d, softmax,
 *     eltwise. They take an MmrtDtype and untyped pointers so that bf16 is a
 *     new enum value, not a new ABI; matmul, linear and conv take MMRT_F32
 *     and MMRT_BF16, softmax and eltwise MMRT_F32 only (another dtype aborts
 *     with a message). Primitives are created once per
 *     (dtype, shape, flags) and cached; one engine and stream per process.
 *   - own C kernels (mmrt_ops.c, OpenMP over rows): norms, RoPE, attention,
 *     cross entropy, embedding, broadcasting binary ops, reductions,
 *     optimizers, gradient norm. fp32 (`float *`); optimizers and the
 *     gradient norm are fp32 by design (master weights).
 *
 * Conventions:
 *   - `accumulate` (or MMRT_MM_ACCUM): nonzero means "dst += result",
 *     zero means "dst = result". Gradients of parameters and of values with
 *     several consumers use it.
 *   - Pointers marked "may be NULL" switch that input or output off.
 *   - Outputs may not alias inputs unless the comment says "in place ok".
 *   - Calls come from one thread at a time (the step function); each kernel
 *     is itself multithreaded (oneDNN and OpenMP use all cores).
 *   - A misuse of the ABI (bad dtype, shape oneDNN rejects) is an internal
 *     error: a message naming the kernel and the shape, then abort(). Bad
 *     *data* (a label or token id out of range) is reported by a negative
 *     return value and a message on stderr, never by exiting.
 */
#ifndef MMRT_KERNELS_H
#define MMRT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum MmrtDtype {
  MMRT_F32 = 0,
  MMRT_BF16 = 1,     /* the matmul, linear and conv kernels, attention (mmrt_bf16.c) */
  MMRT_BF16_F32 = 2, /* matmul and linear: bf16 operands, f32 result and bias */
} MmrtDtype;

/* ---- bf16 (mmrt_bf16.c): 16-bit words, the high half of an f32 ----
 * The bf16 kernels accumulate in fp32: oneDNN's bf16 primitives where this
 * CPU and oneDNN make them ("native"), else fp32 primitives on the bf16
 * values widened to f32 and the result rounded back ("emulated": the same
 * products, each exact in f32, and fp32 sums). */
static inline float mmrt_bf16_widen(uint16_t h) { /* exact */
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline uint16_t mmrt_bf16_narrow(float f) { /* nearest, ties to even; a NaN stays quiet */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) /* NaN: quiet, sign kept */
    return (uint16_t)((u | 0x00400000u) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
void mmrt_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void mmrt_f32_to_bf16(uint16_t *dst, const float *src, size_t n); /* nearest, ties to even */
/* 1 when oneDNN creates bf16 matmul primitives here (probed once), else 0. */
int mmrt_bf16_native(void);
/* One line for the trainer's start: which bf16 path runs, and why. */
const char *mmrt_bf16_path(void);
/* A grow-only f32 buffer of n elements, slot 0..7 (the emulated path's
 * widened operands; one thread at a time). */
float *mmrt_bf16_tmp(int slot, size_t n);

/* Release the primitive cache, the oneDNN engine/stream and scratch memory.
 * Optional (for leak checkers); any later call re-creates what it needs. */
void mmrt_kernels_shutdown(void);

/* Number of cached oneDNN primitives (for tests and logging). */
int mmrt_dnnl_cache_size(void);

/* Bytes of glibc's heap that creating those primitives left in use
 * (mallinfo2 before and after each dnnl_primitive_create): oneDNN's kernel
 * objects beside their generated code; 0 under a sanitizer's allocator. */
int64_t mmrt_dnnl_prim_bytes(void);

/* The largest scratchpad (dnnl_query_scratchpad_md) of those primitives:
 * oneDNN allocates it itself (library mode), inside the measured peak and
 * outside the plan. */
int64_t mmrt_dnnl_scratchpad_max(void);

/* The bytes of the convolutions' arguments in oneDNN's blocked layouts
 * (grow-only buffers, one per argument position): inside the measured peak
 * and outside the plan. */
int64_t mmrt_dnnl_layout_bytes(void);

enum {
  MMRT_MM_TRANS_A = 1 << 0, /* A is stored (batch, K, M) */
  MMRT_MM_TRANS_B = 1 << 1, /* B is stored (.., N, K) */
  MMRT_MM_BCAST_B = 1 << 2, /* B has no batch dim: one B for all batches */
  MMRT_MM_ACCUM = 1 << 3,   /* C += ..., else C = ... */
};

/* dw (N, K) = alpha dy^T @ x (+ dw with accumulate) (+ addend: f32, N x
 * K, added by the kernel itself): a weight gradient written straight into
 * a micro-batch sum (runtime/comm/mmrt_pp.c mmrt_mb_linear_bwd_weights,
 * docs/accumulation.md). dt as mmrt_linear_bwd_weights'; an addend needs an
 * f32 dw (MMRT_F32 or MMRT_BF16_F32). */
void mmrt_linear_bwd_weights_into(MmrtDtype dt, void *dw, const float *addend, const void *dy,
                                  const void *x, int rows, int K, int N, float alpha,
                                  int accumulate);

/* One convolution's geometry. Spatial arrays are (D, H, W) for 3-D and
 * (H, W) for 2-D (entry 2 unused). Output size per spatial dim:
 *   out = (in + pad_lo + pad_hi - k) / stride + 1
 * Asymmetric padding covers causal (time) convolution: pad_lo = k - 1,
 * pad_hi = 0. Weights are (OC, C / groups, [KD,] KH, KW). */
typedef struct MmrtConv {
  int N, C, OC, groups; /* groups = 0 means 1 */
  int in[3], k[3], stride[3], pad_lo[3], pad_hi[3];
} MmrtConv;

int mmrt_conv_out_size(int in, int k, int stride, int pad_lo, int pad_hi);

/* The activations: enum name, printable name (the IR op's mnemonic, which
 * binds the op to its kernel), oneDNN algorithm (dnnl_eltwise_ALG) and
 * alpha; all src-based, so the backward takes x. */
#define MMRT_ACT_LIST(X)                                                                           \
  X(GELU, "gelu", gelu_erf, 0.0f)            /* x * Phi(x), erf form */                            \
  X(GELU_TANH, "gelu_tanh", gelu_tanh, 0.0f) /* tanh approximation */                              \
  X(SILU, "silu", swish, 1.0f)               /* x * sigmoid(x) */                                  \
  X(RELU, "relu", relu, 0.0f)                                                                      \
  X(TANH, "tanh", tanh, 0.0f)                                                                      \
  X(SIGMOID, "sigmoid", logistic, 0.0f)                                                            \
  X(EXP, "exp", exp, 0.0f)                                                                         \
  X(LOG, "log", log, 0.0f)                                                                         \
  X(SQRT, "sqrt", sqrt, 0.0f)                                                                      \
  X(ABS, "abs", abs, 0.0f)

typedef enum MmrtAct {
#define X(e, s, alg, alpha) MMRT_ACT_##e,
  MMRT_ACT_LIST(X)
#undef X
      MMRT_ACT_COUNT
} MmrtAct;

const char *mmrt_act_name(MmrtAct act);

#define MMRT_MAX_DIMS 8

typedef enum MmrtBinop {
  MMRT_BIN_ADD,
  MMRT_BIN_SUB,
  MMRT_BIN_MUL,
  MMRT_BIN_DIV,
} MmrtBinop;

/* da (+)= reduce_to_ashape(dy * dy/da), db likewise; da, db may be NULL.
 *   dy: yshape  da, a: ashape  db, b: bshape */
void mmrt_binary_bwd(MmrtBinop op, float *da, float *db, const float *dy, const int *yshape,
                     const float *a, const int *ashape, const float *b, const int *bshape, int ndim,
                     int accumulate);

/* dx (+)= dy broadcast over the middle dim (divided by n for mean)
 *   dx: (outer, n, inner)  dy: (outer, inner) */
void mmrt_reduce_sum_bwd(float *dx, const float *dy, int outer, int n, int inner, int mean,
                         int accumulate);

/* y (+)= alpha * x;  y, x: (n) */
void mmrt_axpy(float *y, const float *x, float alpha, size_t n, int accumulate);

/* The cross-entropy's row kernels, for the vocabulary-parallel cross
 * entropy (runtime/comm/mmrt_split.c) to compute its local rows as
 * mmrt_cross_entropy_fwd and _bwd do (the same vector code, the same
 * values). mmrt_row_lse: max_j x[j] + log sum_j exp(x[j] - max), -inf for
 * n = 0. mmrt_row_exp_scaled: y[j] = g * exp(x[j] - sub).  x, y: (n) */
float mmrt_row_lse(const float *x, int64_t n);
void mmrt_row_exp_scaled(float *y, const float *x, int64_t n, float sub, float g);

/* The ISA of attention's short path (every key in one 64-key tile): the
 * best the CPU has unless set. mmrt_attention_isa(MMRT_ISA_*) forces one
 * (tests: each build against the naive loops) and returns it, or -1 when
 * this CPU or build lacks it; mmrt_attention_isa(-1) returns to the
 * automatic choice and returns that. Not thread-safe: call between kernels. */
enum { MMRT_ISA_BASE = 0, MMRT_ISA_AVX2 = 1, MMRT_ISA_AVX512 = 2 };
int mmrt_attention_isa(int isa);

/* mmrt_attention_cached_fwd's kernel, once the positions are checked:
 * mmrt_attention_fwd's tiles with row b's keys 0 .. pos[b] + n - 1. */
void mmrt_attention_pos_fwd(float *out, const float *q, const float *k, const float *v,
                            const int32_t *pos, int B, int n, int S, int H, int KVH, int D,
                            float scale);

/* Whether x is NaN or infinite, by its exponent bits (-ffast-math cannot
 * fold the test away; it vectorises). */
static inline int mmrt_f32_not_finite(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return (b & 0x7f800000u) == 0x7f800000u;
}

/* Whether an optimizer step (mmrt_adamw_steps, mmrt_adamw_step,
 * mmrt_sgd_step) wrote a parameter that is not finite since the last call;
 * clears it. */
int mmrt_opt_nonfinite_take(void);

/* The kernels generated code calls, with their shapes: mmrt_abi.def. */
#define MMRT_ABI_SECTION_KERNELS
#include "mmrt_abi.h"

#ifdef __cplusplus
}
#endif

#endif /* MMRT_KERNELS_H */
