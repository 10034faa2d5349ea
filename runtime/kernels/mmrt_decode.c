/* mmrt_decode.c: the kernels of incremental decoding and of image tokens in
 * the text: RoPE at per-row positions, place (and its gradient), the KV
 * cache write and attention of new queries on the cache.  Own fp32 loops,
 * OpenMP over rows; see mmrt_kernels.h for the contracts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_kernels.h"

static int rope_pos(float *y, const float *x, int B, int T, int H, int D, float theta,
                    const int32_t *pos, float sign, const char *what) {
  for (int b = 0; b < B; b++)
    if (pos[b] < 0) {
      fprintf(stderr, "mmrt: %s: row %d starts at position %d (< 0)\n", what, b, (int)pos[b]);
      return -1;
    }
  int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      /* the angles as the training kernel's table computes them */
      double p = (double)(pos[b] + t);
      for (int i = 0; i < half; i++) {
        double a = p * pow((double)theta, -2.0 * i / (double)D);
        float c = (float)cos(a), s = sign * (float)sin(a);
        for (int h = 0; h < H; h++) {
          size_t off = (((size_t)b * T + t) * H + h) * D;
          float x1 = x[off + i], x2 = x[off + i + half];
          y[off + i] = x1 * c - x2 * s;
          y[off + i + half] = x2 * c + x1 * s;
        }
      }
    }
  return 0;
}

int mmrt_rope_pos_fwd(float *y, const float *x, int B, int T, int H, int D, float theta,
                      const int32_t *pos) {
  return rope_pos(y, x, B, T, H, D, theta, pos, 1.0f, "mmrt_rope_pos_fwd");
}

int mmrt_rope_pos_bwd(float *dx, const float *dy, int B, int T, int H, int D, float theta,
                      const int32_t *pos) {
  return rope_pos(dx, dy, B, T, H, D, theta, pos, -1.0f, "mmrt_rope_pos_bwd");
}

/* Row b's count of `token`, and whether it is at most N (a row with fewer
 * takes src's first rows: a sample with fewer tiles than the model's
 * most, the rest padding). */
static int place_check(const int32_t *ids, int B, int T, int N, int token, const char *what) {
  for (int b = 0; b < B; b++) {
    int cnt = 0;
    for (int t = 0; t < T; t++) cnt += ids[(size_t)b * T + t] == token;
    if (cnt > N) { /* 0: a sample without an image (text only, or padding) */
      fprintf(stderr,
              "mmrt: %s: sample %d holds the image-context token %d %d times; "
              "the model places at most %d image rows\n",
              what, b, token, cnt, N);
      return -1;
    }
  }
  return 0;
}

int mmrt_place_fwd(float *y, const float *x, const float *src, const int32_t *ids, int B, int T,
                   int N, int C, int token) {
  if (place_check(ids, B, T, N, token, "mmrt_place_fwd")) return -1;
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; b++) {
    int j = 0;
    for (int t = 0; t < T; t++) {
      size_t o = ((size_t)b * T + t) * C;
      const float *from = ids[(size_t)b * T + t] == token ? src + ((size_t)b * N + j++) * C : x + o;
      if (y + o != from) memcpy(y + o, from, sizeof(float) * (size_t)C);
    }
  }
  return 0;
}

int mmrt_place_bwd(float *dx, float *dsrc, const float *dy, const int32_t *ids, int B, int T, int N,
                   int C, int token) {
  if (place_check(ids, B, T, N, token, "mmrt_place_bwd")) return -1;
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; b++) {
    int j = 0;
    for (int t = 0; t < T; t++) {
      size_t o = ((size_t)b * T + t) * C;
      if (ids[(size_t)b * T + t] == token) {
        memcpy(dsrc + ((size_t)b * N + j++) * C, dy + o, sizeof(float) * (size_t)C);
        memset(dx + o, 0, sizeof(float) * (size_t)C);
      } else if (dx != dy) {
        memcpy(dx + o, dy + o, sizeof(float) * (size_t)C);
      }
    }
    if (j < N) /* src rows placed nowhere (padding tiles, no image): no gradient */
      memset(dsrc + ((size_t)b * N + j) * C, 0, sizeof(float) * (size_t)(N - j) * (size_t)C);
  }
  return 0;
}

int mmrt_kv_write(float *cache, const float *x, const int32_t *pos, int B, int S, int n, int KVH,
                  int D) {
  size_t row = (size_t)KVH * D;
  for (int b = 0; b < B; b++) {
    if (pos[b] < 0 || pos[b] + n > S) {
      fprintf(stderr,
              "mmrt: mmrt_kv_write: row %d writes positions %d..%d, the cache holds 0..%d\n", b,
              (int)pos[b], (int)pos[b] + n - 1, S - 1);
      return -1;
    }
    memcpy(cache + ((size_t)b * S + pos[b]) * row, x + (size_t)b * n * row,
           sizeof(float) * row * (size_t)n);
  }
  return 0;
}

int mmrt_attention_cached_fwd(float *out, const float *q, const float *k, const float *v,
                              const int32_t *pos, int B, int n, int S, int H, int KVH, int D,
                              float scale) {
  for (int b = 0; b < B; b++)
    if (pos[b] < 0 || pos[b] + n > S) {
      fprintf(stderr,
              "mmrt: mmrt_attention_cached_fwd: row %d reads positions up to %d, the cache holds "
              "0..%d\n",
              b, (int)pos[b] + n - 1, S - 1);
      return -1;
    }
  mmrt_attention_pos_fwd(out, q, k, v, pos, B, n, S, H, KVH, D, scale);
  return 0;
}
