/* check_rt_bf16.c: libmmrt's bf16 kernels (mmrt_bf16.c, mmrt_dnnl.c) against
 * naive references in double.
 *
 * The reference rounds every input to bf16 itself (nearest, ties to even,
 * with frexp/nearbyint: independent of the runtime's bit trick), sums the
 * products in double and rounds the result to bf16. The kernel sums in fp32
 * in another order, so a result may land on the neighbouring bf16: the
 * tolerance is one bf16 step of the result (2^-7 relative) plus fp32 noise
 * of the sum of |terms|. Whichever path this process runs (printed:
 * oneDNN's bf16 primitives, or "emulated" when oneDNN makes none, e.g. under
 * DNNL_MAX_CPU_ISA=AVX2, as tests/bf16.sh runs it too) must pass. */
#include "mmrt_kernels.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static double urand(void) { /* [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return 2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0;
}

/* x rounded to bf16 (8 significant bits), ties to even */
static double rbf(double x) {
  if (x == 0 || !isfinite(x)) return x;
  int e;
  double m = frexp(x, &e); /* [0.5, 1) */
  return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

static uint16_t *bvec(size_t n, double *ref) { /* random bf16 values and their doubles */
  uint16_t *h = malloc(n * sizeof *h);
  float *f = malloc(n * sizeof *f);
  ck_assert(h && f);
  for (size_t i = 0; i < n; i++) f[i] = (float)urand();
  mmrt_f32_to_bf16(h, f, n);
  for (size_t i = 0; i < n; i++) ref[i] = rbf(f[i]);
  free(f);
  return h;
}

static double *dvec(size_t n) {
  double *d = calloc(n ? n : 1, sizeof *d);
  ck_assert_ptr_nonnull(d);
  return d;
}

/* got (bf16) against ref (exact sums) with |terms| sums mag */
static void check_close(const char *what, const uint16_t *got, const double *ref, const double *mag,
                        size_t n) {
  float *g = malloc(n * sizeof *g);
  ck_assert_ptr_nonnull(g);
  mmrt_bf16_to_f32(g, got, n);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double tol = ldexp(fabs(ref[i]), -7) + 1e-6 * mag[i] + 1e-30;
    double r = fabs(g[i] - rbf(ref[i])) / tol;
    if (r > worst) worst = r, at = i;
  }
  ck_assert_msg(worst <= 1.0, "%s: element %zu is %.9g, the reference %.9g (%.2f of the tolerance)",
                what, at, (double)g[at], rbf(ref[at]), worst);
  free(g);
}

/* got (f32, from bf16 operands) against ref: fp32 sums of exact products */
static void check_close_f32(const char *what, const float *got, const double *ref,
                            const double *mag, size_t n) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double r = fabs(got[i] - ref[i]) / (1e-5 * mag[i] + 1e-30);
    if (r > worst) worst = r, at = i;
  }
  ck_assert_msg(worst <= 1.0, "%s: element %zu is %.9g, the reference %.9g (%.2f of the tolerance)",
                what, at, (double)got[at], ref[at], worst);
}

START_TEST(test_convert) {
  float f[8] = {1.0f,
                1.00390625f /* 1 + 2^-8: a tie, to even (1) */,
                1.01171875f /* 1 + 3 * 2^-8: a tie, to even (1 + 2^-6) */,
                -3.14159265f,
                1e-40f /* subnormal */,
                INFINITY,
                -0.0f,
                NAN};
  uint16_t h[8];
  float back[8];
  mmrt_f32_to_bf16(h, f, 8);
  mmrt_bf16_to_f32(back, h, 8);
  for (int i = 0; i < 6; i++)
    ck_assert_msg(back[i] == (float)rbf(f[i]) || (i == 4 && fabs(back[i] - f[i]) < 1e-41),
                  "f32 %.9g -> bf16 -> %.9g, want %.9g", (double)f[i], (double)back[i], rbf(f[i]));
  ck_assert_uint_eq(h[0], 0x3f80);
  ck_assert_uint_eq(h[1], 0x3f80);
  ck_assert_uint_eq(h[2], 0x3f82);
  ck_assert_uint_eq(h[6], 0x8000);
  ck_assert_msg(isnan(back[7]), "NaN came back as %g", (double)back[7]);
  for (int i = 0; i < 1000; i++) { /* random values: exactly the reference's rounding */
    float x = (float)(urand() * 1000.0);
    uint16_t b;
    float y;
    mmrt_f32_to_bf16(&b, &x, 1);
    mmrt_bf16_to_f32(&y, &b, 1);
    ck_assert_msg(y == (float)rbf(x), "%.9g -> %.9g, want %.9g", (double)x, (double)y, rbf(x));
  }
}
END_TEST

/* C = op(A) op(B) over batches, with the flags of mmrt_matmul */
static void matmul_case(int batch, int M, int N, int K, int flags) {
  int bb = (flags & MMRT_MM_BCAST_B) ? 1 : batch;
  size_t na = (size_t)batch * M * K, nb = (size_t)bb * K * N, nc = (size_t)batch * M * N;
  double *a = dvec(na), *b = dvec(nb), *c0 = dvec(nc), *ref = dvec(nc), *mag = dvec(nc);
  uint16_t *A = bvec(na, a), *B = bvec(nb, b), *C = bvec(nc, c0);
  for (int p = 0; p < batch; p++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = 0, m = 0;
        for (int k = 0; k < K; k++) {
          double x = (flags & MMRT_MM_TRANS_A) ? a[(size_t)p * M * K + (size_t)k * M + i]
                                               : a[(size_t)p * M * K + (size_t)i * K + k];
          size_t ob = (size_t)((flags & MMRT_MM_BCAST_B) ? 0 : p) * K * N;
          double y =
              (flags & MMRT_MM_TRANS_B) ? b[ob + (size_t)j * K + k] : b[ob + (size_t)k * N + j];
          s += x * y;
          m += fabs(x * y);
        }
        size_t o = (size_t)p * M * N + (size_t)i * N + j;
        if (flags & MMRT_MM_ACCUM) s += c0[o], m += fabs(c0[o]);
        ref[o] = s;
        mag[o] = m;
      }
  mmrt_matmul(MMRT_BF16, C, A, B, batch, M, N, K, 1.0f, flags);
  char what[80];
  snprintf(what, sizeof what, "bf16 matmul %dx%dx%dx%d flags %d", batch, M, N, K, flags);
  check_close(what, C, ref, mag, nc);
  free(a), free(b), free(c0), free(ref), free(mag), free(A), free(B), free(C);
}

START_TEST(test_matmul) {
  printf("bf16 path: %s\n", mmrt_bf16_path());
  matmul_case(1, 37, 29, 53, 0);
  matmul_case(3, 17, 31, 19, MMRT_MM_TRANS_A);
  matmul_case(2, 13, 11, 70, MMRT_MM_TRANS_B | MMRT_MM_BCAST_B);
  matmul_case(1, 9, 21, 33, MMRT_MM_ACCUM);
  matmul_case(1, 64, 256, 64, MMRT_MM_TRANS_B | MMRT_MM_BCAST_B); /* a GPT2Tiny fc1 */
}
END_TEST

/* The three linear kernels: y = x w^T, dx = dy w, dw = dy^T x */
START_TEST(test_linear) {
  int R = 23, K = 40, N = 17;
  double *x = dvec((size_t)R * K), *w = dvec((size_t)N * K), *dy = dvec((size_t)R * N);
  uint16_t *X = bvec((size_t)R * K, x), *W = bvec((size_t)N * K, w), *DY = bvec((size_t)R * N, dy);
  uint16_t *Y = calloc((size_t)R * N, 2), *DX = calloc((size_t)R * K, 2),
           *DW = calloc((size_t)N * K, 2);
  double *ry = dvec((size_t)R * N), *my = dvec((size_t)R * N), *rdx = dvec((size_t)R * K),
         *mdx = dvec((size_t)R * K), *rdw = dvec((size_t)N * K), *mdw = dvec((size_t)N * K);
  for (int r = 0; r < R; r++)
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++) {
        double a = x[r * K + k] * w[n * K + k], b = dy[r * N + n] * w[n * K + k],
               c = dy[r * N + n] * x[r * K + k];
        ry[r * N + n] += a, my[r * N + n] += fabs(a);
        rdx[r * K + k] += b, mdx[r * K + k] += fabs(b);
        rdw[n * K + k] += c, mdw[n * K + k] += fabs(c);
      }
  mmrt_linear_fwd(MMRT_BF16, Y, X, W, NULL, R, K, N);
  mmrt_linear_bwd_data(MMRT_BF16, DX, DY, W, R, K, N, 0);
  mmrt_linear_bwd_weights(MMRT_BF16, DW, NULL, DY, X, R, K, N, 0);
  check_close("bf16 linear y", Y, ry, my, (size_t)R * N);
  check_close("bf16 linear dx", DX, rdx, mdx, (size_t)R * K);
  check_close("bf16 linear dw", DW, rdw, mdw, (size_t)N * K);
  /* bf16 operands into f32 results (codegen's fold of the cast back and the
   * bias add), against the unrounded sums */
  float *y32 = calloc((size_t)R * N, 4), *dx32 = calloc((size_t)R * K, 4),
        *dw32 = calloc((size_t)N * K, 4), *bias = calloc((size_t)N, 4);
  for (int n = 0; n < N; n++) bias[n] = 0.25f * (float)(n - 8);
  mmrt_linear_fwd(MMRT_BF16_F32, y32, X, W, bias, R, K, N);
  mmrt_linear_bwd_data(MMRT_BF16_F32, dx32, DY, W, R, K, N, 0);
  mmrt_linear_bwd_weights(MMRT_BF16_F32, dw32, NULL, DY, X, R, K, N, 0);
  for (int r = 0; r < R; r++)
    for (int n = 0; n < N; n++) ry[r * N + n] += bias[n], my[r * N + n] += fabs(bias[n]);
  check_close_f32("bf16 linear into f32 y (+ bias)", y32, ry, my, (size_t)R * N);
  check_close_f32("bf16 linear into f32 dx", dx32, rdx, mdx, (size_t)R * K);
  check_close_f32("bf16 linear into f32 dw", dw32, rdw, mdw, (size_t)N * K);
  free(y32), free(dx32), free(dw32), free(bias);
  free(x), free(w), free(dy), free(X), free(W), free(DY), free(Y), free(DX), free(DW);
  free(ry), free(my), free(rdx), free(mdx), free(rdw), free(mdw);
}
END_TEST

/* conv2d forward, data and weight gradients against a double loop */
static void conv2d_case(int N, int C, int OC, int H, int W, int kh, int kw, int sh, int sw, int ph,
                        int pw) {
  MmrtConv cv = {.N = N, .C = C, .OC = OC, .groups = 1};
  cv.in[0] = H, cv.in[1] = W, cv.k[0] = kh, cv.k[1] = kw, cv.stride[0] = sh, cv.stride[1] = sw;
  cv.pad_lo[0] = cv.pad_hi[0] = ph, cv.pad_lo[1] = cv.pad_hi[1] = pw;
  int OH = mmrt_conv_out_size(H, kh, sh, ph, ph), OW = mmrt_conv_out_size(W, kw, sw, pw, pw);
  size_t nx = (size_t)cv.N * cv.C * H * W, nw = (size_t)cv.OC * cv.C * kh * kw,
         ny = (size_t)cv.N * cv.OC * OH * OW;
  double *x = dvec(nx), *w = dvec(nw), *dy = dvec(ny);
  uint16_t *X = bvec(nx, x), *Wt = bvec(nw, w), *DY = bvec(ny, dy);
  uint16_t *Y = calloc(ny, 2), *DX = calloc(nx, 2), *DW = calloc(nw, 2);
  double *ry = dvec(ny), *my = dvec(ny), *rdx = dvec(nx), *mdx = dvec(nx), *rdw = dvec(nw),
         *mdw = dvec(nw);
  for (int n = 0; n < cv.N; n++)
    for (int o = 0; o < cv.OC; o++)
      for (int i = 0; i < OH; i++)
        for (int j = 0; j < OW; j++)
          for (int c = 0; c < cv.C; c++)
            for (int a = 0; a < kh; a++)
              for (int b = 0; b < kw; b++) {
                int hi = i * sh - ph + a, wi = j * sw - pw + b;
                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                size_t yi = (((size_t)n * cv.OC + o) * OH + i) * OW + j;
                size_t xi = (((size_t)n * cv.C + c) * H + hi) * W + wi;
                size_t wi_ = (((size_t)o * cv.C + c) * kh + a) * kw + b;
                ry[yi] += x[xi] * w[wi_], my[yi] += fabs(x[xi] * w[wi_]);
                rdx[xi] += dy[yi] * w[wi_], mdx[xi] += fabs(dy[yi] * w[wi_]);
                rdw[wi_] += dy[yi] * x[xi], mdw[wi_] += fabs(dy[yi] * x[xi]);
              }
  mmrt_conv2d_fwd(MMRT_BF16, &cv, Y, X, Wt, NULL);
  mmrt_conv2d_bwd_data(MMRT_BF16, &cv, DX, DY, Wt, 0);
  mmrt_conv2d_bwd_weights(MMRT_BF16, &cv, DW, NULL, DY, X, 0);
  check_close("bf16 conv2d y", Y, ry, my, ny);
  check_close("bf16 conv2d dx", DX, rdx, mdx, nx);
  check_close("bf16 conv2d dw", DW, rdw, mdw, nw);
  free(x), free(w), free(dy), free(X), free(Wt), free(DY), free(Y), free(DX), free(DW);
  free(ry), free(my), free(rdx), free(mdx), free(rdw), free(mdw);
}

/* N 2, C 3, OC 4, 9x7 input, kernel 3x2, stride 2x1, padding 1x0; and
 * 16 channels in and out over 96x96 (2.1e7 multiply-adds: on AMX the
 * bf16 weight gradient runs on the tiles, the small one in fp32, see
 * mmrt_dnnl.c bwd_w_in_f32) */
START_TEST(test_conv2d) {
  conv2d_case(2, 3, 4, 9, 7, 3, 2, 2, 1, 1, 0);
  conv2d_case(1, 16, 16, 96, 96, 3, 3, 1, 1, 1, 1);
}
END_TEST

/* attention on bf16 q, k, v against softmax attention in double (GQA: H 4
 * query heads on KVH 2), forward and backward, causal and not; S = 70 is
 * two key tiles, and B * KVH = 16 the work items that own a whole (row, KV
 * head) (for bf16 results only with one key tile) */
static void attention_case(int causal, int B, int S) {
  int T = 5, H = 4, KVH = 2, D = 8;
  double scale = 1.0 / sqrt(D);
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D;
  double *q = dvec(nq), *k = dvec(nk), *v = dvec(nk), *dout = dvec(nq);
  uint16_t *Q = bvec(nq, q), *K = bvec(nk, k), *V = bvec(nk, v), *DO = bvec(nq, dout);
  uint16_t *O = calloc(nq, 2), *DQ = calloc(nq, 2), *DK = calloc(nk, 2), *DV = calloc(nk, 2);
  float *lse = calloc((size_t)B * H * T, sizeof(float));
  double *ro = dvec(nq), *mo = dvec(nq), *rdq = dvec(nq), *mdq = dvec(nq), *rdk = dvec(nk),
         *mdk = dvec(nk), *rdv = dvec(nk), *mdv = dvec(nk);
  double *p = dvec((size_t)S), *dp = dvec((size_t)S);
#define QI(b, t, h, d) ((((size_t)(b) * T + (t)) * H + (h)) * D + (d))
#define KI(b, s, g, d) ((((size_t)(b) * S + (s)) * KVH + (g)) * D + (d))
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        int g = h / (H / KVH), last = causal ? t + (S - T) : S - 1;
        double mx = -INFINITY, sum = 0, dd = 0;
        for (int s = 0; s <= last; s++) {
          double sc = 0;
          for (int d = 0; d < D; d++) sc += q[QI(b, t, h, d)] * k[KI(b, s, g, d)];
          p[s] = sc * scale;
          mx = fmax(mx, p[s]);
        }
        for (int s = 0; s <= last; s++) sum += p[s] = exp(p[s] - mx);
        for (int s = 0; s <= last; s++) p[s] /= sum;
        for (int d = 0; d < D; d++) {
          double o = 0, m = 0;
          for (int s = 0; s <= last; s++)
            o += p[s] * v[KI(b, s, g, d)], m += fabs(p[s] * v[KI(b, s, g, d)]);
          ro[QI(b, t, h, d)] = o, mo[QI(b, t, h, d)] = m;
          dd += dout[QI(b, t, h, d)] * rbf(o); /* the kernel's D uses the saved (bf16) out */
        }
        for (int s = 0; s <= last; s++) {
          dp[s] = 0;
          for (int d = 0; d < D; d++) dp[s] += dout[QI(b, t, h, d)] * v[KI(b, s, g, d)];
          double ds = p[s] * (dp[s] - dd) * scale;
          for (int d = 0; d < D; d++) {
            rdq[QI(b, t, h, d)] += ds * k[KI(b, s, g, d)];
            mdq[QI(b, t, h, d)] += fabs(ds * k[KI(b, s, g, d)]) + fabs(p[s] * dd * scale);
            rdk[KI(b, s, g, d)] += ds * q[QI(b, t, h, d)];
            mdk[KI(b, s, g, d)] += fabs(ds * q[QI(b, t, h, d)]) + fabs(p[s] * dd * scale);
            rdv[KI(b, s, g, d)] += p[s] * dout[QI(b, t, h, d)];
            mdv[KI(b, s, g, d)] += fabs(p[s] * dout[QI(b, t, h, d)]);
          }
        }
      }
#undef QI
#undef KI
  mmrt_attention_bf16_fwd(O, lse, Q, K, V, B, T, S, H, KVH, D, causal, (float)scale);
  check_close(causal ? "bf16 attention out (causal)" : "bf16 attention out", O, ro, mo, nq);
  mmrt_attention_bf16_bwd(DQ, DK, DV, DO, Q, K, V, O, lse, B, T, S, H, KVH, D, causal, (float)scale,
                          0);
  check_close("bf16 attention dq", DQ, rdq, mdq, nq);
  check_close("bf16 attention dk", DK, rdk, mdk, nk);
  check_close("bf16 attention dv", DV, rdv, mdv, nk);
  free(q), free(k), free(v), free(dout), free(Q), free(K), free(V), free(DO), free(O), free(DQ);
  free(DK), free(DV), free(lse), free(ro), free(mo), free(rdq), free(mdq), free(rdk), free(mdk);
  free(rdv), free(mdv), free(p), free(dp);
}

START_TEST(test_attention) {
  attention_case(0, 2, 7);
  attention_case(1, 2, 7);
  attention_case(1, 8, 70);
  attention_case(0, 8, 70);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_bf16");
  TCase *tc = tcase_create("bf16");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_convert);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_linear);
  tcase_add_test(tc, test_conv2d);
  tcase_add_test(tc, test_attention);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  mmrt_kernels_shutdown();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
