/* mmrt_ops.c: libmmrt's own fp32 kernels (norms, RoPE, attention, cross
 * entropy, embedding, broadcasting binary ops, reductions, optimizers).
 *
 * Plain C with OpenMP: rows (or independent outputs) are split across
 * threads, inner loops run over contiguous memory so the compiler can
 * vectorise them. Every output element is written by exactly one thread, so
 * results do not depend on the thread count except for the order of
 * floating-point sums inside mmrt_sum_squares (reduced in double).
 */
#include "../../support/att_tile.h"
#include "mmrt_kernels.h"
#include "mmrt_mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_num_threads(void) {
  return 1;
}
static int omp_get_thread_num(void) {
  return 0;
}
#endif

static _Noreturn void die(const char *what, const char *detail) {
  fprintf(stderr, "mmrt: internal error in %s: %s\n", what, detail);
  abort();
}

static void *xmalloc(size_t n, const char *what) {
  return mmrt_xmalloc(n, what); /* out of memory: a message and exit 1 */
}

/* This thread's share [*lo, *hi) of n items, inside a parallel region. */
static void thread_range(size_t n, size_t *lo, size_t *hi) {
  size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
  size_t per = n / nt, rem = n % nt;
  *lo = id * per + (id < rem ? id : rem);
  *hi = *lo + per + (id < rem ? 1 : 0);
}

typedef void (*RangeFn)(void *ctx, int64_t begin, int64_t end);

void mmrt_parallel_for(void *fn, void *ctx, int64_t n) {
  RangeFn f;
  memcpy(&f, &fn, sizeof f);
#ifdef _OPENMP
  if (n > 1 && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      size_t lo, hi;
      thread_range((size_t)n, &lo, &hi);
      if (hi > lo) f(ctx, (int64_t)lo, (int64_t)hi);
    }
    return;
  }
#endif
  if (n > 0) f(ctx, 0, n);
}

static int full_threads; /* the program's thread count, before the first small op */

void mmrt_threads_small(int small) {
#ifdef _OPENMP
  if (!full_threads) full_threads = omp_get_max_threads();
  omp_set_num_threads(small ? 1 : full_threads);
#else
  (void)small;
#endif
}

/* Hot row loops get AVX-512 and AVX2 clones chosen at load time: the
 * runtime is built for baseline x86-64 and cannot assume either.
 * -DMMRT_NO_CLONES builds only the baseline (to test that path). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 &&           \
    !defined(MMRT_NO_CLONES)
#define MMRT_CLONES      __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define MMRT_HAVE_CLONES 1
#else
#define MMRT_CLONES
#endif

/* exp(x) for x in [-86, 88] (clamped), within ~2 ulp; branch-free so that
 * simd loops vectorise it (libm's expf does not). Cephes polynomial. */
static inline __attribute__((always_inline)) float exp_approx(float x) {
  x = x < -86.0f ? -86.0f : x;
  x = x > 88.0f ? 88.0f : x;
  /* n = round(x / ln 2) via the 1.5 * 2^23 trick; its low bits are n */
  float t = x * 1.44269504088896341f + 12582912.0f;
  int32_t ti;
  memcpy(&ti, &t, sizeof ti);
  float n = t - 12582912.0f;
  float r = x - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t pb;
  memcpy(&pb, &p, sizeof pb);
  pb += (uint32_t)(ti - 0x4B400000) << 23; /* times 2^n */
  memcpy(&p, &pb, sizeof p);
  return p;
}

static inline void put(float *dst, float v, int accumulate) {
  if (accumulate)
    *dst += v;
  else
    *dst = v;
}

/* ======================================================================
 * layer norm, RMSNorm, group norm
 * ====================================================================== */

/* One row of the layer norm (and of its gradient below): AVX-512 and AVX2
 * clones, each row's sums in one fixed order per clone. */
MMRT_CLONES static void layernorm_row(float *restrict yr, float *mean, float *rstd,
                                      const float *restrict xr, const float *gamma,
                                      const float *beta, int C, float eps) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < C; c++) s += xr[c];
  float m = s / (float)C;
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
  float rs = 1.0f / sqrtf(v / (float)C + eps);
  if (gamma && beta) {
#pragma omp simd
    for (int c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
  } else {
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float h = (xr[c] - m) * rs;
      yr[c] = h * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f);
    }
  }
  if (mean) *mean = m;
  if (rstd) *rstd = rs;
}

void mmrt_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++)
    layernorm_row(y + (size_t)r * C, mean ? mean + r : NULL, rstd ? rstd + r : NULL,
                  x + (size_t)r * C, gamma, beta, C, eps);
}

/* Column sums over rows of dy * xhat and dy, where xhat[r,c] =
 * (x[r,c] - mean[r]) * rstd[r] (mean may be NULL: RMSNorm). Threads own
 * column ranges, so there are no races and no partial buffers. */
/* ag[c - c0] += sum_r dy[r,c] xhat[r,c], ab[c - c0] += sum_r dy[r,c] for
 * c0 <= c < c1 (rows in order) */
MMRT_CLONES static void norm_param_cols(float *restrict ag, float *restrict ab, const float *dy,
                                        const float *x, const float *mean, const float *rstd, int N,
                                        int C, size_t c0, size_t c1) {
  for (int r = 0; r < N; r++) {
    const float *xr = x + (size_t)r * C, *dr = dy + (size_t)r * C;
    float m = mean ? mean[r] : 0.0f, rs = rstd[r];
#pragma omp simd
    for (size_t c = c0; c < c1; c++) {
      ag[c - c0] += dr[c] * (xr[c] - m) * rs;
      ab[c - c0] += dr[c];
    }
  }
}

static void norm_param_grads(float *dgamma, float *dbeta, const float *dy, const float *x,
                             const float *mean, const float *rstd, int N, int C, int accumulate) {
#pragma omp parallel
  {
    size_t lo, hi;
    thread_range((size_t)C, &lo, &hi);
    for (size_t c0 = lo; c0 < hi; c0 += 256) {
      size_t c1 = c0 + 256 < hi ? c0 + 256 : hi;
      float ag[256] = {0}, ab[256] = {0};
      norm_param_cols(ag, ab, dy, x, mean, rstd, N, C, c0, c1);
      for (size_t c = c0; c < c1; c++) {
        if (dgamma) put(&dgamma[c], ag[c - c0], accumulate);
        if (dbeta) put(&dbeta[c], ab[c - c0], accumulate);
      }
    }
  }
}

MMRT_CLONES static void layernorm_grad_row(float *restrict dxr, const float *restrict dr,
                                           const float *restrict xr, float m, float rs,
                                           const float *gamma, int C, int acc_dx) {
  float sg = 0.0f, sgh = 0.0f; /* sums of g and g * xhat */
#pragma omp simd reduction(+ : sg, sgh)
  for (int c = 0; c < C; c++) {
    float g = dr[c] * (gamma ? gamma[c] : 1.0f);
    sg += g;
    sgh += g * (xr[c] - m) * rs;
  }
  sg /= (float)C;
  sgh /= (float)C;
  if (acc_dx) {
#pragma omp simd
    for (int c = 0; c < C; c++)
      dxr[c] += rs * (dr[c] * (gamma ? gamma[c] : 1.0f) - sg - (xr[c] - m) * rs * sgh);
  } else {
#pragma omp simd
    for (int c = 0; c < C; c++)
      dxr[c] = rs * (dr[c] * (gamma ? gamma[c] : 1.0f) - sg - (xr[c] - m) * rs * sgh);
  }
}

void mmrt_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int N, int C,
                        int accumulate) {
  /* accumulate 2: dx only (codegen's fold of the residual add after it) */
  int acc_dx = accumulate != 0;
  accumulate = accumulate == 1;
  if (dx) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++)
      layernorm_grad_row(dx + (size_t)r * C, dy + (size_t)r * C, x + (size_t)r * C, mean[r],
                         rstd[r], gamma, C, acc_dx);
  }
  if (dgamma || dbeta) norm_param_grads(dgamma, dbeta, dy, x, mean, rstd, N, C, accumulate);
}

/* ---- layer norm over a dim before the last: x laid out (outer, C, inner),
 * normalised over c at each (o, i); statistics r = o * inner + i. The
 * positions go in blocks of LN_BLK, the channels outside, the block's
 * contiguous positions inside (vectorised), so nothing strides over c in
 * the inner loop. Each position's sums run over c in order. */
enum { LN_BLK = 256 };

MMRT_CLONES static void lnax_fwd_block(float *restrict y, float *mean, float *rstd,
                                       const float *restrict x, const float *gamma,
                                       const float *beta, int64_t C, int64_t inner, int64_t n,
                                       float eps) {
  float m[LN_BLK], rs[LN_BLK];
  for (int64_t j = 0; j < n; j++) m[j] = 0.0f, rs[j] = 0.0f;
  for (int64_t c = 0; c < C; c++) {
    const float *xc = x + c * inner;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) m[j] += xc[j];
  }
#pragma omp simd
  for (int64_t j = 0; j < n; j++) m[j] /= (float)C;
  for (int64_t c = 0; c < C; c++) {
    const float *xc = x + c * inner;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) rs[j] += (xc[j] - m[j]) * (xc[j] - m[j]);
  }
  for (int64_t j = 0; j < n; j++) rs[j] = 1.0f / sqrtf(rs[j] / (float)C + eps);
  for (int64_t c = 0; c < C; c++) {
    const float *xc = x + c * inner;
    float *yc = y + c * inner, ga = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) yc[j] = (xc[j] - m[j]) * rs[j] * ga + be;
  }
  if (mean) memcpy(mean, m, sizeof(float) * (size_t)n);
  if (rstd) memcpy(rstd, rs, sizeof(float) * (size_t)n);
}

void mmrt_layernorm_axis_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                             const float *beta, int64_t outer, int64_t C, int64_t inner,
                             float eps) {
  if (inner == 1) {
    mmrt_layernorm_fwd(y, mean, rstd, x, gamma, beta, (int)outer, (int)C, eps);
    return;
  }
  int64_t nb = (inner + LN_BLK - 1) / LN_BLK;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < outer * nb; t++) {
    int64_t o = t / nb, i0 = t % nb * LN_BLK, n = inner - i0 < LN_BLK ? inner - i0 : LN_BLK;
    size_t base = (size_t)(o * C * inner + i0), r = (size_t)(o * inner + i0);
    lnax_fwd_block(y + base, mean ? mean + r : NULL, rstd ? rstd + r : NULL, x + base, gamma, beta,
                   C, inner, n, eps);
  }
}

MMRT_CLONES static void lnax_dx_block(float *restrict dx, const float *restrict dy,
                                      const float *restrict x, const float *mean, const float *rstd,
                                      const float *gamma, int64_t C, int64_t inner, int64_t n,
                                      int acc_dx) {
  float sg[LN_BLK], sgh[LN_BLK];
  for (int64_t j = 0; j < n; j++) sg[j] = 0.0f, sgh[j] = 0.0f;
  for (int64_t c = 0; c < C; c++) {
    const float *xc = x + c * inner, *dc = dy + c * inner;
    float ga = gamma ? gamma[c] : 1.0f;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      float g = dc[j] * ga;
      sg[j] += g;
      sgh[j] += g * (xc[j] - mean[j]) * rstd[j];
    }
  }
#pragma omp simd
  for (int64_t j = 0; j < n; j++) sg[j] /= (float)C, sgh[j] /= (float)C;
  for (int64_t c = 0; c < C; c++) {
    const float *xc = x + c * inner, *dc = dy + c * inner;
    float *dxc = dx + c * inner, ga = gamma ? gamma[c] : 1.0f;
    if (acc_dx) {
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        dxc[j] += rstd[j] * (dc[j] * ga - sg[j] - (xc[j] - mean[j]) * rstd[j] * sgh[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        dxc[j] = rstd[j] * (dc[j] * ga - sg[j] - (xc[j] - mean[j]) * rstd[j] * sgh[j]);
    }
  }
}

/* channel c's sums over every (o, i) of dy * xhat and dy, in that order */
MMRT_CLONES static void lnax_param_chan(float *ag, float *ab, const float *dy, const float *x,
                                        const float *mean, const float *rstd, int64_t outer,
                                        int64_t C, int64_t inner, int64_t c) {
  float sg = 0.0f, sb = 0.0f;
  for (int64_t o = 0; o < outer; o++) {
    const float *xc = x + (o * C + c) * inner, *dc = dy + (o * C + c) * inner;
    const float *m = mean + o * inner, *rs = rstd + o * inner;
#pragma omp simd reduction(+ : sg, sb)
    for (int64_t i = 0; i < inner; i++) {
      sg += dc[i] * (xc[i] - m[i]) * rs[i];
      sb += dc[i];
    }
  }
  *ag = sg;
  *ab = sb;
}

void mmrt_layernorm_axis_bwd(float *dx, float *dgamma, float *dbeta, const float *dy,
                             const float *x, const float *mean, const float *rstd,
                             const float *gamma, int64_t outer, int64_t C, int64_t inner,
                             int accumulate) {
  if (inner == 1) {
    mmrt_layernorm_bwd(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, (int)outer, (int)C, accumulate);
    return;
  }
  /* accumulate 2: dx only (codegen's fold of the residual add after it) */
  int acc_dx = accumulate != 0;
  accumulate = accumulate == 1;
  if (dx) {
    int64_t nb = (inner + LN_BLK - 1) / LN_BLK;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < outer * nb; t++) {
      int64_t o = t / nb, i0 = t % nb * LN_BLK, n = inner - i0 < LN_BLK ? inner - i0 : LN_BLK;
      size_t base = (size_t)(o * C * inner + i0), r = (size_t)(o * inner + i0);
      lnax_dx_block(dx + base, dy + base, x + base, mean + r, rstd + r, gamma, C, inner, n, acc_dx);
    }
  }
  if (dgamma || dbeta) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
      float ag, ab;
      lnax_param_chan(&ag, &ab, dy, x, mean, rstd, outer, C, inner, c);
      if (dgamma) put(&dgamma[c], ag, accumulate);
      if (dbeta) put(&dbeta[c], ab, accumulate);
    }
  }
}

void mmrt_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                      float eps) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    const float *xr = x + (size_t)r * C;
    float *yr = y + (size_t)r * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
    float rs = 1.0f / sqrtf(ss / (float)C + eps);
    for (int c = 0; c < C; c++) yr[c] = xr[c] * rs * (w ? w[c] : 1.0f);
    if (rstd) rstd[r] = rs;
  }
}

void mmrt_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *rstd,
                      const float *w, int N, int C, int accumulate) {
  if (dx) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
      const float *xr = x + (size_t)r * C, *dr = dy + (size_t)r * C;
      float *dxr = dx + (size_t)r * C;
      float rs = rstd[r], sgh = 0.0f;
#pragma omp simd reduction(+ : sgh)
      for (int c = 0; c < C; c++) sgh += dr[c] * (w ? w[c] : 1.0f) * xr[c] * rs;
      sgh /= (float)C;
      for (int c = 0; c < C; c++) {
        float g = dr[c] * (w ? w[c] : 1.0f);
        put(&dxr[c], rs * (g - xr[c] * rs * sgh), accumulate);
      }
    }
  }
  if (dw) norm_param_grads(dw, NULL, dy, x, NULL, rstd, N, C, accumulate);
}

void mmrt_groupnorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int N, int C, int S, int G, float eps) {
  if (C % G) die("mmrt_groupnorm_fwd", "C not divisible by G");
  int Cg = C / G;
  size_t M = (size_t)Cg * S;
#pragma omp parallel for collapse(2) schedule(static)
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      size_t base = ((size_t)n * C + (size_t)g * Cg) * S;
      const float *xb = x + base;
      double s = 0.0, ss = 0.0;
#pragma omp simd reduction(+ : s)
      for (size_t i = 0; i < M; i++) s += xb[i];
      double m = s / (double)M;
#pragma omp simd reduction(+ : ss)
      for (size_t i = 0; i < M; i++) ss += (xb[i] - m) * (xb[i] - m);
      float mf = (float)m, rs = (float)(1.0 / sqrt(ss / (double)M + eps));
      for (int c = 0; c < Cg; c++) {
        int ch = g * Cg + c;
        float ga = gamma ? gamma[ch] : 1.0f, be = beta ? beta[ch] : 0.0f;
        const float *xc = xb + (size_t)c * S;
        float *yc = y + base + (size_t)c * S;
        for (int i = 0; i < S; i++) yc[i] = (xc[i] - mf) * rs * ga + be;
      }
      if (mean) mean[n * G + g] = mf;
      if (rstd) rstd[n * G + g] = rs;
    }
  }
}

void mmrt_groupnorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int N, int C,
                        int S, int G, int accumulate) {
  if (C % G) die("mmrt_groupnorm_bwd", "C not divisible by G");
  int Cg = C / G;
  size_t M = (size_t)Cg * S;
  if (dx) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < N; n++) {
      for (int g = 0; g < G; g++) {
        size_t base = ((size_t)n * C + (size_t)g * Cg) * S;
        float m = mean[n * G + g], rs = rstd[n * G + g];
        double sg = 0.0, sgh = 0.0;
        for (int c = 0; c < Cg; c++) {
          float ga = gamma ? gamma[g * Cg + c] : 1.0f;
          const float *xc = x + base + (size_t)c * S;
          const float *dc = dy + base + (size_t)c * S;
          for (int i = 0; i < S; i++) {
            float gv = dc[i] * ga;
            sg += gv;
            sgh += gv * (xc[i] - m) * rs;
          }
        }
        float mg = (float)(sg / (double)M), mgh = (float)(sgh / (double)M);
        for (int c = 0; c < Cg; c++) {
          float ga = gamma ? gamma[g * Cg + c] : 1.0f;
          const float *xc = x + base + (size_t)c * S;
          const float *dc = dy + base + (size_t)c * S;
          float *dxc = dx + base + (size_t)c * S;
          for (int i = 0; i < S; i++) {
            float h = (xc[i] - m) * rs;
            put(&dxc[i], rs * (dc[i] * ga - mg - h * mgh), accumulate);
          }
        }
      }
    }
  }
  if (dgamma || dbeta) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
      int g = c / Cg;
      double ag = 0.0, ab = 0.0;
      for (int n = 0; n < N; n++) {
        const float *xc = x + ((size_t)n * C + c) * S;
        const float *dc = dy + ((size_t)n * C + c) * S;
        float m = mean[n * G + g], rs = rstd[n * G + g];
        for (int i = 0; i < S; i++) {
          ag += dc[i] * (xc[i] - m) * rs;
          ab += dc[i];
        }
      }
      if (dgamma) put(&dgamma[c], (float)ag, accumulate);
      if (dbeta) put(&dbeta[c], (float)ab, accumulate);
    }
  }
}

/* ======================================================================
 * RoPE
 * ====================================================================== */

/* cos/sin table: (T, D/2) each. */
static void rope_table(float *cs, float *sn, int T, int D, float theta, int pos_offset) {
  int half = D / 2;
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < half; i++) {
      double f = pow((double)theta, -2.0 * i / (double)D);
      double a = (double)(pos_offset + t) * f;
      cs[t * half + i] = (float)cos(a);
      sn[t * half + i] = (float)sin(a);
    }
  }
}

/* The tables of the last few (T, D, theta, offset) asked for: a step calls
 * RoPE with the same few every layer, forward and backward, and a table
 * costs T x D/2 double-precision pow, cos and sin (more than the rotation
 * itself). Kept to the end of the process, never replaced (a table in use
 * is never freed); a shape beyond the first ROPE_KEPT gets a table of its
 * own each call. */
#define ROPE_KEPT 8
static struct {
  int T, D, pos_offset;
  float theta, *cs;
} rope_kept[ROPE_KEPT];
static int rope_nkept;

/* The (T, D/2) cos table followed by the sin table; *own: the caller frees it. */
static float *rope_tables(int T, int D, float theta, int pos_offset, int *own, const char *what) {
  float *cs = NULL;
#pragma omp critical(mmrt_rope_kept)
  for (int i = 0; i < rope_nkept && !cs; i++)
    if (rope_kept[i].T == T && rope_kept[i].D == D && rope_kept[i].pos_offset == pos_offset &&
        rope_kept[i].theta == theta)
      cs = rope_kept[i].cs;
  *own = 0;
  if (cs) return cs;
  size_t half = (size_t)(D / 2);
  cs = xmalloc(sizeof(float) * (size_t)T * half * 2, what);
  rope_table(cs, cs + (size_t)T * half, T, D, theta, pos_offset);
  int kept = 0;
#pragma omp critical(mmrt_rope_kept)
  if (rope_nkept < ROPE_KEPT) {
    rope_kept[rope_nkept].T = T, rope_kept[rope_nkept].D = D;
    rope_kept[rope_nkept].pos_offset = pos_offset, rope_kept[rope_nkept].theta = theta;
    rope_kept[rope_nkept++].cs = cs;
    kept = 1;
  }
  *own = !kept;
  return cs;
}

/* y = R(sign * angle) x on every (b, t, h) row. */
static void rope_apply(float *y, const float *x, int B, int T, int H, int D, float theta,
                       int pos_offset, float sign, int accumulate, const char *what) {
  if (D % 2) die(what, "head dim must be even");
  int half = D / 2, own;
  float *cs = rope_tables(T, D, theta, pos_offset, &own, what);
  const float *sn = cs + (size_t)T * half;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const float *c = cs + (size_t)t * half, *s = sn + (size_t)t * half;
      for (int h = 0; h < H; h++) {
        size_t off = (((size_t)b * T + t) * H + h) * D;
        const float *xr = x + off;
        float *yr = y + off;
#pragma omp simd
        for (int i = 0; i < half; i++) {
          float x1 = xr[i], x2 = xr[i + half], si = sign * s[i];
          float y1 = x1 * c[i] - x2 * si, y2 = x2 * c[i] + x1 * si;
          if (accumulate) {
            yr[i] += y1;
            yr[i + half] += y2;
          } else {
            yr[i] = y1;
            yr[i + half] = y2;
          }
        }
      }
    }
  }
  if (own) free(cs);
}

void mmrt_rope_fwd(float *y, const float *x, int B, int T, int H, int D, float theta,
                   int pos_offset) {
  rope_apply(y, x, B, T, H, D, theta, pos_offset, 1.0f, 0, "mmrt_rope_fwd");
}

void mmrt_rope_bwd(float *dx, const float *dy, int B, int T, int H, int D, float theta,
                   int pos_offset, int accumulate) {
  rope_apply(dx, dy, B, T, H, D, theta, pos_offset, -1.0f, accumulate, "mmrt_rope_bwd");
}

/* ======================================================================
 * attention
 * ====================================================================== */

/* Flash-style attention: the scores of a tile of queries against a tile of
 * keys are one small matrix product (tile_gemm, register-blocked), the
 * softmax runs online over the key tiles (a running max and sum per query,
 * the output rescaled as the max grows), and only out and lse leave the
 * forward. The backward recomputes each tile's probabilities from lse.
 * Workspace is a few tiles per thread; no T x S tensor exists at any time. */
enum { ATT_TQ = MM_ATT_TILE_Q, ATT_TK = 64, ATT_MR = 6 }; /* support/att_tile.h */

/* Number of keys query t sees; off = S - T, the position of the first
 * query (the queries are the last T of the keys' positions). */
static inline int visible_keys(int t, int S, int off, int causal) {
  if (!causal) return S;
  int n = t + off + 1;
  return n < 0 ? 0 : (n > S ? S : n);
}

/* First query that sees key s. */
static inline int first_query(int s, int off, int causal) {
  if (!causal) return 0;
  int t = s - off;
  return t < 0 ? 0 : t;
}

/* Row lengths of tiles are padded to whole 16-float vectors. */
static inline int pad16(int n) {
  return (n + 15) & ~15;
}

/* Element i of an attention operand: f32, or bf16 (widened) when bf. */
static inline float att_el(const void *p, size_t i, int bf) {
  return bf ? mmrt_bf16_widen(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* The hot loops below want fused multiply-adds; ISO C mode turns
 * contraction off, so allow it here only (clang: the same with its own
 * pragma, reset to its default, `on`, below). GCC also gets
 * -fno-trapping-math here: with trapping math its if-conversion keeps
 * exp_approx's clamps as branches unless the target has AVX-512 masks, so
 * the softmax and gradient rows ran scalar in the AVX2 and baseline builds
 * (the values are the same: it only lets GCC compute both sides of a
 * select). */
#if defined(__clang__)
#define ATT_CONTRACT_FAST _Pragma("clang fp contract(fast)")
#define ATT_CONTRACT_END  _Pragma("clang fp contract(on)")
#else
#define ATT_CONTRACT_FAST                                                                          \
  _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=fast\", \"no-trapping-math\")")
#define ATT_CONTRACT_END _Pragma("GCC pop_options")
#endif
ATT_CONTRACT_FAST

/* 16-float vectors (GNU C vector extension; two AVX2 registers, one
 * AVX-512 register, narrower in the baseline clone). Vf16u is the
 * unaligned, aliasing view of a float array. */
typedef float Vf16 __attribute__((vector_size(64)));
typedef float Vf16u __attribute__((vector_size(64), aligned(4), may_alias));
/* 16 bf16 words (unaligned, aliasing) and 16 32-bit lanes */
typedef uint16_t Vh16u __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t Vu16 __attribute__((vector_size(64)));
typedef uint16_t Vh16 __attribute__((vector_size(32)));

/* dst[0..16) = the 16 bf16 values at p, widened (exact) */
static inline __attribute__((always_inline)) void widen16(float *dst, const uint16_t *p) {
  Vu16 u = __builtin_convertvector(*(const Vh16u *)p, Vu16) << 16;
  memcpy(dst, &u, sizeof u);
}

/* p[0..16) = the 16 floats at f rounded to bf16 as mmrt_bf16_narrow does
 * (a NaN stays quiet) */
static inline __attribute__((always_inline)) void narrow16(uint16_t *p, const float *f) {
  Vu16 u;
  memcpy(&u, f, sizeof u);
  Vu16 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  Vu16 nan = (Vu16)((u & 0x7f800000u) == 0x7f800000u) & (Vu16)((u & 0x007fffffu) != 0);
  r = (r & ~nan) | (((u | 0x00400000u) >> 16) & nan);
  *(Vh16u *)p = __builtin_convertvector(r, Vh16);
}

/* The tile helpers below are always_inline bodies with MMRT_CLONES
 * wrappers for the general path; the short path (att_short_*) inlines them
 * into its own per-ISA builds, so that a forced ISA is the ISA that runs. */
#define ATT_AI static inline __attribute__((always_inline))

/* dst[j * ld + d] = src[off + j * stride + d] for j < n, d < D, zero for
 * D <= d < ld: rows padded to whole vectors (bf16 rows widened). */
ATT_AI void pad_rows_body(float *dst, size_t ld, const void *src, size_t off, int n, size_t stride,
                          int D, int bf) {
  for (int j = 0; j < n; j++) {
    size_t o = off + (size_t)j * stride;
    if (bf) {
      const uint16_t *r = (const uint16_t *)src + o;
      int d = 0;
      for (; d + 16 <= D; d += 16) widen16(dst + (size_t)j * ld + d, r + d);
      for (; d < D; d++) dst[(size_t)j * ld + d] = mmrt_bf16_widen(r[d]);
    } else { /* whole vectors, not a libc call per row of a head */
      const float *r = (const float *)src + o;
      float *w = dst + (size_t)j * ld;
      int d = 0;
      for (; d + 16 <= D; d += 16) *(Vf16u *)(w + d) = *(const Vf16u *)(r + d);
      for (; d < D; d++) w[d] = r[d];
    }
    for (size_t d = (size_t)D; d < ld; d++) dst[(size_t)j * ld + d] = 0.0f;
  }
}

MMRT_CLONES static void pad_rows(float *dst, size_t ld, const void *src, size_t off, int n,
                                 size_t stride, int D, int bf) {
  pad_rows_body(dst, ld, src, off, n, stride, D, bf);
}

/* r[i][l] becomes r[l][i]: at stage b (8, 4, 2, 1) rows i and i + b (i & b
 * clear) swap the off-diagonal b x b blocks of each 2b x 2b block (two-input
 * lane shuffles), instead of 256 scalar moves. */
#define TR_LANES(...) __VA_ARGS__
#define TR_STAGE(B, LO, HI)                                                                        \
  do {                                                                                             \
    for (int i = 0; i < 16; i++)                                                                   \
      if (!(i & (B))) {                                                                            \
        Vf16 a = r[i], b = r[i + (B)];                                                             \
        r[i] = __builtin_shufflevector(a, b, TR_LANES LO);                                         \
        r[i + (B)] = __builtin_shufflevector(a, b, TR_LANES HI);                                   \
      }                                                                                            \
  } while (0)
static inline __attribute__((always_inline)) void transpose16(Vf16 *r) {
  TR_STAGE(8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
           (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  TR_STAGE(4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
           (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31));
  TR_STAGE(2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
           (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31));
  TR_STAGE(1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
           (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31));
}
#undef TR_STAGE
#undef TR_LANES

/* dst[d * ld + j] = src[j * stride + d] for j < n, d < D; zero for
 * n <= j < ld. Blocks of 16 rows by 16 columns: the block's rows are read
 * as whole vectors (independent loads, so their cache misses overlap) into
 * a local block, which is written out by columns (contiguous stores).
 * Element by element, each strided load waited on memory in turn (a tenth
 * of ViTFashion's step at one thread). */
ATT_AI void transpose_rows_body(float *dst, size_t ld, const void *src, size_t off, int n,
                                size_t stride, int D, int bf) {
  enum { TB = 16 };
  Vf16 blk[TB];
  float *fb = (float *)blk;
  const float *sf = (const float *)src + off;
  const uint16_t *sh = (const uint16_t *)src + off;
  for (int d0 = 0; d0 < D; d0 += TB) {
    int nd = D - d0 < TB ? D - d0 : TB;
    for (size_t j0 = 0; j0 < ld; j0 += TB) {
      int nj = (int)j0 >= n ? 0 : (n - (int)j0 < TB ? n - (int)j0 : TB);
      if (bf && nd == TB)
        for (int jj = 0; jj < nj; jj++) widen16(fb + jj * TB, sh + (j0 + (size_t)jj) * stride + d0);
      else if (bf)
        for (int jj = 0; jj < nj; jj++) {
          const uint16_t *r = sh + (j0 + (size_t)jj) * stride + d0;
          for (int dd = 0; dd < TB; dd++) fb[jj * TB + dd] = dd < nd ? mmrt_bf16_widen(r[dd]) : 0;
        }
      else if (nd == TB)
        for (int jj = 0; jj < nj; jj++)
          blk[jj] = *(const Vf16u *)(sf + (j0 + (size_t)jj) * stride + d0);
      else
        for (int jj = 0; jj < nj; jj++) {
          Vf16 z = {0};
          blk[jj] = z;
          memcpy(&blk[jj], sf + (j0 + (size_t)jj) * stride + d0, sizeof(float) * (size_t)nd);
        }
      for (int jj = nj; jj < TB; jj++) {
        Vf16 z = {0};
        blk[jj] = z;
      }
      size_t w = ld - j0 < TB ? ld - j0 : TB;
      transpose16(blk);
      for (int dd = 0; dd < nd; dd++) {
        float *o = dst + (size_t)(d0 + dd) * ld + j0;
        if (w == TB)
          *(Vf16u *)o = blk[dd];
        else
          memcpy(o, &blk[dd], sizeof(float) * w);
      }
    }
  }
}

MMRT_CLONES static void transpose_rows(float *dst, size_t ld, const void *src, size_t off, int n,
                                       size_t stride, int D, int bf) {
  transpose_rows_body(dst, ld, src, off, n, stride, D, bf);
}

/* 8-float vectors: one AVX2 register. Vf8u: the unaligned, aliasing view. */
typedef float Vf8 __attribute__((vector_size(32)));
typedef float Vf8u __attribute__((vector_size(32), aligned(4), may_alias));

/* R rows (R <= ATT_MR, a constant after inlining) of one 16-column strip:
 * R accumulators stay in registers while k runs; each step is one load of b
 * and R broadcast FMAs. V (a constant too) is the accumulators' width: 16
 * (one AVX-512 register per row) or 8 (two AVX2 registers per row, 12 of
 * the 16). Below AVX-512, GCC 12 kept an array of 16-float accumulators in
 * memory and moved each through general registers at every FMA (tile_gemm
 * was three quarters of the attention's time, VideoDiTSmall's 80 tokens);
 * two 8-float halves per row are the same lane-wise FMAs in the same order,
 * so the bits do not change. */
static inline __attribute__((always_inline)) void
gemm_strip(float *restrict c, size_t ldc, const float *restrict a, size_t ai, size_t ak,
           const float *restrict b, size_t ldb, int K, int acc, const int R, const int V) {
  if (V == 16) {
    Vf16 s[ATT_MR];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      Vf16 z = {0};
      if (acc) z = *(const Vf16u *)(c + (size_t)r * ldc);
      s[r] = z;
    }
    for (int k = 0; k < K; k++) {
      Vf16 bv = *(const Vf16u *)(b + (size_t)k * ldb);
#pragma GCC unroll 6
      for (int r = 0; r < R; r++) s[r] += a[(size_t)r * ai + (size_t)k * ak] * bv;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) *(Vf16u *)(c + (size_t)r * ldc) = s[r];
    return;
  }
  Vf8 s0[ATT_MR], s1[ATT_MR];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    Vf8 z0 = {0}, z1 = {0};
    if (acc) {
      z0 = *(const Vf8u *)(c + (size_t)r * ldc);
      z1 = *(const Vf8u *)(c + (size_t)r * ldc + 8);
    }
    s0[r] = z0;
    s1[r] = z1;
  }
  for (int k = 0; k < K; k++) {
    const float *bk = b + (size_t)k * ldb, *ak_ = a + (size_t)k * ak;
    Vf8 b0 = *(const Vf8u *)bk, b1 = *(const Vf8u *)(bk + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      float x = ak_[(size_t)r * ai];
      s0[r] += x * b0;
      s1[r] += x * b1;
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    *(Vf8u *)(c + (size_t)r * ldc) = s0[r];
    *(Vf8u *)(c + (size_t)r * ldc + 8) = s1[r];
  }
}

/* c[i * ldc + j] (+)= sum_{k < K} A(i, k) b[k * ldb + j] for i < M and
 * j < N, N a multiple of 16; A(i, k) = a[i * ai + k * ak] (a row-major
 * matrix or a transposed one). V: gemm_strip's accumulator width. */
ATT_AI void tile_gemm_body(float *restrict c, size_t ldc, const float *restrict a, size_t ai,
                           size_t ak, const float *restrict b, size_t ldb, int M, int N, int K,
                           int acc, const int V) {
  for (int j = 0; j < N; j += 16) {
    int i = 0;
    for (; i + ATT_MR <= M; i += ATT_MR)
      gemm_strip(c + (size_t)i * ldc + j, ldc, a + (size_t)i * ai, ai, ak, b + j, ldb, K, acc,
                 ATT_MR, V);
    float *cc = c + (size_t)i * ldc + j;
    const float *aa = a + (size_t)i * ai;
    switch (M - i) {
      case 5: gemm_strip(cc, ldc, aa, ai, ak, b + j, ldb, K, acc, 5, V); break;
      case 4: gemm_strip(cc, ldc, aa, ai, ak, b + j, ldb, K, acc, 4, V); break;
      case 3: gemm_strip(cc, ldc, aa, ai, ak, b + j, ldb, K, acc, 3, V); break;
      case 2: gemm_strip(cc, ldc, aa, ai, ak, b + j, ldb, K, acc, 2, V); break;
      case 1: gemm_strip(cc, ldc, aa, ai, ak, b + j, ldb, K, acc, 1, V); break;
      default: break;
    }
  }
}

/* The general path's product: 16-float accumulators where the CPU has
 * AVX-512 (only the x86-64-v4 clone runs there), 8-float halves below. */
MMRT_CLONES static void tile_gemm(float *restrict c, size_t ldc, const float *restrict a, size_t ai,
                                  size_t ak, const float *restrict b, size_t ldb, int M, int N,
                                  int K, int acc) {
#ifdef MMRT_HAVE_CLONES
  if (__builtin_cpu_supports("avx512f")) {
    tile_gemm_body(c, ldc, a, ai, ak, b, ldb, M, N, K, acc, 16);
    return;
  }
#endif
  tile_gemm_body(c, ldc, a, ai, ak, b, ldb, M, N, K, acc, 8);
}

/* One row of the online softmax: s[0..n) are the scaled scores of the
 * visible keys of this tile, s[n..nk) are masked. Raises the running max
 * *m, rescales the running sum *l and the output row o[0..Dp), and leaves
 * p = exp(s - max) in s (zero where masked). */
MMRT_CLONES static void online_softmax_row(float *restrict s, int n, int nk, float *m, float *l,
                                           float *restrict o, int Dp) {
  float mx = *m;
  for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  float alpha = *m == -INFINITY ? 0.0f : exp_approx(*m - mx), sum = 0.0f;
#pragma omp simd
  for (int j = 0; j < n; j++) s[j] = exp_approx(s[j] - mx);
  /* in order: the sum's bits do not depend on the vector width */
  for (int j = 0; j < n; j++) sum += s[j];
  for (int j = n; j < nk; j++) s[j] = 0.0f;
  *l = *l * alpha + sum;
  *m = mx;
#pragma omp simd
  for (int d = 0; d < Dp; d++) o[d] *= alpha;
}

/* p = exp(scale * s - lse), ds = p * (dp - Dt) * scale for j < n; both
 * zero for n <= j < nk. */
MMRT_CLONES static void grad_row(float *restrict s, float *restrict dp, int n, int nk, float lse,
                                 float Dt, float scale) {
#pragma omp simd
  for (int j = 0; j < n; j++) {
    float p = exp_approx(scale * s[j] - lse);
    s[j] = p;
    dp[j] = p * (dp[j] - Dt) * scale;
  }
  for (int j = n; j < nk; j++) s[j] = dp[j] = 0.0f;
}

ATT_CONTRACT_END

static float max_row(const float *p, int n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
  return m;
}

static void attention_check(int H, int KVH, int D, const char *what) {
  if (KVH < 1 || H % KVH || D < 1) die(what, "H must be a multiple of KVH");
}

/* Per-thread tiles: TQ x TK scores (and their gradient), the key tile
 * transposed (D x TK) for K and V, the key tile and the query tile with
 * rows padded to Dp (K, Q, dO), and TQ x Dp (and TK x Dp) accumulators. */
typedef struct AttWs {
  float *s, *dp, *kt, *vt, *kp, *qp, *dop, *o, *dk, *dv, *m, *l, *op;
} AttWs;

static AttWs att_ws(int D, const char *what) {
  size_t Dp = (size_t)pad16(D), TQ = ATT_TQ, TK = ATT_TK;
  size_t n = 2 * TQ * TK + 2 * (size_t)D * TK + TK * Dp + 4 * TQ * Dp + 2 * TK * Dp + 2 * TQ;
  AttWs w;
  w.s = xmalloc(sizeof(float) * n, what);
  w.dp = w.s + TQ * TK;
  w.kt = w.dp + TQ * TK;
  w.vt = w.kt + (size_t)D * TK;
  w.kp = w.vt + (size_t)D * TK;
  w.qp = w.kp + TK * Dp;
  w.dop = w.qp + TQ * Dp;
  w.o = w.dop + TQ * Dp;
  w.dk = w.o + TQ * Dp;
  w.dv = w.dk + TK * Dp;
  w.m = w.dv + TK * Dp;
  w.l = w.m + TQ;
  w.op = w.l + TQ;
  return w;
}

/* dst rows from element off (stride ld) (+)= the tile's rows (stride Dp),
 * D columns; a bf16 dst (bf) gets each sum rounded. */
ATT_AI void put_tile_body(void *dst, size_t off, size_t ld, const float *src, int n, int D,
                          int accumulate, int bf) {
  int Dp = pad16(D);
  for (int i = 0; i < n; i++) {
    const float *sr = src + (size_t)i * Dp;
    size_t o = off + (size_t)i * ld;
    if (bf) {
      uint16_t *dr = (uint16_t *)dst + o;
      int d = 0;
      for (; d + 16 <= D; d += 16) {
        float v[16];
        if (accumulate) {
          widen16(v, dr + d);
          for (int e = 0; e < 16; e++) v[e] += sr[d + e];
        } else {
          memcpy(v, sr + d, sizeof v);
        }
        narrow16(dr + d, v);
      }
      for (; d < D; d++)
        dr[d] = mmrt_bf16_narrow(accumulate ? mmrt_bf16_widen(dr[d]) + sr[d] : sr[d]);
    } else if (accumulate) {
      float *dr = (float *)dst + o;
#pragma omp simd
      for (int d = 0; d < D; d++) dr[d] += sr[d];
    } else {
      float *dr = (float *)dst + o;
      int d = 0;
      for (; d + 16 <= D; d += 16) *(Vf16u *)(dr + d) = *(const Vf16u *)(sr + d);
      for (; d < D; d++) dr[d] = sr[d];
    }
  }
}

MMRT_CLONES static void put_tile(void *dst, size_t off, size_t ld, const float *src, int n, int D,
                                 int accumulate, int bf) {
  put_tile_body(dst, off, ld, src, n, D, accumulate, bf);
}

/* Shape of one call; with pos, row b's queries are at positions pos[b] ..
 * pos[b] + T - 1 and see keys 0 .. pos[b] + T - 1 (causal; the KV cache). */
typedef struct AttShape {
  int B, T, S, H, KVH, D, causal;
  float scale;
  const int32_t *pos;
  int bf;             /* q, k, v, out (dout, dq, dk, dv) are bf16 */
  const float *mask;  /* [B, S] or NULL: key s of row b is dropped where mask[b, s] == 0 */
  const int32_t *seg; /* [B, T] (S == T) or NULL: query t sees key s only where
                         seg[b, s] == seg[b, t] (packed documents) */
} AttShape;

/* The key mask on row i of a tile (its first n keys from s0 of row b): the
 * dropped keys' entries of s set to x (-inf: scores; 0: probabilities).
 * Returns whether any of the n keys is kept. */
static int mask_row(const AttShape *a, int b, int s0, int n, float *s, float x) {
  const float *mk = a->mask + (size_t)b * a->S + s0;
  int kept = 0;
  for (int j = 0; j < n; j++) {
    if (mk[j] == 0.0f)
      s[j] = x;
    else
      kept = 1;
  }
  return kept;
}

/* Segments: on row i of a tile (query t of row b; its first n keys from
 * s0), the keys of another segment set to x (-inf: scores; 0:
 * probabilities). Returns whether any of the n keys is kept. */
static int seg_row(const AttShape *a, int b, int t, int s0, int n, float *s, float x) {
  const int32_t *sg = a->seg + (size_t)b * a->T;
  int kept = 0;
  for (int j = 0; j < n; j++) {
    if (sg[s0 + j] != sg[t])
      s[j] = x;
    else
      kept = 1;
  }
  return kept;
}

/* Whether no query of [t0, t0 + nq) shares a segment with a key of
 * [s0, s0 + nk) of row b, by the ranges of their segment numbers (exact for
 * segments numbered in order along the row, as packed rows are): the tile
 * is skipped (varlen: no work across a document boundary). */
static int seg_disjoint(const AttShape *a, int b, int t0, int nq, int s0, int nk) {
  if (!a->seg) return 0;
  const int32_t *sg = a->seg + (size_t)b * a->T;
  int32_t qlo = sg[t0], qhi = sg[t0], klo = sg[s0], khi = sg[s0];
  for (int i = 1; i < nq; i++)
    qlo = sg[t0 + i] < qlo ? sg[t0 + i] : qlo, qhi = sg[t0 + i] > qhi ? sg[t0 + i] : qhi;
  for (int j = 1; j < nk; j++)
    klo = sg[s0 + j] < klo ? sg[s0 + j] : klo, khi = sg[s0 + j] > khi ? sg[s0 + j] : khi;
  return khi < qlo || klo > qhi;
}

static inline int att_keys(const AttShape *a, int b) {
  return a->pos ? a->pos[b] + a->T : a->S;
}

/* Forward work item: queries [t0, t0 + nq) of head h in row b. */
static void fwd_item(const AttShape *a, AttWs *w, void *out, float *lse, const void *q,
                     const void *k, const void *v, int b, int h, int t0, int nq) {
  int D = a->D, Dp = pad16(D), S = att_keys(a, b), off = S - a->T, bf = a->bf;
  int causal = a->pos ? 1 : a->causal;
  size_t kvs = (size_t)a->KVH * D, qs = (size_t)a->H * D;
  size_t kb = (size_t)b * a->S * kvs + (size_t)(h / (a->H / a->KVH)) * D;
  size_t qb = ((size_t)b * a->T + t0) * qs + (size_t)h * D;
  for (int i = 0; i < nq; i++) {
    w->m[i] = -INFINITY;
    w->l[i] = 0.0f;
  }
  memset(w->o, 0, sizeof(float) * (size_t)nq * Dp);
  /* the scaled query tile */
  pad_rows(w->qp, (size_t)Dp, q, qb, nq, qs, D, bf);
  for (size_t i = 0; i < (size_t)nq * Dp; i++) w->qp[i] *= a->scale;
  int smax = visible_keys(t0 + nq - 1, S, off, causal);
  for (int s0 = 0; s0 < smax; s0 += ATT_TK) {
    int nk = smax - s0 < ATT_TK ? smax - s0 : ATT_TK, ld = pad16(nk);
    if (seg_disjoint(a, b, t0, nq, s0, nk)) continue; /* every score -inf: nothing changes */
    transpose_rows(w->kt, (size_t)ld, k, kb + (size_t)s0 * kvs, nk, kvs, D, bf);
    pad_rows(w->kp, (size_t)Dp, v, kb + (size_t)s0 * kvs, nk, kvs, D, bf);
    tile_gemm(w->s, (size_t)ld, w->qp, (size_t)Dp, 1, w->kt, (size_t)ld, nq, ld, D, 0);
    for (int i = 0; i < nq; i++) {
      int n = visible_keys(t0 + i, S, off, causal) - s0;
      n = n < 0 ? 0 : (n > nk ? nk : n);
      float *si = w->s + (size_t)i * ld;
      if (n > 0 && a->mask && !mask_row(a, b, s0, n, si, -INFINITY) && w->m[i] == -INFINITY)
        n = 0; /* every key so far dropped */
      if (n > 0 && a->seg && !seg_row(a, b, t0 + i, s0, n, si, -INFINITY) && w->m[i] == -INFINITY)
        n = 0;
      if (n == 0) {
        memset(si, 0, sizeof(float) * (size_t)nk);
        continue;
      }
      online_softmax_row(si, n, nk, &w->m[i], &w->l[i], w->o + (size_t)i * Dp, Dp);
      if (a->mask) mask_row(a, b, s0, n, si, 0.0f);
      if (a->seg) seg_row(a, b, t0 + i, s0, n, si, 0.0f);
    }
    tile_gemm(w->o, (size_t)Dp, w->s, (size_t)ld, 1, w->kp, (size_t)Dp, nq, Dp, nk, 1);
  }
  for (int i = 0; i < nq; i++) {
    float inv = w->l[i] > 0.0f ? 1.0f / w->l[i] : 0.0f;
    for (int d = 0; d < Dp; d++) w->o[(size_t)i * Dp + d] *= inv;
    if (lse)
      lse[((size_t)b * a->H + h) * a->T + t0 + i] =
          w->l[i] > 0.0f ? w->m[i] + logf(w->l[i]) : -INFINITY;
  }
  put_tile(out, ((size_t)b * a->T + t0) * qs + (size_t)h * D, qs, w->o, nq, D, 0, bf);
}

/* The backward's inputs for one call. */
typedef struct AttGrad {
  AttShape a;
  const void *dout, *q, *k, *v, *out; /* f32, or bf16 (a.bf) */
  const float *lse, *Dt;              /* Dt: NULL on the short path (computed per tile) */
} AttGrad;

/* ---- the short path: every key in one tile (S <= ATT_TK) ----
 * Small heads over short sequences (ViT's 50 tokens with head size 16)
 * spent most of their time outside the products: the online softmax's
 * scalar max and rescaling, the separate Dt pass, the calls between
 * helpers. With one key tile the softmax is exact in one pass over a whole
 * score row (kept in the TQ x TK tile), the backward computes each head's
 * P and dS once and Dt from its own dO and out tiles, and the whole item is
 * one function per ISA (AVX-512, AVX2, baseline) chosen at the first call
 * or by mmrt_attention_isa (tests), with the tile helpers inlined. */

ATT_CONTRACT_FAST

/* VMAX16: the lane-wise max of two vectors (macros, not functions: GCC
 * warns on 64-byte vectors passed by value, whose ABI differs with
 * AVX-512). HALVES(v, OP): every lane of v becomes OP over v's 16 lanes. */
typedef int32_t Vi16 __attribute__((vector_size(64)));
#define VMAX16(a, b) ((Vf16)(((Vi16)(a) & ((a) > (b))) | ((Vi16)(b) & ~((a) > (b)))))
#define VADD16(a, b) ((a) + (b))
#define HALVES(v, OP)                                                                              \
  do {                                                                                             \
    v = OP(v,                                                                                      \
           __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));   \
    v = OP(v,                                                                                      \
           __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));   \
    v = OP(v,                                                                                      \
           __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));   \
    v = OP(v,                                                                                      \
           __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));   \
  } while (0)

/* kb[j] = 0 where key j of row b is kept, -inf where it is dropped (key
 * mask) or j >= S (the padding up to Sp). */
ATT_AI void short_key_bias(const AttShape *a, int b, float *kb, int Sp) {
  for (int j = 0; j < Sp; j++)
    kb[j] = j < a->S && !(a->mask && a->mask[(size_t)b * a->S + j] == 0.0f) ? 0.0f : -INFINITY;
}

/* One row of the exact softmax: x = scale s + kb for keys j < n, -inf past
 * them; s becomes p = exp(x - max) (0 where x = -inf); returns the sum and
 * sets *m to the max (-inf, p = 0: no key seen). Sp is a multiple of 16. */
ATT_AI float short_softmax_row(float *restrict s, const float *restrict kb, int n, int Sp,
                               float scale, float *m) {
  Vf16 mv = {0}, sv = {0};
  mv -= INFINITY;
  for (int j0 = 0; j0 < Sp; j0 += 16) {
#pragma omp simd
    for (int jj = 0; jj < 16; jj++)
      s[j0 + jj] = j0 + jj < n ? scale * s[j0 + jj] + kb[j0 + jj] : -INFINITY;
    Vf16 x = *(const Vf16u *)(s + j0);
    mv = VMAX16(x, mv);
  }
  HALVES(mv, VMAX16);
  float mx = *m = mv[0];
  if (mx == -INFINITY) {
    memset(s, 0, sizeof(float) * (size_t)Sp);
    return 0.0f;
  }
  for (int j0 = 0; j0 < Sp; j0 += 16) {
#pragma omp simd
    for (int jj = 0; jj < 16; jj++) {
      float x = s[j0 + jj];
      s[j0 + jj] = x == -INFINITY ? 0.0f : exp_approx(x - mx);
    }
    sv += *(const Vf16u *)(s + j0);
  }
  HALVES(sv, VADD16);
  return sv[0];
}

/* n rows at src + off (stride ld) as a tile operand: read in place when
 * they are whole f32 vectors (D % 16 == 0), else padded (and widened) into
 * buf (stride Dp). *lds: the stride of the returned rows. */
ATT_AI const float *rows_view(float *buf, int Dp, const void *src, size_t off, int n, size_t ld,
                              int D, int bf, size_t *lds) {
  if (!bf && D % 16 == 0) {
    *lds = ld;
    return (const float *)src + off;
  }
  pad_rows_body(buf, (size_t)Dp, src, off, n, ld, D, bf);
  *lds = (size_t)Dp;
  return buf;
}

/* Forward work item of the short path: queries [t0, t0 + nq) of head h in
 * row b against all S keys. P is normalised before P V, so that (f32, whole
 * vectors) the product is written to out in place. */
ATT_AI void short_fwd_body(const AttShape *a, AttWs *w, void *out, float *lse, const void *q,
                           const void *k, const void *v, int b, int h, int t0, int nq,
                           const int V) {
  int D = a->D, Dp = pad16(D), S = a->S, Sp = pad16(S), off = S - a->T, bf = a->bf;
  size_t kvs = (size_t)a->KVH * D, qs = (size_t)a->H * D;
  size_t kb = (size_t)b * S * kvs + (size_t)(h / (a->H / a->KVH)) * D;
  size_t qb = ((size_t)b * a->T + t0) * qs + (size_t)h * D;
  size_t ldq, ldv;
  const float *qr = rows_view(w->qp, Dp, q, qb, nq, qs, D, bf, &ldq);
  transpose_rows_body(w->kt, (size_t)Sp, k, kb, S, kvs, D, bf);
  const float *vr = rows_view(w->kp, Dp, v, kb, S, kvs, D, bf, &ldv);
  short_key_bias(a, b, w->m, Sp);
  tile_gemm_body(w->s, (size_t)Sp, qr, ldq, 1, w->kt, (size_t)Sp, nq, Sp, D, 0, V);
  for (int i = 0; i < nq; i++) {
    float mx, *si = w->s + (size_t)i * Sp;
    float l =
        short_softmax_row(si, w->m, visible_keys(t0 + i, S, off, a->causal), Sp, a->scale, &mx);
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int j0 = 0; j0 < Sp; j0 += 16) *(Vf16u *)(si + j0) = *(const Vf16u *)(si + j0) * inv;
    if (lse) lse[((size_t)b * a->H + h) * a->T + t0 + i] = l > 0.0f ? mx + logf(l) : -INFINITY;
  }
  if (ldq != (size_t)Dp) { /* f32 in place */
    tile_gemm_body((float *)out + qb, qs, w->s, (size_t)Sp, 1, vr, ldv, nq, Dp, S, 0, V);
    return;
  }
  tile_gemm_body(w->o, (size_t)Dp, w->s, (size_t)Sp, 1, vr, ldv, nq, Dp, S, 0, V);
  put_tile_body(out, qb, qs, w->o, nq, D, 0, bf);
}

/* Backward work item of the short path: KV head kh of row b with every
 * query tile of every head of its group; each tile's P and dS computed
 * once. dq (+)= dS K per tile; dk, dv summed over the tiles, then stored. */
ATT_AI void short_bwd_body(const AttGrad *g, AttWs *w, int b, int kh, void *dq, void *dk, void *dv,
                           int accumulate, const int V) {
  const AttShape *a = &g->a;
  int D = a->D, Dp = pad16(D), S = a->S, Sp = pad16(S), off = S - a->T, bf = a->bf;
  int grp = a->H / a->KVH;
  size_t kvs = (size_t)a->KVH * D, qs = (size_t)a->H * D;
  size_t ko = (size_t)b * S * kvs + (size_t)kh * D;
  transpose_rows_body(w->kt, (size_t)Sp, g->k, ko, S, kvs, D, bf);
  transpose_rows_body(w->vt, (size_t)Sp, g->v, ko, S, kvs, D, bf);
  size_t ldk, ldq, ldo, ldd;
  const float *kr = rows_view(w->kp, Dp, g->k, ko, S, kvs, D, bf, &ldk);
  short_key_bias(a, b, w->m, Sp);
  memset(w->dk, 0, sizeof(float) * (size_t)S * Dp);
  memset(w->dv, 0, sizeof(float) * (size_t)S * Dp);
  for (int gi = 0; gi < grp; gi++) {
    int h = kh * grp + gi;
    for (int t0 = 0; t0 < a->T; t0 += ATT_TQ) {
      int nq = a->T - t0 < ATT_TQ ? a->T - t0 : ATT_TQ;
      size_t o = ((size_t)b * a->T + t0) * qs + (size_t)h * D;
      const float *qr = rows_view(w->qp, Dp, g->q, o, nq, qs, D, bf, &ldq);
      const float *dor = rows_view(w->dop, Dp, g->dout, o, nq, qs, D, bf, &ldd);
      const float *outr = rows_view(w->op, Dp, g->out, o, nq, qs, D, bf, &ldo);
      tile_gemm_body(w->s, (size_t)Sp, qr, ldq, 1, w->kt, (size_t)Sp, nq, Sp, D, 0, V);
      tile_gemm_body(w->dp, (size_t)Sp, dor, ldd, 1, w->vt, (size_t)Sp, nq, Sp, D, 0, V);
      const float *lse = g->lse + ((size_t)b * a->H + h) * a->T + t0;
      for (int i = 0; i < nq; i++) {
        const float *dori = dor + (size_t)i * ldd, *orow = outr + (size_t)i * ldo;
        float l = lse[i], sc = a->scale, *si = w->s + (size_t)i * Sp, *dpi = w->dp + (size_t)i * Sp;
        Vf16 dv16 = {0};
        for (int d0 = 0; d0 < Dp; d0 += 16)
          dv16 += *(const Vf16u *)(dori + d0) * *(const Vf16u *)(orow + d0);
        HALVES(dv16, VADD16);
        float Dt = dv16[0];
        int n = visible_keys(t0 + i, S, off, a->causal);
        const float *kb = w->m;
        for (int j0 = 0; j0 < Sp; j0 += 16) {
#pragma omp simd
          for (int jj = 0; jj < 16; jj++)
            si[j0 + jj] = j0 + jj < n && kb[j0 + jj] == 0.0f ? sc * si[j0 + jj] - l : -INFINITY;
#pragma omp simd
          for (int jj = 0; jj < 16; jj++) {
            float x = si[j0 + jj], p = x == -INFINITY ? 0.0f : exp_approx(x);
            si[j0 + jj] = p;
            dpi[j0 + jj] = p * (dpi[j0 + jj] - Dt) * sc;
          }
        }
      }
      if (dq && ldk != (size_t)Dp) /* f32 in place */
        tile_gemm_body((float *)dq + o, qs, w->dp, (size_t)Sp, 1, kr, ldk, nq, Dp, S, accumulate,
                       V);
      else if (dq) {
        tile_gemm_body(w->o, (size_t)Dp, w->dp, (size_t)Sp, 1, kr, ldk, nq, Dp, S, 0, V);
        put_tile_body(dq, o, qs, w->o, nq, D, accumulate, bf);
      }
      if (dv) tile_gemm_body(w->dv, (size_t)Dp, w->s, 1, (size_t)Sp, dor, ldd, S, Dp, nq, 1, V);
      if (dk) tile_gemm_body(w->dk, (size_t)Dp, w->dp, 1, (size_t)Sp, qr, ldq, S, Dp, nq, 1, V);
    }
  }
  if (dk) put_tile_body(dk, ko, kvs, w->dk, S, D, accumulate, bf);
  if (dv) put_tile_body(dv, ko, kvs, w->dv, S, D, accumulate, bf);
}

/* One build of the two items per ISA. */
#define ATT_SHORT_ISA(SUF, TARGET, V)                                                              \
  TARGET static void short_fwd_##SUF(const AttShape *a, AttWs *w, void *out, float *lse,           \
                                     const void *q, const void *k, const void *v, int b, int h,    \
                                     int t0, int nq) {                                             \
    short_fwd_body(a, w, out, lse, q, k, v, b, h, t0, nq, V);                                      \
  }                                                                                                \
  TARGET static void short_bwd_##SUF(const AttGrad *g, AttWs *w, int b, int kh, void *dq,          \
                                     void *dk, void *dv, int accumulate) {                         \
    short_bwd_body(g, w, b, kh, dq, dk, dv, accumulate, V);                                        \
  }
ATT_SHORT_ISA(base, , 8)
#ifdef MMRT_HAVE_CLONES
ATT_SHORT_ISA(avx2, __attribute__((target("arch=x86-64-v3"))), 8)
ATT_SHORT_ISA(avx512, __attribute__((target("arch=x86-64-v4"))), 16)
#endif
#undef ATT_SHORT_ISA

ATT_CONTRACT_END

typedef struct AttShortFns {
  void (*fwd)(const AttShape *, AttWs *, void *, float *, const void *, const void *, const void *,
              int, int, int, int);
  void (*bwd)(const AttGrad *, AttWs *, int, int, void *, void *, void *, int);
} AttShortFns;

static const AttShortFns att_short_isas[3] = {
    {short_fwd_base, short_bwd_base},
#ifdef MMRT_HAVE_CLONES
    {short_fwd_avx2, short_bwd_avx2},
    {short_fwd_avx512, short_bwd_avx512},
#endif
};

static int att_isa = -1; /* the short path's ISA: MMRT_ISA_*, -1 until chosen */

static int isa_supported(int isa) {
#ifdef MMRT_HAVE_CLONES
  if (isa == MMRT_ISA_AVX512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (isa == MMRT_ISA_AVX2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2");
#endif
  return isa == MMRT_ISA_BASE;
}

int mmrt_attention_isa(int isa) {
  if (isa < 0) {
    att_isa = isa_supported(MMRT_ISA_AVX512) ? MMRT_ISA_AVX512
              : isa_supported(MMRT_ISA_AVX2) ? MMRT_ISA_AVX2
                                             : MMRT_ISA_BASE;
    return att_isa;
  }
  if (isa > MMRT_ISA_AVX512 || !isa_supported(isa)) return -1;
  return att_isa = isa;
}

/* Called outside parallel regions (the first call chooses). */
static const AttShortFns *att_short(void) {
  if (att_isa < 0) mmrt_attention_isa(-1);
  return &att_short_isas[att_isa];
}

static void attention_fwd(const AttShape *a, void *out, float *lse, const void *q, const void *k,
                          const void *v, const char *what) {
  attention_check(a->H, a->KVH, a->D, what);
  int nblk = (a->T + ATT_TQ - 1) / ATT_TQ;
  const AttShortFns *sh = !a->pos && !a->seg && a->S <= ATT_TK ? att_short() : NULL;
#pragma omp parallel
  {
    AttWs w = att_ws(a->D, what);
#pragma omp for collapse(3) schedule(dynamic)
    for (int b = 0; b < a->B; b++)
      for (int h = 0; h < a->H; h++)
        for (int blk = 0; blk < nblk; blk++) {
          int t0 = blk * ATT_TQ, nq = a->T - t0 < ATT_TQ ? a->T - t0 : ATT_TQ;
          if (sh)
            sh->fwd(a, &w, out, lse, q, k, v, b, h, t0, nq);
          else
            fwd_item(a, &w, out, lse, q, k, v, b, h, t0, nq);
        }
    free(w.s);
  }
}

void mmrt_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                        int B, int T, int S, int H, int KVH, int D, int causal, float scale) {
  AttShape a = {B, T, S, H, KVH, D, causal, scale, NULL, 0, NULL, NULL};
  attention_fwd(&a, out, lse, q, k, v, "mmrt_attention_fwd");
}

void mmrt_attention_bf16_fwd(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                             const uint16_t *v, int B, int T, int S, int H, int KVH, int D,
                             int causal, float scale) {
  AttShape a = {B, T, S, H, KVH, D, causal, scale, NULL, 1, NULL, NULL};
  attention_fwd(&a, out, lse, q, k, v, "mmrt_attention_bf16_fwd");
}

void mmrt_attention_pos_fwd(float *out, const float *q, const float *k, const float *v,
                            const int32_t *pos, int B, int n, int S, int H, int KVH, int D,
                            float scale) {
  AttShape a = {B, n, S, H, KVH, D, 1, scale, pos, 0, NULL, NULL};
  attention_fwd(&a, out, NULL, q, k, v, "mmrt_attention_cached_fwd");
}

/* Key tile [s0, s0 + nk) of KV head kh in row b into the workspace: K and V
 * transposed (the scores' and dP's right operands), K padded (dq's). */
static void bwd_load_keys(const AttGrad *g, AttWs *w, int b, int kh, int s0, int nk) {
  int D = g->a.D, ld = pad16(nk), bf = g->a.bf;
  size_t kvs = (size_t)g->a.KVH * D, o = ((size_t)b * g->a.S + s0) * kvs + (size_t)kh * D;
  transpose_rows(w->kt, (size_t)ld, g->k, o, nk, kvs, D, bf);
  transpose_rows(w->vt, (size_t)ld, g->v, o, nk, kvs, D, bf);
  pad_rows(w->kp, (size_t)pad16(D), g->k, o, nk, kvs, D, bf);
}

/* One tile of the backward: queries [t0, t0 + nq) of head h, against the
 * key tile [s0, s0 + nk) loaded by bwd_load_keys. P and dS are recomputed
 * from lse; then, for the non-NULL ones, dqc (+)= dS K (acc_dq),
 * dk += dS^T Q and dv += P^T dO (TK x Dp tiles). */
static void bwd_tile(const AttGrad *g, AttWs *w, int b, int h, int t0, int nq, int s0, int nk,
                     float *dqc, int acc_dq, float *dk, float *dv) {
  const AttShape *a = &g->a;
  int D = a->D, Dp = pad16(D), ld = pad16(nk), off = a->S - a->T;
  size_t qs = (size_t)a->H * D, o = ((size_t)b * a->T + t0) * qs + (size_t)h * D;
  if (seg_disjoint(a, b, t0, nq, s0, nk)) { /* no probability: no gradient */
    if (dqc && !acc_dq) memset(dqc, 0, sizeof(float) * (size_t)nq * Dp);
    return;
  }
  pad_rows(w->qp, (size_t)Dp, g->q, o, nq, qs, D, a->bf);
  pad_rows(w->dop, (size_t)Dp, g->dout, o, nq, qs, D, a->bf);
  tile_gemm(w->s, (size_t)ld, w->qp, (size_t)Dp, 1, w->kt, (size_t)ld, nq, ld, D, 0);
  tile_gemm(w->dp, (size_t)ld, w->dop, (size_t)Dp, 1, w->vt, (size_t)ld, nq, ld, D, 0);
  const float *lse = g->lse + ((size_t)b * a->H + h) * a->T + t0;
  const float *Dt = g->Dt + ((size_t)b * a->H + h) * a->T + t0;
  for (int i = 0; i < nq; i++) {
    int n = visible_keys(t0 + i, a->S, off, a->causal) - s0;
    n = n < 0 ? 0 : (n > nk ? nk : n);
    grad_row(w->s + (size_t)i * ld, w->dp + (size_t)i * ld, n, nk, lse[i], Dt[i], a->scale);
    if (a->mask && n > 0) {
      mask_row(a, b, s0, n, w->s + (size_t)i * ld, 0.0f);
      mask_row(a, b, s0, n, w->dp + (size_t)i * ld, 0.0f);
    }
    if (a->seg && n > 0) {
      seg_row(a, b, t0 + i, s0, n, w->s + (size_t)i * ld, 0.0f);
      seg_row(a, b, t0 + i, s0, n, w->dp + (size_t)i * ld, 0.0f);
    }
  }
  if (dqc) tile_gemm(dqc, (size_t)Dp, w->dp, (size_t)ld, 1, w->kp, (size_t)Dp, nq, Dp, nk, acc_dq);
  if (dv) tile_gemm(dv, (size_t)Dp, w->s, 1, (size_t)ld, w->dop, (size_t)Dp, nk, Dp, nq, 1);
  if (dk) tile_gemm(dk, (size_t)Dp, w->dp, 1, (size_t)ld, w->qp, (size_t)Dp, nk, Dp, nq, 1);
}

/* dk, dv of key tile [s0, s0 + nk) of KV head kh: every visible query tile
 * of every head of its group (the key tile is loaded); dq of those tiles
 * too when dq_out is set (work item (b, kh) owns all of it). */
static void bwd_keys(const AttGrad *g, AttWs *w, int b, int kh, int s0, int nk, void *dq_out,
                     void *dk, void *dv, int accumulate) {
  const AttShape *a = &g->a;
  int D = a->D, Dp = pad16(D), grp = a->H / a->KVH;
  size_t kvs = (size_t)a->KVH * D, qs = (size_t)a->H * D;
  memset(w->dk, 0, sizeof(float) * (size_t)nk * Dp);
  memset(w->dv, 0, sizeof(float) * (size_t)nk * Dp);
  int tmin = first_query(s0, a->S - a->T, a->causal);
  for (int gi = 0; gi < grp; gi++) {
    int h = kh * grp + gi;
    for (int t0 = tmin; t0 < a->T; t0 += ATT_TQ) {
      int nq = a->T - t0 < ATT_TQ ? a->T - t0 : ATT_TQ;
      bwd_tile(g, w, b, h, t0, nq, s0, nk, dq_out ? w->o : NULL, 0, dk ? w->dk : NULL,
               dv ? w->dv : NULL);
      if (dq_out)
        put_tile(dq_out, ((size_t)b * a->T + t0) * qs + (size_t)h * D, qs, w->o, nq, D, 1, a->bf);
    }
  }
  size_t ko = ((size_t)b * a->S + s0) * kvs + (size_t)kh * D;
  if (dk) put_tile(dk, ko, kvs, w->dk, nk, D, accumulate, a->bf);
  if (dv) put_tile(dv, ko, kvs, w->dv, nk, D, accumulate, a->bf);
}

/* Backward, flash-style: Dt = dout_t . out_t per query, then per tile
 * pair p = exp(scale q.k - lse), ds = p (dout.v - Dt), and
 * dq = scale ds K, dk = scale ds^T Q, dv = p^T dout. With many (row, KV
 * head) pairs a work item is one pair and computes each tile once (it owns
 * the pair's dq, dk and dv); with few (long sequences), dq runs per query
 * tile and dk, dv per key tile, each tile computed twice, so that the
 * threads have work. The choice depends on the shape only, not on the
 * thread count, so results do not either. With bf16 results (bf), an item
 * owns the pair's dq only when there is one key tile, so that each dq
 * element is rounded once, as dk and dv are. */
static void attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *out, const float *lse, int B,
                          int T, int S, int H, int KVH, int D, int causal, float scale,
                          int accumulate, int bf, const float *mask, const int32_t *seg,
                          const char *what) {
  attention_check(H, KVH, D, what);
  size_t qs = (size_t)H * D;
  int nkb = (S + ATT_TK - 1) / ATT_TK, nqb = (T + ATT_TQ - 1) / ATT_TQ, grp = H / KVH;
  AttGrad g = {
      {B, T, S, H, KVH, D, causal, scale, NULL, bf, mask, seg}, dout, q, k, v, out, lse, NULL};
  if (!seg && nkb <= 1 && (B * KVH >= 16 || nqb == 1)) { /* the short path */
    const AttShortFns *sh = att_short();
#pragma omp parallel
    {
      AttWs w = att_ws(D, what);
#pragma omp for collapse(2) schedule(dynamic)
      for (int b = 0; b < B; b++)
        for (int kh = 0; kh < KVH; kh++) sh->bwd(&g, &w, b, kh, dq, dk, dv, accumulate);
      free(w.s);
    }
    return;
  }
  float *Dt = xmalloc(sizeof(float) * (size_t)B * H * T, what);
  g.Dt = Dt;
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        size_t off = ((size_t)b * T + t) * qs + (size_t)h * D;
        float s = 0.0f;
        for (int d = 0; d < D; d++) s += att_el(dout, off + d, bf) * att_el(out, off + d, bf);
        Dt[((size_t)b * H + h) * T + t] = s;
      }
  size_t es = bf ? sizeof(uint16_t) : sizeof(float);
  if ((B * KVH >= 16 || (nkb == 1 && nqb == 1)) && (!bf || nkb == 1)) {
#pragma omp parallel
    {
      AttWs w = att_ws(D, what);
#pragma omp for collapse(2) schedule(dynamic)
      for (int b = 0; b < B; b++)
        for (int kh = 0; kh < KVH; kh++) {
          if (dq && !accumulate)
            for (int t = 0; t < T; t++)
              memset((char *)dq + (((size_t)b * T + t) * qs + (size_t)kh * grp * D) * es, 0,
                     es * (size_t)grp * D);
          for (int s0 = 0; s0 < S; s0 += ATT_TK) {
            int nk = S - s0 < ATT_TK ? S - s0 : ATT_TK;
            bwd_load_keys(&g, &w, b, kh, s0, nk);
            bwd_keys(&g, &w, b, kh, s0, nk, dq, dk, dv, accumulate);
          }
        }
      free(w.s);
    }
  } else {
#pragma omp parallel
    {
      AttWs w = att_ws(D, what);
      if (dq) {
#pragma omp for collapse(3) schedule(dynamic)
        for (int b = 0; b < B; b++)
          for (int h = 0; h < H; h++)
            for (int qb = 0; qb < nqb; qb++) {
              int t0 = qb * ATT_TQ, nq = T - t0 < ATT_TQ ? T - t0 : ATT_TQ;
              int smax = visible_keys(t0 + nq - 1, S, S - T, causal);
              float *acc = w.dk; /* TQ x Dp fits in the TK x Dp tile */
              memset(acc, 0, sizeof(float) * (size_t)nq * pad16(D));
              for (int s0 = 0; s0 < smax; s0 += ATT_TK) {
                int nk = smax - s0 < ATT_TK ? smax - s0 : ATT_TK;
                bwd_load_keys(&g, &w, b, h / grp, s0, nk);
                bwd_tile(&g, &w, b, h, t0, nq, s0, nk, acc, 1, NULL, NULL);
              }
              put_tile(dq, ((size_t)b * T + t0) * qs + (size_t)h * D, qs, acc, nq, D, accumulate,
                       bf);
            }
      }
      if (dk || dv) {
#pragma omp for collapse(3) schedule(dynamic)
        for (int b = 0; b < B; b++)
          for (int kh = 0; kh < KVH; kh++)
            for (int kb = 0; kb < nkb; kb++) {
              int s0 = kb * ATT_TK, nk = S - s0 < ATT_TK ? S - s0 : ATT_TK;
              bwd_load_keys(&g, &w, b, kh, s0, nk);
              bwd_keys(&g, &w, b, kh, s0, nk, NULL, dk, dv, accumulate);
            }
      }
      free(w.s);
    }
  }
  free(Dt);
}

void mmrt_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse, int B,
                        int T, int S, int H, int KVH, int D, int causal, float scale,
                        int accumulate) {
  attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, S, H, KVH, D, causal, scale, accumulate,
                0, NULL, NULL, "mmrt_attention_bwd");
}

void mmrt_attention_bf16_bwd(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const uint16_t *out, const float *lse, int B, int T, int S, int H,
                             int KVH, int D, int causal, float scale, int accumulate) {
  attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, S, H, KVH, D, causal, scale, accumulate,
                1, NULL, NULL, "mmrt_attention_bf16_bwd");
}

void mmrt_attention_masked_fwd(void *out, float *lse, const void *q, const void *k, const void *v,
                               const float *mask, int B, int T, int S, int H, int KVH, int D,
                               int causal, float scale, int bf16) {
  AttShape a = {B, T, S, H, KVH, D, causal, scale, NULL, bf16 != 0, mask, NULL};
  attention_fwd(&a, out, lse, q, k, v, "mmrt_attention_masked_fwd");
}

void mmrt_attention_masked_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
                               const void *k, const void *v, const void *out, const float *lse,
                               const float *mask, int B, int T, int S, int H, int KVH, int D,
                               int causal, float scale, int accumulate, int bf16) {
  attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, S, H, KVH, D, causal, scale, accumulate,
                bf16 != 0, mask, NULL, "mmrt_attention_masked_bwd");
}

void mmrt_attention_seg_fwd(void *out, float *lse, const void *q, const void *k, const void *v,
                            const int32_t *seg, int B, int T, int H, int KVH, int D, int causal,
                            float scale, int bf16) {
  AttShape a = {B, T, T, H, KVH, D, causal, scale, NULL, bf16 != 0, NULL, seg};
  attention_fwd(&a, out, lse, q, k, v, "mmrt_attention_seg_fwd");
}

void mmrt_attention_seg_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *k, const void *v, const void *out, const float *lse,
                            const int32_t *seg, int B, int T, int H, int KVH, int D, int causal,
                            float scale, int accumulate, int bf16) {
  attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, T, H, KVH, D, causal, scale, accumulate,
                bf16 != 0, NULL, seg, "mmrt_attention_seg_bwd");
}

/* ======================================================================
 * cross entropy, embedding
 * ====================================================================== */

/* The cross-entropy's exponential rows: GCC gets -fno-trapping-math here
 * (only that: each exponential's value is the same) so that its
 * if-conversion turns exp_approx's clamps into selects in the AVX2 and
 * baseline clones too, as under AVX-512's masks. Without it these loops ran
 * scalar on an AVX2 machine, the cross-entropy and its gradient 7 to 10
 * times the time the cost model gives them (GPT-2 124M: 62 ms a step on a
 * Zen 3). The row's sum now adds in the vector lanes' order there, as it
 * did under AVX-512. */
#if defined(__clang__)
#define ROWS_NO_TRAP_BEGIN
#define ROWS_NO_TRAP_END
#else
#define ROWS_NO_TRAP_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"no-trapping-math\")")
#define ROWS_NO_TRAP_END   _Pragma("GCC pop_options")
#endif
ROWS_NO_TRAP_BEGIN
/* sum_j exp(x[j] - sub) */
MMRT_CLONES static float sum_exp(const float *x, int n, float sub) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < n; j++) s += exp_approx(x[j] - sub);
  return s;
}

/* y[j] (+)= g * exp(x[j] - sub) */
MMRT_CLONES static void scaled_exp_row(float *restrict y, const float *restrict x, int n, float sub,
                                       float g, int accumulate) {
  if (accumulate) {
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] += g * exp_approx(x[j] - sub);
  } else {
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] = g * exp_approx(x[j] - sub);
  }
}
ROWS_NO_TRAP_END

float mmrt_row_lse(const float *x, int64_t n) {
  if (n <= 0) return -INFINITY;
  float mx = max_row(x, (int)n);
  return mx + logf(sum_exp(x, (int)n, mx));
}

void mmrt_row_exp_scaled(float *y, const float *x, int64_t n, float sub, float g) {
  scaled_exp_row(y, x, (int)n, sub, g, 0);
}

static int count_labels(const int32_t *labels, int N, int V, int ignore_index, const char *what) {
  int count = 0;
  for (int i = 0; i < N; i++) {
    if (labels[i] == ignore_index) continue;
    if (labels[i] < 0 || labels[i] >= V) {
      fprintf(stderr,
              "mmrt: %s: label %d at row %d is outside [0, %d) and is "
              "not the ignore index %d\n",
              what, (int)labels[i], i, V, ignore_index);
      return -1;
    }
    count++;
  }
  return count;
}

int mmrt_cross_entropy_fwd(float *loss, float *lse, const float *logits, const int32_t *labels,
                           int N, int V, int ignore_index) {
  int count = count_labels(labels, N, V, ignore_index, "mmrt_cross_entropy_fwd");
  if (count < 0) return -1;
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int i = 0; i < N; i++) {
    const float *row = logits + (size_t)i * V;
    float l = mmrt_row_lse(row, V);
    if (lse) lse[i] = l;
    if (labels[i] != ignore_index) total += (double)l - (double)row[labels[i]];
  }
  *loss = count ? (float)(total / count) : 0.0f;
  return count;
}

void mmrt_cross_entropy_bwd(float *dlogits, const float *logits, const float *lse,
                            const int32_t *labels, float dloss, int N, int V, int ignore_index,
                            int accumulate) {
  int count = count_labels(labels, N, V, ignore_index, "mmrt_cross_entropy_bwd");
  if (count < 0) die("mmrt_cross_entropy_bwd", "bad labels (forward should have failed)");
  float g = count ? dloss / (float)count : 0.0f;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *row = logits + (size_t)i * V;
    float *drow = dlogits + (size_t)i * V;
    if (labels[i] == ignore_index) {
      if (!accumulate) memset(drow, 0, sizeof(float) * (size_t)V);
      continue;
    }
    scaled_exp_row(drow, row, V, lse[i], g, accumulate);
    drow[labels[i]] -= g;
  }
}

int mmrt_embedding_fwd(float *out, const float *table, const int32_t *ids, int N, int V, int C) {
  int bad = -1;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    float *o = out + (size_t)i * C;
    if (ids[i] < 0 || ids[i] >= V) {
      memset(o, 0, sizeof(float) * (size_t)C);
#pragma omp critical(mmrt_embedding_bad)
      if (bad < 0 || i < bad) bad = i;
      continue;
    }
    memcpy(o, table + (size_t)ids[i] * C, sizeof(float) * (size_t)C);
  }
  if (bad >= 0) {
    fprintf(stderr,
            "mmrt: mmrt_embedding_fwd: id %d at row %d is outside "
            "[0, %d)\n",
            (int)ids[bad], bad, V);
    return -1;
  }
  return 0;
}

void mmrt_embedding_bwd(float *dtable, const float *dout, const int32_t *ids, int N, int V, int C,
                        int accumulate) {
#pragma omp parallel
  {
    /* Threads own column ranges: every row's scatter is race-free. */
    size_t lo, hi;
    thread_range((size_t)C, &lo, &hi);
    if (!accumulate)
      for (int v = 0; v < V; v++) memset(dtable + (size_t)v * C + lo, 0, sizeof(float) * (hi - lo));
    for (int i = 0; i < N; i++) {
      if (ids[i] < 0 || ids[i] >= V) continue;
      float *d = dtable + (size_t)ids[i] * C;
      const float *g = dout + (size_t)i * C;
#pragma omp simd
      for (size_t c = lo; c < hi; c++) d[c] += g[c];
    }
  }
}

void mmrt_embedding_bwd_add(float *dtable, const void *base, int base_bf16, const float *dout,
                            const int32_t *ids, int N, int V, int C) {
  /* seen[v]: a row some id touches; first[i]: id i is its row's first */
  unsigned char *seen = calloc((size_t)(V > 0 ? V : 1) + (size_t)(N > 0 ? N : 1), 1);
  if (!seen)
    mmrt_die_oom("mmrt_embedding_bwd_add (row marks)",
                 (size_t)(V > 0 ? V : 1) + (size_t)(N > 0 ? N : 1));
  unsigned char *first = seen + (V > 0 ? V : 1);
  for (int i = 0; i < N; i++)
    if (ids[i] >= 0 && ids[i] < V) {
      first[i] = !seen[ids[i]];
      seen[ids[i]] = 1;
    }
  const float *bf = base;
  const uint16_t *bh = base;
#pragma omp parallel
  {
    size_t lo, hi;
    thread_range((size_t)C, &lo, &hi);
    /* the touched rows: their sum from 0 in id order, as embedding_bwd's */
    for (int i = 0; i < N; i++) {
      if (ids[i] < 0 || ids[i] >= V) continue;
      float *d = dtable + (size_t)ids[i] * C;
      const float *g = dout + (size_t)i * C;
      if (first[i]) {
#pragma omp simd
        for (size_t c = lo; c < hi; c++) d[c] = 0.0f + g[c];
      } else {
#pragma omp simd
        for (size_t c = lo; c < hi; c++) d[c] += g[c];
      }
    }
    /* every row: base + that sum (+ 0 where no id touched it, as the add) */
    for (size_t v = 0; v < (size_t)V; v++) {
      float *d = dtable + v * C;
      if (base_bf16) {
        const uint16_t *b = bh + v * C;
        if (seen[v]) {
#pragma omp simd
          for (size_t c = lo; c < hi; c++) d[c] = mmrt_bf16_widen(b[c]) + d[c];
        } else {
#pragma omp simd
          for (size_t c = lo; c < hi; c++) d[c] = mmrt_bf16_widen(b[c]) + 0.0f;
        }
      } else {
        const float *b = bf + v * C;
        if (seen[v]) {
#pragma omp simd
          for (size_t c = lo; c < hi; c++) d[c] = b[c] + d[c];
        } else {
#pragma omp simd
          for (size_t c = lo; c < hi; c++) d[c] = b[c] + 0.0f;
        }
      }
    }
  }
  free(seen);
}

/* ======================================================================
 * reductions and small helpers
 * ====================================================================== */

/* Fixed blocks of a reduced dim: each block's sum is one thread's and the
 * blocks' sums are added in order, so a sum has the same bits for any
 * thread count (an OpenMP reduction's order depends on it). */
enum { RED_CHUNK = 1 << 13, RED_ROWS = 128 };

/* acc[j - j0] += x[i * ld + j] for i < rows, j0 <= j < j1, rows in order
 * (each column's sum in the same order in every clone) */
MMRT_CLONES static void add_rows(float *restrict acc, const float *restrict x, int rows, size_t ld,
                                 int j0, int j1) {
  for (int i = 0; i < rows; i++) {
    const float *xr = x + (size_t)i * ld;
#pragma omp simd
    for (int j = j0; j < j1; j++) acc[j - j0] += xr[j];
  }
}

void mmrt_reduce_sum(float *y, const float *x, int outer, int n, int inner, int mean,
                     int accumulate) {
  float sc = mean && n > 0 ? 1.0f / (float)n : 1.0f;
  if (inner == 1) {
    if (outer == 1) {
      int nc = (n + RED_CHUNK - 1) / RED_CHUNK;
      double *part = xmalloc((size_t)(nc > 0 ? nc : 1) * sizeof *part, "mmrt_reduce_sum");
#pragma omp parallel for schedule(static) if (nc > 1)
      for (int c = 0; c < nc; c++) {
        int i0 = c * RED_CHUNK, i1 = i0 + RED_CHUNK < n ? i0 + RED_CHUNK : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int i = i0; i < i1; i++) s += x[i];
        part[c] = s;
      }
      double s = 0.0;
      for (int c = 0; c < nc; c++) s += part[c];
      free(part);
      put(y, (float)s * sc, accumulate);
      return;
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < outer; o++) {
      const float *xr = x + (size_t)o * n;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int i = 0; i < n; i++) s += xr[i];
      put(&y[o], s * sc, accumulate);
    }
    return;
  }
  /* Threads own (outer, 256-wide inner chunk) tiles. */
  int nchunk = (inner + 255) / 256;
  if ((size_t)outer * (size_t)nchunk < 16 && n >= 2 * RED_ROWS) {
    /* too few tiles for the threads (a bias gradient: [rows, C] -> [C]):
     * blocks of RED_ROWS rows summed apart, then the blocks in order */
    int nb = (n + RED_ROWS - 1) / RED_ROWS;
    float *part =
        xmalloc((size_t)outer * (size_t)nb * (size_t)inner * sizeof *part, "mmrt_reduce_sum");
#pragma omp parallel for collapse(2) schedule(static)
    for (int o = 0; o < outer; o++)
      for (int b = 0; b < nb; b++) {
        float *acc = part + ((size_t)o * (size_t)nb + (size_t)b) * (size_t)inner;
        int i0 = b * RED_ROWS, i1 = i0 + RED_ROWS < n ? i0 + RED_ROWS : n;
        memset(acc, 0, (size_t)inner * sizeof *acc);
        add_rows(acc, x + ((size_t)o * n + i0) * inner, i1 - i0, (size_t)inner, 0, inner);
      }
#pragma omp parallel for collapse(2) schedule(static)
    for (int o = 0; o < outer; o++)
      for (int j = 0; j < inner; j++) {
        const float *pj = part + (size_t)o * (size_t)nb * (size_t)inner + j;
        float s = 0.0f;
        for (int b = 0; b < nb; b++) s += pj[(size_t)b * (size_t)inner];
        put(&y[(size_t)o * inner + j], s * sc, accumulate);
      }
    free(part);
    return;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int o = 0; o < outer; o++) {
    for (int ch = 0; ch < nchunk; ch++) {
      int j0 = ch * 256, j1 = j0 + 256 < inner ? j0 + 256 : inner;
      float acc[256] = {0};
      add_rows(acc, x + (size_t)o * n * inner, n, (size_t)inner, j0, j1);
      float *yr = y + (size_t)o * inner;
      for (int j = j0; j < j1; j++) put(&yr[j], acc[j - j0] * sc, accumulate);
    }
  }
}

void mmrt_reduce_sum_bwd(float *dx, const float *dy, int outer, int n, int inner, int mean,
                         int accumulate) {
  float sc = mean && n > 0 ? 1.0f / (float)n : 1.0f;
#pragma omp parallel for collapse(2) schedule(static)
  for (int o = 0; o < outer; o++) {
    for (int i = 0; i < n; i++) {
      const float *g = dy + (size_t)o * inner;
      float *d = dx + ((size_t)o * n + i) * inner;
      if (accumulate) {
#pragma omp simd
        for (int j = 0; j < inner; j++) d[j] += g[j] * sc;
      } else {
#pragma omp simd
        for (int j = 0; j < inner; j++) d[j] = g[j] * sc;
      }
    }
  }
}

void mmrt_axpy(float *y, const float *x, float alpha, size_t n, int accumulate) {
  if (accumulate) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
  } else {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = alpha * x[i];
  }
}

void mmrt_fill(float *x, float value, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = value;
}

/* ======================================================================
 * broadcasting binary ops
 * ====================================================================== */

/* A broadcast iteration space: the output shape with dims of size 1
 * dropped and neighbouring dims merged while both operands broadcast the
 * same way across them; sa/sb are element strides (0 = broadcast). */
typedef struct Bcast {
  int nd;
  size_t dim[MMRT_MAX_DIMS], sa[MMRT_MAX_DIMS], sb[MMRT_MAX_DIMS];
  size_t total;
} Bcast;

static void bcast_plan(Bcast *bc, const int *ys, const int *as, const int *bs, int ndim,
                       const char *what) {
  if (ndim < 0 || ndim > MMRT_MAX_DIMS) die(what, "too many dims");
  int keep_a[MMRT_MAX_DIMS], keep_b[MMRT_MAX_DIMS];
  size_t dims[MMRT_MAX_DIMS];
  int nd = 0;
  bc->total = 1;
  for (int i = 0; i < ndim; i++) {
    if ((as[i] != ys[i] && as[i] != 1) || (bs[i] != ys[i] && bs[i] != 1))
      die(what, "operand shape does not broadcast to the output");
    bc->total *= (size_t)ys[i];
    if (ys[i] == 1) continue;
    int ka = as[i] != 1, kb = bs[i] != 1;
    if (nd > 0 && keep_a[nd - 1] == ka && keep_b[nd - 1] == kb) {
      dims[nd - 1] *= (size_t)ys[i];
      continue;
    }
    keep_a[nd] = ka;
    keep_b[nd] = kb;
    dims[nd++] = (size_t)ys[i];
  }
  if (nd == 0) {
    keep_a[0] = keep_b[0] = 1;
    dims[nd++] = 1;
  }
  size_t sa = 1, sb = 1;
  for (int i = nd - 1; i >= 0; i--) {
    bc->dim[i] = dims[i];
    bc->sa[i] = keep_a[i] ? sa : 0;
    bc->sb[i] = keep_b[i] ? sb : 0;
    if (keep_a[i]) sa *= dims[i];
    if (keep_b[i]) sb *= dims[i];
  }
  bc->nd = nd;
}

/* y = a op b over a plan; y is contiguous in the output shape. Work items
 * are (row of the last dim, chunk of 4096) pairs. */
static void bcast_run(const Bcast *bc, MmrtBinop op, float *y, const float *a, const float *b) {
  enum { CHUNK = 4096 };
  int nd = bc->nd;
  size_t L = bc->dim[nd - 1], rows = bc->total / (L ? L : 1);
  size_t nch = (L + CHUNK - 1) / CHUNK, items = rows * nch;
  size_t la = bc->sa[nd - 1], lb = bc->sb[nd - 1];
  if (bc->total == 0) return;
#pragma omp parallel for schedule(static)
  for (size_t it = 0; it < items; it++) {
    size_t r = it / nch, j0 = (it % nch) * CHUNK;
    size_t j1 = j0 + CHUNK < L ? j0 + CHUNK : L;
    size_t oa = 0, ob = 0, rem = r;
    for (int d = nd - 2; d >= 0; d--) {
      size_t idx = rem % bc->dim[d];
      rem /= bc->dim[d];
      oa += idx * bc->sa[d];
      ob += idx * bc->sb[d];
    }
    float *yr = y + r * L;
    const float *ar = a + oa, *br = b + ob;
    /* the last dim's strides are 0 or 1: one loop per case, so each
     * vectorises (with the strides as variables none did) */
    int kind = (la == 1) * 2 + (lb == 1);
    switch (op * 4 + kind) {
#define LOOP1(OP, K, A, B, EXPR)                                                                   \
  case OP * 4 + K:                                                                                 \
    _Pragma("omp simd") for (size_t j = j0; j < j1; j++) {                                         \
      float av = A, bv = B;                                                                        \
      yr[j] = EXPR;                                                                                \
    }                                                                                              \
    break;
#define LOOP(OP, EXPR)                                                                             \
  LOOP1(OP, 3, ar[j], br[j], EXPR)                                                                 \
  LOOP1(OP, 2, ar[j], br[0], EXPR)                                                                 \
  LOOP1(OP, 1, ar[0], br[j], EXPR)                                                                 \
  LOOP1(OP, 0, ar[0], br[0], EXPR)
      LOOP(MMRT_BIN_ADD, av + bv)
      LOOP(MMRT_BIN_SUB, av - bv)
      LOOP(MMRT_BIN_MUL, av * bv)
      LOOP(MMRT_BIN_DIV, av / bv)
#undef LOOP
#undef LOOP1
      default: break;
    }
  }
}

void mmrt_binary_fwd(MmrtBinop op, float *y, const int *yshape, const float *a, const int *ashape,
                     const float *b, const int *bshape, int ndim) {
  Bcast bc;
  bcast_plan(&bc, yshape, ashape, bshape, ndim, "mmrt_binary_fwd");
  bcast_run(&bc, op, y, a, b);
}

/* dst (+)= src reduced from shape ys to shape xs (xs[i] is 1 or ys[i]),
 * as a chain of [outer, n, inner] middle-dim sums; the last stage writes
 * dst. */
static void reduce_to(float *dst, const int *xs, const float *src, const int *ys, int ndim,
                      int accumulate) {
  int cur[MMRT_MAX_DIMS];
  size_t total = 1;
  for (int i = 0; i < ndim; i++) {
    cur[i] = ys[i];
    total *= (size_t)ys[i];
  }
  /* The dims still to reduce. */
  int todo[MMRT_MAX_DIMS], nt = 0;
  for (int i = 0; i < ndim; i++)
    if (xs[i] == 1 && ys[i] != 1) todo[nt++] = i;
  if (nt == 0) {
    mmrt_axpy(dst, src, 1.0f, total, accumulate);
    return;
  }
  const float *in = src;
  float *bufs[2] = {NULL, NULL};
  for (int k = 0; k < nt; k++) {
    int d = todo[k];
    size_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= (size_t)cur[i];
    for (int i = d + 1; i < ndim; i++) inner *= (size_t)cur[i];
    int n = cur[d];
    cur[d] = 1;
    float *o;
    if (k == nt - 1) {
      o = dst;
    } else {
      if (!bufs[k & 1]) bufs[k & 1] = xmalloc(sizeof(float) * outer * inner, "mmrt_binary_bwd");
      o = bufs[k & 1];
    }
    mmrt_reduce_sum(o, in, (int)outer, n, (int)inner, 0, k == nt - 1 ? accumulate : 0);
    in = o;
  }
  free(bufs[0]);
  free(bufs[1]);
}

static size_t shape_total(const int *s, int ndim) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)s[i];
  return n;
}

static int same_shape(const int *x, const int *y, int ndim) {
  for (int i = 0; i < ndim; i++)
    if (x[i] != y[i]) return 0;
  return 1;
}

void mmrt_binary_bwd(MmrtBinop op, float *da, float *db, const float *dy, const int *yshape,
                     const float *a, const int *ashape, const float *b, const int *bshape, int ndim,
                     int accumulate) {
  static const char *what = "mmrt_binary_bwd";
  size_t ny = shape_total(yshape, ndim);
  int ones[MMRT_MAX_DIMS];
  for (int i = 0; i < ndim && i < MMRT_MAX_DIMS; i++) ones[i] = 1;
  float *tmp = NULL, neg1 = -1.0f;
  Bcast bc;
  for (int side = 0; side < 2; side++) {
    float *dst = side == 0 ? da : db;
    const int *xs = side == 0 ? ashape : bshape;
    if (!dst) continue;
    /* g = dy * d(y)/d(operand), full output shape (dy itself when the
     * factor is 1). */
    const float *g = dy;
    if (op != MMRT_BIN_ADD && !(op == MMRT_BIN_SUB && side == 0)) {
      if (!tmp) tmp = xmalloc(sizeof(float) * ny, what);
      g = tmp;
      if (op == MMRT_BIN_SUB) { /* db = -dy */
        bcast_plan(&bc, yshape, yshape, ones, ndim, what);
        bcast_run(&bc, MMRT_BIN_MUL, tmp, dy, &neg1);
      } else if (op == MMRT_BIN_MUL) {
        const float *o = side == 0 ? b : a;
        bcast_plan(&bc, yshape, yshape, side == 0 ? bshape : ashape, ndim, what);
        bcast_run(&bc, MMRT_BIN_MUL, tmp, dy, o);
      } else if (side == 0) { /* DIV: da = dy / b */
        bcast_plan(&bc, yshape, yshape, bshape, ndim, what);
        bcast_run(&bc, MMRT_BIN_DIV, tmp, dy, b);
      } else { /* DIV: db = -dy * a / b^2 */
        bcast_plan(&bc, yshape, yshape, ashape, ndim, what);
        bcast_run(&bc, MMRT_BIN_MUL, tmp, dy, a);
        bcast_plan(&bc, yshape, yshape, bshape, ndim, what);
        bcast_run(&bc, MMRT_BIN_DIV, tmp, tmp, b);
        bcast_run(&bc, MMRT_BIN_DIV, tmp, tmp, b);
        bcast_plan(&bc, yshape, yshape, ones, ndim, what);
        bcast_run(&bc, MMRT_BIN_MUL, tmp, tmp, &neg1);
      }
    }
    if (same_shape(xs, yshape, ndim))
      mmrt_axpy(dst, g, 1.0f, ny, accumulate);
    else
      reduce_to(dst, xs, g, yshape, ndim, accumulate);
  }
  free(tmp);
}

/* ======================================================================
 * optimizers and gradient norm
 * ====================================================================== */

/* Set by the optimizers when a parameter they wrote is not finite (NaN or
 * infinite): the trainer's check after each step (mmrt_opt_nonfinite_take)
 * reads it in place of a pass over the weights (GPT-2 124M: 500 MB, about
 * 25 ms a step on a 2-core Xeon). */
static int opt_nonfinite;

int mmrt_opt_nonfinite_take(void) {
  int r;
#pragma omp atomic capture
  {
    r = opt_nonfinite;
    opt_nonfinite = 0;
  }
  return r;
}

static void opt_nonfinite_note(int bad) {
  if (bad) {
#pragma omp atomic write
    opt_nonfinite = 1;
  }
}

/* AdamW on elements [lo, hi) of one tensor: every caller gives an element
 * the same arithmetic, so the bits do not depend on how work is split (nor
 * on the clone: the vector divisions and square roots are IEEE-exact like
 * the scalar ones, and C11 mode contracts no FMA). The loop vectorises
 * because the runtime is built with -fno-math-errno (sqrtf sets no errno).
 * Returns whether a parameter it wrote is not finite. */
MMRT_CLONES static int adamw_range(float *param, const float *grad, float *m, float *v, size_t lo,
                                   size_t hi, float lr, float beta1, float beta2, float eps,
                                   float decay, float grad_scale, float bc1, float bc2) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t i = lo; i < hi; i++) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = param[i] * decay - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    param[i] = p;
    bad |= mmrt_f32_not_finite(p);
  }
  return bad;
}

void mmrt_adamw_step(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                     int step) {
  float *const ps[1] = {param}, *const ms[1] = {m}, *const vs[1] = {v};
  const float *const gs[1] = {grad};
  mmrt_adamw_steps(ps, gs, ms, vs, &n, &weight_decay, 1, lr, beta1, beta2, eps, grad_scale, step);
}

/* Below this many elements in all, one thread updates them: a parallel
 * region's start and end cost more (a sleeping thread's wake-up on a busy
 * machine: tens of microseconds). */
enum { ADAMW_PAR_MIN = 1 << 16 };

void mmrt_adamw_steps(float *const *params, const float *const *grads, float *const *ms,
                      float *const *vs, const size_t *sizes, const float *weight_decays, int count,
                      float lr, float beta1, float beta2, float eps, float grad_scale, int step) {
  float bc1 = (float)(1.0 - pow((double)beta1, (double)step));
  float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
  size_t total = 0;
  for (int k = 0; k < count; k++) total += sizes[k];
  /* one region for the whole list: thread t takes elements [lo, hi) of the
   * tensors laid end to end */
#pragma omp parallel if (total >= ADAMW_PAR_MIN)
  {
    size_t lo, hi, at = 0;
    int bad = 0;
    thread_range(total, &lo, &hi);
    for (int k = 0; k < count && at < hi; k++) {
      size_t a = lo > at ? lo - at : 0, b = hi - at < sizes[k] ? hi - at : sizes[k];
      if (a < b)
        bad |= adamw_range(params[k], grads[k], ms[k], vs[k], a, b, lr, beta1, beta2, eps,
                           1.0f - lr * weight_decays[k], grad_scale, bc1, bc2);
      at += sizes[k];
    }
    opt_nonfinite_note(bad);
  }
}

void mmrt_sgd_step(float *param, const float *grad, float *mom, size_t n, float lr, float momentum,
                   float weight_decay, float grad_scale, int nesterov) {
  int bad = 0;
  if (momentum == 0.0f || !mom) {
#pragma omp parallel for simd schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) {
      float p = param[i] - lr * (grad[i] * grad_scale + weight_decay * param[i]);
      param[i] = p;
      bad |= mmrt_f32_not_finite(p);
    }
  } else {
#pragma omp parallel for simd schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) {
      float g = grad[i] * grad_scale + weight_decay * param[i];
      float b = momentum * mom[i] + g;
      mom[i] = b;
      float p = param[i] - lr * (nesterov ? g + momentum * b : b);
      param[i] = p;
      bad |= mmrt_f32_not_finite(p);
    }
  }
  opt_nonfinite_note(bad);
}

/* Fixed chunks of this many elements: each chunk's sum is one thread's,
 * the chunks' sums are added in order, so the total has the same bits for
 * any thread count. */
enum { SUMSQ_CHUNK = 1 << 13, SUMSQ_LANES = 32 };

/* One chunk's sum of squares in SUMSQ_LANES independent double sums (one
 * sum's chain of dependent adds ran at a quarter of the loads' rate: GPT-2
 * 124M's gradient norm 44 ms a step on a 2-core Xeon, where its 500 MB
 * take 10 at the memory's rate). A float's square is exact in a double, so
 * every clone and contraction gives the same bits. */
MMRT_CLONES static double sumsq_chunk(const float *x, size_t n) {
  double a[SUMSQ_LANES] = {0};
  size_t j = 0;
  for (; j + SUMSQ_LANES <= n; j += SUMSQ_LANES)
    for (int u = 0; u < SUMSQ_LANES; u++) a[u] += (double)x[j + u] * x[j + u];
  for (int u = 0; j < n; j++, u++) a[u] += (double)x[j] * x[j];
  double s = 0.0;
  for (int u = 0; u < SUMSQ_LANES; u++) s += a[u];
  return s;
}

double mmrt_sum_squares(const float *const *bufs, const size_t *sizes, int nbufs) {
  size_t nc = 0;
  for (int k = 0; k < nbufs; k++) nc += (sizes[k] + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  if (!nc) return 0.0;
  double *part = xmalloc(nc * sizeof *part, "mmrt_sum_squares");
#pragma omp parallel if (nc > 4)
  {
    /* chunk i of the tensors laid end to end: found by walking them once
     * from this thread's first chunk */
    size_t lo, hi, i = 0;
    thread_range(nc, &lo, &hi);
    for (int k = 0; k < nbufs && i < hi; k++) {
      size_t ck = (sizes[k] + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
      for (size_t c = 0; c < ck && i < hi; c++, i++) {
        if (i < lo) continue;
        size_t off = c * SUMSQ_CHUNK,
               n = sizes[k] - off < SUMSQ_CHUNK ? sizes[k] - off : SUMSQ_CHUNK;
        part[i] = sumsq_chunk(bufs[k] + off, n);
      }
    }
  }
  double total = 0.0;
  for (size_t i = 0; i < nc; i++) total += part[i];
  free(part);
  return total;
}

double mmrt_grad_norm(const float *const *bufs, const size_t *sizes, int nbufs) {
  return sqrt(mmrt_sum_squares(bufs, sizes, nbufs));
}

float mmrt_clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0f;
  return (float)(max_norm / (norm + 1e-6));
}

/* ---- Haar wavelet transforms ----
 * A block of S = 4 (2D) or 8 (3D) values, indexed p = 4 dt + 2 dh + dw, goes
 * through the fast Walsh-Hadamard butterfly (a sum and a difference per
 * axis, columns then rows then frames): v[q] = sum_p (-1)^popcount(p & q) x[p],
 * then times 1/sqrt(S). The butterfly is its own inverse up to S, so the
 * inverse is the same butterfly. q holds bit 0 columns, bit 1 rows, bit 2
 * frames; the 2D sub-band order (rows first, as WF-VAE's aa, ad, da, dd) is
 * q with its two bits swapped. */
static void haar_block(float *v, int S) {
  for (int m = 1; m < S; m <<= 1)
    for (int p = 0; p < S; p++)
      if (!(p & m)) {
        float a = v[p], b = v[p | m];
        v[p] = a + b, v[p | m] = a - b;
      }
}

int mmrt_haar(float *y, const float *x, int32_t B, int32_t C, int32_t T, int32_t H, int32_t W,
              int32_t dims, int32_t inverse) {
  int three = dims == 3, S = three ? 8 : 4;
  if ((dims != 2 && dims != 3) || B < 1 || C < 1 || H < 2 || W < 2 || H % 2 || W % 2 ||
      (three ? T < 2 || T % 2 : T != 1)) {
    fprintf(stderr, "mmrt_haar: cannot take dims %d, [%d, %d, %d, %d, %d]\n", dims, B, C, T, H, W);
    return -1;
  }
  int64_t T2 = three ? T / 2 : 1, H2 = H / 2, W2 = W / 2, plane = (int64_t)H * W,
          cplane = T2 * H2 * W2;
  float scale = three ? 0.35355339059327373f : 0.5f;
  static const int k2d[4] = {0, 2, 1, 3}; /* q -> 2D sub-band k */
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bc = 0; bc < (int64_t)B * C; bc++)
    for (int64_t tc = 0; tc < T2; tc++)
      for (int64_t h = 0; h < H2; h++)
        for (int64_t w = 0; w < W2; w++) {
          float v[8];
          int64_t full = bc * T * plane + (three ? 2 * tc : 0) * plane + 2 * h * W + 2 * w;
          int64_t coef = bc * S * cplane + (tc * H2 + h) * W2 + w;
          for (int p = 0; p < S; p++) {
            int64_t fi = full + (p >> 2) * plane + (p >> 1 & 1) * W + (p & 1);
            int64_t ci = coef + (three ? p : k2d[p]) * cplane;
            v[p] = inverse ? x[ci] : x[fi];
          }
          haar_block(v, S);
          for (int q = 0; q < S; q++) {
            int64_t fi = full + (q >> 2) * plane + (q >> 1 & 1) * W + (q & 1);
            int64_t ci = coef + (three ? q : k2d[q]) * cplane;
            if (inverse)
              y[fi] = v[q] * scale;
            else
              y[ci] = v[q] * scale;
          }
        }
  return 0;
}
