/* A reference interpreter of the IR: plain C, naive loops, every value held
 * in double precision (integer dtypes too: their values are exact up to
 * 2^53), no oneDNN. It is the independent oracle of the tests: gradients
 * against finite differences, the backend's kernels and trainers against
 * it. Speed is not a goal.
 *
 * A store maps IR values (function inputs, parameters, node results) to
 * tensors. The caller puts the inputs and parameters (ir_store_put, or
 * ir_store_init_params for the parameters' init specs), runs a function
 * (ir_eval_func), and reads the results and the parameters that in-place
 * ops (adamw, sgd) updated. Tensors are reused when a function runs again.
 *
 * Semantics follow ops.def and runtime/kernels/mmrt_kernels.h, except:
 *   - no rounding to f32/bf16: float dtypes are computed in double, and cast
 *     between float dtypes is the identity; cast to an integer dtype
 *     truncates toward zero (bool: != 0);
 *   - dropout keeps element i when uniform(seed, step, i) >= p and scales it
 *     by 1 / (1 - p); uniform is a splitmix64 hash unless the store has a
 *     hook (set it to the runtime's Philox stream to compare masks). */
#ifndef MM_IR_IR_EVAL_H
#define MM_IR_IR_EVAL_H

#include "ir.h"

typedef struct IrTensor {
  IrDType dtype;
  IrShape shape;
  int64_t n; /* numel */
  double *d; /* n values, row-major */
} IrTensor;

typedef struct IrTensorStore {
  Arena arena;   /* the map and the IrTensor records; data is malloc'd */
  IrMap map;     /* const IrValue* -> IrTensor* (p) */
  uint64_t step; /* the training step, for dropout masks (default 0) */
  double (*uniform)(void *user, int64_t seed, uint64_t step, uint64_t i); /* NULL: built-in */
  void *user;
} IrTensorStore;

void ir_store_init(IrTensorStore *st);
void ir_store_free(IrTensorStore *st);
/* The tensor of v, or NULL. */
IrTensor *ir_store_get(const IrTensorStore *st, const IrValue *v);
/* The tensor of v with v's dtype and shape, created as zeros when absent
 * (an existing one of another shape is reallocated and zeroed). */
IrTensor *ir_store_put(IrTensorStore *st, const IrValue *v);
/* Fills every parameter of m from its init spec (normal, uniform, fan_in,
 * zeros, ones, fill; none gives zeros) with a deterministic generator. */
void ir_store_init_params(IrTensorStore *st, const IrModule *m, uint64_t seed);
/* A uniform double in [0, 1) from (seed, stream, i), the built-in hash. */
double ir_eval_uniform(uint64_t seed, uint64_t stream, uint64_t i);

/* Runs f's nodes in order: reads operands from the store, writes results
 * (and in-place updates) into it. False on a missing operand or bad data
 * (an id or label out of range), with a message naming the node in err. */
bool ir_eval_func(const IrModule *m, const IrFunc *f, IrTensorStore *st, char *err, size_t errlen);
/* One node (the same, for tests of single ops). */
bool ir_eval_node(const IrModule *m, const IrNode *n, IrTensorStore *st, char *err, size_t errlen);

#endif
