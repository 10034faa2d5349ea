/* bench/loader.sh's loader alone: opens --data SPEC (JSONL with a
 * tokenizer, or an indexed prefix) for rows of T tokens, times the opening
 * (reading, tokenizing on THREADS loader threads, laying out: the tokens
 * per second from raw JSONL) and then mmrt_loader_row over the rows of
 * shuffled batches of B (the trainer's fill without the step), and prints
 * both rates.
 *   loader_bench SPEC TOKENIZER|- T B VOCAB SECONDS [THREADS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mmrt_loader.h"
#include "mmrt_rng.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 7 && argc != 8) {
    fprintf(stderr, "usage: loader_bench SPEC TOKENIZER|- T B VOCAB SECONDS [THREADS]\n");
    return 2;
  }
  MmrtTextOpts o = {0};
  o.tokenizer = strcmp(argv[2], "-") ? argv[2] : NULL;
  o.pack = -1;
  o.threads = argc == 8 ? atoi(argv[7]) : -1;
  int64_t T = atoll(argv[3]), B = atoll(argv[4]), V = atoll(argv[5]);
  double secs = atof(argv[6]);
  char err[1024];
  double t0 = now();
  MmrtLoader *l = mmrt_loader_open(argv[1], &o, T, V, -100, err, sizeof err);
  if (!l) {
    fprintf(stderr, "loader_bench: %s\n", err);
    return 1;
  }
  double topen = now() - t0;
  char line[400];
  mmrt_loader_describe(l, line, sizeof line);
  int64_t n = mmrt_loader_samples(l, MMRT_TEXT_TRAIN);
  int64_t ntok = mmrt_loader_tokens(l);
  printf("%s\nopened in %.3f s (loader threads %s): %lld tokens, %.0f tokens/s\n", line, topen,
         argc == 8 ? argv[7] : "default", (long long)ntok, (double)ntok / topen);
  if (secs <= 0) return mmrt_loader_close(l), 0;
  int32_t *ids = malloc((size_t)(B * T) * 4), *y = malloc((size_t)(B * T) * 4);
  uint32_t *perm = malloc((size_t)n * 4);
  int64_t rows = 0;
  t0 = now();
  for (uint64_t ep = 0; now() - t0 < secs; ep++) {
    mmrt_rng_permutation(perm, (uint32_t)n, 42, ep);
    for (int64_t i = 0; i + B <= n && now() - t0 < secs; i += B, rows += B)
      for (int64_t k = 0; k < B; k++)
        mmrt_loader_row(l, MMRT_TEXT_TRAIN, perm[i + k], ids + k * T, y + k * T, NULL, NULL);
  }
  double dt = now() - t0;
  printf("loader alone: %.0f samples/s (rows of %lld tokens; %lld rows in %.2f s)\n",
         (double)rows / dt, (long long)T, (long long)rows, dt);
  free(ids), free(y), free(perm);
  mmrt_loader_close(l);
  return 0;
}
