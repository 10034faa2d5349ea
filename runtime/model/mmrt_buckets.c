/* mmrt_buckets.c: tile buckets (mmrt_buckets.h). */
#include "mmrt_buckets.h"

#include <stdio.h>
#include <string.h>

#include "mmrt_ckpt.h"

static const MmrtModelDesc *const *buckets;
static int nbuckets;

void mmrt_tile_buckets_set(const MmrtModelDesc *const *b, int n) {
  buckets = b, nbuckets = b ? n : 0;
}

const MmrtModelDesc *const *mmrt_tile_buckets(int *n) {
  *n = nbuckets;
  return buckets;
}

int64_t mmrt_bucket_dim(const MmrtModelDesc *b, const char *name, int dim) {
  const MmrtTensorDesc *t = mmrt_desc_input(b, name);
  return t && dim < t->ndim ? t->shape[dim] : -1;
}

/* This rank's piece of t: each dim over the mesh axes that split it. */
static void local_shape(const MmrtModelDesc *m, const MmrtTensorDesc *t, int64_t *d) {
  for (int i = 0; i < t->ndim; i++) {
    d[i] = t->shape[i];
    for (int a = 0; a < MMRT_DESC_NAXES; a++)
      if (t->split[i] >> a & 1 && m->mesh[a] > 1) d[i] /= m->mesh[a];
  }
}

int mmrt_bucket_check(const MmrtModelDesc *m, const MmrtModelDesc *b, char *err, size_t errlen) {
  if (b->nparams != m->nparams)
    return snprintf(err, errlen, "%lld parameters and state tensors, the model's %lld",
                    (long long)b->nparams, (long long)m->nparams),
           1;
  for (int64_t i = 0; i < m->nparams; i++) {
    const MmrtTensorDesc *p = &m->params[i], *q = &b->params[i];
    if (strcmp(p->name, q->name) || p->arena != q->arena || p->offset != q->offset ||
        p->ndim != q->ndim || memcmp(p->shape, q->shape, sizeof p->shape))
      return snprintf(err, errlen, "parameter %s is not the model's %s at the same place", q->name,
                      p->name),
             1;
  }
  static const char *const arena[MMRT_NARENAS] = {"param", "grad", "opt", "act", "input"};
  for (int a = 0; a < MMRT_NARENAS; a++) {
    if (a == MMRT_ARENA_INPUT) continue;
    int same = a == MMRT_ARENA_PARAM || a == MMRT_ARENA_OPT;
    if (same ? b->arena_bytes[a] != m->arena_bytes[a] : b->arena_bytes[a] > m->arena_bytes[a])
      return snprintf(err, errlen, "its %s arena is %lld bytes, the model's %lld", arena[a],
                      (long long)b->arena_bytes[a], (long long)m->arena_bytes[a]),
             1;
  }
  if (memcmp(b->mesh, m->mesh, sizeof m->mesh) || b->batch != m->batch ||
      b->train_loss_offset < 0 || !b->train_step)
    return snprintf(err, errlen, "another mesh or batch, or no train step"), 1;
  for (int64_t i = 0; i < b->ninputs; i++) {
    const MmrtTensorDesc *x = &b->inputs[i], *y = mmrt_desc_input(m, x->name);
    int fits = y && y->ndim == x->ndim && y->dtype == x->dtype;
    for (int k = 0; fits && k < x->ndim; k++) fits = x->shape[k] <= y->shape[k];
    if (!fits)
      return snprintf(err, errlen, "its input %s is not a corner of the model's", x->name), 1;
  }
  return 0;
}

/* The leading corner of src (shape s) into dst (shape d, d[i] <= s[i]). */
static void corner(char *dst, const char *src, const int64_t *d, const int64_t *s, int nd,
                   size_t el) {
  if (nd == 0) {
    memcpy(dst, src, el);
    return;
  }
  size_t din = el, sin = el; /* bytes of one step of dim 0 */
  for (int i = 1; i < nd; i++) din *= (size_t)d[i], sin *= (size_t)s[i];
  if (din == sin) {
    memcpy(dst, src, (size_t)d[0] * din);
    return;
  }
  for (int64_t k = 0; k < d[0]; k++)
    corner(dst + (size_t)k * din, src + (size_t)k * sin, d + 1, s + 1, nd - 1, el);
}

int mmrt_bucket_run(const MmrtModelDesc *m, const MmrtModelDesc *b, char **arenas, char *inputs,
                    const char *pool, uint64_t seed, void *mesh) {
  for (int64_t i = 0; i < b->ninputs; i++) {
    const MmrtTensorDesc *x = &b->inputs[i], *y = mmrt_desc_input(m, x->name);
    int64_t d[MMRT_DESC_MAX_DIMS], s[MMRT_DESC_MAX_DIMS];
    local_shape(b, x, d), local_shape(m, y, s);
    if (pool && !strcmp(x->name, pool)) { /* a pool: its first elements */
      int64_t n = 1;
      for (int k = 0; k < x->ndim; k++) n *= d[k];
      memcpy(inputs + x->offset, arenas[MMRT_ARENA_INPUT] + y->offset,
             (size_t)n * mmrt_st_dtype_size((MmrtStDtype)x->dtype));
      continue;
    }
    corner(inputs + x->offset, arenas[MMRT_ARENA_INPUT] + y->offset, d, s, (int)x->ndim,
           mmrt_st_dtype_size((MmrtStDtype)x->dtype));
  }
  char *a[MMRT_NARENAS];
  memcpy(a, arenas, sizeof a);
  a[MMRT_ARENA_INPUT] = inputs;
  int rc = b->train_step(a, seed, mesh);
  memmove(arenas[MMRT_ARENA_ACT] + m->train_loss_offset,
          arenas[MMRT_ARENA_ACT] + b->train_loss_offset, sizeof(float));
  return rc;
}
