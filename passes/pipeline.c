/* The pass pipeline, top to bottom. `lower` is the frontend's elaboration;
 * the passes below run on its IR. */
#include <stdio.h>
#include <string.h>

#include "pass.h"

const Pass pass_list[] = {
#define PASS(N, R, S) {#N, R, S, pass_##N},
#include "passes.def"
#undef PASS
};
const int pass_count = (int)(sizeof pass_list / sizeof pass_list[0]);

int pass_index(const char *name) {
  for (int i = 0; i < pass_count; i++)
    if (strcmp(pass_list[i].name, name) == 0) return i;
  return -1;
}

bool pass_exists(const char *name) {
  return strcmp(name, "lower") == 0 || pass_index(name) >= 0;
}

/* The index of the last pipeline pass run on m (verify aside), or -1. */
static int last_run(const IrModule *m) {
  int last = -1;
  for (int k = 0; k < m->passes_run.len; k++) {
    int j = pass_index(m->passes_run.items[k]);
    if (j > 0 && j > last) last = j;
  }
  return last;
}

/* " verify lora ..." (or " none"): the passes run on m, appended to buf */
static void append_run(const IrModule *m, char *buf, size_t n) {
  for (int k = 0; k <= m->passes_run.len; k++) {
    size_t len = strlen(buf);
    if (k < m->passes_run.len)
      snprintf(buf + len, n - len, " %s", (const char *)m->passes_run.items[k]);
    else if (k == 0)
      snprintf(buf + len, n - len, " none");
  }
}

bool pass_can_run(const IrModule *m, int i, char *err, size_t errlen) {
  const Pass *p = &pass_list[i];
  for (int k = 0; k < m->passes_run.len; k++) {
    const char *done = m->passes_run.items[k];
    if (pass_index(done) < 0) {
      snprintf(err, errlen, "the module's passes(...) names '%s', which is not a pass", done);
      return false;
    }
  }
  if (i == 0) return true; /* verify: anywhere */
  if (ir_module_ran(m, p->name)) {
    snprintf(err, errlen, "%s has run on this module already", p->name);
    return false;
  }
  int last = last_run(m);
  if (last > i) {
    snprintf(err, errlen, "%s must run before %s, which has run already", p->name,
             pass_list[last].name);
    return false;
  }
  for (const char *r = p->requires; *r;) {
    size_t n = strcspn(r, " ");
    char need[64];
    snprintf(need, sizeof need, "%.*s", (int)n, r);
    if (n && !ir_module_ran(m, need)) {
      snprintf(err, errlen, "%s needs %s to have run first (passes run so far:", p->name, need);
      append_run(m, err, errlen);
      size_t len = strlen(err);
      snprintf(err + len, errlen - len, ")");
      return false;
    }
    r += n;
    while (*r == ' ') r++;
  }
  return true;
}

bool pass_run(IrModule *m, PassCtx *cx, int i) {
  char err[512];
  Diag *d = cx && cx->d ? cx->d : m->diag;
  if (!pass_can_run(m, i, err, sizeof err)) {
    diag_error_plain(d, "pass %s: %s", pass_list[i].name, err);
    return false;
  }
  if (!pass_list[i].run(m, cx)) return false;
#ifdef MMC_VERIFY_EACH_PASS
  if (!ir_verify(m)) return false;
#endif
  ir_module_mark_ran(m, pass_list[i].name);
  return true;
}

bool pass_run_pipeline(IrModule *m, PassCtx *cx, const char *stop,
                       void (*after)(const char *name, IrModule *m, void *user), void *user) {
  int first = m->passes_run.len ? last_run(m) + 1 : 0;
  if (first == 0 && m->passes_run.len) first = 1; /* only verify has run */
  Diag *d = cx && cx->d ? cx->d : m->diag;
  if (stop && (strcmp(stop, "lower") == 0 ? first > 0 : pass_index(stop) < first)) {
    char run[512] = "";
    append_run(m, run, sizeof run);
    diag_error_plain(d, "%s has run on this module already, or a pass after it has (passes run:%s)",
                     stop, run);
    return false;
  }
  if (first == 0 && after) after("lower", m, user);
  if (stop && strcmp(stop, "lower") == 0) return true;
  for (int i = first; i < pass_count; i++) {
    if (!pass_run(m, cx, i)) return false;
    if (after) after(pass_list[i].name, m, user);
    if (stop && strcmp(stop, pass_list[i].name) == 0) break;
  }
  return true;
}
