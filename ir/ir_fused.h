/* The sub-program of a `fused` node: a chain (a DAG) of elementwise ops that
 * the `fuse` pass merged and codegen turns into one loop.
 *
 * It lives in the node's `prog` attribute as text, so that the IR text form
 * round-trips without new syntax:
 *
 *   %7 = fused(%5, @h.0.fc1.bias) {prog = "t0 = add(i0, i1); t1 = relu(t0)"} : f32[4, 32, 256]
 *
 * iK is operand K of the node, broadcast (numpy rules) to the node's result
 * shape; tK is the value of instruction K; the node's result is the value of
 * the last instruction. An instruction is any op of the table flagged
 * OPF_ELEMWISE, with that op's attributes in braces ({value = 0.5},
 * {p = 0.1, seed = 3}, {dtype = i32}); its result type comes from the op's
 * own shape rule, so a sub-program is checked exactly like the nodes it
 * replaced. Every value is computed at each element of the result. */
#ifndef MM_IR_IR_FUSED_H
#define MM_IR_IR_FUSED_H

#include "ir.h"

#define IR_FUSED_MAX_ARGS 4

typedef struct IrFusedInstr {
  IrOp op;
  int nargs;
  int arg[IR_FUSED_MAX_ARGS]; /* >= 0: instruction index (tK); < 0: operand -1 - K (iK) */
  IrAttrs attrs;
  IrDType dtype; /* result dtype (from the shape rule) */
  IrShape shape; /* result shape before broadcasting to the node's */
} IrFusedInstr;

typedef struct IrFusedProg {
  int n;
  IrFusedInstr *ins; /* n instructions, in evaluation order */
} IrFusedProg;

/* Parses `text` for a node with `nin` operands of the given dtypes and
 * shapes, running each instruction's shape rule (NULL dtypes/shapes: skip
 * the type check and leave dtype/shape unset). Allocates in `a`. On error
 * returns false with a message in err. */
bool ir_fused_parse(const char *text, int nin, const IrDType *dtypes, const IrShape *const *shapes,
                    IrFusedProg *out, Arena *a, char *err, size_t errlen);

/* The text form of a program (allocated in a). */
char *ir_fused_format(const IrFusedProg *p, Arena *a);

/* The program of a fused node (parsed with its operands' types); asserts
 * that the node is a valid fused node. */
void ir_fused_of(const IrNode *n, IrFusedProg *out, Arena *a);

#endif
