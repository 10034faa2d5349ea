/* Micro-batches: gradient accumulation over the micro-batches of a step
 * (mmrt_pp.h). */
#include "mmrt_pp.h"

#include <stdlib.h>
#include <string.h>

static float g_count; /* the last micro-batch's label count */
static int g_counted; /* whether it reported one */

int mmrt_mb_count(void *mesh, int axes, int count) {
  float c = (float)count;
  int rc = mmrt_step_all_reduce(mesh, axes, &c, 1);
  if (rc) return -1;
  g_count += c;
  g_counted = 1;
  return 0;
}

void mmrt_mb_begin(void) {
  g_count = 0;
  g_counted = 0;
}

int mmrt_mb_init(MmrtMbAcc *a, const MmrtModelDesc *m,
                 int64_t (*elems)(void *, const MmrtTensorDesc *), void *user) {
  memset(a, 0, sizeof *a);
  a->m = m;
  int64_t n = m->naccum;
  a->acc = calloc((size_t)n + 1, sizeof *a->acc);
  a->n = calloc((size_t)n + 1, sizeof *a->n);
  if (!a->acc || !a->n) return -1;
  for (int64_t i = 0; i < n; i++) {
    a->n[i] = elems(user, &m->accum[i]);
    a->acc[i] = malloc(sizeof(float) * (size_t)(a->n[i] + 1));
    if (!a->acc[i]) return -1;
  }
  return 0;
}

void mmrt_mb_free(MmrtMbAcc *a) {
  for (int64_t i = 0; a->acc && a->m && i < a->m->naccum; i++) free(a->acc[i]);
  free(a->acc);
  free(a->n);
  memset(a, 0, sizeof *a);
}

void mmrt_mb_begin_step(MmrtMbAcc *a) {
  a->loss = a->count = 0;
  a->k = 0;
  mmrt_mb_begin();
}

void mmrt_mb_add(MmrtMbAcc *a, char **arenas, float loss) {
  double c = g_counted ? (double)g_count : 1.0;
  float w = (float)c;
  for (int64_t i = 0; i < a->m->naccum; i++) {
    const MmrtTensorDesc *d = &a->m->accum[i];
    const float *g = (const float *)(void *)(arenas[d->arena] + d->offset);
    float *s = a->acc[i];
    if (a->k == 0)
      for (int64_t e = 0; e < a->n[i]; e++) s[e] = w * g[e];
    else
      for (int64_t e = 0; e < a->n[i]; e++) s[e] += w * g[e];
  }
  a->loss += c * (double)loss;
  a->count += c;
  a->k++;
  mmrt_mb_begin();
}

float mmrt_mb_finish(MmrtMbAcc *a, char **arenas) {
  float inv = a->count > 0 ? (float)(1.0 / a->count) : 0.0f;
  for (int64_t i = 0; i < a->m->naccum; i++) {
    const MmrtTensorDesc *d = &a->m->accum[i];
    float *g = (float *)(void *)(arenas[d->arena] + d->offset);
    const float *s = a->acc[i];
    for (int64_t e = 0; e < a->n[i]; e++) g[e] = s[e] * inv;
  }
  return a->count > 0 ? (float)(a->loss / a->count) : 0.0f;
}
