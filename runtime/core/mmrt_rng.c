/* mmrt_rng.c: Philox4x32-10 (Salmon et al., SC'11) and the fills built on it.
 * See mmrt_rng.h for how (seed, stream, index) map to counters. */
#include "mmrt_rng.h"

#include <math.h>
#include <stdio.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void mmrt_philox(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]) {
  uint32_t k0 = key[0], k1 = key[1];
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* Block b of a stream: key = seed, counter = (b, stream). */
static void block(uint64_t seed, uint64_t stream, uint64_t b, uint32_t out[4]) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
  mmrt_philox(key, ctr, out);
}

uint32_t mmrt_rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
  uint32_t w[4];
  block(seed, stream, i / 4, w);
  return w[i % 4];
}

static float u01(uint32_t w) {
  return (float)(w >> 8) * 0x1p-24f;
}

float mmrt_rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t i) {
  return u01(mmrt_rng_u32(seed, stream, i));
}

void mmrt_rng_uniform(float *out, uint64_t seed, uint64_t stream, uint64_t lo, uint64_t hi) {
  uint32_t w[4];
  uint64_t cur = UINT64_MAX;
  for (uint64_t i = lo; i < hi; i++) {
    if (i / 4 != cur) {
      cur = i / 4;
      block(seed, stream, cur, w);
    }
    out[i - lo] = u01(w[i % 4]);
  }
}

/* The four normals of block b: Box-Muller on word pairs (0,1) and (2,3).
 * u1 is taken in (0, 1] so the log is finite. */
static void normal4(uint64_t seed, uint64_t stream, uint64_t b, double z[4]) {
  uint32_t w[4];
  block(seed, stream, b, w);
  for (int p = 0; p < 2; p++) {
    double u1 = ((double)(w[2 * p] >> 8) + 1.0) * 0x1p-24;
    double u2 = (double)(w[2 * p + 1] >> 8) * 0x1p-24;
    double r = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586 * u2;
    z[2 * p] = r * cos(th);
    z[2 * p + 1] = r * sin(th);
  }
}

void mmrt_rng_normal(float *out, uint64_t seed, uint64_t stream, uint64_t lo, uint64_t hi,
                     float mean, float std) {
  double z[4];
  uint64_t cur = UINT64_MAX;
  for (uint64_t i = lo; i < hi; i++) {
    if (i / 4 != cur) {
      cur = i / 4;
      normal4(seed, stream, cur, z);
    }
    out[i - lo] = (float)(mean + std * z[i % 4]);
  }
}

void mmrt_rng_keep_mask(uint8_t *out, uint64_t seed, uint64_t stream, uint64_t lo, uint64_t hi,
                        float p) {
  uint32_t w[4];
  uint64_t cur = UINT64_MAX;
  for (uint64_t i = lo; i < hi; i++) {
    if (i / 4 != cur) {
      cur = i / 4;
      block(seed, stream, cur, w);
    }
    out[i - lo] = u01(w[i % 4]) >= p;
  }
}

uint64_t mmrt_rng_stream(const char *name, uint64_t step) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
    h ^= *s;
    h *= 0x100000001b3ull;
  }
  for (int k = 0; k < 8; k++) {
    h ^= (step >> (8 * k)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

/* Uniform integer in [0, range) for Fisher-Yates position i: Lemire's
 * multiply-shift with rejection, so it is exactly unbiased.  Attempts use
 * the words of block (i, attempt) of the shuffle stream. */
static uint32_t draw_below(uint64_t seed, uint64_t stream, uint32_t i, uint32_t range) {
  uint32_t thresh = (uint32_t)(-range) % range;
  for (uint32_t a = 0;; a++) {
    uint32_t w[4];
    block(seed, stream, ((uint64_t)a << 32) | i, w);
    for (int k = 0; k < 4; k++) {
      uint64_t m = (uint64_t)w[k] * range;
      if ((uint32_t)m >= thresh) return (uint32_t)(m >> 32);
    }
  }
}

void mmrt_rng_permutation(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch) {
  uint64_t stream = mmrt_rng_stream("mmrt/shuffle", epoch);
  for (uint32_t i = 0; i < n; i++) perm[i] = i;
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = draw_below(seed, stream, i - 1, i);
    uint32_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

void mmrt_randn(float *y, size_t n, uint64_t seed, uint64_t step, int32_t site) {
  char name[32];
  snprintf(name, sizeof name, "randn/%d", (int)site);
  mmrt_rng_normal(y, seed, mmrt_rng_stream(name, step), 0, n, 0.0f, 1.0f);
}
