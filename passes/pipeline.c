/* The pass pipeline, top to bottom. `lower` is the frontend's elaboration;
 * the passes below run on its IR. */
#include <string.h>

#include "pass.h"

#define PASS(N, S) bool pass_##N(IrModule *m, PassCtx *cx);
#include "passes.def"
#undef PASS

const Pass pass_list[] = {
#define PASS(N, S) {#N, S, pass_##N},
#include "passes.def"
#undef PASS
};
const int pass_count = (int)(sizeof pass_list / sizeof pass_list[0]);

bool pass_exists(const char *name) {
  if (strcmp(name, "lower") == 0) return true;
  for (int i = 0; i < pass_count; i++)
    if (strcmp(pass_list[i].name, name) == 0) return true;
  return false;
}

bool pass_run_pipeline(IrModule *m, PassCtx *cx, const char *stop,
                       void (*after)(const char *name, IrModule *m, void *user), void *user) {
  if (after) after("lower", m, user);
  if (stop && strcmp(stop, "lower") == 0) return true;
  for (int i = 0; i < pass_count; i++) {
    if (!pass_list[i].run(m, cx)) return false;
#ifdef MMC_VERIFY_EACH_PASS
    if (!ir_verify(m)) return false;
#endif
    if (after) after(pass_list[i].name, m, user);
    if (stop && strcmp(stop, pass_list[i].name) == 0) break;
  }
  return true;
}
