/* The nodes the backend does inside the kernel call of the node before
 * them: a bias add, a residual add or a gradient sum folded into the kernel
 * that makes its operand, the f32 cast of a bf16 product written by the
 * product itself, the adamw nodes of one multi-tensor call.
 * codegen/cg_ops.c lowers them so and the cost model (passes/cost.c)
 * charges them so (one call, one fixed time), both through the predicates
 * here, so that the prediction follows the program (docs/planner.md
 * "Merged calls").
 *
 * They hold on the module as memplan left it (storage offsets) and on the
 * rank's view of it: sizes and shapes are each value's local ones
 * (ir_local_shape), which codegen's localized values (placements all B)
 * and the passes' global ones give alike. A dim split over the mesh is read
 * from the placements, so in codegen, whose localized values have none,
 * the caller tells it apart first (its split kernels fold nothing). */
#ifndef MM_IR_IR_MERGE_H
#define MM_IR_IR_MERGE_H

#include "ir.h"

/* uses: each value of f -> how many operands of f's nodes (and results of
 * f) read it, in a map allocated in a. */
void ir_use_counts(const IrFunc *f, Arena *a, IrMap *uses);

/* The bias vector that node i + 1 of f adds to the result y of linear node
 * i, when the linear kernel can add it instead: the add reads y alone (its
 * only use) and an f32 vector [N], and writes in place (its storage is
 * y's). NULL when the pattern does not hold. */
const IrValue *ir_linear_bias_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses);

/* A bf16 product (linear, linear_grad_x, linear_grad_w) node i whose result
 * only node i + 1 reads, and that node casts it back to f32 (`cast {dtype =
 * f32}`, or after a linear with bias: the fused `t0 = cast(i0) {dtype =
 * f32}; t1 = add(t0, i1)` with an f32 vector [N], *bias): the kernel writes
 * the f32 result into that node's storage (returned) instead. NULL when the
 * pattern does not hold or the storage overlaps node i's operands. */
const IrValue *ir_f32_dest_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses,
                                const IrValue **bias);

/* The residual add node i + 1 makes of the dx of layer_norm_grad node i
 * (its result 0, read by the add alone), add(r, dx) or add(dx, r) in place
 * onto r: the kernel adds dx into r's storage (returned) itself. NULL when
 * the pattern does not hold, the normalised dim is split over the mesh, or
 * r's storage overlaps node i's operands or other results. */
const IrValue *ir_residual_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses);

/* The add node i + 1 makes of the gradient g of embedding_grad node i (read
 * by it alone) and another gradient b of the table, add(b, g), add(g, b) or
 * the bf16 `t0 = cast(i0) {dtype = f32}; t1 = add(t0, i1)` with i1 = g: the
 * kernel writes b + g into the add's storage (returned; *base = b). NULL
 * when the pattern does not hold, the table's rows are split over the mesh,
 * or the storage overlaps b or node i's operands. */
const IrValue *ir_grad_sum_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses,
                                const IrValue **base);

/* adamw node b joins the multi-tensor call of adamw node a: the same lr,
 * step and scale operands, betas and eps. */
bool ir_adamw_joins(const IrNode *a, const IrNode *b);

/* The last node of the multi-tensor call that adamw node i of f starts: the
 * adamw nodes right after it that join it (keep: only nodes j with keep[j]
 * count, NULL: all). */
int ir_adamw_run_end(const IrFunc *f, int i, const unsigned char *keep);

typedef enum IrMerge {
  IR_MERGE_NONE,     /* a call of its own */
  IR_MERGE_EPILOGUE, /* done by the call before it as it writes its result: no time of its own */
  IR_MERGE_CALL,     /* one more tensor of the call before it: its work, no fixed time */
} IrMerge;

/* How node i of f is done: inside the call of node i - 1 (one of the
 * patterns above) or by a call of its own. uses: ir_use_counts of f. */
IrMerge ir_merged_into_prev(const IrModule *m, const IrFunc *f, int i, const IrMap *uses);

#endif
