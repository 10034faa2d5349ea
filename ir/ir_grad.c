/* Gradient rules (vector-Jacobian products), one per GRAD op of ops.def.
 * Placeholder: every rule reports that it is not written yet. */
#include <stdio.h>

#include "ir.h"

#define STUB_GRAD(N)                                                       \
  bool ir_grad_##N(IrGradCtx *cx) {                                        \
    snprintf(cx->err, cx->errlen, "gradient rule of %s is not written yet", #N); \
    return false;                                                          \
  }
#define STUB_NOGRAD(N)
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, G) STUB_##G(N)
#include "ops.def"
#undef OP
