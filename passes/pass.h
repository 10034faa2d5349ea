/* The pass pipeline: each pass is `bool run(IrModule *, PassCtx *)`, false
 * meaning a diagnostic was emitted. The list in passes.def is the order they
 * run in; `mmc dump-ir --after NAME` prints the module after any of them and
 * `mmc opt FILE.mmir --passes a,b` runs chosen ones on IR text. Everything a
 * pass reads (the plan, the train settings) is in the module (IrModule.plan,
 * .train, .inference, .no_fuse), so a parsed module runs as a built one. */
#ifndef MM_PASSES_PASS_H
#define MM_PASSES_PASS_H

#include <stdbool.h>
#include <stddef.h>

#include "../ir/settings.h"
#include "../ir/ir.h"

typedef struct PassCtx {
  Diag *d; /* NULL: the module's */
} PassCtx;

typedef struct Pass {
  const char *name;
  const char *
    requires; /* space-separated pass names, or "" */
  const char *summary;
  bool (*run)(IrModule *m, PassCtx *cx);
} Pass;

/* One function per pass, as passes.def names them: pass_verify, pass_lora, ... */
#define PASS(N, R, S) bool pass_##N(IrModule *m, PassCtx *cx);
#include "passes.def"
#undef PASS

/* The passes after `lower` (which is the frontend), in order. */
extern const Pass pass_list[];
extern const int pass_count;

/* Runs the passes that follow the last one run on m (all of them on a
 * module fresh from the frontend) in order, up to and including `stop`
 * (NULL: all). After each, calls after(name, m, user) if given ("lower"
 * first, when no pass has run); in debug builds verifies the IR. */
bool pass_run_pipeline(IrModule *m, PassCtx *cx, const char *stop,
                       void (*after)(const char *name, IrModule *m, void *user), void *user);
bool pass_exists(const char *name); /* a pass or "lower" */
/* A gan's gate in f (autodiff.c): relu(step - start) - relu(step - start - 1),
 * 1 from step start + 1 on and 0 before; NULL after a message. */
IrValue *pass_gan_gate(IrModule *m, IrFunc *f, IrValue *step, Diag *d);
int pass_index(const char *name); /* in pass_list, or -1 */
/* Whether pass i may run on m now (see passes.def); else false and a
 * message in err. */
bool pass_can_run(const IrModule *m, int i, char *err, size_t errlen);
/* Runs pass i (pass_can_run first: its message becomes a diagnostic) and
 * records it in m->passes_run. */
bool pass_run(IrModule *m, PassCtx *cx, int i);

/* How many parameters the shard pass's tp strategy would split on m's
 * forward at tensor parallel degree tp (no messages, nothing changed; a
 * vocabulary tp does not divide counts, vocabpad pads it). 0: tp splits
 * nothing, which the frontend and the pass refuse (TP_NOTHING, ir/settings.h, says why). */
int shard_tp_splits(IrModule *m, int tp);

#endif
