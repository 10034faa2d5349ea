/* mmrt_bf16.c: bf16 in libmmrt (train { precision = bf16 }, passes/precision.c).
 *
 * A bf16 value is the high 16 bits of an f32: widening is exact, narrowing
 * rounds to the nearest bf16, ties to even (a NaN stays a quiet NaN), as
 * PyTorch's and oneDNN's conversions do. The matmul, linear and conv
 * kernels of mmrt_dnnl.c take MMRT_BF16 through oneDNN's bf16 primitives
 * (fp32 accumulation) where oneDNN creates them, else they widen the
 * operands here, run the fp32 primitive and round the result ("emulated":
 * a product of two bf16 values is exact in f32, so only the order of the
 * fp32 sums differs). Attention is always the fp32 kernel of mmrt_ops.c on
 * the widened values, its results rounded: the scores, the softmax and the
 * sums are fp32 either way.
 */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_kernels.h"

static int bf16_native = -1; /* unknown until probed */

/* Whether oneDNN creates a bf16 matmul here (2.6 makes none below
 * AVX-512; DNNL_MAX_CPU_ISA=AVX2 makes a machine look so). */
int mmrt_bf16_native(void) {
  if (bf16_native >= 0) return bf16_native;
  bf16_native = 0;
  dnnl_engine_t eng;
  if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
  dnnl_memory_desc_t md;
  dnnl_dims_t d = {16, 16};
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd;
  if (dnnl_memory_desc_init_by_tag(&md, 2, d, dnnl_bf16, dnnl_ab) == dnnl_success &&
      dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md) == dnnl_success &&
      dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL) == dnnl_success) {
    bf16_native = 1;
    dnnl_primitive_desc_destroy(pd);
  }
  dnnl_engine_destroy(eng);
  return bf16_native;
}

static inline float widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t narrow(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) /* NaN: quiet, sign kept */
    return (uint16_t)((u | 0x00400000u) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

void mmrt_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 65536)
  for (size_t i = 0; i < n; i++) dst[i] = widen(src[i]);
}

void mmrt_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 65536)
  for (size_t i = 0; i < n; i++) dst[i] = narrow(src[i]);
}

enum { NTMP = 8 };
static float *tmp[NTMP];
static size_t tmp_cap[NTMP];

float *mmrt_bf16_tmp(int slot, size_t n) {
  if (slot < 0 || slot >= NTMP) abort();
  if (n > tmp_cap[slot]) {
    free(tmp[slot]);
    tmp[slot] = malloc((n ? n : 1) * sizeof(float));
    if (!tmp[slot]) {
      fprintf(stderr, "mmrt: out of memory for a bf16 scratch buffer of %zu floats\n", n);
      abort();
    }
    tmp_cap[slot] = n;
  }
  return tmp[slot];
}

static float *widened(int slot, const uint16_t *x, size_t n) {
  float *t = mmrt_bf16_tmp(slot, n);
  mmrt_bf16_to_f32(t, x, n);
  return t;
}

const char *mmrt_bf16_path(void) {
#if defined(__x86_64__) || defined(__i386__)
  int insn = __builtin_cpu_supports("avx512bf16");
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#else
  int insn = 0, avx512 = 0;
#endif
  if (mmrt_bf16_native())
    return insn     ? "native (oneDNN bf16 primitives, avx512_bf16 instructions)"
           : avx512 ? "native (oneDNN bf16 primitives on AVX-512, no bf16 instructions)"
                    : "native (oneDNN bf16 primitives)";
  return "emulated (oneDNN makes no bf16 matmul here: fp32 products of the bf16 values)";
}

void mmrt_attention_bf16_fwd(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                             const uint16_t *v, int B, int T, int S, int H, int KVH, int D,
                             int causal, float scale) {
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D;
  float *o = mmrt_bf16_tmp(3, nq);
  mmrt_attention_fwd(o, lse, widened(0, q, nq), widened(1, k, nk), widened(2, v, nk), B, T, S, H,
                     KVH, D, causal, scale);
  mmrt_f32_to_bf16(out, o, nq);
}

/* dst (+)= the f32 result t of n elements, rounded */
static void store(uint16_t *dst, const float *t, size_t n, int accumulate) {
  if (!dst) return;
  if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) dst[i] = narrow(widen(dst[i]) + t[i]);
  } else {
    mmrt_f32_to_bf16(dst, t, n);
  }
}

void mmrt_attention_bf16_bwd(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const uint16_t *out, const float *lse, int B, int T, int S, int H,
                             int KVH, int D, int causal, float scale, int accumulate) {
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * S * KVH * D;
  float *fdo = widened(0, dout, nq), *fq = widened(1, q, nq), *fk = widened(2, k, nk);
  float *fv = widened(3, v, nk), *fo = widened(4, out, nq);
  float *gq = dq ? mmrt_bf16_tmp(5, nq) : NULL, *gk = dk ? mmrt_bf16_tmp(6, nk) : NULL;
  float *gv = dv ? mmrt_bf16_tmp(7, nk) : NULL;
  mmrt_attention_bwd(gq, gk, gv, fdo, fq, fk, fv, fo, lse, B, T, S, H, KVH, D, causal, scale, 0);
  store(dq, gq, nq, accumulate);
  store(dk, gk, nk, accumulate);
  store(dv, gv, nk, accumulate);
}
