/* desc_probe: prints the model descriptor `mm_model` of a compiled model
 * (a shared object made from `mmc compile --emit obj`), one line per field
 * read through the C structs of runtime/model/mmrt_main.h:
 *   model.FIELD=VALUE          arrays as comma lists, strings as they are,
 *   param.NAME.FIELD=VALUE     step functions and pointers to records as
 *   input.NAME.FIELD=VALUE     set or null
 * and under a pipeline its records:
 *   pp.rank.R.FIELD=VALUE      MmrtPpRank of pipeline rank R
 *   pp.actions.R=0F0 0F1 ...   its actions, stage kind micro-batch
 *   pp.xfer_route=F>T ...      the step's transfers, pp.eval_route the evaluation's
 *   pp.accum_stage=S ...
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
static void put_ptr(const char *pre, const char *f, const void *p, size_t size) {
  (void)size;
  printf("%s%s=%s\n", pre, f, *(const void *const *)p ? "set" : "null");
}
#define put_i64s       put_ptr
#define put_pp_ranks   put_ptr
#define put_pp_actions put_ptr
#define put_pp_routes  put_ptr

static void put_routes(const char *f, const MmrtPpRoute *r, int64_t n) {
  printf("pp.%s=", f);
  for (int64_t i = 0; i < n; i++)
    printf("%s%lld>%lld", i ? " " : "", (long long)r[i].from, (long long)r[i].to);
  printf("\n");
}

static void put_pp(const MmrtModelDesc *m) {
  for (int64_t r = 0; r < m->pp; r++) {
    char pre[64];
    snprintf(pre, sizeof pre, "pp.rank.%lld.", (long long)r);
    const MmrtPpRank *x = &m->pp_rank[r];
#define MMRT_PP_RANK(ty, name, dims) put_##ty(pre, #name, &x->name, sizeof x->name);
#include "mmrt_desc.def"
    printf("pp.actions.%lld=", (long long)r);
    for (int64_t i = 0; i < x->nactions; i++) {
      const MmrtPpAction *a = &m->pp_actions[x->first + i];
      printf("%s%lld%c%lld", i ? " " : "", (long long)a->stage,
             a->kind >= 0 && a->kind < 4 ? "FBIW"[a->kind] : '?', (long long)a->mb);
    }
    printf("\n");
  }
  put_routes("xfer_route", m->pp_xfer_route, m->pp_nxfer);
  put_routes("eval_route", m->pp_eval_route, m->pp_eval_nxfer);
  printf("pp.accum_stage=");
  for (int64_t i = 0; i < m->naccum; i++)
    printf("%s%lld", i ? " " : "", (long long)m->pp_accum_stage[i]);
  printf("\n");
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
  if (m->pp > 1 && m->pp_rank && m->pp_actions) put_pp(m);
  return 0;
}
