/* The `verify` pass: the IR verifier as a pipeline step, so that the lowered
 * graph is checked in every build, not only in debug ones. */
#include "pass.h"

bool pass_verify(IrModule *m, PassCtx *cx) {
  (void)cx;
  return ir_verify(m);
}
