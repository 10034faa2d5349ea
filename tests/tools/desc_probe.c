/* desc_probe: prints the model descriptor `mm_model` of a compiled model
 * (a shared object made from `mmc compile --emit obj`), one line per field
 * read through the C structs of runtime/model/mmrt_main.h:
 *   model.FIELD=VALUE          arrays as comma lists, strings as they are,
 *   param.NAME.FIELD=VALUE     step functions as set or null
 *   input.NAME.FIELD=VALUE
 * The fields come from runtime/model/mmrt_desc.def; tests/backend_desc.sh checks
 * the values against the plan and the model source.
 * Usage: desc_probe MODEL.so */
#include <dlfcn.h>
#include <stdio.h>

#include "mmrt_main.h"

static void put_i64(const char *pre, const char *f, const void *p, size_t size) {
  const int64_t *v = p;
  printf("%s%s=", pre, f);
  for (size_t i = 0; i < size / sizeof *v; i++) printf("%s%lld", i ? "," : "", (long long)v[i]);
  printf("\n");
}
static void put_f64(const char *pre, const char *f, const void *p, size_t size) {
  (void)size;
  printf("%s%s=%.17g\n", pre, f, *(const double *)p);
}
static void put_str(const char *pre, const char *f, const void *p, size_t size) {
  const char *v = *(const char *const *)p;
  (void)size;
  printf("%s%s=%s\n", pre, f, v ? v : "(null)");
}
static void put_tensors(const char *pre, const char *f, const void *p, size_t size) {
  (void)size;
  printf("%s%s=%s\n", pre, f, *(const MmrtTensorDesc *const *)p ? "set" : "null");
}
static void put_step(const char *pre, const char *f, const void *p, size_t size) {
  (void)size;
  printf("%s%s=%s\n", pre, f, *(const MmrtStepFn *)p ? "set" : "null");
}

static void put_tensor(const char *kind, const MmrtTensorDesc *t) {
  char pre[300];
  snprintf(pre, sizeof pre, "%s.%s.", kind, t->name);
#define MMRT_TENSOR(ty, name, dims) put_##ty(pre, #name, &t->name, sizeof t->name);
#define MMRT_MODEL(ty, name, dims)
#include "mmrt_desc.def"
#undef MMRT_TENSOR
#undef MMRT_MODEL
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: desc_probe MODEL.so\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);
  const MmrtModelDesc *m = h ? dlsym(h, "mm_model") : NULL;
  if (!m) {
    fprintf(stderr, "desc_probe: %s: no mm_model (%s)\n", argv[1], dlerror());
    return 1;
  }
#define MMRT_TENSOR(ty, name, dims)
#define MMRT_MODEL(ty, name, dims) put_##ty("model.", #name, &m->name, sizeof m->name);
#include "mmrt_desc.def"
#undef MMRT_TENSOR
#undef MMRT_MODEL
  for (int64_t i = 0; i < m->nparams; i++) put_tensor("param", &m->params[i]);
  for (int64_t i = 0; i < m->ninputs; i++) put_tensor("input", &m->inputs[i]);
  return 0;
}
