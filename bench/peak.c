/* bench/peak.c: oneDNN's fp32 matmul throughput on this machine now
 * (dnnl_sgemm, N x N x N, best of a few), the peak bench/run.sh's MFU is
 * against. Usage: peak [N] -> prints GFLOP/s. */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1024;
  if (n < 16) n = 16;
  float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n),
        *c = malloc(sizeof(float) * (size_t)n * n);
  if (!a || !b || !c) return 1;
  for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 1.0f / (float)(1 + i % 7), c[i] = 0;
  double best = 0;
  for (int r = 0; r < 6; r++) {
    double t = now();
    if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) != dnnl_success) return 1;
    t = now() - t;
    double g = 2.0 * n * n * (double)n / t / 1e9;
    best = g > best ? g : best;
  }
  printf("%.1f\n", best);
  free(a), free(b), free(c);
  return 0;
}
