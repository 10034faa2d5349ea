/* The pass pipeline: each pass is `bool run(IrModule *, PassCtx *)`, false
 * meaning a diagnostic was emitted. The list in passes.def is the order they
 * run in; `mmc dump-ir --after NAME` prints the module after any of them. */
#ifndef MM_PASSES_PASS_H
#define MM_PASSES_PASS_H

#include <stdbool.h>

#include "../frontend/plan.h"
#include "../ir/ir.h"

typedef struct PassCtx {
  Diag *d;
  const MmPlan *plan;
  const MmTrain *train;
  bool no_fuse;   /* fuse: leave every op on its own (mmc --no-fuse) */
  bool inference; /* generate/eval executables: no @train (autodiff and optimizer do nothing) */
} PassCtx;

typedef struct Pass {
  const char *name;
  const char *summary;
  bool (*run)(IrModule *m, PassCtx *cx);
} Pass;

/* The passes after `lower` (which is the frontend), in order. */
extern const Pass pass_list[];
extern const int pass_count;

/* Runs passes in order up to and including `stop` (NULL: all). After each,
 * calls after(name, m, user) if given; in debug builds verifies the IR. */
bool pass_run_pipeline(IrModule *m, PassCtx *cx, const char *stop,
                       void (*after)(const char *name, IrModule *m, void *user), void *user);
bool pass_exists(const char *name);

#endif
