/* check_rt_kernels.c: libmmrt's compute kernels against naive references.
 *
 * Every kernel runs on random inputs of odd sizes and is compared with a
 * naive loop written here in double. Backward kernels are additionally (or,
 * where a hand-written backward would just restate the kernel, only)
 * compared with central finite differences of the double reference forward:
 * the loss is L = sum(w * fwd(x)) for a random w, which is also the dy given
 * to the kernel. In double, with h = 1e-6, those differences are exact to
 * ~1e-9, so the tolerance measures the fp32 kernel alone.
 *
 * Error metric: max |got - ref| / max(1, max |ref|) ("relative-ish").
 * Tolerances: 1e-5 for fp32 kernels unless a comment says otherwise.
 */
#include "mmrt_kernels.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

/* ---- allocation, random data, comparison ------------------------------ */

enum { MAX_ALLOCS = 512 };
static void *allocs[MAX_ALLOCS];
static int nallocs;

static void *talloc(size_t bytes) {
  ck_assert_int_lt(nallocs, MAX_ALLOCS);
  void *p = calloc(1, bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  allocs[nallocs++] = p;
  return p;
}

static void teardown(void) {
  for (int i = 0; i < nallocs; i++) free(allocs[i]);
  nallocs = 0;
  mmrt_kernels_shutdown();
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void) /* [0, 1) */
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static float *fvec(size_t n) {
  return talloc(n * sizeof(float));
}
static double *dvec(size_t n) {
  return talloc(n * sizeof(double));
}

/* Uniform in [lo, hi). */
static float *rnd_range(size_t n, double lo, double hi) {
  float *x = fvec(n);
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
  return x;
}

static float *rnd(size_t n) {
  return rnd_range(n, -1.0, 1.0);
}

static double *tod(const float *x, size_t n) {
  double *d = dvec(n);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static float *fcopy(const float *x, size_t n) {
  float *y = fvec(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}

static double max_err(const float *got, const double *ref, size_t n) {
  double e = 0.0, m = 1.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= e)) /* also catches NaN */
      e = isnan(d) ? INFINITY : d;
    if (fabs(ref[i]) > m) m = fabs(ref[i]);
  }
  return e / m;
}

#define CHECK_CLOSE(got, ref, n, tol, name)                                                        \
  do {                                                                                             \
    double e_ = max_err((got), (ref), (n));                                                        \
    ck_assert_msg(e_ <= (tol), "%s: error %.3g > %.3g", (name), e_, (double)(tol));                \
  } while (0)

static double dotd(const double *a, const double *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* g = dL/dx by central differences, x being one of the inputs f reads. */
typedef double (*LossFn)(void *ctx);

static void fd_grad(LossFn f, void *ctx, double *x, size_t n, double *g) {
  for (size_t i = 0; i < n; i++) {
    double s = x[i], h = 1e-6 * (fabs(s) > 1.0 ? fabs(s) : 1.0);
    x[i] = s + h;
    double lp = f(ctx);
    x[i] = s - h;
    double lm = f(ctx);
    x[i] = s;
    g[i] = (lp - lm) / (2.0 * h);
  }
}

/* ======================================================================
 * matmul and linear
 * ====================================================================== */

/* C (+)= alpha op(A) op(B), flags as mmrt_matmul. */
static void matmul_ref(double *C, const double *A, const double *B, int batch, int M, int N, int K,
                       double alpha, int flags) {
  for (int b = 0; b < batch; b++) {
    const double *Ab = A + (size_t)b * M * K;
    const double *Bb = B + ((flags & MMRT_MM_BCAST_B) ? 0 : (size_t)b * K * N);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = 0.0;
        for (int p = 0; p < K; p++) {
          double a = (flags & MMRT_MM_TRANS_A) ? Ab[p * M + i] : Ab[i * K + p];
          double bb = (flags & MMRT_MM_TRANS_B) ? Bb[j * K + p] : Bb[p * N + j];
          s += a * bb;
        }
        double *c = &C[((size_t)b * M + i) * N + j];
        *c = alpha * s + ((flags & MMRT_MM_ACCUM) ? *c : 0.0);
      }
  }
}

START_TEST(test_matmul_flags) {
  int batch = 3, M = 7, N = 11, K = 13;
  for (int flags = 0; flags < 16; flags++) {
    float alpha = (flags & 1) ? 0.5f : 1.0f;
    size_t nb = (flags & MMRT_MM_BCAST_B) ? 1 : (size_t)batch;
    float *A = rnd((size_t)batch * M * K), *B = rnd(nb * K * N);
    float *C = rnd((size_t)batch * M * N);
    double *ref = tod(C, (size_t)batch * M * N);
    matmul_ref(ref, tod(A, (size_t)batch * M * K), tod(B, nb * K * N), batch, M, N, K, alpha,
               flags);
    mmrt_matmul(MMRT_F32, C, A, B, batch, M, N, K, alpha, flags);
    char name[64];
    snprintf(name, sizeof name, "matmul flags=%d", flags);
    CHECK_CLOSE(C, ref, (size_t)batch * M * N, TOL, name);
  }
  /* The cache holds one primitive per (shape, flags): a repeat adds none. */
  int before = mmrt_dnnl_cache_size();
  float *A = rnd((size_t)batch * M * K), *B = rnd((size_t)batch * K * N);
  float *C = fvec((size_t)batch * M * N);
  mmrt_matmul(MMRT_F32, C, A, B, batch, M, N, K, 1.0f, 0);
  ck_assert_int_eq(mmrt_dnnl_cache_size(), before);
}
END_TEST

typedef struct LinCtx {
  int rows, K, N;
  double *x, *w, *b, *gy, *y;
} LinCtx;

static double lin_loss(void *p) {
  LinCtx *c = p;
  for (int r = 0; r < c->rows; r++)
    for (int n = 0; n < c->N; n++) {
      double s = c->b[n];
      for (int k = 0; k < c->K; k++) s += c->x[r * c->K + k] * c->w[n * c->K + k];
      c->y[r * c->N + n] = s;
    }
  return dotd(c->y, c->gy, (size_t)c->rows * c->N);
}

START_TEST(test_linear) {
  int rows = 7, K = 13, N = 11;
  size_t nx = (size_t)rows * K, nw = (size_t)N * K, ny = (size_t)rows * N;
  float *x = rnd(nx), *w = rnd(nw), *b = rnd(N), *gy = rnd(ny);
  LinCtx c = {rows, K, N, tod(x, nx), tod(w, nw), tod(b, N), tod(gy, ny), dvec(ny)};

  /* forward, with and without bias */
  float *y = fvec(ny);
  mmrt_linear_fwd(MMRT_F32, y, x, w, b, rows, K, N);
  lin_loss(&c);
  CHECK_CLOSE(y, c.y, ny, TOL, "linear fwd");
  mmrt_linear_fwd(MMRT_F32, y, x, w, NULL, rows, K, N);
  double *y0 = dvec(ny);
  for (int r = 0; r < rows; r++)
    for (int n = 0; n < N; n++) y0[r * N + n] = c.y[r * N + n] - c.b[n];
  CHECK_CLOSE(y, y0, ny, TOL, "linear fwd no bias");

  /* naive backward */
  double *rdx = dvec(nx), *rdw = dvec(nw), *rdb = dvec(N);
  for (int r = 0; r < rows; r++)
    for (int n = 0; n < N; n++) {
      double g = c.gy[r * N + n];
      rdb[n] += g;
      for (int k = 0; k < K; k++) {
        rdx[r * K + k] += g * c.w[n * K + k];
        rdw[n * K + k] += g * c.x[r * K + k];
      }
    }
  float *dx = fvec(nx), *dw = fvec(nw), *db = fvec(N);
  mmrt_linear_bwd_data(MMRT_F32, dx, gy, w, rows, K, N, 0);
  mmrt_linear_bwd_weights(MMRT_F32, dw, db, gy, x, rows, K, N, 0);
  CHECK_CLOSE(dx, rdx, nx, TOL, "linear dx");
  CHECK_CLOSE(dw, rdw, nw, TOL, "linear dw");
  CHECK_CLOSE(db, rdb, N, TOL, "linear dbias");

  /* finite differences */
  double *g = dvec(nx > nw ? nx : nw);
  fd_grad(lin_loss, &c, c.x, nx, g);
  CHECK_CLOSE(dx, g, nx, TOL, "linear dx vs fd");
  fd_grad(lin_loss, &c, c.w, nw, g);
  CHECK_CLOSE(dw, g, nw, TOL, "linear dw vs fd");
  fd_grad(lin_loss, &c, c.b, N, g);
  CHECK_CLOSE(db, g, N, TOL, "linear dbias vs fd");

  /* accumulate: a second pass doubles every gradient */
  mmrt_linear_bwd_data(MMRT_F32, dx, gy, w, rows, K, N, 1);
  mmrt_linear_bwd_weights(MMRT_F32, dw, db, gy, x, rows, K, N, 1);
  for (size_t i = 0; i < nx; i++) rdx[i] *= 2;
  for (size_t i = 0; i < nw; i++) rdw[i] *= 2;
  for (int i = 0; i < N; i++) rdb[i] *= 2;
  CHECK_CLOSE(dx, rdx, nx, TOL, "linear dx accumulate");
  CHECK_CLOSE(dw, rdw, nw, TOL, "linear dw accumulate");
  CHECK_CLOSE(db, rdb, N, TOL, "linear dbias accumulate");

  /* into a micro-batch sum (mmrt_linear_bwd_weights_into): s = 3 dw, then
   * s += 2 dw (scale and sum post-op), then out = 0.5 dw + s (binary add):
   * 5.5 x the naive dw (rdw holds 2 dw now) */
  float *s = fvec(nw), *out = fvec(nw);
  mmrt_linear_bwd_weights_into(MMRT_F32, s, NULL, gy, x, rows, K, N, 3.0f, 0);
  mmrt_linear_bwd_weights_into(MMRT_F32, s, NULL, gy, x, rows, K, N, 2.0f, 1);
  for (size_t i = 0; i < nw; i++) rdw[i] *= 2.5; /* 5 dw */
  CHECK_CLOSE(s, rdw, nw, TOL, "linear dw into a sum, scaled");
  mmrt_linear_bwd_weights_into(MMRT_F32, out, s, gy, x, rows, K, N, 0.5f, 0);
  for (size_t i = 0; i < nw; i++) rdw[i] *= 1.1; /* 5.5 dw */
  CHECK_CLOSE(out, rdw, nw, TOL, "linear dw plus a sum (binary add)");
}
END_TEST

START_TEST(test_bad_dtype_aborts) { /* bf16 is checked in check_rt_bf16.c */
  float a[4] = {0}, b[4] = {0}, c[4];
  mmrt_matmul((MmrtDtype)7, c, a, b, 1, 2, 2, 1, 1.0f, 0);
}
END_TEST

/* ======================================================================
 * convolution
 * ====================================================================== */

typedef struct ConvCtx {
  MmrtConv cv;
  int nsp;
  double *x, *w, *b, *gy, *y;
  size_t nx, nw, ny;
} ConvCtx;

/* The 3-D geometry of a 2-D or 3-D conv: a 2-D conv is D = 1, KD = 1. */
static void conv_geom(const MmrtConv *cv, int nsp, int in[3], int k[3], int st[3], int pl[3],
                      int out[3]) {
  for (int i = 0; i < 3; i++) {
    int j = i - (3 - nsp);
    int ok = j >= 0;
    in[i] = ok ? cv->in[j] : 1;
    k[i] = ok ? cv->k[j] : 1;
    st[i] = ok ? cv->stride[j] : 1;
    pl[i] = ok ? cv->pad_lo[j] : 0;
    out[i] =
        ok ? mmrt_conv_out_size(cv->in[j], cv->k[j], cv->stride[j], cv->pad_lo[j], cv->pad_hi[j])
           : 1;
  }
}

/* y = conv(x, w) + b; with gy, instead the gradients of sum(y * gy), which
 * is linear in x and w: gx and gw (zeroed first) */
static void conv_ref_grad(double *y, const double *x, const double *w, const double *b,
                          const MmrtConv *cv, int nsp, const double *gy, double *gx, double *gw) {
  int in[3], k[3], st[3], pl[3], out[3];
  conv_geom(cv, nsp, in, k, st, pl, out);
  int G = cv->groups > 0 ? cv->groups : 1, Cg = cv->C / G, OCg = cv->OC / G;
  size_t nx = (size_t)cv->N * cv->C * in[0] * in[1] * in[2];
  size_t nw = (size_t)cv->OC * Cg * k[0] * k[1] * k[2];
  if (gy) {
    memset(gx, 0, nx * sizeof *gx);
    memset(gw, 0, nw * sizeof *gw);
  }
  for (int n = 0; n < cv->N; n++)
    for (int oc = 0; oc < cv->OC; oc++)
      for (int od = 0; od < out[0]; od++)
        for (int oh = 0; oh < out[1]; oh++)
          for (int ow = 0; ow < out[2]; ow++) {
            double s = b ? b[oc] : 0.0;
            int g = oc / OCg;
            size_t yi = ((((size_t)n * cv->OC + oc) * out[0] + od) * out[1] + oh) * out[2] + ow;
            for (int ic = 0; ic < Cg; ic++)
              for (int kd = 0; kd < k[0]; kd++)
                for (int kh = 0; kh < k[1]; kh++)
                  for (int kw = 0; kw < k[2]; kw++) {
                    int id = od * st[0] - pl[0] + kd;
                    int ih = oh * st[1] - pl[1] + kh;
                    int iw = ow * st[2] - pl[2] + kw;
                    if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1] || iw < 0 || iw >= in[2])
                      continue;
                    size_t xi =
                        ((((size_t)n * cv->C + g * Cg + ic) * in[0] + id) * in[1] + ih) * in[2] +
                        iw;
                    size_t wi = ((((size_t)oc * Cg + ic) * k[0] + kd) * k[1] + kh) * k[2] + kw;
                    if (gy) {
                      gx[xi] += gy[yi] * w[wi];
                      gw[wi] += gy[yi] * x[xi];
                    }
                    s += x[xi] * w[wi];
                  }
            if (!gy) y[yi] = s;
          }
}

static void conv_ref(double *y, const double *x, const double *w, const double *b,
                     const MmrtConv *cv, int nsp) {
  conv_ref_grad(y, x, w, b, cv, nsp, NULL, NULL, NULL);
}

static double conv_loss(void *p) {
  ConvCtx *c = p;
  conv_ref(c->y, c->x, c->w, c->b, &c->cv, c->nsp);
  return dotd(c->y, c->gy, c->ny);
}

/* exact: the gradients from the naive loop's transpose (conv_ref_grad)
 * rather than finite differences, for channel counts where those are slow */
static void conv_case(const MmrtConv *cv, int nsp, int exact) {
  int in[3], k[3], st[3], pl[3], out[3];
  conv_geom(cv, nsp, in, k, st, pl, out);
  int G = cv->groups > 0 ? cv->groups : 1;
  size_t sp_in = (size_t)in[0] * in[1] * in[2], sp_out = (size_t)out[0] * out[1] * out[2];
  size_t nx = (size_t)cv->N * cv->C * sp_in, ny = (size_t)cv->N * cv->OC * sp_out;
  size_t nw = (size_t)cv->OC * (cv->C / G) * k[0] * k[1] * k[2];
  float *x = rnd(nx), *w = rnd(nw), *b = rnd(cv->OC), *gy = rnd(ny);
  ConvCtx c = {*cv, nsp, tod(x, nx), tod(w, nw), tod(b, cv->OC), tod(gy, ny), dvec(ny), nx, nw, ny};
  void (*fwd)(MmrtDtype, const MmrtConv *, void *, const void *, const void *, const void *) =
      nsp == 3 ? mmrt_conv3d_fwd : mmrt_conv2d_fwd;
  void (*bwd_data)(MmrtDtype, const MmrtConv *, void *, const void *, const void *, int) =
      nsp == 3 ? mmrt_conv3d_bwd_data : mmrt_conv2d_bwd_data;
  void (*bwd_w)(MmrtDtype, const MmrtConv *, void *, void *, const void *, const void *, int) =
      nsp == 3 ? mmrt_conv3d_bwd_weights : mmrt_conv2d_bwd_weights;

  float *y = fvec(ny);
  fwd(MMRT_F32, cv, y, x, w, b);
  conv_loss(&c);
  CHECK_CLOSE(y, c.y, ny, TOL, "conv fwd");
  fwd(MMRT_F32, cv, y, x, w, NULL);
  conv_ref(c.y, c.x, c.w, NULL, cv, nsp);
  CHECK_CLOSE(y, c.y, ny, TOL, "conv fwd no bias");

  float *dx = fvec(nx), *dw = fvec(nw), *db = fvec(cv->OC);
  bwd_data(MMRT_F32, cv, dx, gy, w, 0);
  bwd_w(MMRT_F32, cv, dw, db, gy, x, 0);
  double *gx = dvec(nx), *gw = dvec(nw), *gb = dvec(cv->OC);
  if (exact) {
    conv_ref_grad(NULL, c.x, c.w, NULL, cv, nsp, c.gy, gx, gw);
    for (int oc = 0; oc < cv->OC; oc++) {
      gb[oc] = 0;
      for (int n = 0; n < cv->N; n++)
        for (size_t i = 0; i < sp_out; i++) gb[oc] += c.gy[((size_t)n * cv->OC + oc) * sp_out + i];
    }
  } else {
    fd_grad(conv_loss, &c, c.x, nx, gx);
    fd_grad(conv_loss, &c, c.w, nw, gw);
    fd_grad(conv_loss, &c, c.b, cv->OC, gb);
  }
  CHECK_CLOSE(dx, gx, nx, TOL, "conv dx vs fd");
  CHECK_CLOSE(dw, gw, nw, TOL, "conv dw vs fd");
  CHECK_CLOSE(db, gb, cv->OC, TOL, "conv dbias vs fd");

  /* accumulate onto a known start; and dw without a bias grad */
  float *dx0 = rnd(nx), *dw0 = rnd(nw), *db0 = rnd(cv->OC);
  double *ex = tod(dx0, nx), *ew = tod(dw0, nw), *eb = tod(db0, cv->OC);
  for (size_t i = 0; i < nx; i++) ex[i] += gx[i];
  for (size_t i = 0; i < nw; i++) ew[i] += gw[i];
  for (int i = 0; i < cv->OC; i++) eb[i] += gb[i];
  bwd_data(MMRT_F32, cv, dx0, gy, w, 1);
  bwd_w(MMRT_F32, cv, dw0, db0, gy, x, 1);
  CHECK_CLOSE(dx0, ex, nx, TOL, "conv dx accumulate");
  CHECK_CLOSE(dw0, ew, nw, TOL, "conv dw accumulate");
  CHECK_CLOSE(db0, eb, cv->OC, TOL, "conv dbias accumulate");
  bwd_w(MMRT_F32, cv, dw, NULL, gy, x, 0);
  CHECK_CLOSE(dw, gw, nw, TOL, "conv dw without dbias");
}

START_TEST(test_conv2d) {
  /* N=3, C=5, 9x7, OC=4, kernel 3, stride 2, padding 1 */
  MmrtConv cv = {.N = 3,
                 .C = 5,
                 .OC = 4,
                 .in = {9, 7},
                 .k = {3, 3},
                 .stride = {2, 2},
                 .pad_lo = {1, 1},
                 .pad_hi = {1, 1}};
  conv_case(&cv, 2, 0);
  ck_assert_int_eq(mmrt_conv_out_size(9, 3, 2, 1, 1), 5);
}
END_TEST

START_TEST(test_conv2d_grouped) {
  /* groups = 2, stride 1, asymmetric padding, non-square kernel */
  MmrtConv cv = {.N = 2,
                 .C = 6,
                 .OC = 4,
                 .groups = 2,
                 .in = {7, 5},
                 .k = {3, 2},
                 .stride = {1, 1},
                 .pad_lo = {1, 0},
                 .pad_hi = {2, 1}};
  conv_case(&cv, 2, 0);
}
END_TEST

START_TEST(test_conv3d) {
  /* causal in time: pad (2, 0); stride 2 in space */
  MmrtConv cv = {.N = 2,
                 .C = 3,
                 .OC = 4,
                 .in = {5, 7, 6},
                 .k = {3, 3, 3},
                 .stride = {1, 2, 2},
                 .pad_lo = {2, 1, 1},
                 .pad_hi = {0, 1, 1}};
  conv_case(&cv, 3, 0);
}
END_TEST

/* patchifying convolutions (stride = kernel, no padding: a ViT's patch
 * embedding), whose weight gradient the runtime computes as one product
 * over the gathered patches (mmrt_dnnl.c patch_bwd_weights): inputs that
 * the patches do not cover to the edge, a one-channel input with 64
 * outputs as InternVL2Tiny's, and 3-D */
START_TEST(test_conv_patchify) {
  MmrtConv c2 = {.N = 3, .C = 2, .OC = 5, .in = {9, 8}, .k = {3, 4}, .stride = {3, 4}};
  conv_case(&c2, 2, 1);
  MmrtConv c1 = {.N = 2, .C = 1, .OC = 64, .in = {14, 14}, .k = {7, 7}, .stride = {7, 7}};
  conv_case(&c1, 2, 1);
  MmrtConv c3 = {.N = 2, .C = 3, .OC = 4, .in = {5, 6, 4}, .k = {2, 3, 2}, .stride = {2, 3, 2}};
  conv_case(&c3, 3, 1);
}
END_TEST

/* channel counts of 16 and more: oneDNN lays the arguments out in channel
 * blocks (its direct kernels), reordered from and to the plain buffers */
START_TEST(test_conv_blocked) {
  int64_t before = mmrt_dnnl_layout_bytes();
  MmrtConv c3 = {.N = 2,
                 .C = 16,
                 .OC = 32,
                 .in = {4, 6, 5},
                 .k = {3, 3, 3},
                 .stride = {1, 1, 1},
                 .pad_lo = {2, 1, 1},
                 .pad_hi = {0, 1, 1}};
  conv_case(&c3, 3, 1);
  ck_assert_msg(mmrt_dnnl_layout_bytes() > before,
                "conv3d 16 -> 32 channels used no blocked layout");
  MmrtConv c2 = {.N = 3,
                 .C = 32,
                 .OC = 16,
                 .in = {9, 8},
                 .k = {3, 3},
                 .stride = {2, 2},
                 .pad_lo = {0, 0},
                 .pad_hi = {1, 1}};
  conv_case(&c2, 2, 1);
}
END_TEST

/* ======================================================================
 * softmax and eltwise
 * ====================================================================== */

typedef struct SmCtx {
  int rows, cols;
  double *x, *gy, *y;
} SmCtx;

static void softmax_ref(double *y, const double *x, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < cols; j++) m = fmax(m, x[r * cols + j]);
    for (int j = 0; j < cols; j++) s += exp(x[r * cols + j] - m);
    for (int j = 0; j < cols; j++) y[r * cols + j] = exp(x[r * cols + j] - m) / s;
  }
}

static double sm_loss(void *p) {
  SmCtx *c = p;
  softmax_ref(c->y, c->x, c->rows, c->cols);
  return dotd(c->y, c->gy, (size_t)c->rows * c->cols);
}

START_TEST(test_softmax) {
  int rows = 7, cols = 13;
  size_t n = (size_t)rows * cols;
  float *x = rnd_range(n, -4, 4), *gy = rnd(n);
  SmCtx c = {rows, cols, tod(x, n), tod(gy, n), dvec(n)};
  float *y = fvec(n);
  mmrt_softmax_fwd(MMRT_F32, y, x, rows, cols);
  sm_loss(&c);
  CHECK_CLOSE(y, c.y, n, TOL, "softmax fwd");
  float *xi = fcopy(x, n);
  mmrt_softmax_fwd(MMRT_F32, xi, xi, rows, cols);
  CHECK_CLOSE(xi, c.y, n, TOL, "softmax fwd in place");

  /* naive: dx = y (dy - sum(dy y)) */
  double *rdx = dvec(n);
  for (int r = 0; r < rows; r++) {
    double s = 0.0;
    for (int j = 0; j < cols; j++) s += c.gy[r * cols + j] * c.y[r * cols + j];
    for (int j = 0; j < cols; j++) rdx[r * cols + j] = c.y[r * cols + j] * (c.gy[r * cols + j] - s);
  }
  float *dx = fvec(n);
  mmrt_softmax_bwd(MMRT_F32, dx, gy, y, rows, cols, 0);
  CHECK_CLOSE(dx, rdx, n, TOL, "softmax bwd");
  double *g = dvec(n);
  fd_grad(sm_loss, &c, c.x, n, g);
  CHECK_CLOSE(dx, g, n, TOL, "softmax bwd vs fd");
  mmrt_softmax_bwd(MMRT_F32, dx, gy, y, rows, cols, 1);
  for (size_t i = 0; i < n; i++) rdx[i] *= 2;
  CHECK_CLOSE(dx, rdx, n, TOL, "softmax bwd accumulate");
}
END_TEST

static double act_ref(MmrtAct a, double x) {
  switch (a) {
    case MMRT_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case MMRT_ACT_GELU_TANH:
      return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case MMRT_ACT_SILU: return x / (1.0 + exp(-x));
    case MMRT_ACT_RELU: return x > 0 ? x : 0.0;
    case MMRT_ACT_TANH: return tanh(x);
    case MMRT_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case MMRT_ACT_EXP: return exp(x);
    case MMRT_ACT_LOG: return log(x);
    case MMRT_ACT_SQRT: return sqrt(x);
    case MMRT_ACT_ABS: return fabs(x);
    case MMRT_ACT_COUNT: break;
  }
  return NAN;
}

START_TEST(test_eltwise) {
  size_t n = 1001;
  for (int a = 0; a < MMRT_ACT_COUNT; a++) {
    int pos = a == MMRT_ACT_LOG || a == MMRT_ACT_SQRT;
    float *x = pos ? rnd_range(n, 0.1, 3.0) : rnd_range(n, -3.0, 3.0);
    float *gy = rnd(n), *y = fvec(n), *dx = fvec(n);
    double *ry = dvec(n), *rdx = dvec(n);
    for (size_t i = 0; i < n; i++) {
      double xi = x[i], h = 1e-6;
      ry[i] = act_ref(a, xi);
      /* the derivative by central differences, in double */
      rdx[i] = gy[i] * (act_ref(a, xi + h) - act_ref(a, xi - h)) / (2 * h);
    }
    char name[64];
    mmrt_eltwise_fwd(MMRT_F32, a, y, x, n);
    snprintf(name, sizeof name, "%s fwd", mmrt_act_name(a));
    CHECK_CLOSE(y, ry, n, TOL, name);
    mmrt_eltwise_bwd(MMRT_F32, a, dx, gy, x, n, 0);
    snprintf(name, sizeof name, "%s bwd vs fd", mmrt_act_name(a));
    CHECK_CLOSE(dx, rdx, n, TOL, name);
    mmrt_eltwise_bwd(MMRT_F32, a, dx, gy, x, n, 1);
    for (size_t i = 0; i < n; i++) rdx[i] *= 2;
    snprintf(name, sizeof name, "%s bwd accumulate", mmrt_act_name(a));
    CHECK_CLOSE(dx, rdx, n, TOL, name);
    /* in place: y = act(y); dx aliasing dy */
    float *yi = fcopy(x, n);
    mmrt_eltwise_fwd(MMRT_F32, a, yi, yi, n);
    CHECK_CLOSE(yi, ry, n, TOL, "eltwise in place");
    float *gi = fcopy(gy, n);
    mmrt_eltwise_bwd(MMRT_F32, a, gi, gi, x, n, 0);
    for (size_t i = 0; i < n; i++) rdx[i] /= 2;
    CHECK_CLOSE(gi, rdx, n, TOL, "eltwise bwd in place");
  }
  ck_assert_str_eq(mmrt_act_name(MMRT_ACT_GELU_TANH), "gelu_tanh");
}
END_TEST

/* ======================================================================
 * layer norm, RMSNorm, group norm
 * ====================================================================== */

typedef struct NormCtx {
  int N, C, S, G;
  double eps;
  double *x, *gamma, *beta, *gy, *y, *mean, *rstd;
} NormCtx;

static void layernorm_ref(NormCtx *c) {
  for (int r = 0; r < c->N; r++) {
    const double *x = c->x + (size_t)r * c->C;
    double m = 0.0, v = 0.0;
    for (int j = 0; j < c->C; j++) m += x[j];
    m /= c->C;
    for (int j = 0; j < c->C; j++) v += (x[j] - m) * (x[j] - m);
    double rs = 1.0 / sqrt(v / c->C + c->eps);
    for (int j = 0; j < c->C; j++)
      c->y[(size_t)r * c->C + j] = (x[j] - m) * rs * c->gamma[j] + c->beta[j];
    c->mean[r] = m;
    c->rstd[r] = rs;
  }
}

static double ln_loss(void *p) {
  NormCtx *c = p;
  layernorm_ref(c);
  return dotd(c->y, c->gy, (size_t)c->N * c->C);
}

START_TEST(test_layernorm) {
  int N = 7, C = 13;
  size_t n = (size_t)N * C;
  float *x = rnd_range(n, -2, 3), *gamma = rnd(C), *beta = rnd(C), *gy = rnd(n);
  NormCtx c = {N,          C,       1,       1,      1e-5, tod(x, n), tod(gamma, C), tod(beta, C),
               tod(gy, n), dvec(n), dvec(N), dvec(N)};
  float *y = fvec(n), *mean = fvec(N), *rstd = fvec(N);
  mmrt_layernorm_fwd(y, mean, rstd, x, gamma, beta, N, C, 1e-5f);
  ln_loss(&c);
  CHECK_CLOSE(y, c.y, n, TOL, "layernorm fwd");
  CHECK_CLOSE(mean, c.mean, N, TOL, "layernorm mean");
  CHECK_CLOSE(rstd, c.rstd, N, TOL, "layernorm rstd");

  /* naive backward */
  double *rdx = dvec(n), *rdg = dvec(C), *rdb = dvec(C);
  for (int r = 0; r < N; r++) {
    double sg = 0.0, sgh = 0.0;
    for (int j = 0; j < C; j++) {
      double h = (c.x[r * C + j] - c.mean[r]) * c.rstd[r];
      double gg = c.gy[r * C + j] * c.gamma[j];
      sg += gg;
      sgh += gg * h;
      rdg[j] += c.gy[r * C + j] * h;
      rdb[j] += c.gy[r * C + j];
    }
    for (int j = 0; j < C; j++) {
      double h = (c.x[r * C + j] - c.mean[r]) * c.rstd[r];
      rdx[r * C + j] = c.rstd[r] * (c.gy[r * C + j] * c.gamma[j] - sg / C - h * sgh / C);
    }
  }
  float *dx = fvec(n), *dg = fvec(C), *db = fvec(C);
  mmrt_layernorm_bwd(dx, dg, db, gy, x, mean, rstd, gamma, N, C, 0);
  CHECK_CLOSE(dx, rdx, n, TOL, "layernorm dx");
  CHECK_CLOSE(dg, rdg, C, TOL, "layernorm dgamma");
  CHECK_CLOSE(db, rdb, C, TOL, "layernorm dbeta");
  double *g = dvec(n);
  fd_grad(ln_loss, &c, c.x, n, g);
  CHECK_CLOSE(dx, g, n, TOL, "layernorm dx vs fd");
  fd_grad(ln_loss, &c, c.gamma, C, g);
  CHECK_CLOSE(dg, g, C, TOL, "layernorm dgamma vs fd");
  fd_grad(ln_loss, &c, c.beta, C, g);
  CHECK_CLOSE(db, g, C, TOL, "layernorm dbeta vs fd");
  mmrt_layernorm_bwd(dx, dg, db, gy, x, mean, rstd, gamma, N, C, 1);
  for (size_t i = 0; i < n; i++) rdx[i] *= 2;
  for (int j = 0; j < C; j++) {
    rdg[j] *= 2;
    rdb[j] *= 2;
  }
  CHECK_CLOSE(dx, rdx, n, TOL, "layernorm dx accumulate");
  CHECK_CLOSE(dg, rdg, C, TOL, "layernorm dgamma accumulate");
  CHECK_CLOSE(db, rdb, C, TOL, "layernorm dbeta accumulate");
  /* accumulate 2: dx only (the residual add folded in); dgamma, dbeta written */
  mmrt_layernorm_bwd(dx, dg, db, gy, x, mean, rstd, gamma, N, C, 2);
  for (size_t i = 0; i < n; i++) rdx[i] *= 1.5;
  for (int j = 0; j < C; j++) {
    rdg[j] /= 2;
    rdb[j] /= 2;
  }
  CHECK_CLOSE(dx, rdx, n, TOL, "layernorm dx accumulate (dx only)");
  CHECK_CLOSE(dg, rdg, C, TOL, "layernorm dgamma (dx only accumulates)");
  CHECK_CLOSE(db, rdb, C, TOL, "layernorm dbeta (dx only accumulates)");
}
END_TEST

/* libgomp's, linked with the runtime (this file is not built with -fopenmp) */
void omp_set_num_threads(int n);

/* Layer norm over a dim before the last: x laid out (O, C, I), normalised
 * over c at each (o, i), statistics at o * I + i. gamma, beta are the
 * kernel's or ones and zeros (the kernel given NULL). */
typedef struct AxisNormCtx {
  int O, C, I;
  double eps;
  double *x, *gamma, *beta, *gy, *y, *mean, *rstd;
} AxisNormCtx;

static void layernorm_axis_ref(AxisNormCtx *c) {
  for (int o = 0; o < c->O; o++)
    for (int i = 0; i < c->I; i++) {
      size_t at = (size_t)o * c->C * c->I + i, st = (size_t)c->I;
      double m = 0.0, v = 0.0;
      for (int j = 0; j < c->C; j++) m += c->x[at + j * st];
      m /= c->C;
      for (int j = 0; j < c->C; j++) v += (c->x[at + j * st] - m) * (c->x[at + j * st] - m);
      double rs = 1.0 / sqrt(v / c->C + c->eps);
      for (int j = 0; j < c->C; j++)
        c->y[at + j * st] = (c->x[at + j * st] - m) * rs * c->gamma[j] + c->beta[j];
      c->mean[(size_t)o * c->I + i] = m;
      c->rstd[(size_t)o * c->I + i] = rs;
    }
}

static double lnax_loss(void *p) {
  AxisNormCtx *c = p;
  layernorm_axis_ref(c);
  return dotd(c->y, c->gy, (size_t)c->O * c->C * c->I);
}

static void layernorm_axis_case(int O, int C, int I, int affine) {
  size_t n = (size_t)O * C * I, R = (size_t)O * I;
  char what[96];
  float *x = rnd_range(n, -2, 3), *gy = rnd(n);
  float *gamma = affine ? rnd_range(C, 0.5, 1.5) : NULL, *beta = affine ? rnd(C) : NULL;
  double *rg = dvec(C), *rb = dvec(C);
  for (int j = 0; j < C; j++) rg[j] = gamma ? gamma[j] : 1.0, rb[j] = beta ? beta[j] : 0.0;
  AxisNormCtx c = {O, C, I, 1e-5, tod(x, n), rg, rb, tod(gy, n), dvec(n), dvec(R), dvec(R)};
  lnax_loss(&c);
#define LNAX_CLOSE(got, ref, len, name)                                                            \
  do {                                                                                             \
    snprintf(what, sizeof what, "layernorm axis (%d, %d, %d)%s: %s", O, C, I,                      \
             affine ? "" : " no gamma/beta", (name));                                              \
    CHECK_CLOSE((got), (ref), (len), TOL, what);                                                   \
  } while (0)
#define LNAX_SAME(a, b, len, name)                                                                 \
  ck_assert_msg(!memcmp((a), (b), (len) * sizeof(float)), "layernorm axis (%d, %d, %d)%s: %s", O,  \
                C, I, affine ? "" : " no gamma/beta", (name))

  /* the forward, then again with 1, 2 and 3 threads and without statistics */
  float *y[3], *mean[3], *rstd[3];
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(t + 1);
    y[t] = fvec(n), mean[t] = fvec(R), rstd[t] = fvec(R);
    mmrt_layernorm_axis_fwd(y[t], mean[t], rstd[t], x, gamma, beta, O, C, I, 1e-5f);
  }
  omp_set_num_threads(2);
  LNAX_CLOSE(y[0], c.y, n, "y");
  LNAX_CLOSE(mean[0], c.mean, R, "mean");
  LNAX_CLOSE(rstd[0], c.rstd, R, "rstd");
  for (int t = 1; t < 3; t++) {
    LNAX_SAME(y[0], y[t], n, "y bits vary with the thread count");
    LNAX_SAME(mean[0], mean[t], R, "mean bits vary with the thread count");
    LNAX_SAME(rstd[0], rstd[t], R, "rstd bits vary with the thread count");
  }
  float *y0 = fvec(n);
  mmrt_layernorm_axis_fwd(y0, NULL, NULL, x, gamma, beta, O, C, I, 1e-5f);
  LNAX_SAME(y0, y[0], n, "y without mean and rstd");
  const float *m = mean[0], *rs = rstd[0];

  /* naive backward, from the double statistics */
  double *rdx = dvec(n), *rdg = dvec(C), *rdb = dvec(C);
  for (int o = 0; o < O; o++)
    for (int i = 0; i < I; i++) {
      size_t at = (size_t)o * C * I + i, r = (size_t)o * I + i;
      double sg = 0.0, sgh = 0.0;
      for (int j = 0; j < C; j++) {
        size_t e = at + (size_t)j * I;
        double h = (c.x[e] - c.mean[r]) * c.rstd[r], gg = c.gy[e] * rg[j];
        sg += gg;
        sgh += gg * h;
        rdg[j] += c.gy[e] * h;
        rdb[j] += c.gy[e];
      }
      for (int j = 0; j < C; j++) {
        size_t e = at + (size_t)j * I;
        double h = (c.x[e] - c.mean[r]) * c.rstd[r];
        rdx[e] = c.rstd[r] * (c.gy[e] * rg[j] - sg / C - h * sgh / C);
      }
    }
  float *dx[3], *dg[3], *db[3];
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(t + 1);
    dx[t] = fvec(n), dg[t] = fvec(C), db[t] = fvec(C);
    mmrt_layernorm_axis_bwd(dx[t], dg[t], db[t], gy, x, m, rs, gamma, O, C, I, 0);
  }
  omp_set_num_threads(2);
  LNAX_CLOSE(dx[0], rdx, n, "dx");
  LNAX_CLOSE(dg[0], rdg, C, "dgamma");
  LNAX_CLOSE(db[0], rdb, C, "dbeta");
  for (int t = 1; t < 3; t++) {
    LNAX_SAME(dx[0], dx[t], n, "dx bits vary with the thread count");
    LNAX_SAME(dg[0], dg[t], C, "dgamma bits vary with the thread count");
    LNAX_SAME(db[0], db[t], C, "dbeta bits vary with the thread count");
  }
  double *g = dvec(n);
  fd_grad(lnax_loss, &c, c.x, n, g);
  LNAX_CLOSE(dx[0], g, n, "dx vs fd");
  fd_grad(lnax_loss, &c, c.gamma, C, g);
  LNAX_CLOSE(dg[0], g, C, "dgamma vs fd");
  fd_grad(lnax_loss, &c, c.beta, C, g);
  LNAX_CLOSE(db[0], g, C, "dbeta vs fd");

  /* each output alone (the others NULL): the same bits */
  float *dx1 = fvec(n), *dg1 = fvec(C), *db1 = fvec(C);
  mmrt_layernorm_axis_bwd(dx1, NULL, NULL, gy, x, m, rs, gamma, O, C, I, 0);
  mmrt_layernorm_axis_bwd(NULL, dg1, NULL, gy, x, m, rs, gamma, O, C, I, 0);
  mmrt_layernorm_axis_bwd(NULL, NULL, db1, gy, x, m, rs, gamma, O, C, I, 0);
  LNAX_SAME(dx1, dx[0], n, "dx alone");
  LNAX_SAME(dg1, dg[0], C, "dgamma alone");
  LNAX_SAME(db1, db[0], C, "dbeta alone");

  /* accumulate 1: all three add */
  float *dx2 = fcopy(dx[0], n), *dg2 = fcopy(dg[0], C), *db2 = fcopy(db[0], C);
  mmrt_layernorm_axis_bwd(dx2, dg2, db2, gy, x, m, rs, gamma, O, C, I, 1);
  for (size_t e = 0; e < n; e++) rdx[e] *= 2;
  for (int j = 0; j < C; j++) rdg[j] *= 2, rdb[j] *= 2;
  LNAX_CLOSE(dx2, rdx, n, "dx accumulate");
  LNAX_CLOSE(dg2, rdg, C, "dgamma accumulate");
  LNAX_CLOSE(db2, rdb, C, "dbeta accumulate");
  /* accumulate 2: dx adds, dgamma and dbeta are written */
  mmrt_layernorm_axis_bwd(dx2, dg2, db2, gy, x, m, rs, gamma, O, C, I, 2);
  for (size_t e = 0; e < n; e++) rdx[e] *= 1.5;
  for (int j = 0; j < C; j++) rdg[j] /= 2, rdb[j] /= 2;
  LNAX_CLOSE(dx2, rdx, n, "dx accumulate (dx only)");
  LNAX_SAME(dg2, dg[0], C, "dgamma written under accumulate 2");
  LNAX_SAME(db2, db[0], C, "dbeta written under accumulate 2");
#undef LNAX_CLOSE
#undef LNAX_SAME
}

/* (2, 13, 37) odd sizes, (1, 8, 300) more than one 256-position block and
 * not a multiple of it, (3, 1, 5) one channel, (2, 40, 1) inner 1 (the
 * row kernels); each with and without gamma and beta. */
START_TEST(test_layernorm_axis) {
  static const int shapes[][3] = {{2, 13, 37}, {1, 8, 300}, {3, 1, 5}, {2, 40, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int affine = 1; affine >= 0; affine--)
      layernorm_axis_case(shapes[s][0], shapes[s][1], shapes[s][2], affine);
}
END_TEST

static void rmsnorm_ref(NormCtx *c) {
  for (int r = 0; r < c->N; r++) {
    const double *x = c->x + (size_t)r * c->C;
    double ss = 0.0;
    for (int j = 0; j < c->C; j++) ss += x[j] * x[j];
    double rs = 1.0 / sqrt(ss / c->C + c->eps);
    for (int j = 0; j < c->C; j++) c->y[(size_t)r * c->C + j] = x[j] * rs * c->gamma[j];
    c->rstd[r] = rs;
  }
}

static double rms_loss(void *p) {
  NormCtx *c = p;
  rmsnorm_ref(c);
  return dotd(c->y, c->gy, (size_t)c->N * c->C);
}

START_TEST(test_rmsnorm) {
  int N = 7, C = 13;
  size_t n = (size_t)N * C;
  float *x = rnd(n), *w = rnd(C), *gy = rnd(n);
  NormCtx c = {N, C, 1, 1, 1e-6, tod(x, n), tod(w, C), NULL, tod(gy, n), dvec(n), NULL, dvec(N)};
  float *y = fvec(n), *rstd = fvec(N);
  mmrt_rmsnorm_fwd(y, rstd, x, w, N, C, 1e-6f);
  rms_loss(&c);
  CHECK_CLOSE(y, c.y, n, TOL, "rmsnorm fwd");
  CHECK_CLOSE(rstd, c.rstd, N, TOL, "rmsnorm rstd");
  /* naive backward */
  double *rdx = dvec(n), *rdw = dvec(C);
  for (int r = 0; r < N; r++) {
    double s = 0.0, rs = c.rstd[r];
    for (int j = 0; j < C; j++) {
      s += c.gy[r * C + j] * c.gamma[j] * c.x[r * C + j];
      rdw[j] += c.gy[r * C + j] * c.x[r * C + j] * rs;
    }
    for (int j = 0; j < C; j++)
      rdx[r * C + j] = rs * c.gy[r * C + j] * c.gamma[j] - c.x[r * C + j] * rs * rs * rs * s / C;
  }
  float *dx = fvec(n), *dw = fvec(C);
  mmrt_rmsnorm_bwd(dx, dw, gy, x, rstd, w, N, C, 0);
  CHECK_CLOSE(dx, rdx, n, TOL, "rmsnorm dx");
  CHECK_CLOSE(dw, rdw, C, TOL, "rmsnorm dw");
  double *g = dvec(n);
  fd_grad(rms_loss, &c, c.x, n, g);
  CHECK_CLOSE(dx, g, n, TOL, "rmsnorm dx vs fd");
  fd_grad(rms_loss, &c, c.gamma, C, g);
  CHECK_CLOSE(dw, g, C, TOL, "rmsnorm dw vs fd");
  mmrt_rmsnorm_bwd(dx, dw, gy, x, rstd, w, N, C, 1);
  for (size_t i = 0; i < n; i++) rdx[i] *= 2;
  for (int j = 0; j < C; j++) rdw[j] *= 2;
  CHECK_CLOSE(dx, rdx, n, TOL, "rmsnorm dx accumulate");
  CHECK_CLOSE(dw, rdw, C, TOL, "rmsnorm dw accumulate");
}
END_TEST

static void groupnorm_ref(NormCtx *c) {
  int Cg = c->C / c->G;
  size_t M = (size_t)Cg * c->S;
  for (int n = 0; n < c->N; n++)
    for (int g = 0; g < c->G; g++) {
      size_t base = ((size_t)n * c->C + (size_t)g * Cg) * c->S;
      double m = 0.0, v = 0.0;
      for (size_t i = 0; i < M; i++) m += c->x[base + i];
      m /= (double)M;
      for (size_t i = 0; i < M; i++) v += (c->x[base + i] - m) * (c->x[base + i] - m);
      double rs = 1.0 / sqrt(v / (double)M + c->eps);
      for (size_t i = 0; i < M; i++) {
        int ch = g * Cg + (int)(i / (size_t)c->S);
        c->y[base + i] = (c->x[base + i] - m) * rs * c->gamma[ch] + c->beta[ch];
      }
      c->mean[n * c->G + g] = m;
      c->rstd[n * c->G + g] = rs;
    }
}

static double gn_loss(void *p) {
  NormCtx *c = p;
  groupnorm_ref(c);
  return dotd(c->y, c->gy, (size_t)c->N * c->C * c->S);
}

START_TEST(test_groupnorm) {
  int N = 3, C = 6, S = 35, G = 3; /* S = 5 x 7 */
  size_t n = (size_t)N * C * S;
  float *x = rnd_range(n, -1, 2), *gamma = rnd(C), *beta = rnd(C), *gy = rnd(n);
  NormCtx c = {N,
               C,
               S,
               G,
               1e-5,
               tod(x, n),
               tod(gamma, C),
               tod(beta, C),
               tod(gy, n),
               dvec(n),
               dvec((size_t)N * G),
               dvec((size_t)N * G)};
  float *y = fvec(n), *mean = fvec((size_t)N * G), *rstd = fvec((size_t)N * G);
  mmrt_groupnorm_fwd(y, mean, rstd, x, gamma, beta, N, C, S, G, 1e-5f);
  gn_loss(&c);
  CHECK_CLOSE(y, c.y, n, TOL, "groupnorm fwd");
  CHECK_CLOSE(mean, c.mean, (size_t)N * G, TOL, "groupnorm mean");
  CHECK_CLOSE(rstd, c.rstd, (size_t)N * G, TOL, "groupnorm rstd");
  float *dx = fvec(n), *dg = fvec(C), *db = fvec(C);
  mmrt_groupnorm_bwd(dx, dg, db, gy, x, mean, rstd, gamma, N, C, S, G, 0);
  double *gx = dvec(n), *gg = dvec(C), *gb = dvec(C);
  fd_grad(gn_loss, &c, c.x, n, gx);
  fd_grad(gn_loss, &c, c.gamma, C, gg);
  fd_grad(gn_loss, &c, c.beta, C, gb);
  CHECK_CLOSE(dx, gx, n, TOL, "groupnorm dx vs fd");
  CHECK_CLOSE(dg, gg, C, TOL, "groupnorm dgamma vs fd");
  CHECK_CLOSE(db, gb, C, TOL, "groupnorm dbeta vs fd");
  mmrt_groupnorm_bwd(dx, dg, db, gy, x, mean, rstd, gamma, N, C, S, G, 1);
  for (size_t i = 0; i < n; i++) gx[i] *= 2;
  for (int j = 0; j < C; j++) {
    gg[j] *= 2;
    gb[j] *= 2;
  }
  CHECK_CLOSE(dx, gx, n, TOL, "groupnorm dx accumulate");
  CHECK_CLOSE(dg, gg, C, TOL, "groupnorm dgamma accumulate");
  CHECK_CLOSE(db, gb, C, TOL, "groupnorm dbeta accumulate");
}
END_TEST

/* ======================================================================
 * RoPE and attention
 * ====================================================================== */

typedef struct RopeCtx {
  int B, T, H, D, off;
  double theta;
  double *x, *gy, *y;
} RopeCtx;

static double rope_loss(void *p) {
  RopeCtx *c = p;
  int half = c->D / 2;
  for (int b = 0; b < c->B; b++)
    for (int t = 0; t < c->T; t++)
      for (int h = 0; h < c->H; h++) {
        size_t o = (((size_t)b * c->T + t) * c->H + h) * c->D;
        for (int i = 0; i < half; i++) {
          double a = (c->off + t) * pow(c->theta, -2.0 * i / c->D);
          double x1 = c->x[o + i], x2 = c->x[o + i + half];
          c->y[o + i] = x1 * cos(a) - x2 * sin(a);
          c->y[o + i + half] = x2 * cos(a) + x1 * sin(a);
        }
      }
  return dotd(c->y, c->gy, (size_t)c->B * c->T * c->H * c->D);
}

START_TEST(test_rope) {
  int B = 3, T = 5, H = 6, D = 8, off = 3;
  float theta = 10000.0f;
  size_t n = (size_t)B * T * H * D;
  float *x = rnd(n), *gy = rnd(n);
  RopeCtx c = {B, T, H, D, off, theta, tod(x, n), tod(gy, n), dvec(n)};
  float *y = fvec(n);
  mmrt_rope_fwd(y, x, B, T, H, D, theta, off);
  rope_loss(&c);
  CHECK_CLOSE(y, c.y, n, TOL, "rope fwd");
  float *xi = fcopy(x, n);
  mmrt_rope_fwd(xi, xi, B, T, H, D, theta, off);
  CHECK_CLOSE(xi, c.y, n, TOL, "rope fwd in place");
  float *dx = fvec(n);
  mmrt_rope_bwd(dx, gy, B, T, H, D, theta, off, 0);
  double *g = dvec(n);
  fd_grad(rope_loss, &c, c.x, n, g);
  CHECK_CLOSE(dx, g, n, TOL, "rope bwd vs fd");
  mmrt_rope_bwd(dx, gy, B, T, H, D, theta, off, 1);
  for (size_t i = 0; i < n; i++) g[i] *= 2;
  CHECK_CLOSE(dx, g, n, TOL, "rope bwd accumulate");
  /* backward undoes forward: R^T R x = x */
  mmrt_rope_bwd(xi, xi, B, T, H, D, theta, off, 0);
  CHECK_CLOSE(xi, tod(x, n), n, TOL, "rope bwd in place inverts fwd");
}
END_TEST

typedef struct AttnCtx {
  int B, T, S, H, KVH, D, causal;
  double scale;
  double *q, *k, *v, *gy, *out, *lse;
} AttnCtx;

/* The key mask [B, S] of the references below (NULL: none); key j of row b
 * is skipped where it is 0. */
static const double *att_mask;
/* Or the segments [B, T] (S == T): query t sees key j of its own segment only. */
static const int32_t *att_seg;

static int att_dropped(int b, int S, int t, int j) {
  if (att_seg) return att_seg[(size_t)b * S + j] != att_seg[(size_t)b * S + t];
  return att_mask && att_mask[(size_t)b * S + j] == 0.0;
}

static void attention_ref(AttnCtx *c) {
  int grp = c->H / c->KVH, D = c->D;
  double *p = malloc(sizeof(double) * (size_t)c->S);
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->H; h++)
      for (int t = 0; t < c->T; t++) {
        const double *q = c->q + (((size_t)b * c->T + t) * c->H + h) * D;
        double *o = c->out + (((size_t)b * c->T + t) * c->H + h) * D;
        double m = -INFINITY, s = 0.0;
        int n = 0;
        for (int j = 0; j < c->S; j++) {
          if (c->causal && j > t + (c->S - c->T)) continue;
          n = j + 1;
          const double *k = c->k + (((size_t)b * c->S + j) * c->KVH + h / grp) * D;
          p[j] = att_dropped(b, c->S, t, j) ? -INFINITY : c->scale * dotd(q, k, (size_t)D);
          m = fmax(m, p[j]);
        }
        for (int d = 0; d < D; d++) o[d] = 0.0;
        if (n == 0 || m == -INFINITY) {
          c->lse[((size_t)b * c->H + h) * c->T + t] = -INFINITY;
          continue;
        }
        for (int j = 0; j < n; j++) s += exp(p[j] - m);
        for (int j = 0; j < n; j++) {
          const double *v = c->v + (((size_t)b * c->S + j) * c->KVH + h / grp) * D;
          for (int d = 0; d < D; d++) o[d] += exp(p[j] - m) / s * v[d];
        }
        c->lse[((size_t)b * c->H + h) * c->T + t] = m + log(s);
      }
  free(p);
}

static double attn_loss(void *p) {
  AttnCtx *c = p;
  attention_ref(c);
  return dotd(c->out, c->gy, (size_t)c->B * c->T * c->H * c->D);
}

/* ---- incremental decoding: rope at per-row positions, the KV cache ---- */

START_TEST(test_rope_pos) {
  enum { B = 3, T = 4, H = 2, D = 8 };
  const int32_t pos[B] = {5, 0, 11};
  size_t row = (size_t)T * H * D, n = B * row;
  float *x = rnd(n), *y = fvec(n), *back = fvec(n);
  ck_assert_int_eq(mmrt_rope_pos_fwd(y, x, B, T, H, D, 500.0f, pos), 0);
  for (int b = 0; b < B; b++) { /* row b is the reference at offset pos[b] */
    float *gy = rnd(row);
    RopeCtx c = {1, T, H, D, pos[b], 500.0, tod(x + b * row, row), tod(gy, row), dvec(row)};
    rope_loss(&c);
    CHECK_CLOSE(y + b * row, c.y, row, TOL, "rope at per-row positions");
  }
  ck_assert_int_eq(mmrt_rope_pos_bwd(back, y, B, T, H, D, 500.0f, pos), 0);
  CHECK_CLOSE(back, tod(x, n), n, TOL, "rope_pos bwd inverts fwd");
  const int32_t neg[B] = {0, -1, 0};
  ck_assert_int_eq(mmrt_rope_pos_fwd(y, x, B, T, H, D, 500.0f, neg), -1);
}
END_TEST

START_TEST(test_place) {
  enum { B = 2, T = 7, N = 3, C = 5 };
  const int32_t ids[B * T] = {1, 3, 3, 3, 9, 9, 2, 3, 8, 3, 8, 3, 2, 0};
  float *x = rnd(B * T * C), *src = rnd(B * N * C), *y = fvec(B * T * C);
  ck_assert_int_eq(mmrt_place_fwd(y, x, src, ids, B, T, N, C, 3), 0);
  for (int b = 0; b < B; b++)
    for (int t = 0, j = 0; t < T; t++) {
      const float *want = ids[b * T + t] == 3 ? src + (b * N + j++) * C : x + (b * T + t) * C;
      for (int c = 0; c < C; c++) ck_assert_float_eq(y[(b * T + t) * C + c], want[c]);
    }
  float *dx = fvec(B * T * C), *ds = fvec(B * N * C);
  ck_assert_int_eq(mmrt_place_bwd(dx, ds, y, ids, B, T, N, C, 3), 0);
  for (int i = 0; i < B * T * C; i++) /* the image rows' gradient goes to src, the rest to x */
    ck_assert_float_eq(dx[i], ids[i / C] == 3 ? 0.0f : x[i]);
  for (int i = 0; i < B * N * C; i++) ck_assert_float_eq(ds[i], src[i]);
  const int32_t four[B * T] = {3, 3, 3, 3, 9, 9, 2, 3, 8, 3, 8, 3, 2, 0};
  ck_assert_int_eq(mmrt_place_fwd(y, x, src, four, B, T, N, C, 3), -1); /* 4 tokens for 3 rows */
  const int32_t none[B * T] = {1, 5, 5, 5, 9, 9, 2,
                               3, 8, 3, 8, 3, 2, 0}; /* sample 0 has no image */
  ck_assert_int_eq(mmrt_place_fwd(y, x, src, none, B, T, N, C, 3), 0);
  for (int i = 0; i < T * C; i++) ck_assert_float_eq(y[i], x[i]);
  /* fewer tokens than rows (a sample with fewer tiles than the most): the
   * first rows placed; the rows placed nowhere get a zero gradient, whatever
   * the buffer held */
  const int32_t one[B * T] = {1, 5, 3, 5, 9, 9, 2, 3, 8, 3, 8, 3, 2, 0};
  ck_assert_int_eq(mmrt_place_fwd(y, x, src, one, B, T, N, C, 3), 0);
  for (int c = 0; c < C; c++) ck_assert_float_eq(y[2 * C + c], src[c]);
  for (int i = 0; i < B * N * C; i++) ds[i] = 7.0f;
  ck_assert_int_eq(mmrt_place_bwd(dx, ds, y, one, B, T, N, C, 3), 0);
  for (int c = 0; c < C; c++) ck_assert_float_eq(ds[c], src[c]);
  for (int i = C; i < N * C; i++) ck_assert_float_eq(ds[i], 0.0f);
  for (int i = 0; i < B * N * C; i++) ds[i] = 7.0f;
  ck_assert_int_eq(mmrt_place_bwd(dx, ds, y, none, B, T, N, C, 3), 0);
  for (int i = 0; i < N * C; i++) ck_assert_float_eq(ds[i], 0.0f); /* no image: no gradient */
}
END_TEST

/* Queries at positions pos[b] .. pos[b] + n - 1 on a cache filled by
 * kv_write: the causal attention of the textbook reference on the first
 * pos[b] + n positions. */
START_TEST(test_attention_cached) {
  enum { B = 2, S = 12, n = 2, H = 4, KVH = 2, D = 8 };
  const int32_t pos[B] = {6, 0};
  size_t kvrow = (size_t)KVH * D;
  float *k = rnd(B * S * kvrow), *v = rnd(B * S * kvrow), *kc = fvec(B * S * kvrow),
        *vc = fvec(B * S * kvrow);
  float *q = rnd((size_t)B * n * H * D), *out = fvec((size_t)B * n * H * D);
  const int32_t zero[B] = {0, 0};
  /* a prefill of all S positions, then the n new ones written at pos */
  ck_assert_int_eq(mmrt_kv_write(kc, k, zero, B, S, S, KVH, D), 0);
  ck_assert_int_eq(mmrt_kv_write(vc, v, zero, B, S, S, KVH, D), 0);
  float *kn = rnd(B * n * kvrow), *vn = rnd(B * n * kvrow);
  ck_assert_int_eq(mmrt_kv_write(kc, kn, pos, B, S, n, KVH, D), 0);
  ck_assert_int_eq(mmrt_kv_write(vc, vn, pos, B, S, n, KVH, D), 0);
  ck_assert_int_eq(mmrt_attention_cached_fwd(out, q, kc, vc, pos, B, n, S, H, KVH, D, 0.3f), 0);
  for (int b = 0; b < B; b++) {
    int len = pos[b] + n;
    float *kr = fcopy(k + b * S * kvrow, (size_t)len * kvrow),
          *vr = fcopy(v + b * S * kvrow, (size_t)len * kvrow);
    memcpy(kr + pos[b] * kvrow, kn + b * n * kvrow, sizeof(float) * n * kvrow);
    memcpy(vr + pos[b] * kvrow, vn + b * n * kvrow, sizeof(float) * n * kvrow);
    AttnCtx c = {.B = 1,
                 .T = n,
                 .S = len,
                 .H = H,
                 .KVH = KVH,
                 .D = D,
                 .causal = 1,
                 .scale = 0.3,
                 .q = tod(q + b * n * H * D, (size_t)n * H * D),
                 .k = tod(kr, (size_t)len * kvrow),
                 .v = tod(vr, (size_t)len * kvrow),
                 .out = dvec((size_t)n * H * D),
                 .lse = dvec((size_t)H * n)};
    attention_ref(&c);
    CHECK_CLOSE(out + b * n * H * D, c.out, (size_t)n * H * D, TOL, "attention on the cache");
  }
  const int32_t full[B] = {11, 0}; /* 11 + 2 > 12 */
  ck_assert_int_eq(mmrt_kv_write(kc, kn, full, B, S, n, KVH, D), -1);
  ck_assert_int_eq(mmrt_attention_cached_fwd(out, q, kc, vc, full, B, n, S, H, KVH, D, 0.3f), -1);
}
END_TEST

/* The textbook backward with the probabilities written out, in double. */
static void attention_bwd_ref(AttnCtx *c, double *dq, double *dk, double *dv) {
  int grp = c->H / c->KVH, D = c->D;
  attention_ref(c);
  double *p = malloc(sizeof(double) * (size_t)c->S * 2), *dp = p + c->S;
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->H; h++)
      for (int t = 0; t < c->T; t++) {
        size_t off = (((size_t)b * c->T + t) * c->H + h) * D;
        double l = c->lse[((size_t)b * c->H + h) * c->T + t], Dt = 0.0;
        int n = c->causal ? t + (c->S - c->T) + 1 : c->S;
        n = n < 0 ? 0 : n;
        for (int j = 0; j < n; j++) {
          size_t ko = (((size_t)b * c->S + j) * c->KVH + h / grp) * D;
          p[j] = att_dropped(b, c->S, t, j)
                     ? 0.0
                     : exp(c->scale * dotd(c->q + off, c->k + ko, (size_t)D) - l);
          dp[j] = dotd(c->gy + off, c->v + ko, (size_t)D);
          Dt += p[j] * dp[j];
        }
        for (int j = 0; j < n; j++) {
          size_t ko = (((size_t)b * c->S + j) * c->KVH + h / grp) * D;
          double ds = p[j] * (dp[j] - Dt) * c->scale;
          for (int d = 0; d < D; d++) {
            dq[off + d] += ds * c->k[ko + d];
            dk[ko + d] += ds * c->q[off + d];
            dv[ko + d] += p[j] * c->gy[off + d];
          }
        }
      }
  free(p);
}

static void attention_case(int B, int T, int S, int H, int KVH, int D, int causal) {
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D;
  size_t nl = (size_t)B * H * T;
  float scale = 1.7f / sqrtf((float)D); /* > 1/sqrt(D): peakier softmax */
  float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *gy = rnd(nq);
  AttnCtx c = {B,     T,          S,          H,          KVH,         D,        causal,
               scale, tod(q, nq), tod(k, nk), tod(v, nk), tod(gy, nq), dvec(nq), dvec(nl)};
  char name[128];
  snprintf(name, sizeof name, "attention B=%d T=%d S=%d H=%d KVH=%d D=%d causal=%d", B, T, S, H,
           KVH, D, causal);
  float *out = fvec(nq), *lse = fvec(nl);
  mmrt_attention_fwd(out, lse, q, k, v, B, T, S, H, KVH, D, causal, scale);
  attn_loss(&c);
  CHECK_CLOSE(out, c.out, nq, TOL, name);
  /* rows that see no key: lse = -inf in both; compare the rest */
  float *lf = fcopy(lse, nl);
  double *lr = dvec(nl);
  for (size_t i = 0; i < nl; i++) {
    lr[i] = c.lse[i];
    if (isinf(c.lse[i])) {
      ck_assert_msg(isinf(lse[i]) && lse[i] < 0, "%s: lse not -inf", name);
      lf[i] = 0.0f;
      lr[i] = 0.0;
    }
  }
  CHECK_CLOSE(lf, lr, nl, TOL, name);

  float *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
  mmrt_attention_bwd(dq, dk, dv, gy, q, k, v, out, lse, B, T, S, H, KVH, D, causal, scale, 0);
  double *gq = dvec(nq), *gk = dvec(nk), *gv = dvec(nk);
  fd_grad(attn_loss, &c, c.q, nq, gq);
  fd_grad(attn_loss, &c, c.k, nk, gk);
  fd_grad(attn_loss, &c, c.v, nk, gv);
  CHECK_CLOSE(dq, gq, nq, TOL, name);
  CHECK_CLOSE(dk, gk, nk, TOL, name);
  CHECK_CLOSE(dv, gv, nk, TOL, name);
  double *rq = dvec(nq), *rk = dvec(nk), *rv = dvec(nk);
  attention_bwd_ref(&c, rq, rk, rv);
  CHECK_CLOSE(dq, rq, nq, TOL, name);
  CHECK_CLOSE(dk, rk, nk, TOL, name);
  CHECK_CLOSE(dv, rv, nk, TOL, name);
  /* accumulate onto random starting values */
  float *aq = rnd(nq), *ak = rnd(nk), *av = rnd(nk);
  double *eq = tod(aq, nq), *ek = tod(ak, nk), *ev = tod(av, nk);
  for (size_t i = 0; i < nq; i++) eq[i] += gq[i];
  for (size_t i = 0; i < nk; i++) {
    ek[i] += gk[i];
    ev[i] += gv[i];
  }
  mmrt_attention_bwd(aq, ak, av, gy, q, k, v, out, lse, B, T, S, H, KVH, D, causal, scale, 1);
  CHECK_CLOSE(aq, eq, nq, TOL, "attention dq accumulate");
  CHECK_CLOSE(ak, ek, nk, TOL, "attention dk accumulate");
  CHECK_CLOSE(av, ev, nk, TOL, "attention dv accumulate");
}

START_TEST(test_attention_causal_gqa) {
  attention_case(3, 5, 5, 6, 2, 8, 1);
}
END_TEST

START_TEST(test_attention_causal_prefix) {
  /* queries are the last 5 of 7 positions (a KV cache of 2) */
  attention_case(3, 5, 7, 6, 2, 8, 1);
}
END_TEST

START_TEST(test_attention_noncausal) {
  attention_case(3, 5, 7, 6, 2, 8, 0); /* cross attention, GQA */
  attention_case(2, 5, 5, 3, 3, 8, 0); /* MHA */
  attention_case(2, 3, 4, 4, 1, 6, 0); /* MQA */
}
END_TEST

/* dq, dk, dv against the naive backward's (and finite differences when fd). */
static void grads_close(AttnCtx *c, const float *dq, const float *dk, const float *dv,
                        const double *rq, const double *rk, const double *rv, int fd,
                        const char *what) {
  size_t nq = (size_t)c->B * c->T * c->H * c->D, nk = (size_t)c->B * c->S * c->KVH * c->D;
  char name[96];
  const float *got[3] = {dq, dk, dv};
  const double *ref[3] = {rq, rk, rv};
  double *x[3] = {c->q, c->k, c->v};
  for (int i = 0; i < 3; i++) {
    size_t n = i ? nk : nq;
    snprintf(name, sizeof name, "%s d%c", what, "qkv"[i]);
    CHECK_CLOSE(got[i], ref[i], n, TOL, name);
    if (!fd) continue;
    double *g = dvec(n);
    fd_grad(attn_loss, c, x[i], n, g);
    snprintf(name, sizeof name, "%s d%c vs fd", what, "qkv"[i]);
    CHECK_CLOSE(got[i], g, n, TOL, name);
  }
}

/* mmrt_attention_masked_fwd/_bwd against the naive loops with the key
 * mask (and finite differences when fd): row 0 drops every third key, row
 * 1 its first 70 (the whole first 64-key tile when S > 64), row 2 every
 * key (out 0, lse -inf, no gradient). */
static void attention_mask_case(int T, int S, int H, int KVH, int D, int causal, int fd) {
  int B = 3;
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D, nl = (size_t)B * H * T;
  float scale = 1.3f / sqrtf((float)D);
  float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *gy = rnd(nq), *mask = fvec((size_t)B * S);
  for (int j = 0; j < S; j++) {
    mask[j] = j % 3 != 1;
    mask[S + j] = j >= 70 || (S <= 70 && j >= S / 2);
    mask[2 * S + j] = 0.0f;
  }
  double *md = tod(mask, (size_t)B * S);
  att_mask = md;
  AttnCtx c = {B,     T,          S,          H,          KVH,         D,        causal,
               scale, tod(q, nq), tod(k, nk), tod(v, nk), tod(gy, nq), dvec(nq), dvec(nl)};
  float *out = fvec(nq), *lse = fvec(nl);
  mmrt_attention_masked_fwd(out, lse, q, k, v, mask, B, T, S, H, KVH, D, causal, scale, 0);
  double *rq = dvec(nq), *rk = dvec(nk), *rv = dvec(nk);
  attention_bwd_ref(&c, rq, rk, rv); /* also runs the forward */
  CHECK_CLOSE(out, c.out, nq, TOL, "masked attention fwd");
  float *lf = fcopy(lse, nl);
  double *lr = dvec(nl);
  for (size_t i = 0; i < nl; i++) {
    lr[i] = c.lse[i];
    if (isinf(c.lse[i])) {
      ck_assert_msg(isinf(lse[i]) && lse[i] < 0, "masked attention: lse[%zu] = %g, not -inf", i,
                    (double)lse[i]);
      lf[i] = 0.0f, lr[i] = 0.0;
    }
  }
  CHECK_CLOSE(lf, lr, nl, TOL, "masked attention lse");
  float *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
  mmrt_attention_masked_bwd(dq, dk, dv, gy, q, k, v, out, lse, mask, B, T, S, H, KVH, D, causal,
                            scale, 0, 0);
  grads_close(&c, dq, dk, dv, rq, rk, rv, fd, "masked attention");
  for (size_t i = (size_t)2 * S * KVH * D; i < nk; i++) /* row 2: no key is attended */
    ck_assert_msg(dk[i] == 0.0f && dv[i] == 0.0f, "masked attention: a dropped key has a gradient");
  att_mask = NULL;
}

/* mmrt_attention_seg_fwd/_bwd (packed documents) against the naive loops
 * with segments: row 0 three documents, row 1 one, row 2 a document per
 * token for its first 5 then one long one (across the 64-key tiles when
 * T > 64, whose tiles of other documents the kernel skips); finite
 * differences when fd. */
static void attention_seg_case(int T, int H, int KVH, int D, int causal, int fd) {
  int B = 3, S = T;
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D, nl = (size_t)B * H * T;
  float scale = 1.3f / sqrtf((float)D);
  float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *gy = rnd(nq);
  int32_t *seg = calloc((size_t)B * T, sizeof *seg);
  for (int t = 0; t < T; t++) {
    seg[t] = t < T / 3 ? 0 : t < T / 2 ? 1 : 2;
    seg[T + t] = 0;
    seg[2 * T + t] = t < 5 ? t : 5;
  }
  att_seg = seg;
  AttnCtx c = {B,     T,          S,          H,          KVH,         D,        causal,
               scale, tod(q, nq), tod(k, nk), tod(v, nk), tod(gy, nq), dvec(nq), dvec(nl)};
  float *out = fvec(nq), *lse = fvec(nl);
  mmrt_attention_seg_fwd(out, lse, q, k, v, seg, B, T, H, KVH, D, causal, scale, 0);
  double *rq = dvec(nq), *rk = dvec(nk), *rv = dvec(nk);
  attention_bwd_ref(&c, rq, rk, rv); /* also runs the forward */
  CHECK_CLOSE(out, c.out, nq, TOL, "segment attention fwd");
  CHECK_CLOSE(lse, c.lse, nl, TOL, "segment attention lse");
  float *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
  mmrt_attention_seg_bwd(dq, dk, dv, gy, q, k, v, out, lse, seg, B, T, H, KVH, D, causal, scale, 0,
                         0);
  grads_close(&c, dq, dk, dv, rq, rk, rv, fd, "segment attention");
  att_seg = NULL;
  free(seg);
}

START_TEST(test_attention_segments) {
  attention_seg_case(7, 4, 2, 8, 1, 1);    /* causal, GQA, finite differences */
  attention_seg_case(7, 2, 2, 8, 0, 1);    /* bidirectional within each document */
  attention_seg_case(150, 2, 1, 19, 1, 0); /* three key tiles: skipped across documents */
}
END_TEST

START_TEST(test_attention_mask) {
  attention_mask_case(5, 7, 4, 2, 8, 0, 1); /* cross attention, GQA, finite differences */
  attention_mask_case(5, 5, 4, 4, 8, 1,
                      1); /* causal: row 1's first queries see dropped keys only */
  attention_mask_case(9, 83, 2, 1, 19, 0, 0); /* two key tiles, the first dropped in row 1 */
}
END_TEST

/* mmrt_attention_fwd and _bwd against the naive forward and backward only
 * (finite differences at larger sizes would take minutes). */
static void attention_ref_case(int B, int T, int S, int H, int KVH, int D, int causal) {
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D;
  size_t nl = (size_t)B * H * T;
  float scale = 1.0f / sqrtf((float)D);
  float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *gy = rnd(nq);
  AttnCtx c = {B,     T,          S,          H,          KVH,         D,        causal,
               scale, tod(q, nq), tod(k, nk), tod(v, nk), tod(gy, nq), dvec(nq), dvec(nl)};
  char name[160];
  snprintf(name, sizeof name, "attention B=%d T=%d S=%d H=%d KVH=%d D=%d causal=%d", B, T, S, H,
           KVH, D, causal);
  float *out = fvec(nq), *lse = fvec(nl);
  mmrt_attention_fwd(out, lse, q, k, v, B, T, S, H, KVH, D, causal, scale);
  double *rq = dvec(nq), *rk = dvec(nk), *rv = dvec(nk);
  attention_bwd_ref(&c, rq, rk, rv); /* also runs the forward */
  CHECK_CLOSE(out, c.out, nq, TOL, name);
  float *lf = fcopy(lse, nl); /* rows that see no key: lse = -inf in both; compare the rest */
  for (size_t i = 0; i < nl; i++)
    if (isinf(c.lse[i])) {
      ck_assert_msg(isinf(lse[i]) && lse[i] < 0, "%s: lse not -inf", name);
      lf[i] = 0.0f, c.lse[i] = 0.0;
    }
  CHECK_CLOSE(lf, c.lse, nl, TOL, name);
  float *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
  mmrt_attention_bwd(dq, dk, dv, gy, q, k, v, out, lse, B, T, S, H, KVH, D, causal, scale, 0);
  CHECK_CLOSE(dq, rq, nq, TOL, name);
  CHECK_CLOSE(dk, rk, nk, TOL, name);
  CHECK_CLOSE(dv, rv, nk, TOL, name);
}

/* Sizes past the kernels' 64 x 64 tiles (T, S > 64, D not a multiple of
 * 16). B * KVH = 2 takes the backward that splits dq from dk, dv (few work
 * items), B * KVH = 16 the one whose items own a whole (row, KV head). */
START_TEST(test_attention_large) {
  for (int causal = 0; causal <= 1; causal++) {
    attention_ref_case(1, 67, 83, 4, 2, 72, causal);
    attention_ref_case(8, 67, 83, 6, 2, 19, causal);
  }
}
END_TEST

/* The short path (every key in one 64-key tile) in each ISA build this CPU
 * runs (mmrt_attention_isa forces it): odd sizes, causal and not, GQA and
 * MQA, two query tiles, S = 64, the key mask; and the same bits for 1, 2
 * and 3 threads. */
START_TEST(test_attention_isas) {
  static const char *names[] = {"baseline", "AVX2", "AVX-512"};
  for (int isa = MMRT_ISA_BASE; isa <= MMRT_ISA_AVX512; isa++) {
    if (mmrt_attention_isa(isa) != isa) {
      printf("attention short path: no %s build on this CPU, not checked\n", names[isa]);
      continue;
    }
    attention_ref_case(3, 5, 7, 6, 2, 8, 1);    /* GQA, the queries the last 5 of 7 */
    attention_ref_case(2, 50, 50, 4, 4, 16, 0); /* ViTFashion's heads */
    attention_ref_case(8, 67, 61, 6, 2, 19, 1); /* two query tiles, B * KVH = 16 */
    attention_ref_case(1, 9, 64, 2, 1, 40, 0);  /* MQA, S = 64 */
    attention_ref_case(1, 70, 30, 2, 1, 16, 1); /* short forward, split backward */
    attention_mask_case(5, 7, 4, 2, 8, 0, 0);
    attention_mask_case(9, 37, 2, 1, 19, 1, 0);
    enum { B = 3, T = 21, S = 21, H = 4, KVH = 2, D = 24 };
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D, nl = (size_t)B * H * T;
    float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *gy = rnd(nq), *r[3][5];
    for (int t = 0; t < 3; t++) {
      omp_set_num_threads(t + 1);
      float *o = r[t][0] = fvec(nq), *l = r[t][1] = fvec(nl);
      mmrt_attention_fwd(o, l, q, k, v, B, T, S, H, KVH, D, 1, 0.3f);
      r[t][2] = fvec(nq), r[t][3] = fvec(nk), r[t][4] = fvec(nk);
      mmrt_attention_bwd(r[t][2], r[t][3], r[t][4], gy, q, k, v, o, l, B, T, S, H, KVH, D, 1, 0.3f,
                         0);
    }
    omp_set_num_threads(2);
    size_t len[5] = {nq, nl, nq, nk, nk};
    for (int t = 1; t < 3; t++)
      for (int i = 0; i < 5; i++)
        ck_assert_msg(!memcmp(r[0][i], r[t][i], len[i] * sizeof(float)),
                      "attention %s: output %d has other bits at %d threads", names[isa], i, t + 1);
  }
  ck_assert_int_ge(mmrt_attention_isa(-1), MMRT_ISA_BASE);
}
END_TEST

START_TEST(test_attention_empty_rows) {
  /* causal with T > S: the first queries see no key */
  attention_case(2, 5, 3, 4, 2, 8, 1);
}
END_TEST

/* ======================================================================
 * cross entropy, embedding
 * ====================================================================== */

typedef struct CeCtx {
  int N, V, ignore;
  const int32_t *labels;
  double *logits;
} CeCtx;

static double ce_loss(void *p) {
  CeCtx *c = p;
  double total = 0.0;
  int count = 0;
  for (int i = 0; i < c->N; i++) {
    if (c->labels[i] == c->ignore) continue;
    const double *r = c->logits + (size_t)i * c->V;
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < c->V; j++) m = fmax(m, r[j]);
    for (int j = 0; j < c->V; j++) s += exp(r[j] - m);
    total += m + log(s) - r[c->labels[i]];
    count++;
  }
  return count ? total / count : 0.0;
}

START_TEST(test_cross_entropy) {
  int N = 7, V = 11, ignore = -100;
  int32_t labels[7] = {3, -100, 0, 10, 5, -100, 3};
  size_t n = (size_t)N * V;
  float *logits = rnd_range(n, -3, 3);
  CeCtx c = {N, V, ignore, labels, tod(logits, n)};
  float loss, *lse = fvec(N);
  int count = mmrt_cross_entropy_fwd(&loss, lse, logits, labels, N, V, ignore);
  ck_assert_int_eq(count, 5);
  double rl = ce_loss(&c);
  CHECK_CLOSE(&loss, &rl, 1, TOL, "cross entropy loss");

  float dloss = 0.7f;
  float *dl = rnd(n);
  mmrt_cross_entropy_bwd(dl, logits, lse, labels, dloss, N, V, ignore, 0);
  double *g = dvec(n);
  fd_grad(ce_loss, &c, c.logits, n, g);
  for (size_t i = 0; i < n; i++) g[i] *= dloss;
  CHECK_CLOSE(dl, g, n, TOL, "cross entropy bwd vs fd");
  for (int j = 0; j < V; j++) ck_assert(dl[1 * V + j] == 0.0f); /* ignored row is exactly zero */
  mmrt_cross_entropy_bwd(dl, logits, lse, labels, dloss, N, V, ignore, 1);
  for (size_t i = 0; i < n; i++) g[i] *= 2;
  CHECK_CLOSE(dl, g, n, TOL, "cross entropy bwd accumulate");

  /* all rows ignored: count 0, loss 0, zero gradient */
  int32_t none[7] = {-100, -100, -100, -100, -100, -100, -100};
  count = mmrt_cross_entropy_fwd(&loss, lse, logits, none, N, V, ignore);
  ck_assert_int_eq(count, 0);
  ck_assert(loss == 0.0f);
  mmrt_cross_entropy_bwd(dl, logits, lse, none, dloss, N, V, ignore, 0);
  for (size_t i = 0; i < n; i++) ck_assert(dl[i] == 0.0f);

  /* wide rows and a wide logit range (the vectorised exp's range) */
  {
    int N2 = 3, V2 = 1001;
    int32_t lab2[3] = {0, 1000, 517};
    float *lg = rnd_range((size_t)N2 * V2, -40, 40), *lse2 = fvec(N2);
    CeCtx c2 = {N2, V2, ignore, lab2, tod(lg, (size_t)N2 * V2)};
    ck_assert_int_eq(mmrt_cross_entropy_fwd(&loss, lse2, lg, lab2, N2, V2, ignore), 3);
    double rl2 = ce_loss(&c2);
    CHECK_CLOSE(&loss, &rl2, 1, TOL, "cross entropy wide loss");
    float *dl2 = fvec((size_t)N2 * V2);
    double *rg2 = dvec((size_t)N2 * V2);
    mmrt_cross_entropy_bwd(dl2, lg, lse2, lab2, 1.0f, N2, V2, ignore, 0);
    for (int i = 0; i < N2; i++) {
      const double *r = c2.logits + (size_t)i * V2;
      double m = -INFINITY, sm = 0.0;
      for (int j = 0; j < V2; j++) m = fmax(m, r[j]);
      for (int j = 0; j < V2; j++) sm += exp(r[j] - m);
      for (int j = 0; j < V2; j++)
        rg2[(size_t)i * V2 + j] = (exp(r[j] - m) / sm - (j == lab2[i])) / N2;
    }
    CHECK_CLOSE(dl2, rg2, (size_t)N2 * V2, TOL, "cross entropy wide bwd");
  }

  /* a label out of range is bad data: -1, not a crash */
  int32_t bad[7] = {3, 1, 0, 11, 5, 2, 3};
  fprintf(stderr, "(an expected message follows)\n");
  ck_assert_int_eq(mmrt_cross_entropy_fwd(&loss, lse, logits, bad, N, V, ignore), -1);
}
END_TEST

START_TEST(test_embedding) {
  int N = 9, V = 7, C = 5;
  int32_t ids[9] = {3, 0, 6, 3, 3, 1, 6, 2, 0};
  float *table = rnd((size_t)V * C), *out = fvec((size_t)N * C);
  ck_assert_int_eq(mmrt_embedding_fwd(out, table, ids, N, V, C), 0);
  double *ref = dvec((size_t)N * C);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) ref[i * C + j] = table[ids[i] * C + j];
  CHECK_CLOSE(out, ref, (size_t)N * C, 0.0, "embedding fwd");

  float *gout = rnd((size_t)N * C), *dt = rnd((size_t)V * C);
  double *rdt = dvec((size_t)V * C);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) rdt[ids[i] * C + j] += gout[i * C + j];
  mmrt_embedding_bwd(dt, gout, ids, N, V, C, 0);
  CHECK_CLOSE(dt, rdt, (size_t)V * C, TOL, "embedding bwd");
  mmrt_embedding_bwd(dt, gout, ids, N, V, C, 1);
  for (int i = 0; i < V * C; i++) rdt[i] *= 2;
  CHECK_CLOSE(dt, rdt, (size_t)V * C, TOL, "embedding bwd accumulate");

  /* embedding_bwd_add: base + the gradient, f32 and bf16 base, bit for bit
   * the two ops in turn (a naive float add here), rows 4 and 5 untouched,
   * -0 in the base and the gradient, an out-of-range id skipped */
  int32_t ids2[9] = {3, 0, 6, 3, 3, 1, 6, -1, 0};
  float *base = rnd((size_t)V * C), *g0 = fvec((size_t)V * C), *sum = fvec((size_t)V * C);
  uint16_t *hb = talloc((size_t)V * C * sizeof(uint16_t));
  base[4 * C] = -0.0f, base[3 * C + 1] = -0.0f, gout[5 * C + 1] = -0.0f, base[1 * C + 1] = -0.0f;
  mmrt_f32_to_bf16(hb, base, (size_t)V * C);
  mmrt_embedding_bwd(g0, gout, ids2, N, V, C, 0);
  for (int bf = 0; bf <= 1; bf++) {
    for (int i = 0; i < V * C; i++) {
      float b = bf ? mmrt_bf16_widen(hb[i]) : base[i];
      sum[i] = b + g0[i];
    }
    mmrt_embedding_bwd_add(dt, bf ? (const void *)hb : base, bf, gout, ids2, N, V, C);
    ck_assert_msg(!memcmp(dt, sum, (size_t)V * C * sizeof(float)),
                  "embedding_bwd_add (%s base): other bits than embedding_bwd then add",
                  bf ? "bf16" : "f32");
  }

  int32_t bad[9] = {3, 0, 6, 3, 7, 1, 6, 2, 0};
  fprintf(stderr, "(an expected message follows)\n");
  ck_assert_int_eq(mmrt_embedding_fwd(out, table, bad, N, V, C), -1);
  for (int j = 0; j < C; j++) ck_assert(out[4 * C + j] == 0.0f);
}
END_TEST

/* ======================================================================
 * broadcasting binary ops and reductions
 * ====================================================================== */

typedef struct BinCtx {
  MmrtBinop op;
  int nd;
  const int *ys, *as, *bs;
  double *a, *b, *gy, *y;
} BinCtx;

static size_t shape_n(const int *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++) n *= (size_t)s[i];
  return n;
}

/* Offset in a broadcast operand of shape s for output multi-index idx. */
static size_t bc_off(const int *s, const int *idx, int nd) {
  size_t o = 0;
  for (int i = 0; i < nd; i++) o = o * (size_t)s[i] + (s[i] == 1 ? 0 : (size_t)idx[i]);
  return o;
}

static double bin_loss(void *p) {
  BinCtx *c = p;
  size_t n = shape_n(c->ys, c->nd);
  for (size_t e = 0; e < n; e++) {
    int idx[MMRT_MAX_DIMS];
    size_t r = e;
    for (int i = c->nd - 1; i >= 0; i--) {
      idx[i] = (int)(r % (size_t)c->ys[i]);
      r /= (size_t)c->ys[i];
    }
    double a = c->a[bc_off(c->as, idx, c->nd)], b = c->b[bc_off(c->bs, idx, c->nd)];
    switch (c->op) {
      case MMRT_BIN_ADD: c->y[e] = a + b; break;
      case MMRT_BIN_SUB: c->y[e] = a - b; break;
      case MMRT_BIN_MUL: c->y[e] = a * b; break;
      case MMRT_BIN_DIV: c->y[e] = a / b; break;
    }
  }
  return dotd(c->y, c->gy, n);
}

START_TEST(test_binary_broadcast) {
  static const int shapes[][3][4] = {
      /* y, a, b */
      {{3, 5, 4, 1}, {3, 5, 4, 1}, {1, 5, 1, 1}}, /* per-channel */
      {{3, 5, 4, 1}, {3, 1, 4, 1}, {3, 5, 1, 1}}, /* both broadcast */
      {{3, 5, 4, 7}, {3, 5, 4, 7}, {1, 1, 1, 1}}, /* scalar */
      {{3, 5, 4, 7}, {1, 5, 1, 7}, {3, 5, 4, 7}}, /* a broadcast */
      {{3, 5, 4, 7}, {3, 5, 4, 7}, {3, 5, 4, 7}}, /* same shape */
      {{3, 5, 1, 7}, {3, 1, 1, 7}, {1, 5, 1, 1}}, /* size-1 output dim */
      {{3, 5, 4, 7}, {3, 5, 4, 1}, {3, 5, 4, 7}}, /* a broadcast along the last dim */
  };
  int nd = 4;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int *ys = shapes[s][0], *as = shapes[s][1], *bs = shapes[s][2];
    size_t ny = shape_n(ys, nd), na = shape_n(as, nd), nb = shape_n(bs, nd);
    for (int op = MMRT_BIN_ADD; op <= MMRT_BIN_DIV; op++) {
      float *a = rnd(na), *b = rnd_range(nb, 0.5, 1.5), *gy = rnd(ny);
      BinCtx c = {op, nd, ys, as, bs, tod(a, na), tod(b, nb), tod(gy, ny), dvec(ny)};
      char name[64];
      snprintf(name, sizeof name, "binary case %zu op %d", s, op);
      float *y = fvec(ny);
      mmrt_binary_fwd(op, y, ys, a, as, b, bs, nd);
      bin_loss(&c);
      CHECK_CLOSE(y, c.y, ny, TOL, name);
      float *da = fvec(na), *db = fvec(nb);
      mmrt_binary_bwd(op, da, db, gy, ys, a, as, b, bs, nd, 0);
      double *ga = dvec(na), *gb = dvec(nb);
      fd_grad(bin_loss, &c, c.a, na, ga);
      fd_grad(bin_loss, &c, c.b, nb, gb);
      CHECK_CLOSE(da, ga, na, TOL, name);
      CHECK_CLOSE(db, gb, nb, TOL, name);
      mmrt_binary_bwd(op, da, NULL, gy, ys, a, as, b, bs, nd, 1);
      for (size_t i = 0; i < na; i++) ga[i] *= 2;
      CHECK_CLOSE(da, ga, na, TOL, name);
    }
  }
}
END_TEST

START_TEST(test_reduce_sum) {
  static const int cases[][3] = {{3, 5, 4}, {7, 13, 1}, {1, 13, 5}, {1, 1001, 1}, {2, 3, 600}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int outer = cases[k][0], n = cases[k][1], inner = cases[k][2];
    size_t nx = (size_t)outer * n * inner, ny = (size_t)outer * inner;
    for (int mean = 0; mean <= 1; mean++) {
      float *x = rnd(nx), *y = rnd(ny), *gy = rnd(ny), *dx = rnd(nx);
      double *ry = tod(y, ny), *rdx = dvec(nx);
      double *sum = dvec(ny);
      for (int o = 0; o < outer; o++)
        for (int i = 0; i < n; i++)
          for (int j = 0; j < inner; j++) {
            sum[o * inner + j] += x[((size_t)o * n + i) * inner + j];
            rdx[((size_t)o * n + i) * inner + j] = gy[o * inner + j] / (mean ? n : 1);
          }
      for (size_t j = 0; j < ny; j++) sum[j] /= mean ? n : 1;
      mmrt_reduce_sum(y, x, outer, n, inner, mean, 0);
      CHECK_CLOSE(y, sum, ny, TOL, "reduce_sum");
      mmrt_reduce_sum(y, x, outer, n, inner, mean, 1);
      for (size_t j = 0; j < ny; j++) ry[j] = 2 * sum[j];
      CHECK_CLOSE(y, ry, ny, TOL, "reduce_sum accumulate");
      mmrt_reduce_sum_bwd(dx, gy, outer, n, inner, mean, 0);
      CHECK_CLOSE(dx, rdx, nx, TOL, "reduce_sum bwd");
      mmrt_reduce_sum_bwd(dx, gy, outer, n, inner, mean, 1);
      for (size_t j = 0; j < nx; j++) rdx[j] *= 2;
      CHECK_CLOSE(dx, rdx, nx, TOL, "reduce_sum bwd accumulate");
    }
  }
  float x[5] = {1, 2, 3, 4, 5}, y[5];
  mmrt_axpy(y, x, 2.0f, 5, 0);
  mmrt_axpy(y, x, -1.0f, 5, 1);
  for (int i = 0; i < 5; i++) ck_assert(y[i] == x[i]);
  mmrt_fill(y, 0.25f, 5);
  for (int i = 0; i < 5; i++) ck_assert(y[i] == 0.25f);
}
END_TEST

/* ======================================================================
 * optimizers and gradient norm
 * ====================================================================== */

START_TEST(test_adamw) {
  size_t n = 37;
  float *p = rnd(n), *m = fvec(n), *v = fvec(n);
  double *rp = tod(p, n), *rm = dvec(n), *rv = dvec(n);
  double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
  for (int step = 1; step <= 3; step++) {
    float *g = rnd(n);
    mmrt_adamw_step(p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
                    (float)gs, step);
    for (size_t i = 0; i < n; i++) {
      double gi = g[i] * gs;
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
      rp[i] -= lr * (wd * rp[i] + mh / (sqrt(vh) + eps));
    }
  }
  CHECK_CLOSE(p, rp, n, TOL, "adamw param");
  CHECK_CLOSE(m, rm, n, TOL, "adamw m");
  CHECK_CLOSE(v, rv, n, TOL, "adamw v");
}
END_TEST

/* The update of a list of tensors in one call equals one call per tensor
 * bit for bit; sums split in fixed blocks (reduce_sum, sum_squares) have the
 * same bits for 1, 2 and 3 threads and equal a double-precision loop. */
START_TEST(test_thread_count_bits) {
  size_t sz[3] = {5, 70000, 1031};
  float wd[3] = {0.1f, 0.0f, 0.05f};
  float *p[3], *g[3], *m[3], *v[3], *p1[3], *m1[3], *v1[3];
  for (int k = 0; k < 3; k++) {
    p[k] = rnd(sz[k]), g[k] = rnd(sz[k]), m[k] = fvec(sz[k]), v[k] = fvec(sz[k]);
    p1[k] = fvec(sz[k]), m1[k] = fvec(sz[k]), v1[k] = fvec(sz[k]);
    memcpy(p1[k], p[k], sz[k] * sizeof(float));
  }
  for (int step = 1; step <= 2; step++) {
    mmrt_adamw_steps(p, (const float *const *)g, m, v, sz, wd, 3, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f,
                     step);
    for (int k = 0; k < 3; k++)
      mmrt_adamw_step(p1[k], g[k], m1[k], v1[k], sz[k], 1e-2f, 0.9f, 0.95f, 1e-8f, wd[k], 0.5f,
                      step);
  }
  for (int k = 0; k < 3; k++) {
    ck_assert_msg(!memcmp(p[k], p1[k], sz[k] * sizeof(float)), "adamw_steps param %d", k);
    ck_assert_msg(!memcmp(m[k], m1[k], sz[k] * sizeof(float)), "adamw_steps m %d", k);
    ck_assert_msg(!memcmp(v[k], v1[k], sz[k] * sizeof(float)), "adamw_steps v %d", k);
  }
  static const int cases[][3] = {{1, 3200, 64}, {2, 777, 40}, {1, 50001, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int outer = cases[c][0], n = cases[c][1], inner = cases[c][2];
    size_t nx = (size_t)outer * n * inner, ny = (size_t)outer * inner;
    float *x = rnd(nx), *y[3];
    double *ref = dvec(ny);
    for (int o = 0; o < outer; o++)
      for (int i = 0; i < n; i++)
        for (int j = 0; j < inner; j++) ref[o * inner + j] += x[((size_t)o * n + i) * inner + j];
    for (int t = 0; t < 3; t++) {
      omp_set_num_threads(t + 1);
      y[t] = fvec(ny);
      mmrt_reduce_sum(y[t], x, outer, n, inner, 0, 0);
    }
    CHECK_CLOSE(y[0], ref, ny, 1e-3, "reduce_sum in blocks");
    ck_assert_msg(!memcmp(y[0], y[1], ny * sizeof(float)) &&
                      !memcmp(y[0], y[2], ny * sizeof(float)),
                  "reduce_sum %d x %d x %d: other bits for another thread count", outer, n, inner);
  }
  const float *bufs[3] = {p[0], p[1], p[2]};
  double ss[3], rs = 0;
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < sz[k]; i++) rs += (double)p[k][i] * p[k][i];
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(t + 1);
    ss[t] = mmrt_sum_squares(bufs, sz, 3);
  }
  omp_set_num_threads(2);
  ck_assert_msg(fabs(ss[0] - rs) <= 1e-12 * rs, "sum_squares %.17g vs %.17g", ss[0], rs);
  ck_assert_msg(ss[0] == ss[1] && ss[0] == ss[2],
                "sum_squares: other bits for another thread count");
}
END_TEST

/* A linear's gradients that mmrt_dnnl.c gives to dnnl_sgemm in fixed row
 * blocks (a wide output, N >= 32768: a head over its vocabulary; a product
 * of 1.34e8 FLOPs or more) equal a double loop, accumulate, and have the
 * same bits for 1, 2 and 3 threads. */
static void linear_sgemm_bits(int rows, int K, int N, const char *what) {
  size_t nx = (size_t)rows * K, nw = (size_t)N * K, ny = (size_t)rows * N;
  float *x = rnd(nx), *w = rnd(nw), *gy = rnd(ny);
  double *rdx = dvec(nx), *rdw = dvec(nw);
  for (int r = 0; r < rows; r++)
    for (int n = 0; n < N; n++) {
      double g = gy[(size_t)r * N + n];
      for (int k = 0; k < K; k++) {
        rdx[(size_t)r * K + k] += g * w[(size_t)n * K + k];
        rdw[(size_t)n * K + k] += g * x[(size_t)r * K + k];
      }
    }
  float *dx[3], *dw[3];
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(t + 1);
    dx[t] = fvec(nx), dw[t] = fvec(nw);
    mmrt_linear_bwd_data(MMRT_F32, dx[t], gy, w, rows, K, N, 0);
    mmrt_linear_bwd_weights(MMRT_F32, dw[t], NULL, gy, x, rows, K, N, 0);
    ck_assert_msg(!memcmp(dx[0], dx[t], nx * sizeof(float)) &&
                      !memcmp(dw[0], dw[t], nw * sizeof(float)),
                  "%s linear: other bits for %d threads", what, t + 1);
  }
  omp_set_num_threads(2);
  CHECK_CLOSE(dx[0], rdx, nx, TOL, what);
  CHECK_CLOSE(dw[0], rdw, nw, TOL, what);
  mmrt_linear_bwd_data(MMRT_F32, dx[0], gy, w, rows, K, N, 1);
  mmrt_linear_bwd_weights(MMRT_F32, dw[0], NULL, gy, x, rows, K, N, 1);
  for (size_t i = 0; i < nx; i++) rdx[i] *= 2;
  for (size_t i = 0; i < nw; i++) rdw[i] *= 2;
  CHECK_CLOSE(dx[0], rdx, nx, TOL, what);
  CHECK_CLOSE(dw[0], rdw, nw, TOL, what);
}

START_TEST(test_linear_sgemm_bits) {
  linear_sgemm_bits(6, 9, 32771, "wide");
  linear_sgemm_bits(130, 520, 1000, "large"); /* 1.352e8 FLOPs, 2 row blocks */
}
END_TEST

/* The optimizers note a parameter they wrote that is not finite
 * (mmrt_opt_nonfinite_take, the trainer's check after each step): a NaN or
 * infinite gradient, in one element of a tensor split over 1 to 3 threads,
 * is seen once and cleared; a finite step notes nothing. */
START_TEST(test_opt_nonfinite) {
  size_t n = 70000; /* over ADAMW_PAR_MIN: a parallel region */
  float *p = rnd(n), *m = fvec(n), *v = fvec(n), *g = rnd(n), *mom = fvec(n);
  const size_t sizes[1] = {n};
  const float wd[1] = {0.01f};
  mmrt_opt_nonfinite_take();
  for (int t = 1; t <= 3; t++) {
    omp_set_num_threads(t);
    float *const ps[1] = {p}, *const ms[1] = {m}, *const vs[1] = {v};
    const float *const gs[1] = {g};
    mmrt_adamw_steps(ps, gs, ms, vs, sizes, wd, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 1.0f, t);
    ck_assert_msg(!mmrt_opt_nonfinite_take(), "adamw: a finite step noted (%d threads)", t);
    mmrt_sgd_step(p, g, mom, n, 1e-3f, 0.9f, 0.0f, 1.0f, 0);
    ck_assert_msg(!mmrt_opt_nonfinite_take(), "sgd: a finite step noted (%d threads)", t);
  }
  omp_set_num_threads(2);
  float *q = fcopy(p, n), *qm = fcopy(m, n), *qv = fcopy(v, n);
  g[n - 3] = NAN;
  float *const ps[1] = {q}, *const ms[1] = {qm}, *const vs[1] = {qv};
  const float *const gs[1] = {g};
  mmrt_adamw_steps(ps, gs, ms, vs, sizes, wd, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 1.0f, 5);
  ck_assert_msg(mmrt_opt_nonfinite_take(), "adamw: a NaN gradient's update not noted");
  ck_assert_msg(!mmrt_opt_nonfinite_take(), "the note not cleared");
  g[n - 3] = 0.5f, g[7] = INFINITY;
  mmrt_sgd_step(p, g, NULL, n, 1e-3f, 0.0f, 0.0f, 1.0f, 0);
  ck_assert_msg(mmrt_opt_nonfinite_take(), "sgd: an infinite gradient's update not noted");
}
END_TEST

START_TEST(test_sgd) {
  size_t n = 37;
  for (int nesterov = 0; nesterov <= 1; nesterov++) {
    float *p = rnd(n), *mom = fvec(n);
    double *rp = tod(p, n), *rb = dvec(n);
    double lr = 0.05, mu = 0.9, wd = 1e-3, gs = 2.0;
    for (int step = 1; step <= 3; step++) {
      float *g = rnd(n);
      mmrt_sgd_step(p, g, mom, n, (float)lr, (float)mu, (float)wd, (float)gs, nesterov);
      for (size_t i = 0; i < n; i++) {
        double gi = g[i] * gs + wd * rp[i];
        rb[i] = mu * rb[i] + gi;
        rp[i] -= lr * (nesterov ? gi + mu * rb[i] : rb[i]);
      }
    }
    CHECK_CLOSE(p, rp, n, TOL, "sgd param");
    CHECK_CLOSE(mom, rb, n, TOL, "sgd momentum");
  }
  /* no momentum buffer */
  float p[3] = {1, 2, 3}, g[3] = {1, 1, 1};
  mmrt_sgd_step(p, g, NULL, 3, 0.5f, 0.0f, 0.0f, 1.0f, 0);
  ck_assert(p[0] == 0.5f && p[1] == 1.5f && p[2] == 2.5f);
}
END_TEST

START_TEST(test_grad_norm) {
  size_t sizes[3] = {37, 1, 1001};
  const float *bufs[3];
  double ss = 0.0;
  for (int k = 0; k < 3; k++) {
    float *b = rnd(sizes[k]);
    bufs[k] = b;
    for (size_t i = 0; i < sizes[k]; i++) ss += (double)b[i] * b[i];
  }
  double nrm = mmrt_grad_norm(bufs, sizes, 3);
  ck_assert_double_eq_tol(mmrt_sum_squares(bufs, sizes, 3), ss, 1e-9 * ss);
  ck_assert_double_eq_tol(nrm, sqrt(ss), 1e-9 * sqrt(ss));
  ck_assert_float_eq(mmrt_clip_scale(nrm, 2 * nrm), 1.0f);
  ck_assert_float_eq(mmrt_clip_scale(nrm, 0.0), 1.0f);
  ck_assert_float_eq_tol(mmrt_clip_scale(nrm, nrm / 4), 0.25f, 1e-5f);
  ck_assert(mmrt_grad_norm(bufs, sizes, 0) == 0.0);
}
END_TEST

/* ---------------------------------------------------------------------- */

static Suite *kernels_suite(void) {
  Suite *s = suite_create("rt_kernels");
  TCase *tc = tcase_create("dnnl");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_matmul_flags);
  tcase_add_test(tc, test_linear);
  tcase_add_test(tc, test_conv2d);
  tcase_add_test(tc, test_conv2d_grouped);
  tcase_add_test(tc, test_conv3d);
  tcase_add_test(tc, test_conv_blocked);
  tcase_add_test(tc, test_conv_patchify);
  tcase_add_test(tc, test_softmax);
  tcase_add_test(tc, test_eltwise);
  suite_add_tcase(s, tc);

  /* Its own case, so that CK_FORK=no CK_RUN_CASE=dnnl runs the rest. */
  tc = tcase_create("abort");
  tcase_add_test_raise_signal(tc, test_bad_dtype_aborts, SIGABRT);
  suite_add_tcase(s, tc);

  tc = tcase_create("ops");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_layernorm);
  tcase_add_test(tc, test_layernorm_axis);
  tcase_add_test(tc, test_rmsnorm);
  tcase_add_test(tc, test_groupnorm);
  tcase_add_test(tc, test_rope);
  tcase_add_test(tc, test_attention_causal_gqa);
  tcase_add_test(tc, test_attention_causal_prefix);
  tcase_add_test(tc, test_attention_noncausal);
  tcase_add_test(tc, test_attention_empty_rows);
  tcase_add_test(tc, test_attention_large);
  tcase_add_test(tc, test_attention_mask);
  tcase_add_test(tc, test_attention_segments);
  tcase_add_test(tc, test_attention_isas);
  tcase_add_test(tc, test_cross_entropy);
  tcase_add_test(tc, test_embedding);
  tcase_add_test(tc, test_binary_broadcast);
  tcase_add_test(tc, test_reduce_sum);
  tcase_add_test(tc, test_adamw);
  tcase_add_test(tc, test_opt_nonfinite);
  tcase_add_test(tc, test_sgd);
  tcase_add_test(tc, test_thread_count_bits);
  tcase_add_test(tc, test_linear_sgemm_bits);
  tcase_add_test(tc, test_grad_norm);
  tcase_add_test(tc, test_rope_pos);
  tcase_add_test(tc, test_place);
  tcase_add_test(tc, test_attention_cached);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(kernels_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
