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
  char file[4096], dir[4096];
  struct stat st;
  *loaded = 0;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (mmrt_ckpt_resolve(path, dir, sizeof dir, err, errlen) != MMRT_OK) return MMRT_ERR_NOTFOUND;
    mmrt_ckpt_rank_path(file, sizeof file, dir, 0);
  } else {
    snprintf(file, sizeof file, "%s", path);
  }
  MmrtStFile *f = NULL;
  int rc = mmrt_st_open(&f, file, err, errlen);
  for (int64_t i = 0; i < m->nparams && rc == MMRT_OK; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != MMRT_ARENA_PARAM || (adapters && !mmrt_is_adapter(p->name))) continue;
    if (mmrt_st_find(f, p->name) < 0) {
      if (adapters || !mmrt_is_adapter(p->name)) /* adapters may come from a file of their own */
        rc = mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "%s: no tensor '%s'", file, p->name);
      continue;
    }
    MmrtTensorRef ref = {.name = p->name,
                         .dtype = (MmrtStDtype)p->dtype,
                         .ndim = (int)p->ndim,
                         .data = arenas[p->arena] + p->offset};
    for (int64_t d = 0; d < p->ndim; d++) ref.shape[d] = p->shape[d];
    rc = mmrt_st_read(f, &ref, err, errlen);
    *loaded += rc == MMRT_OK;
  }
  if (f) mmrt_st_close(f);
  return rc;
}
