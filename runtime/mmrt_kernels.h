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
 *     new enum value, not a new ABI; today only MMRT_F32 is implemented and
 *     any other dtype aborts with a message. Primitives are created once per
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

#ifdef __cplusplus
extern "C" {
#endif

typedef enum MmrtDtype {
  MMRT_F32 = 0,
  MMRT_BF16 = 1, /* reserved: accepted by the ABI, not yet implemented */
} MmrtDtype;

/* Release the primitive cache, the oneDNN engine/stream and scratch memory.
 * Optional (for leak checkers); any later call re-creates what it needs. */
void mmrt_kernels_shutdown(void);

/* Number of cached oneDNN primitives (for tests and logging). */
int mmrt_dnnl_cache_size(void);

/* ======================================================================
 * matmul and linear (oneDNN matmul)
 * ====================================================================== */

enum {
  MMRT_MM_TRANS_A = 1 << 0, /* A is stored (batch, K, M) */
  MMRT_MM_TRANS_B = 1 << 1, /* B is stored (.., N, K) */
  MMRT_MM_BCAST_B = 1 << 2, /* B has no batch dim: one B for all batches */
  MMRT_MM_ACCUM = 1 << 3,   /* C += ..., else C = ... */
};

/* C[b] = alpha * op(A[b]) @ op(B[b])  (+ C[b] with MMRT_MM_ACCUM)
 *   A: (batch, M, K), or (batch, K, M) with MMRT_MM_TRANS_A
 *   B: (batch, K, N), or (batch, N, K) with MMRT_MM_TRANS_B;
 *      the batch dim is absent with MMRT_MM_BCAST_B
 *   C: (batch, M, N)
 * batch >= 1; a plain 2-D matmul is batch = 1. */
void mmrt_matmul(MmrtDtype dt, void *C, const void *A, const void *B, int batch, int M, int N,
                 int K, float alpha, int flags);

/* y = x @ w^T + bias
 *   y: (rows, N)  x: (rows, K)  w: (N, K)  bias: (N), may be NULL */
void mmrt_linear_fwd(MmrtDtype dt, void *y, const void *x, const void *w, const void *bias,
                     int rows, int K, int N);

/* dx (+)= dy @ w
 *   dx: (rows, K)  dy: (rows, N)  w: (N, K) */
void mmrt_linear_bwd_data(MmrtDtype dt, void *dx, const void *dy, const void *w, int rows, int K,
                          int N, int accumulate);

/* dw (+)= dy^T @ x;  dbias (+)= column sums of dy
 *   dw: (N, K)  dbias: (N), may be NULL  dy: (rows, N)  x: (rows, K) */
void mmrt_linear_bwd_weights(MmrtDtype dt, void *dw, void *dbias, const void *dy, const void *x,
                             int rows, int K, int N, int accumulate);

/* ======================================================================
 * convolution (oneDNN), channels-first: x (N, C, [D,] H, W)
 * ====================================================================== */

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

/* y = conv(x, w) + bias
 *   y: (N, OC, [OD,] OH, OW)  x: (N, C, [D,] H, W)
 *   w: (OC, C/groups, [KD,] KH, KW)  bias: (OC), may be NULL */
void mmrt_conv2d_fwd(MmrtDtype dt, const MmrtConv *cv, void *y, const void *x, const void *w,
                     const void *bias);
void mmrt_conv3d_fwd(MmrtDtype dt, const MmrtConv *cv, void *y, const void *x, const void *w,
                     const void *bias);

/* dx (+)= conv_transpose(dy, w)
 *   dx: (N, C, [D,] H, W)  dy: (N, OC, [OD,] OH, OW)  w: as above */
void mmrt_conv2d_bwd_data(MmrtDtype dt, const MmrtConv *cv, void *dx, const void *dy, const void *w,
                          int accumulate);
void mmrt_conv3d_bwd_data(MmrtDtype dt, const MmrtConv *cv, void *dx, const void *dy, const void *w,
                          int accumulate);

/* dw (+)= d(loss)/dw;  dbias (+)= sum of dy over N and space
 *   dw: (OC, C/groups, [KD,] KH, KW)  dbias: (OC), may be NULL
 *   dy: (N, OC, [OD,] OH, OW)  x: (N, C, [D,] H, W) */
void mmrt_conv2d_bwd_weights(MmrtDtype dt, const MmrtConv *cv, void *dw, void *dbias,
                             const void *dy, const void *x, int accumulate);
void mmrt_conv3d_bwd_weights(MmrtDtype dt, const MmrtConv *cv, void *dw, void *dbias,
                             const void *dy, const void *x, int accumulate);

/* ======================================================================
 * softmax along the last dim and elementwise activations (oneDNN)
 * ====================================================================== */

/* y = softmax(x) per row
 *   y, x: (rows, cols); in place ok */
void mmrt_softmax_fwd(MmrtDtype dt, void *y, const void *x, int rows, int cols);

/* dx (+)= y * (dy - sum(dy * y))  per row
 *   dx, dy, y: (rows, cols) */
void mmrt_softmax_bwd(MmrtDtype dt, void *dx, const void *dy, const void *y, int rows, int cols,
                      int accumulate);

/* The activations: enum name, printable name. */
#define MMRT_ACT_LIST(X)                                                                           \
  X(GELU, "gelu")           /* x * Phi(x), erf form */                                             \
  X(GELU_TANH, "gelu_tanh") /* tanh approximation */                                               \
  X(SILU, "silu")           /* x * sigmoid(x) */                                                   \
  X(RELU, "relu")                                                                                  \
  X(TANH, "tanh")                                                                                  \
  X(SIGMOID, "sigmoid")                                                                            \
  X(EXP, "exp")                                                                                    \
  X(LOG, "log")                                                                                    \
  X(SQRT, "sqrt")

typedef enum MmrtAct {
#define X(e, s) MMRT_ACT_##e,
  MMRT_ACT_LIST(X)
#undef X
      MMRT_ACT_COUNT
} MmrtAct;

const char *mmrt_act_name(MmrtAct act);

/* y = act(x)
 *   y, x: (n); in place ok */
void mmrt_eltwise_fwd(MmrtDtype dt, MmrtAct act, void *y, const void *x, size_t n);

/* dx (+)= dy * act'(x)
 *   dx, dy, x: (n); without accumulate dx may alias dy */
void mmrt_eltwise_bwd(MmrtDtype dt, MmrtAct act, void *dx, const void *dy, const void *x, size_t n,
                      int accumulate);

/* ======================================================================
 * normalisation (own kernels, fp32)
 * ====================================================================== */

/* y = (x - mean) * rstd * gamma + beta per row; saves mean and rstd
 *   y, x: (N, C)  mean, rstd: (N)  gamma, beta: (C), may be NULL */
void mmrt_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int N, int C, float eps);

/* dx (+)= ..., dgamma (+)= ..., dbeta (+)= ...; any of the three may be NULL
 *   dx, dy, x: (N, C)  mean, rstd: (N)  gamma: (C), may be NULL
 *   dgamma, dbeta: (C), may be NULL */
void mmrt_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int N, int C,
                        int accumulate);

/* y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row
 *   y, x: (N, C)  rstd: (N)  w: (C), may be NULL */
void mmrt_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                      float eps);

/*   dx, dy, x: (N, C)  rstd: (N)  w: (C), may be NULL  dw: (C), may be NULL */
void mmrt_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *rstd,
                      const float *w, int N, int C, int accumulate);

/* Group norm, channels-first; S is the product of the spatial dims.
 * Channels are split into G contiguous groups of C/G.
 *   y, x: (N, C, S)  mean, rstd: (N, G)  gamma, beta: (C), may be NULL */
void mmrt_groupnorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int N, int C, int S, int G, float eps);

/*   dx, dy, x: (N, C, S)  mean, rstd: (N, G)  gamma: (C), may be NULL
 *   dgamma, dbeta: (C), may be NULL */
void mmrt_groupnorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int N, int C,
                        int S, int G, int accumulate);

/* ======================================================================
 * RoPE and attention (own kernels, fp32)
 * ====================================================================== */

/* Rotary embedding, rotate-half form, on every head. For i < D/2:
 *   f = theta^(-2i/D),  a = (pos_offset + t) * f
 *   y[i]       = x[i] cos a - x[i + D/2] sin a
 *   y[i + D/2] = x[i + D/2] cos a + x[i] sin a
 *   y, x: (B, T, H, D), D even; in place ok */
void mmrt_rope_fwd(float *y, const float *x, int B, int T, int H, int D, float theta,
                   int pos_offset);

/* dx (+)= R^T dy
 *   dx, dy: (B, T, H, D); in place ok without accumulate */
void mmrt_rope_bwd(float *dx, const float *dy, int B, int T, int H, int D, float theta,
                   int pos_offset, int accumulate);

/* The same with a start position per row: row b's token t is at position
 * pos[b] + t (incremental decoding).  Returns 0, or -1 when a position is
 * negative (message on stderr). */
int mmrt_rope_pos_fwd(float *y, const float *x, int B, int T, int H, int D, float theta,
                      const int32_t *pos);
int mmrt_rope_pos_bwd(float *dx, const float *dy, int B, int T, int H, int D, float theta,
                      const int32_t *pos);

/* Image features into the text: y = x, except that the rows t of sample b
 * where ids[b, t] == token take src[b, 0], src[b, 1], ... in order.
 *   y, x: (B, T, C)  src: (B, N, C)  ids: (B, T)
 * A sample without the token (text only, or a padding row) keeps x.
 * Returns 0, or -1 when a sample holds the token neither N times nor never
 * (message on stderr naming the sample and the counts). */
int mmrt_place_fwd(float *y, const float *x, const float *src, const int32_t *ids, int B, int T,
                   int N, int C, int token);
/* Its gradient: dx = dy with those rows zeroed, dsrc = those rows of dy.
 *   dx, dy: (B, T, C)  dsrc: (B, N, C); in place (dx == dy) ok */
int mmrt_place_bwd(float *dx, float *dsrc, const float *dy, const int32_t *ids, int B, int T, int N,
                   int C, int token);

/* KV cache: cache[b, pos[b] + i] = x[b, i] for i < n.
 *   cache: (B, S, KVH, D)  x: (B, n, KVH, D)  pos: (B)
 * Returns 0, or -1 when pos[b] + n > S or pos[b] < 0 (message on stderr). */
int mmrt_kv_write(float *cache, const float *x, const int32_t *pos, int B, int S, int n, int KVH,
                  int D);
/* Attention of n new queries per row on the cache: query i of row b is at
 * position pos[b] + i and sees cache positions 0 .. pos[b] + i (causal);
 * query head h reads KV head h / (H / KVH).
 *   out, q: (B, n, H, D)  k, v: (B, S, KVH, D)  pos: (B)
 * Returns 0, or -1 when a position falls outside the cache. */
int mmrt_attention_cached_fwd(float *out, const float *q, const float *k, const float *v,
                              const int32_t *pos, int B, int n, int S, int H, int KVH, int D,
                              float scale);

/* Scaled dot-product attention with grouped KV heads (H % KVH == 0; query
 * head h reads KV head h / (H / KVH)). With causal != 0, query t sees keys
 * s <= t + (S - T) (the queries are the last T of S positions); a query
 * that sees no key gets out = 0 and lse = -inf.
 *   out, q: (B, T, H, D)  k, v: (B, S, KVH, D)
 *   lse: (B, H, T), log-sum-exp of the scaled scores, saved for backward */
void mmrt_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                        int B, int T, int S, int H, int KVH, int D, int causal, float scale);

/* dq (+)= dL/dq, dk (+)= dL/dk, dv (+)= dL/dv; each may be NULL.
 *   dq, dout, q, out: (B, T, H, D)  dk, dv, k, v: (B, S, KVH, D)
 *   lse: (B, H, T) from the forward */
void mmrt_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse, int B,
                        int T, int S, int H, int KVH, int D, int causal, float scale,
                        int accumulate);

/* ======================================================================
 * losses and lookups (own kernels, fp32)
 * ====================================================================== */

/* Mean cross entropy over the rows whose label != ignore_index.
 *   loss: (1)  lse: (N), per-row log-sum-exp, saved for backward
 *   logits: (N, V)  labels: (N)
 * Returns the number of counted rows (loss = 0 when it is 0), or -1 when a
 * label is outside [0, V) and is not ignore_index (message on stderr). */
int mmrt_cross_entropy_fwd(float *loss, float *lse, const float *logits, const int32_t *labels,
                           int N, int V, int ignore_index);

/* dlogits (+)= dloss * (softmax(logits) - onehot(label)) / count;
 * ignored rows get 0 (or are left alone with accumulate).
 *   dlogits, logits: (N, V)  lse, labels: (N)  dloss: scalar */
void mmrt_cross_entropy_bwd(float *dlogits, const float *logits, const float *lse,
                            const int32_t *labels, float dloss, int N, int V, int ignore_index,
                            int accumulate);

/* out[i] = table[ids[i]]
 *   out: (N, C)  table: (V, C)  ids: (N)
 * Returns 0, or -1 when an id is outside [0, V) (message on stderr; the
 * row is zeroed). */
int mmrt_embedding_fwd(float *out, const float *table, const int32_t *ids, int N, int V, int C);

/* dtable[ids[i]] += dout[i] (scatter-add; dtable zeroed first without
 * accumulate). Out-of-range ids are skipped.
 *   dtable: (V, C)  dout: (N, C)  ids: (N) */
void mmrt_embedding_bwd(float *dtable, const float *dout, const int32_t *ids, int N, int V, int C,
                        int accumulate);

/* ======================================================================
 * elementwise binary ops with numpy broadcasting, reductions, helpers
 * ====================================================================== */

#define MMRT_MAX_DIMS 8

typedef enum MmrtBinop {
  MMRT_BIN_ADD,
  MMRT_BIN_SUB,
  MMRT_BIN_MUL,
  MMRT_BIN_DIV,
} MmrtBinop;

/* y = a op b with broadcasting. All three shapes have `ndim` entries
 * (pad with leading 1s); each dim of a and b is 1 or the output's dim.
 *   y: yshape  a: ashape  b: bshape
 * y may alias a or b when that operand has the full output shape. */
void mmrt_binary_fwd(MmrtBinop op, float *y, const int *yshape, const float *a, const int *ashape,
                     const float *b, const int *bshape, int ndim);

/* da (+)= reduce_to_ashape(dy * dy/da), db likewise; da, db may be NULL.
 *   dy: yshape  da, a: ashape  db, b: bshape */
void mmrt_binary_bwd(MmrtBinop op, float *da, float *db, const float *dy, const int *yshape,
                     const float *a, const int *ashape, const float *b, const int *bshape, int ndim,
                     int accumulate);

/* y (+)= sum (or mean) of x over the middle dim
 *   y: (outer, inner)  x: (outer, n, inner)
 * Sum over leading dims: outer = 1; over trailing dims: inner = 1. */
void mmrt_reduce_sum(float *y, const float *x, int outer, int n, int inner, int mean,
                     int accumulate);

/* dx (+)= dy broadcast over the middle dim (divided by n for mean)
 *   dx: (outer, n, inner)  dy: (outer, inner) */
void mmrt_reduce_sum_bwd(float *dx, const float *dy, int outer, int n, int inner, int mean,
                         int accumulate);

/* y (+)= alpha * x;  y, x: (n) */
void mmrt_axpy(float *y, const float *x, float alpha, size_t n, int accumulate);

/* x = value;  x: (n) */
void mmrt_fill(float *x, float value, size_t n);

/* ======================================================================
 * optimizers and gradient norm (fp32 master weights)
 * ====================================================================== */

/* One AdamW step, in place, t = step >= 1 (for bias correction):
 *   g = grad * grad_scale
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr * (wd * p + (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps))
 *   param, grad, m, v: (n) */
void mmrt_adamw_step(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                     int step);

/* SGD with momentum and (coupled, L2) weight decay, as torch.optim.SGD
 * with dampening 0 (mom starts at zero):
 *   g = grad * grad_scale + wd * p;  mom = momentum * mom + g
 *   p -= lr * (nesterov ? g + momentum * mom : mom)
 *   param, grad, mom: (n); mom may be NULL when momentum == 0 */
void mmrt_sgd_step(float *param, const float *grad, float *mom, size_t n, float lr, float momentum,
                   float weight_decay, float grad_scale, int nesterov);

/* Sum of squares over a list of buffers, accumulated in double (for a
 * distributed norm: all-reduce this, then sqrt).
 *   bufs[i]: (sizes[i]) */
double mmrt_sum_squares(const float *const *bufs, const size_t *sizes, int nbufs);

/* sqrt(mmrt_sum_squares(...)) */
double mmrt_grad_norm(const float *const *bufs, const size_t *sizes, int nbufs);

/* Scale to apply to gradients to clip their global norm to max_norm
 * (1 when norm <= max_norm or max_norm <= 0). */
float mmrt_clip_scale(double norm, double max_norm);

#ifdef __cplusplus
}
#endif

#endif /* MMRT_KERNELS_H */
