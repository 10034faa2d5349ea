/* mmrt_model.c: lookups in the model descriptor (mmrt_main.h) that the
 * trainer, its tasks, the generator and the reconstructor share, and the
 * arenas and weights of the one-rank executables. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_main.h"

const MmrtTensorDesc *mmrt_desc_input(const MmrtModelDesc *m, const char *name) {
  for (int64_t i = 0; i < m->ninputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return &m->inputs[i];
  return NULL;
}

int mmrt_is_adapter(const char *name) {
  size_t n = strlen(name);
  return n > 7 && (!strcmp(name + n - 7, ".lora_a") || !strcmp(name + n - 7, ".lora_b"));
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

int mmrt_load_params(const MmrtModelDesc *m, char *const *arenas, const char *path, int adapters,
                     int *loaded, char *err, size_t errlen) {
  struct stat st;
  *loaded = 0;
  MmrtCkpt *c =
      NULL; /* a checkpoint directory of any plan: each tensor assembled from its pieces */
  MmrtStFile *f = NULL;
  int rc = stat(path, &st) == 0 && S_ISDIR(st.st_mode)
               ? mmrt_ckpt_open_all(&c, path, NULL, NULL, err, errlen)
               : mmrt_st_open(&f, path, err, errlen);
  if (rc != MMRT_OK) return rc;
  for (int64_t i = 0; i < m->nparams && rc == MMRT_OK; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != MMRT_ARENA_PARAM || (adapters && !mmrt_is_adapter(p->name))) continue;
    MmrtTensorRef ref = {.name = p->name,
                         .dtype = (MmrtStDtype)p->dtype,
                         .ndim = (int)p->ndim,
                         .data = arenas[p->arena] + p->offset};
    MmrtSlice whole = {.ndim = (int)p->ndim};
    for (int64_t d = 0; d < p->ndim; d++)
      ref.shape[d] = whole.global[d] = whole.len[d] = p->shape[d];
    int got = c                              ? mmrt_ckpt_read_slice(c, &ref, &whole, 0, err, errlen)
              : mmrt_st_find(f, p->name) < 0 ? MMRT_ERR_NOTFOUND
                                             : mmrt_st_read(f, &ref, err, errlen);
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
