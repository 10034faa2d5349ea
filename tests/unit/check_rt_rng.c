/* check_rt_rng.c: Philox4x32-10 against the Random123 known answers, split
 * invariance of the fills, moments, and the epoch permutation. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_rng.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                uint32_t e0, uint32_t e1, uint32_t e2, uint32_t e3) {
  uint32_t key[2] = {k0, k1}, ctr[4] = {c0, c1, c2, c3}, out[4];
  mmrt_philox(key, ctr, out);
  ck_assert_msg(out[0] == e0 && out[1] == e1 && out[2] == e2 && out[3] == e3,
                "philox got %08x %08x %08x %08x, want %08x %08x %08x %08x", out[0], out[1], out[2],
                out[3], e0, e1, e2, e3);
}

START_TEST(philox_known_answers) {
  kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
  kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
      0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
  kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
      0x94fdcceb, 0x5001e420, 0x24126ea1);
}
END_TEST

START_TEST(u32_maps_to_blocks) {
  /* element i of stream s = word i%4 of philox(seed, (i/4, s)) */
  uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
  uint32_t key[2] = {0x89abcdef, 0x01234567};
  uint32_t ctr[4] = {5, 0, 0x76543210, 0xfedcba98}, out[4];
  mmrt_philox(key, ctr, out);
  for (int w = 0; w < 4; w++) ck_assert_uint_eq(mmrt_rng_u32(seed, stream, 20 + w), out[w]);
}
END_TEST

/* Any split of [0, n) into pieces gives the serial values bit for bit. */
START_TEST(split_invariance) {
  enum { N = 1003 };
  static float ser_u[N], ser_n[N], par_u[N], par_n[N];
  static uint8_t ser_m[N], par_m[N];
  uint64_t seed = 42, stream = mmrt_rng_stream("init/w", 0);
  mmrt_rng_uniform(ser_u, seed, stream, 0, N);
  mmrt_rng_normal(ser_n, seed, stream, 0, N, 0.5f, 0.02f);
  mmrt_rng_keep_mask(ser_m, seed, stream, 0, N, 0.1f);
  for (int ranks = 2; ranks <= 7; ranks++) {
    memset(par_u, 0, sizeof par_u);
    memset(par_n, 0, sizeof par_n);
    memset(par_m, 7, sizeof par_m);
    for (int r = 0; r < ranks; r++) {
      uint64_t lo = (uint64_t)N * r / ranks, hi = (uint64_t)N * (r + 1) / ranks;
      mmrt_rng_uniform(par_u + lo, seed, stream, lo, hi);
      mmrt_rng_normal(par_n + lo, seed, stream, lo, hi, 0.5f, 0.02f);
      mmrt_rng_keep_mask(par_m + lo, seed, stream, lo, hi, 0.1f);
    }
    ck_assert(memcmp(ser_u, par_u, sizeof ser_u) == 0);
    ck_assert(memcmp(ser_n, par_n, sizeof ser_n) == 0);
    ck_assert(memcmp(ser_m, par_m, sizeof ser_m) == 0);
  }
  for (int i = 0; i < N; i++) ck_assert(ser_u[i] == mmrt_rng_uniform_at(seed, stream, (uint64_t)i));
  /* another stream or seed differs */
  float other[8];
  mmrt_rng_uniform(other, seed, stream + 1, 0, 8);
  ck_assert(memcmp(other, ser_u, sizeof other) != 0);
  mmrt_rng_uniform(other, seed + 1, stream, 0, 8);
  ck_assert(memcmp(other, ser_u, sizeof other) != 0);
}
END_TEST

START_TEST(moments) {
  enum { N = 200000 };
  float *u = malloc(N * sizeof *u), *z = malloc(N * sizeof *z);
  mmrt_rng_uniform(u, 7, 1, 0, N);
  mmrt_rng_normal(z, 7, 2, 0, N, 0.0f, 1.0f);
  double su = 0, su2 = 0, sz = 0, sz2 = 0, sz4 = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < N; i++) {
    su += u[i], su2 += (double)u[i] * u[i];
    sz += z[i], sz2 += (double)z[i] * z[i], sz4 += pow(z[i], 4);
    umin = fminf(umin, u[i]), umax = fmaxf(umax, u[i]);
    ck_assert(isfinite(z[i]));
  }
  double mu = su / N, vu = su2 / N - mu * mu, mz = sz / N, vz = sz2 / N - mz * mz;
  ck_assert(umin >= 0.0f && umax < 1.0f);
  ck_assert_msg(fabs(mu - 0.5) < 0.005, "uniform mean %g", mu);
  ck_assert_msg(fabs(vu - 1.0 / 12) < 0.002, "uniform var %g", vu);
  ck_assert_msg(fabs(mz) < 0.01, "normal mean %g", mz);
  ck_assert_msg(fabs(vz - 1.0) < 0.02, "normal var %g", vz);
  ck_assert_msg(fabs(sz4 / N - 3.0) < 0.1, "normal 4th moment %g", sz4 / N);

  /* mean and std are applied */
  mmrt_rng_normal(z, 7, 2, 0, N, 3.0f, 0.5f);
  double s = 0, s2 = 0;
  for (int i = 0; i < N; i++) s += z[i], s2 += (double)z[i] * z[i];
  ck_assert(fabs(s / N - 3.0) < 0.01);
  ck_assert(fabs(sqrt(s2 / N - (s / N) * (s / N)) - 0.5) < 0.01);

  /* keep rate of the dropout mask */
  uint8_t *m = malloc(N);
  mmrt_rng_keep_mask(m, 7, 3, 0, N, 0.25f);
  long kept = 0;
  for (int i = 0; i < N; i++) kept += m[i];
  ck_assert(fabs((double)kept / N - 0.75) < 0.01);
  free(m);
  free(u);
  free(z);
}
END_TEST

/* mmrt_randn (ops.def randn) against a naive loop: element i is Box-Muller
 * on the words of Philox block i / 4 of the stream "randn/<site>" mixed with
 * the step (FNV-1a written out here), pairs (0, 1) and (2, 3); sites and steps
 * give other streams; the moments are a standard normal's. */
START_TEST(randn_naive) {
  enum { N = 4001 };
  float *y = malloc(N * sizeof *y);
  for (int site = 0; site < 2; site++)
    for (uint64_t step = 1; step < 3; step++) {
      mmrt_randn(y, N, 1234567890123ull, step, site);
      char name[24];
      snprintf(name, sizeof name, "randn/%d", site);
      uint64_t h = 0xcbf29ce484222325ull;
      for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
      for (int k = 0; k < 8; k++) h = (h ^ ((step >> (8 * k)) & 0xff)) * 0x100000001b3ull;
      double sum = 0, sq = 0;
      for (uint64_t i = 0; i < N; i++) {
        uint32_t key[2] = {(uint32_t)1234567890123ull, (uint32_t)(1234567890123ull >> 32)};
        uint32_t ctr[4] = {(uint32_t)(i / 4), 0, (uint32_t)h, (uint32_t)(h >> 32)}, w[4];
        mmrt_philox(key, ctr, w);
        int p = (int)(i % 4) / 2;
        double u1 = ((double)(w[2 * p] >> 8) + 1.0) / 16777216.0;
        double u2 = (double)(w[2 * p + 1] >> 8) / 16777216.0;
        double r = sqrt(-2.0 * log(u1)), th = 2 * M_PI * u2;
        float want = (float)(i % 2 ? r * sin(th) : r * cos(th));
        ck_assert_msg(y[i] == want, "site %d step %llu element %llu: %g, want %g", site,
                      (unsigned long long)step, (unsigned long long)i, y[i], want);
        sum += y[i], sq += (double)y[i] * y[i];
      }
      double mean = sum / N, var = sq / N - mean * mean;
      ck_assert_msg(fabs(mean) < 0.05 && fabs(var - 1) < 0.08, "moments %g %g", mean, var);
    }
  float a[8], b[8];
  mmrt_randn(a, 8, 1, 1, 0);
  mmrt_randn(b, 8, 1, 2, 0);
  ck_assert_msg(memcmp(a, b, sizeof a) != 0, "steps 1 and 2 gave the same noise");
  mmrt_randn(b, 8, 1, 1, 1);
  ck_assert_msg(memcmp(a, b, sizeof a) != 0, "sites 0 and 1 gave the same noise");
  free(y);
}
END_TEST

START_TEST(permutation) {
  enum { N = 10007 };
  static uint32_t p[N], q[N];
  static uint8_t seen[N];
  mmrt_rng_permutation(p, N, 42, 0);
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < N; i++) {
    ck_assert_uint_lt(p[i], N);
    ck_assert(!seen[p[i]]);
    seen[p[i]] = 1;
  }
  mmrt_rng_permutation(q, N, 42, 0);
  ck_assert(memcmp(p, q, sizeof p) == 0);
  mmrt_rng_permutation(q, N, 42, 1);
  ck_assert(memcmp(p, q, sizeof p) != 0);
  mmrt_rng_permutation(q, N, 43, 0);
  ck_assert(memcmp(p, q, sizeof p) != 0);
  int fixed = 0;
  for (int i = 0; i < N; i++) fixed += p[i] == (uint32_t)i;
  ck_assert_int_lt(fixed, 10); /* about 1 expected */

  /* small n: every one of the 6 orders of 3 appears about equally */
  int count[3][3][3] = {{{0}}};
  for (int e = 0; e < 6000; e++) {
    uint32_t r[3];
    mmrt_rng_permutation(r, 3, 9, (uint64_t)e);
    count[r[0]][r[1]][r[2]]++;
  }
  int orders = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 3; c++)
        if (count[a][b][c]) {
          orders++;
          ck_assert_msg(abs(count[a][b][c] - 1000) < 150, "order %d%d%d: %d", a, b, c,
                        count[a][b][c]);
        }
  ck_assert_int_eq(orders, 6);
  mmrt_rng_permutation(q, 0, 1, 1);
  mmrt_rng_permutation(q, 1, 1, 1);
  ck_assert_uint_eq(q[0], 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_rng");
  TCase *tc = tcase_create("philox");
  tcase_add_test(tc, philox_known_answers);
  tcase_add_test(tc, u32_maps_to_blocks);
  tcase_add_test(tc, split_invariance);
  tcase_add_test(tc, moments);
  tcase_add_test(tc, permutation);
  tcase_add_test(tc, randn_naive);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
