/* Shared state of the codegen files:
 *   cg_module.c  the module, step functions, descriptor
 *   cg_abi.c     calls of runtime functions, typed from runtime/core/mmrt_abi.def
 *   cg_ops.c     one lowering per op: runtime kernel calls
 *   cg_loops.c   loop nests: fused elementwise programs, layout ops, reductions
 *   cg_emit.c    target machine, optimisation, object emission, the link */
#ifndef MM_CODEGEN_CG_INTERNAL_H
#define MM_CODEGEN_CG_INTERNAL_H

#include <llvm-c/Core.h>

#include "../passes/memplan.h"
#include "../passes/pp_stage.h"
#include "mmrt_main.h"
#include "cg.h"

/* pointers of one loop nest: the result and up to 64 operands, and spare */
#define CG_MAX_PTRS 70

typedef struct Cg {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef t_void, t_i1, t_i8, t_i16, t_i32, t_i64, t_f32, t_f64, t_ptr;
  Diag *d;
  const IrModule *m;
  Arena *a;
  const CgOptions *opts; /* the driver's options (the predicted step) */
  /* the step function being built */
  const IrFunc *f;
  LLVMValueRef fn;
  LLVMValueRef bases[IR_ROLE_COUNT]; /* arena bases, by role */
  LLVMValueRef seed;                 /* i64: the run seed */
  LLVMValueRef mesh;                 /* ptr: the MmrtMesh of a multi-rank run, or NULL */
  LLVMValueRef step;                 /* f32: the step input, or NULL */
  LLVMBasicBlockRef fail_bb;         /* returns -1 */
  bool training;                     /* @train: dropout is on */
  int cur;                           /* index of the node being lowered */
  IrMap uses;                        /* IrValue* -> i: its uses in the function (results count) */
  const IrNode *skip;                /* a later node already done by the current one's kernel */
  int skip_to;                       /* nodes up to this index are done by the current one's */
  const unsigned char *keep;         /* the step's nodes (cg_build_step's keep), or NULL: all */
  bool failed;
  int nfns;              /* helper functions made so far (names) */
  PpAssign pp;           /* pipeline stages of @train (cg_pp.c) */
  PpAssign pp_eval;      /* and of @forward, the evaluation (its pp facts) */
  const IrNode *pp_seed; /* pipeline: the gradient seed, the micro-batch's label count */
  int pp_rank1;          /* building pipeline rank r's update: r + 1 (else 0) */
  IrMap pp_mask;         /* pipeline: param or state name -> i: the pp ranks holding it */
  IrMap pp_maker;        /* pipeline: a gradient the update reads -> i: 1 + its maker's rank */
  /* micro-batches: the dp gradient reductions deferred to the step's last
   * micro-batch (cg_pp.c cg_mb_defer_set), while mm_train_step is built */
  IrMap defer;       /* IrNode* -> i: 1 deferred, 2 + j: deferred root j (stashes in[0]) */
  IrMap defer_mm;    /* IrNode*: a root's weight-gradient matmul -> 1 + j (passes/accum.h fused) */
  IrMap defer_fused; /* a root's operand -> 1: its matmul wrote into the sum; 2: mmrt_mb_defer */
  const IrValue **defer_roots; /* root j's operand */
  bool defer_on;               /* the function being built defers them */
  LLVMValueRef defer_now;      /* i1: this micro-batch is not the step's last */
  /* ZeRO-1/2's parameter gathers once a step (passes/accum.h MbDefer.once) */
  IrMap once;            /* IrNode* -> 1 */
  bool once_on;          /* the function being built has them */
  LLVMValueRef once_now; /* i1: this micro-batch gathers (the step's first) */
  /* before localize: each value's global shape and placement */
  IrMap orig; /* IrValue* -> p: CgOrig* */
  /* a tile bucket's program (cg_compile_buckets): its symbols end in this
   * ("_b1"); "" for the main program */
  const char *suffix;
  LLVMValueRef desc; /* the descriptor built (build_desc) */
} Cg;

/* A multi-rank module is made local before lowering (cg_module.c): every
 * value's shape becomes its rank's piece and its placement B, so kernels
 * see plain shapes; what was split is kept here for the few lowerings that
 * need it (losses over split rows, norms of split gradients, descriptors). */
typedef struct CgOrig {
  IrShape shape;
  IrPlacement pl[IR_NAXES];
} CgOrig;
/* Bit a set when mesh axis a split the value (0 on one rank). */
int cg_split_axes(const Cg *cg, const IrValue *v);
/* The value's global shape and placement (its own when never localised). */
const CgOrig *cg_orig(const Cg *cg, const IrValue *v);

/* ---- cg_module.c ---- */
/* i32 name(ptr arenas, i64 seed, ptr mesh) of f's nodes in order (keep:
 * only the nodes i with keep[i]); NULL after an error. */
LLVMValueRef cg_build_step(Cg *cg, const IrFunc *f, const char *name, bool training,
                           const unsigned char *keep);

/* ---- cg_pp.c: micro-batches ---- */
typedef struct CgMb {
  int M;                 /* micro-batches per step (1: none) */
  LLVMValueRef fb, upd;  /* mm_train_step (one micro-batch), mm_update_step */
  const IrValue **accum; /* what the update reads from the micro-batches */
  int naccum;
  /* the dp gradient reductions run once a step (cg_pp.c): the operand of
   * each deferred root collective, summed over the micro-batches by the
   * runtime (mmrt_mb_defer), and per accum tensor 1 when a deferred
   * collective makes it (the sum of the step's micro-batches, reduced) */
  const IrValue **defer;
  int ndefer;
  int64_t *accum_deferred; /* [naccum], NULL when ndefer is 0 */
  int64_t *defer_stage;    /* [ndefer] under a pipeline, else NULL */
  int64_t *defer_home;     /* [ndefer]: the sum's grad-arena offset, or -1 */
  int nonce;               /* the parameter gathers run once a step (MbDefer.once) */
  /* pipeline (pp > 1): the stage functions, transfers and schedule as the
   * descriptor holds them (runtime/model/mmrt_desc.def) */
  LLVMValueRef pp_fn[MMRT_PP_MAXFN];
  LLVMValueRef pp_upd[MMRT_PP_MAXRANKS]; /* each pp rank's update of what it holds */
  const IrValue **xfer;
  int nxfer;
  int64_t *route;                /* [nxfer][2]: from, to (3 s + q) */
  int64_t *xfer_how;             /* [nxfer]: the descriptor's pp_xfer_how */
  int64_t *xfer_src;             /* [nxfer]: the descriptor's pp_xfer_src */
  int64_t *tp_chunk;             /* [nxfer]: 1 when tp rank k sends chunk k (cg_pp_tp_chunk) */
  int64_t *accum_stage;          /* [naccum] */
  int64_t *sched;                /* each rank's actions in turn, [][3]: MMRT_PP_* kind, stage, mb */
  int sched_n[MMRT_PP_MAXRANKS]; /* rank r's actions */
  /* the evaluation through the pipeline: @forward's stage functions and
   * transfers (cg_pp_eval_build) */
  LLVMValueRef pp_eval_fn[MMRT_PP_MAXSTAGES];
  const IrValue **eval_xfer;
  int neval_xfer;
  int64_t *eval_route; /* [neval_xfer][2]: from, to (stages) */
} CgMb;
bool cg_mb_build(Cg *cg, const IrFunc *ftrain, CgMb *out);
/* Whether a pipeline transfer of v is split over tp (pp_scatter,
 * docs/pp-transfers.md): v replicated over tp > 1 ranks, pp_scatter on, not
 * separate placement (whose first stage may be one rank). */
bool cg_pp_tp_chunk(const Cg *cg, const IrValue *v);
/* Lowers deferred node n (cg->defer) of the micro-batch: its roots' sums
 * (mmrt_mb_defer), then the node itself on the step's last micro-batch only. */
bool cg_mb_lower_deferred(Cg *cg, const IrNode *n);
/* Lowers a parameter's gather of cg->once: run on the step's first
 * micro-batch only (mmrt_mb_gathering); the later ones read its copy. */
bool cg_mb_lower_once(Cg *cg, const IrNode *n);
/* A weight-gradient matmul n (linear_grad_w) that makes a deferred root's
 * operand dw (f32): the call that writes it into the root's sum
 * (mmrt_mb_linear_bwd_weights) instead of dw, and true; false (nothing
 * emitted) when n is not such a matmul in the function being built. */
bool cg_mb_linear_w(Cg *cg, const IrNode *n, const IrValue *dw, LLVMValueRef dt, LLVMValueRef dy,
                    LLVMValueRef x, LLVMValueRef rows, LLVMValueRef K, LLVMValueRef N,
                    LLVMValueRef overlap);
bool cg_pp_assign(Cg *cg, const IrFunc *ftrain, const IrFunc *feval);
bool cg_pp_build(Cg *cg, const IrFunc *ftrain, CgMb *out);
bool cg_pp_eval_build(Cg *cg, const IrFunc *feval, CgMb *out);
/* While a pipeline rank's update is built: whether its gradient norm
 * counts v, a gradient the update reads (only where it is made: a tied
 * parameter's other holders receive the sum and do not count it again). */
bool cg_pp_keeps_grad(const Cg *cg, const IrValue *v);

bool cg_error(Cg *cg, const IrNode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
LLVMValueRef cg_i32(Cg *cg, int64_t v);
LLVMValueRef cg_i64(Cg *cg, int64_t v);
LLVMValueRef cg_f32(Cg *cg, double v);
LLVMValueRef cg_f64(Cg *cg, double v);
LLVMValueRef cg_null(Cg *cg);
/* A pointer to a value's storage: its arena base + its planned offset. */
LLVMValueRef cg_ptr(Cg *cg, const IrValue *v);
/* A pointer into node n's scratch, `off` bytes in. */
LLVMValueRef cg_ws(Cg *cg, const IrNode *n, int64_t off);
/* A call of a runtime (or libm) function by name; its type comes from its
 * entry in runtime/core/mmrt_abi.def (cg_abi.c). */
LLVMValueRef cg_call(Cg *cg, const char *name, LLVMValueRef *args, int nargs);
/* An LLVM intrinsic overloaded on `type` (e.g. "llvm.sqrt"). */
LLVMValueRef cg_intrinsic(Cg *cg, const char *name, LLVMTypeRef type, LLVMValueRef *args,
                          int nargs);
/* Branch to the failure exit when the i32 status r is negative. */
void cg_check_status(Cg *cg, LLVMValueRef r);
/* A private constant global (for shape arrays and conv geometry). */
LLVMValueRef cg_const_global(Cg *cg, LLVMValueRef init, const char *name);
LLVMValueRef cg_i32_array(Cg *cg, const int32_t *v, int n);
/* Loads an f32[] scalar value. */
LLVMValueRef cg_load_f32(Cg *cg, const IrValue *v);
/* A fresh internal function `void name.N(ptr x nptr, i64 x nextra)`; the
 * builder moves into its entry block (cg_end_fn returns it to the caller's
 * block). */
LLVMValueRef cg_begin_fn(Cg *cg, const char *prefix, int nptr, int nextra,
                         LLVMBasicBlockRef *saved);
void cg_end_fn(Cg *cg, LLVMBasicBlockRef saved);
LLVMTypeRef cg_dtype(Cg *cg, IrDType t); /* the LLVM type of one element (NULL: unsupported) */

/* ---- cg_ops.c ---- */
bool cg_lower_node(Cg *cg, const IrNode *n);

/* ---- cg_loops.c ---- */

/* An iteration space and, per pointer, its stride (in elements) along each
 * dim; pointer 0 is usually the result. */
typedef struct CgNest {
  int rank;
  int64_t dims[IR_MAX_RANK];
  int nptr;
  int64_t stride[CG_MAX_PTRS][IR_MAX_RANK];
  IrDType dtype[CG_MAX_PTRS];
} CgNest;

/* Contiguous strides of a shape; strides of `in` broadcast (numpy rules) to
 * the rank-r shape `out` (0 along broadcast dims). */
void cg_strides(const IrShape *s, int64_t *st);
void cg_bcast_strides(const IrShape *in, const IrShape *out, int64_t *st);

/* The loops of fused and elementwise nodes, of layout ops (transpose,
 * slice, concat, expand, pad_slice, copies), reductions (sum, mean, sum_to)
 * and row-wise ops the runtime lacks (log_softmax, softmax along another
 * axis, their gradients, mse, full). */
bool cg_loop_elementwise(Cg *cg, const IrNode *n);
bool cg_loop_copy(Cg *cg,
                  const IrNode *n); /* transpose, slice, expand, concat, pad_slice, reshape copy */
bool cg_loop_reduce(Cg *cg, const IrNode *n);  /* sum, mean, sum_to */
bool cg_loop_rowwise(Cg *cg, const IrNode *n); /* softmax, log_softmax and their gradients */
bool cg_loop_mse(Cg *cg, const IrNode *n);
bool cg_loop_fill(Cg *cg, const IrNode *n); /* full */
bool cg_loop_all_slice(Cg *cg, const IrNode *n, LLVMValueRef coord);
/* The batch loop of a broadcasting matmul: calls mmrt_matmul once per
 * result batch. */
bool cg_loop_matmul(Cg *cg, const IrNode *n, int64_t M, int64_t N, int64_t K);

#endif
