/* mmrt_model.c: lookups in the model descriptor (mmrt_main.h) that the
 * trainer, its tasks, the generator and the reconstructor share, and the
 * arenas and weights of the one-rank executables. */
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_flags.h"
#include "mmrt_hf.h"
#include "mmrt_main.h"

const MmrtTensorDesc *mmrt_desc_input(const MmrtModelDesc *m, const char *name) {
  for (int64_t i = 0; i < m->ninputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return &m->inputs[i];
  return NULL;
}

int mmrt_desc_data_flags(const MmrtModelDesc *m, const MmrtFlagSet *s, void *args) {
  if (!m->data_flags || !m->data_flags[0]) return 0;
  static char buf[8192];
  char *words[2 * 32 + 1] = {"data section"};
  if (strlen(m->data_flags) >= sizeof buf)
    return mmrt_fail(s->who, "model %s: its data section's keys are too long", m->name);
  memcpy(buf, m->data_flags, strlen(m->data_flags) + 1);
  int n = 1;
  for (char *w = buf, *nl; n < (int)(sizeof words / sizeof *words) && (nl = strchr(w, '\n'));
       w = nl + 1)
    *nl = 0, words[n++] = w;
  if (mmrt_flags_parse(s, n, words, args, NULL))
    return mmrt_fail(s->who, "model %s: its data section's keys (%s) do not parse", m->name,
                     m->data_flags);
  return 0;
}

int mmrt_desc_step(const MmrtModelDesc *m, const char *name, MmrtStepFn *fn) {
  /* every field of type step in mmrt_desc.def; arrays (pp_fn[...]) are not one step */
  static const struct {
    const char *name;
    size_t at, size;
  } steps[] = {
#define MMRT_DESC_STEP_i64(name)
#define MMRT_DESC_STEP_f64(name)
#define MMRT_DESC_STEP_str(name)
#define MMRT_DESC_STEP_tensors(name)
#define MMRT_DESC_STEP_i64s(name)
#define MMRT_DESC_STEP_pp_ranks(name)
#define MMRT_DESC_STEP_pp_actions(name)
#define MMRT_DESC_STEP_pp_routes(name)
#define MMRT_DESC_STEP_step(name) {#name, offsetof(MmrtModelDesc, name), sizeof m->name},
#define MMRT_MODEL(t, name, dims) MMRT_DESC_STEP_##t(name)
#include "mmrt_desc.def"
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (!strcmp(steps[i].name, name) && steps[i].size == sizeof *fn) {
      memcpy(fn, (const char *)m + steps[i].at, sizeof *fn);
      return 1;
    }
  return 0;
}

int mmrt_is_adapter(const char *name) {
  size_t n = strlen(name);
  return n > 7 && (!strcmp(name + n - 7, ".lora_a") || !strcmp(name + n - 7, ".lora_b"));
}

void mmrt_init_values(const MmrtTensorDesc *p, uint64_t seed, float *w, uint64_t g, int64_t n) {
  char name[600];
  snprintf(name, sizeof name, "init/%s", p->name);
  uint64_t stream = mmrt_rng_stream(name, 0), e = g + (uint64_t)n;
  int64_t total = 1;
  for (int64_t d = 0; d < p->ndim; d++) total *= p->shape[d];
  switch (p->init) {
    case MMRT_INIT_ONES: mmrt_fill(w, 1.0f, (size_t)n); break;
    case MMRT_INIT_FILL: mmrt_fill(w, (float)p->init_a, (size_t)n); break;
    case MMRT_INIT_NORMAL: mmrt_rng_normal(w, seed, stream, g, e, 0.0f, (float)p->init_a); break;
    case MMRT_INIT_UNIFORM:
    case MMRT_INIT_FAN_IN: {
      double lo = p->init_a, hi = p->init_b;
      if (p->init == MMRT_INIT_FAN_IN) {
        int64_t fan_in = p->ndim >= 2 ? total / p->shape[0] : total;
        hi = p->init_a / sqrt((double)fan_in);
        lo = -hi;
      }
      mmrt_rng_uniform(w, seed, stream, g, e);
      for (int64_t i = 0; i < n; i++) w[i] = (float)(lo + (hi - lo) * w[i]);
      break;
    }
    default: memset(w, 0, (size_t)n * sizeof(float)); break; /* zeros, none, optimizer state */
  }
}

int mmrt_alloc_arenas(const MmrtModelDesc *m, char **arenas, char *err, size_t errlen) {
  for (int r = 0; r < MMRT_NARENAS; r++) {
    size_t n = (size_t)m->arena_bytes[r];
    arenas[r] = NULL;
    if (!n) continue;
    n = (n + 63) / 64 * 64;
    if (!(arenas[r] = aligned_alloc(64, n)))
      return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "cannot allocate %zu bytes for arena %d", n, r);
    memset(arenas[r], 0, n);
  }
  return MMRT_OK;
}

/* Parameter p from checkpoint c or file f (one of them): MMRT_OK,
 * MMRT_ERR_NOTFOUND, or another error (in err). */
static int read_param(MmrtCkpt *c, MmrtStFile *f, const MmrtTensorDesc *p, char *const *arenas,
                      char *err, size_t errlen) {
  MmrtTensorRef ref = {.name = p->name,
                       .dtype = (MmrtStDtype)p->dtype,
                       .ndim = (int)p->ndim,
                       .data = arenas[p->arena] + p->offset};
  MmrtSlice whole = {.ndim = (int)p->ndim};
  for (int64_t d = 0; d < p->ndim; d++) ref.shape[d] = whole.global[d] = whole.len[d] = p->shape[d];
  return c                              ? mmrt_ckpt_read_slice(c, &ref, &whole, 0, err, errlen)
         : mmrt_st_find(f, p->name) < 0 ? MMRT_ERR_NOTFOUND
                                        : mmrt_st_read(f, &ref, err, errlen);
}

/* A checkpoint directory of any plan (each tensor assembled from its
 * pieces) into *c, or a safetensors file into *f. */
static int open_weights(const char *path, MmrtCkpt **c, MmrtStFile **f, char *err, size_t errlen) {
  struct stat st;
  *c = NULL, *f = NULL;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode)
             ? mmrt_ckpt_open_all(c, path, NULL, NULL, err, errlen)
             : mmrt_st_open(f, path, err, errlen);
}

/* A Hugging Face directory (mmrt_hf.h): every parameter but the adapters
 * from its mapped tensor, read whole, one tensor at a time. */
static int load_hf(const MmrtModelDesc *m, char *const *arenas, const char *dir, int *loaded,
                   char *err, size_t errlen) {
  MmrtHf *h;
  int rc = mmrt_hf_open(&h, dir, err, errlen), n = 0;
  if (rc != MMRT_OK) return rc;
  MmrtHfParam *p = calloc((size_t)m->nparams + 1, sizeof *p);
  MmrtHfSrc *src = calloc((size_t)m->nparams + 1, sizeof *src);
  const MmrtTensorDesc **d = calloc((size_t)m->nparams + 1, sizeof *d);
  if (!p || !src || !d) rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; rc == MMRT_OK && i < m->nparams; i++) {
    const MmrtTensorDesc *q = &m->params[i];
    if (q->arena != MMRT_ARENA_PARAM || mmrt_is_adapter(q->name)) continue;
    if (q->dtype != MMRT_ST_F32)
      rc = mmrt_errf(err, errlen, MMRT_ERR_MISMATCH, "%s: parameter '%s' is not f32", dir, q->name);
    p[n] = (MmrtHfParam){.name = q->name, .ndim = (int)q->ndim};
    for (int64_t k = 0; k < q->ndim; k++) p[n].shape[k] = q->shape[k];
    d[n++] = q;
  }
  if (rc == MMRT_OK) rc = mmrt_hf_match(h, mmrt_hf_instance(h), p, n, src, err, errlen);
  for (int k = 0; rc == MMRT_OK && k < n; k++)
    if (src[k].tensor < 0)
      rc = mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND,
                     "%s: no tensor for parameter '%s' (the %s mapping loads '%s' only)", dir,
                     p[k].name, mmrt_hf_arch(h), mmrt_hf_instance(h));
  if (rc == MMRT_OK) rc = mmrt_hf_check_ties(h, err, errlen);
  for (int k = 0; rc == MMRT_OK && k < n; k++) {
    MmrtSlice whole = {.ndim = p[k].ndim};
    for (int j = 0; j < p[k].ndim; j++) whole.global[j] = whole.len[j] = p[k].shape[j];
    rc = mmrt_hf_read(h, &p[k], &src[k], &whole, (float *)(arenas[d[k]->arena] + d[k]->offset), err,
                      errlen);
    *loaded += rc == MMRT_OK;
  }
  free(p);
  free(src);
  free(d);
  mmrt_hf_close(h);
  return rc;
}

int mmrt_load_params(const MmrtModelDesc *m, char *const *arenas, const char *path, int adapters,
                     int *loaded, char *err, size_t errlen) {
  *loaded = 0;
  if (!adapters && mmrt_hf_is_dir(path)) return load_hf(m, arenas, path, loaded, err, errlen);
  MmrtCkpt *c;
  MmrtStFile *f;
  int rc = open_weights(path, &c, &f, err, errlen);
  if (rc != MMRT_OK) return rc;
  for (int64_t i = 0; i < m->nparams && rc == MMRT_OK; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != MMRT_ARENA_PARAM || (adapters && !mmrt_is_adapter(p->name))) continue;
    int got = read_param(c, f, p, arenas, err, errlen);
    if (got == MMRT_ERR_NOTFOUND) {
      if (adapters || !mmrt_is_adapter(p->name)) /* adapters may come from a file of their own */
        rc = mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "%s: no tensor '%s'",
                       c ? mmrt_ckpt_dir(c) : path, p->name);
      continue;
    }
    rc = got;
    *loaded += rc == MMRT_OK;
  }
  mmrt_st_close(f);
  mmrt_ckpt_close(c);
  return rc;
}

int mmrt_load_params_any(const MmrtModelDesc *m, char *const *arenas, const char *const *paths,
                         int npaths, int *loaded, int *bad, char *err, size_t errlen) {
  MmrtCkpt *c[MMRT_MAX_WEIGHTS] = {0};
  MmrtStFile *f[MMRT_MAX_WEIGHTS] = {0};
  int rc = MMRT_OK, k = 0;
  *loaded = 0, *bad = -1;
  for (; k < npaths && k < MMRT_MAX_WEIGHTS && rc == MMRT_OK; k++)
    if ((rc = open_weights(paths[k], &c[k], &f[k], err, errlen)) != MMRT_OK) *bad = k;
  for (int64_t i = 0; i < m->nparams && rc == MMRT_OK; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != MMRT_ARENA_PARAM) continue;
    int got = MMRT_ERR_NOTFOUND;
    for (int j = 0; j < k && got == MMRT_ERR_NOTFOUND; j++)
      if ((got = read_param(c[j], f[j], p, arenas, err, errlen)) != MMRT_OK &&
          got != MMRT_ERR_NOTFOUND)
        *bad = j;
    if (got == MMRT_ERR_NOTFOUND)
      rc = mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "no tensor '%s' in %s", p->name,
                     k > 1 ? "any of them" : "it");
    else
      rc = got;
    *loaded += rc == MMRT_OK;
  }
  for (int j = 0; j < k; j++) mmrt_st_close(f[j]), mmrt_ckpt_close(c[j]);
  return rc;
}

int mmrt_fail(const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}
