/* mmrt_bf16.c: bf16 in libmmrt (train { precision = bf16 }, passes/precision.c).
 *
 * A bf16 value is the high 16 bits of an f32: widening is exact, narrowing
 * rounds to the nearest bf16, ties to even (a NaN stays a quiet NaN), as
 * PyTorch's and oneDNN's conversions do. The matmul, linear and conv
 * kernels of mmrt_dnnl.c take MMRT_BF16 through oneDNN's bf16 primitives
 * (fp32 accumulation) where oneDNN creates them, else they widen the
 * operands here, run the fp32 primitive and round the result ("emulated":
 * a product of two bf16 values is exact in f32, so only the order of the
 * fp32 sums differs). Attention (mmrt_ops.c) reads bf16 q, k, v and dout
 * into its fp32 tiles as it loads them and rounds its results as it writes
 * them: the scores, the softmax and the sums are fp32, and no widened copy
 * of a tensor exists.
 */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_mem.h"
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

#define widen  mmrt_bf16_widen
#define narrow mmrt_bf16_narrow

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
    if (!tmp[slot]) mmrt_die_oom("a bf16 scratch buffer", (n ? n : 1) * sizeof(float));
    tmp_cap[slot] = n;
  }
  return tmp[slot];
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
