/* The mmc IR: a module of parameters and SSA functions over tensors.
 *
 * Every value has a dtype, a concrete shape, a role and a placement per mesh
 * axis (S(d) split along dim d, B replicated, P partial sum). Every op is
 * declared once in ops.def; the enum, names, shape rules, parser, printer and
 * verifier come from that table. All memory of a module lives in its arena.
 *
 * Text form (print -> parse -> print is byte-identical). `mmc dump-ir t.mm
 * --after lower` of this t.mm:
 *
 *   model Tiny {
 *     emb = param f32[16, 8] = normal(0.02)
 *     forward(ids: i32[2, 4]) -> loss {
 *       x = embedding(ids, emb)
 *       return mean(x * x)
 *     }
 *   }
 *
 * prints
 *
 *   module @Tiny mesh(dp = 1, cp = 1, tp = 1)
 *   param @emb : f32[16, 8]{dp:B, cp:B, tp:B} init(normal, 0.02) loc("t.mm":2:3)
 *   func @forward(%ids : i32[2, 4]{dp:B, cp:B, tp:B} loc("t.mm":3:11)) {
 *     %0 = embedding(%ids, @emb) : f32[2, 4, 8]{dp:B, cp:B, tp:B} loc("t.mm":4:9)
 *     %1 = mul(%0, %0) : f32[2, 4, 8]{dp:B, cp:B, tp:B} loc("t.mm":5:17)
 *     %2 = mean(%1) {axes = [0, 1, 2]} : f32[]{dp:B, cp:B, tp:B} loc("t.mm":5:12)
 *     return %2
 *   }
 *
 * A module also carries its settings (plan(...), train(...)), the passes run
 * (passes(...)) and its layer groups; a node may add scope("h.0.ln_1") and
 * layer("h", 0), and after memplan each value its arena placement.
 */
#ifndef MM_IR_IR_H
#define MM_IR_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "settings.h" /* MmPlan, MmTrain: the settings a module carries */
#include "../support/arena.h"
#include "../support/diag.h"
#include "../support/mesh_axes.h"

#define IR_MAX_RANK 8

typedef enum IrDType {
  IR_F32,
  IR_BF16,
  IR_F16,
  IR_I32,
  IR_I64,
  IR_U8,
  IR_BOOL,
  IR_DTYPE_COUNT
} IrDType;
const char *ir_dtype_name(IrDType t);
bool ir_dtype_parse(const char *s, IrDType *out);
int ir_dtype_size(IrDType t);
bool ir_dtype_is_float(IrDType t);

typedef struct IrShape {
  int rank;
  int64_t d[IR_MAX_RANK];
} IrShape;
int64_t ir_numel(const IrShape *s); /* product of dims (1 for rank 0) */
bool ir_shape_eq(const IrShape *a, const IrShape *b);

/* Mesh axes in their fixed order; pipeline stages are not a placement axis. */
/* The mesh axes that split tensors: the rows of support/mesh_axes.def marked Y. */
typedef enum IrAxis {
#define MESH_AXIS(ID, name, nest, ir) MESH_IF_##ir(IR_AX_##ID = MESH_##ID, )
#include "../support/mesh_axes.def"
  IR_NAXES = MESH_NIR
} IrAxis;
const char *ir_axis_name(IrAxis a);

typedef enum IrPlaceKind { IR_PL_B, IR_PL_S, IR_PL_P } IrPlaceKind;
typedef struct IrPlacement {
  IrPlaceKind kind;
  int dim; /* for S */
} IrPlacement;

typedef enum IrRole {
  IR_ROLE_ACT,
  IR_ROLE_INPUT,
  IR_ROLE_PARAM,
  IR_ROLE_GRAD,
  IR_ROLE_OPT,
  IR_ROLE_COUNT
} IrRole;
const char *ir_role_name(IrRole r);

/* A node's part of a micro-batch's work under a pipeline (passes/pp_stage.h):
 * forward, input gradient, weight gradient, or the update (no stage).
 * IR_PP_NONE: the pipeline pass has not placed the node. */
typedef enum IrPpPart { IR_PP_NONE, IR_PP_F, IR_PP_I, IR_PP_W, IR_PP_U, IR_PP_COUNT } IrPpPart;
const char *ir_pp_part_name(IrPpPart p);
bool ir_pp_part_parse(const char *s, IrPpPart *out);

typedef enum IrInitKind {
  IR_INIT_NONE,
  IR_INIT_ZEROS,
  IR_INIT_ONES,
  IR_INIT_FILL,    /* fill(a) */
  IR_INIT_NORMAL,  /* normal(a = std) */
  IR_INIT_UNIFORM, /* uniform(a, b) */
  IR_INIT_FAN_IN,  /* uniform(-a/sqrt(fan_in), a/sqrt(fan_in)), fan_in = numel / dim 0 */
} IrInitKind;
typedef struct IrInit {
  IrInitKind kind;
  double a, b;
} IrInit;

/* ---- attributes ---- */
/* MESH: a mesh axis, printed by name (dp, cp, tp) */
typedef enum IrAttrKind {
  IR_AK_INT,
  IR_AK_INTS,
  IR_AK_FLOAT,
  IR_AK_BOOL,
  IR_AK_STR,
  IR_AK_DTYPE,
  IR_AK_MESH
} IrAttrKind;
typedef enum IrAttrId {
#define ATTR(N, S, K) IR_ATTR_##N,
#include "attrs.def"
#undef ATTR
  IR_ATTR_COUNT
} IrAttrId;
typedef struct IrAttrInfo {
  const char *name;
  IrAttrKind kind;
} IrAttrInfo;
extern const IrAttrInfo ir_attrs[IR_ATTR_COUNT];

typedef struct IrAttrVal {
  int64_t i;     /* INT, BOOL, DTYPE */
  double f;      /* FLOAT */
  const char *s; /* STR */
  int64_t *ints; /* INTS */
  int nints;
} IrAttrVal;
typedef struct IrAttrs {
  uint64_t set; /* bit IR_ATTR_X present */
  IrAttrVal v[IR_ATTR_COUNT];
} IrAttrs;
void ir_attrs_set_int(IrAttrs *a, IrAttrId id, int64_t v);
void ir_attrs_set_float(IrAttrs *a, IrAttrId id, double v);
void ir_attrs_set_bool(IrAttrs *a, IrAttrId id, bool v);
void ir_attrs_set_dtype(IrAttrs *a, IrAttrId id, IrDType v);
void ir_attrs_set_mesh(IrAttrs *a, IrAttrId id, IrAxis v);
/* ints are copied into the module arena when the node is built */
void ir_attrs_set_ints(IrAttrs *a, IrAttrId id, const int64_t *v, int n);
bool ir_attrs_has(const IrAttrs *a, IrAttrId id);
/* The dim of x that a layer_norm or layer_norm_grad with attributes a
 * normalises: its axis attribute when set (a dim before the last: channels of
 * [B, C, T, H, W]), else the last dim. */
int ir_norm_dim(const IrAttrs *a, const IrShape *x);

/* ---- the op table ---- */
typedef enum IrOp {
#define OP(N, ...) IR_OP_##N,
#include "ops.def"
#undef OP
  IR_OP_COUNT
} IrOp;

enum {
  OPF_ELEMWISE = 1 << 0, /* same-shape (after broadcast) pointwise: fusible */
  OPF_COMMUTATIVE = 1 << 1,
  OPF_VIEW = 1 << 2,    /* result may alias the operand's storage */
  OPF_LOSS = 1 << 3,    /* scalar loss */
  OPF_INPLACE = 1 << 4, /* side effect: updates the OPF_WRITES operands in place (never dead) */
  OPF_WRITES_STATE =
      1
      << 5, /* the operands it writes are function inputs holding state (a KV cache), not params */
  OPF_ACTIVATION = 1 << 6, /* a name activation("...") accepts */
  OPF_COLLECTIVE = 1 << 7, /* communicates over a mesh axis (all_slice keeps a piece: not one) */
  OPF_OPTIMIZER = 1 << 8,  /* a parameter update (the optimizer pass emits it) */
  /* its results after the first (saved statistics, lse) may be left off: the
   * kernel then writes them into scratch (memplan's workspace) */
  OPF_SCRATCH_OUTS = 1 << 9,
};
/* Operand i (< 16) of an OPF_INPLACE op is updated in place. */
#define OPF_WRITES(i)       (1u << (16 + (i)))
#define IR_OP_WRITES(op, i) ((i) < 16 && (ir_ops[op].flags & OPF_WRITES(i)))

/* FLOP classes (the cost rule is in ir_flops) */
typedef enum IrFlopKind {
  IR_FL_NONE,
  IR_FL_ELEM,
  IR_FL_MATMUL,
  IR_FL_LINEAR,
  IR_FL_CONV,
  IR_FL_ATTENTION,
  IR_FL_LINEAR_W,     /* linear_grad_w: 2 * numel(dy) * K */
  IR_FL_CONV_X,       /* convND_grad_x: 2 * numel(dy) * Cin * kernel volume, from w */
  IR_FL_CONV_W,       /* convND_grad_w: the same, from dw's shape */
  IR_FL_ATTENTION_BWD /* attention_grad: scores recomputed, 5 matmuls */
} IrFlopKind;

typedef struct IrShapeCtx IrShapeCtx;
typedef bool (*IrShapeFn)(IrShapeCtx *cx);
typedef struct IrGradCtx IrGradCtx;
typedef bool (*IrGradFn)(IrGradCtx *cx); /* see IrGradCtx below */

typedef struct IrOpInfo {
  const char *name;
  int min_in, max_in, nout;
  uint64_t req_attrs, opt_attrs;
  unsigned flags;
  IrFlopKind flop_kind;
  int flop_per_elem; /* for IR_FL_ELEM */
  IrShapeFn shape;
  IrGradFn grad;         /* vector-Jacobian rule, or NULL (ops.def: NOGRAD) */
  IrOp grad_op;          /* the op a shared rule emits (ops.def: GRAD_VIA), else 0 */
  uint8_t shard;         /* sharding rule (IrShardRuleId, ops.def: SH(rule, flags)) */
  unsigned shard_pflags; /* IR_SHP_*: how partial sums pass, sequence-parallel region */
} IrOpInfo;
extern const IrOpInfo ir_ops[IR_OP_COUNT];
bool ir_op_parse(const char *name, IrOp *out);

/* ---- values, nodes, functions, modules ---- */
typedef struct IrNode IrNode;
typedef struct IrValue {
  int id; /* printing number within its function; params use name */
  IrDType dtype;
  IrShape shape;
  IrRole role;
  IrPlacement pl[IR_NAXES];
  const char *name; /* params: hierarchical name; inputs: argument name; else NULL */
  IrNode *def;      /* producing node (NULL for params and inputs) */
  SrcLoc loc;
  /* params only */
  IrInit init;
  bool frozen; /* no gradient, no optimizer state */
  /* a padded vocabulary (passes/vocabpad.c): dim 0 holds `rows` real rows, the
   * rest are zero padding, never trained and never saved; 0: not padded */
  int64_t rows;
  struct IrValue
      *grad_of;     /* role GRAD: the parameter this is the gradient of (printed grad(@name)) */
  int group, layer; /* stack group index and layer in it, or -1 */
  void *aux;        /* free slot for passes (cleared by each user) */
  /* memory plan (passes/memplan.c): the arena (named by its role) and byte
   * offset of the storage; printed as mem(act, 4096) once planned */
  bool mem_planned;
  IrRole mem_arena;
  int64_t mem_offset;
  /* under a pipeline, a stage's forward output another rank reads: on the
   * pipeline ranks mem_send_ranks (its makers) it lives at mem_send_offset
   * of the grad arena (the working set), a room of its own the trainer
   * sends it from (docs/pp-memory.md "The send room"); mem_arena and
   * mem_offset are its place on the receivers. 0: one place everywhere */
  uint64_t mem_send_ranks;
  int64_t mem_send_offset;
} IrValue;

struct IrNode {
  IrOp op;
  IrValue **in;
  int nin;
  IrValue **out;
  int nout;
  IrAttrs attrs;
  const char *scope; /* module path of the instance that emitted it, e.g. "h.3.attn" */
  int group, layer;  /* stack group index (IrModule.groups) and layer, or -1 */
  SrcLoc loc;
  void *aux;
  /* scratch of the kernel in the act arena while the node runs (memplan);
   * printed as ws(offset, bytes) when ws_bytes > 0 */
  int64_t ws_offset, ws_bytes;
  /* the pipeline pass's facts (pp > 1, passes/pp_stage.h): the stage that
   * runs the node and its part, printed as pp(stage, F|I|W), or pp(U) for
   * the update (pp_stage unused); pp_part IR_PP_NONE: not placed */
  IrPpPart pp_part;
  int pp_stage;
};

/* A generated elementwise loop splits its outer loop over the threads from
 * this many elements on (codegen/cg_loops.c; below, one thread runs it:
 * a parallel region's start costs more than it saves); the cost model
 * charges it so (passes/cost.c). */
enum { IR_PAR_LOOP_MIN = 1 << 17 };

/* Below these, an op runs on one thread (codegen/cg_module.c small_op,
 * mmrt_threads_small): a product, convolution or attention of fewer FLOPs,
 * any other op of fewer elements in its largest operand or result; the
 * cost model charges it so (passes/cost.c). */
enum { IR_SMALL_FLOPS = 1 << 20, IR_SMALL_ELEMS = 1 << 15 };

/* Value k of n's operands then results (k < nin + nout): the walk over
 * everything a node reads and writes. */
static inline IrValue *ir_node_value(const IrNode *n, int k) {
  return k < n->nin ? n->in[k] : n->out[k - n->nin];
}

/* A repeated stack of layers (Block(...) x depth), e.g. "llm.blocks" with 24 layers. */
typedef struct IrGroup {
  const char *name;
  int nlayers;
} IrGroup;

typedef struct IrFunc {
  const char *name;
  PtrVec inputs;  /* IrValue* (role INPUT) */
  PtrVec nodes;   /* IrNode* in program order */
  PtrVec results; /* IrValue* */
  int next_id;
} IrFunc;

typedef struct IrModule {
  Arena arena;
  Diag *diag; /* for loc file names; not owned */
  const char *name;
  int mesh[IR_NAXES];
  PtrVec params; /* IrValue* (role PARAM) */
  PtrVec groups; /* IrGroup* */
  PtrVec funcs;  /* IrFunc* */
  /* settings (ir_settings.c), printed and parsed as the plan(...), train(...)
   * and passes(...) lines after the header; every pass reads them here */
  MmPlan plan;       /* the parallel plan (shard, zero, bucket) */
  MmTrain train;     /* the train section (lora, optimizer, codegen) */
  bool inference;    /* generate/eval: autodiff and optimizer make no @train */
  bool no_fuse;      /* fuse keeps every op on its own (mmc --no-fuse) */
  PtrVec passes_run; /* const char *: the passes that have run on it, in order */
} IrModule;

IrModule *ir_module_new(Diag *diag, const char *name);
/* The settings of an empty train and parallel section (what the text form
 * leaves out); ir_module_new starts from them. */
void ir_settings_default(MmPlan *plan, MmTrain *train);
/* Copies plan and train, their strings too, into the module. */
void ir_module_set_settings(IrModule *m, const MmPlan *plan, const MmTrain *train);
bool ir_module_ran(const IrModule *m, const char *pass);
void ir_module_mark_ran(IrModule *m, const char *pass);
void ir_module_free(IrModule *m);
IrFunc *ir_func_new(IrModule *m, const char *name);
IrFunc *ir_module_func(IrModule *m, const char *name);           /* or NULL */
IrValue *ir_module_param(IrModule *m, const char *name);         /* or NULL */
int ir_module_group(IrModule *m, const char *name, int nlayers); /* finds or adds */

IrValue *ir_add_param(IrModule *m, const char *name, IrDType dt, const IrShape *s, IrInit init,
                      SrcLoc loc);
IrValue *ir_add_input(IrModule *m, IrFunc *f, const char *name, IrDType dt, const IrShape *s,
                      SrcLoc loc);

/* Where new nodes go and what they are attributed to. */
typedef struct IrBuilder {
  IrModule *m;
  IrFunc *f;
  const char *scope;
  int group, layer;
} IrBuilder;

/* Builds a node: checks arity and attrs against the table, runs the shape
 * rule, appends the node to b->f. On a user-level error (dtype, rank, dim
 * mismatch) returns NULL and writes a one-line message to err; *bad_operand
 * (if not NULL) gets the index of the operand at fault or -1. */
IrNode *ir_build(IrBuilder *b, IrOp op, IrValue **in, int nin, const IrAttrs *attrs, SrcLoc loc,
                 char *err, size_t errlen, int *bad_operand);

/* Forward FLOPs of a node (2 per multiply-add). */
int64_t ir_flops(const IrNode *n);

/* ---- text form ---- */
void ir_print_module(FILE *out, const IrModule *m);
void ir_print_node(FILE *out, const IrModule *m, const IrNode *n);
/* Graphviz, nodes clustered by scope (module instance). */
void ir_print_dot(FILE *out, const IrModule *m);
/* Parses the text form; errors go to diag with locations in the text buffer
 * (file_id is a Diag file index). Returns NULL on error. */
IrModule *ir_parse(Diag *diag, uint32_t file_id);

/* Verifier: SSA (every operand defined before use, in this function or a
 * param), arity, attrs, dtypes and shapes (re-running the shape rule).
 * Reports to m->diag; returns false on the first broken invariant set. */
bool ir_verify(const IrModule *m);

/* ---- shape rules' view ---- */
struct IrShapeCtx {
  const IrNode *node; /* op and attrs */
  IrDType in_dtype[64];
  const IrShape *in_shape[64];
  int nin;
  IrDType out_dtype[4];
  IrShape out_shape[4];
  char *err;
  size_t errlen;
  int bad_operand;
};

/* ---- additions (IR core helpers) ---- */

/* Names of the other enums, and their inverses. */
bool ir_role_parse(const char *s, IrRole *out);
const char *
ir_init_name(IrInitKind k); /* "none", "zeros", "ones", "fill", "normal", "uniform", "fan_in" */
bool ir_init_parse(const char *s, IrInitKind *out);

/* "[4, 64, 768]" into buf (truncated to n); returns buf. */
char *ir_shape_str(char *buf, size_t n, const IrShape *s);
/* Rank in 0..IR_MAX_RANK, every dim >= 1 and the element count <= 2^53. */
bool ir_shape_valid(const IrShape *s);

/* Appends v to the function's returned values. */
void ir_func_add_result(IrModule *m, IrFunc *f, IrValue *v);
/* The phases of @train, as node indexes: the backward begins at autodiff's
 * seed (the first scalar `full` after the node that makes the loss, the
 * function's result 0 before any collective that sums it), the update at the first grad_norm,
 * clip_scale, adamw or sgd; -1 where there is none (a forward-only function). */
void ir_train_phases(const IrFunc *f, int *bwd, int *upd);
/* u[i] = 1 for the nodes of @train's update, upd its first node (ir_train_phases): from upd on,
 * grad_norm, clip_scale, adamw and sgd, what reads their results, and a node without operands
 * that only update nodes read (the optimizer's scale of 1 when nothing clips); the rest of f
 * (before upd, and after it the loss's all-reduce over dp) is not. a holds the scratch maps. */
void ir_update_part(const IrFunc *f, int upd, Arena *a, unsigned char *u);
/* "forward", "backward" or "update" for node i under those boundaries. */
const char *ir_phase_name(int i, int bwd, int upd);

/* Dead code: drops the nodes none of whose results reach the function's
 * results (in-place ops always stay), then the inputs nothing uses. */
void ir_func_dce(IrFunc *f);
/* Sets every node result's id to its print number (0, 1, ... in order). */
void ir_func_renumber(IrFunc *f);

/* A hash map from pointers or strings to (int64, pointer) pairs, allocated
 * in an arena (value numbering, name tables, cotangent maps in passes).
 * String keys are not copied: they must outlive the map. */
typedef struct IrMapSlot {
  const void *key; /* NULL = empty */
  uint64_t hash;
  int64_t i;
  void *p;
} IrMapSlot;
typedef struct IrMap {
  Arena *arena;
  bool str_keys;
  IrMapSlot *slots;
  int cap, len;
} IrMap;
void ir_map_init(IrMap *mp, Arena *a, bool str_keys);
/* Slot for key, created (i = 0, p = NULL) if absent. */
IrMapSlot *ir_map_put(IrMap *mp, const void *key);
IrMapSlot *ir_map_get(const IrMap *mp, const void *key); /* or NULL */

/* A shape rule's failure: "op: message" into cx->err, operand `bad` (or -1)
 * marked; returns false. */
bool ir_shape_fail(IrShapeCtx *cx, int bad, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The shape rule of each op (ir_shape.c), as its SHAPE column names it. */
#define SHAPE(R)                                                   bool ir_shape_##R(IrShapeCtx *cx);
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, ...) SHP
#include "ops.def"
#undef OP
#undef SHAPE

/* ---- gradient rules' view ----
 * autodiff calls ir_ops[op].grad for a node (of @train) with at least one
 * result cotangent. The rule emits ordinary ops through b (ir_build) and
 * sets din[i] for each operand with need[i] (a value of the operand's dtype
 * and shape), or leaves it NULL for a zero cotangent. On an internal failure
 * it writes a message into err and returns false. */
struct IrGradCtx {
  IrBuilder *b;
  const IrNode *node; /* the forward node, operands and results in @train */
  IrValue *dout[4];   /* cotangent of each result, NULL when zero */
  bool need[64];      /* operand i needs a cotangent */
  IrValue *din[64];   /* the rule's answer per operand */
  char *err;
  size_t errlen;
};
/* The gradient rule of each op with one (ir_grad.c), as its grad column
 * names it: GRAD(R) or GRAD_VIA(R, OP) is ir_grad_R. */
#define GRAD(R)        bool ir_grad_##R(IrGradCtx *cx);
#define GRAD_VIA(R, O) bool ir_grad_##R(IrGradCtx *cx);
#define NOGRAD
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, G, ...) G
#include "ops.def"
#undef OP
#undef GRAD
#undef GRAD_VIA
#undef NOGRAD

/* ---- sharding (ir_shard.c) ----
 * Every op has a sharding rule (the SH column of ops.def): its operand and
 * result dims as factors, einsum-like. Splitting a factor on a mesh axis
 * splits every dim mapped to it; a result without the factor becomes P
 * (a reduced factor), stays B (the kernel reduces over the axis itself) or
 * makes the split illegal (`miss`). Dims mapped to no factor never split.
 * Per mesh axis a node runs one strategy: NONE (all B), SPLIT(factor), or
 * PASSP (partial sums pass through a linear op, per the IR_SHP_ flags). */
typedef enum IrShardRuleId {
  IR_SHR_ELEM,
  IR_SHR_OPT_STEP,
  IR_SHR_FULL,
  IR_SHR_SCALAR,
  IR_SHR_MATMUL,
  IR_SHR_LINEAR,
  IR_SHR_LINEAR_GRAD_X,
  IR_SHR_LINEAR_GRAD_W,
  IR_SHR_CONV,
  IR_SHR_CONV_GRAD_X,
  IR_SHR_CONV_GRAD_W,
  IR_SHR_NORM,
  IR_SHR_NORM_GRAD,
  IR_SHR_BATCH_STATS,
  IR_SHR_BATCH_STATS_GRAD,
  IR_SHR_REDUCE,
  IR_SHR_RESHAPE,
  IR_SHR_TRANSPOSE,
  IR_SHR_AXIS_WHOLE,
  IR_SHR_EXPAND,
  IR_SHR_SUM_TO,
  IR_SHR_EMBEDDING,
  IR_SHR_EMBEDDING_GRAD,
  IR_SHR_ROPE,
  IR_SHR_ATTENTION,
  IR_SHR_ATTENTION_GRAD,
  IR_SHR_CROSS_ENTROPY,
  IR_SHR_CROSS_ENTROPY_GRAD,
  IR_SHR_MSE,
  IR_SHR_PLACE,
  IR_SHR_PLACE_GRAD,
  IR_SHR_HAAR,
  IR_SHR_ROWS, /* timestep_embedding: operand dims pass through, the added last dim whole */
  IR_SHR_FREE, /* grad_norm: operands split any way (never P); the kernel reduces, the result is B
                */
  IR_SHR_COLLECTIVE, /* all_reduce, all_gather, ...: checked against their attributes */
  IR_SHR_RESHARD,    /* reshard: any placement change (lowered by the collectives pass) */
  IR_SHR_COUNT
} IrShardRuleId;
enum {
  IR_SHP_ALL = 1 << 0, /* partial in every operand -> partial (add, sub, concat) */
  IR_SHP_ONE = 1 << 1, /* partial in one operand, the others B -> partial (mul) */
  IR_SHP_FIRST =
      1 << 2,           /* partial in operand 0, the others B -> partial (div, reshape, sum, ...) */
  IR_SHP_SEQ = 1 << 3,  /* in the sequence-parallel region (norms, residual adds, dropout) */
  IR_SHP_PROG = 1 << 4, /* fused: as its sub-program's ops let partial sums through */
};
#define IR_SH_MAXF 30
typedef enum IrFactorMiss { IR_FM_BAD, IR_FM_P, IR_FM_B } IrFactorMiss;
typedef struct IrFactor {
  int64_t size;
  uint8_t miss; /* IrFactorMiss: a result without the factor, when it is split */
} IrFactor;
typedef enum IrShardKind { IR_SK_FACTORS, IR_SK_FREE, IR_SK_COLLECTIVE, IR_SK_RESHARD } IrShardKind;
typedef struct IrShardRule {
  IrShardKind kind;
  int nf, nin, nout;
  IrFactor f[IR_SH_MAXF];
  uint32_t in[64][IR_MAX_RANK]; /* the factors of each operand dim (a mask) */
  uint32_t out[4][IR_MAX_RANK];
  unsigned pflags;
} IrShardRule;
typedef enum IrStratKind { IR_ST_NONE, IR_ST_SPLIT, IR_ST_PASSP } IrStratKind;
typedef struct IrStrategy {
  IrStratKind kind;
  int factor; /* SPLIT: the factor; PASSP with IR_SHP_ONE: the partial operand; with
                 IR_SHP_PROG: the mask of partial operands */
} IrStrategy;

void ir_shard_rule(const IrNode *n, IrShardRule *r);
/* All strategies of a rule for node n on axis a (a fused
 * node's PASSP takes its operands' partial sums on a as they are); returns
 * how many. */
int ir_shard_strategies(const IrShardRule *r, const IrNode *n, int a, IrStrategy *out, int max);
/* The operand placements strategy s needs and the result placements it
 * gives, on one axis; false if s is not legal for the node. */
bool ir_shard_apply(const IrShardRule *r, const IrNode *n, IrStrategy s, IrPlacement *req,
                    IrPlacement *out);
/* Whether some strategy explains the node's placements on every axis of
 * size > 1 (collectives: their attributes); else a message in err. */
bool ir_shard_check_node(const IrModule *m, const IrNode *n, char *err, size_t errlen);
bool ir_placement_eq(IrPlacement a, IrPlacement b);
/* Whether the module splits over cp in the balanced (zigzag) layout: a
 * causal ring attention on cp > 1. Then a dim split over cp is cut into
 * 2 cp chunks and rank i holds chunks i and 2 cp - 1 - i (in that order),
 * so that the causal attention's work is the same on every rank; the
 * collectives over cp and the position-dependent kernels follow it. */
bool ir_cp_balanced(const IrModule *m);
const char *ir_placement_str(char *buf, size_t n, IrPlacement p); /* "B", "P", "S(2)" */

/* Ranks: rank = (dp_i * cp + cp_i) * tp + tp_i (tp fastest). A dim split by
 * several axes is split by cp first (outermost: sp cuts each cp chunk of the
 * sequence over tp), then tp, then dp (ZeRO cuts a tp slice). */
int ir_world_size(const IrModule *m);
/* placement = separate with the first block on one rank (mm_subplan_one_rank):
 * the pipeline's first stage is one process for its tp logical ranks. */
bool ir_one_rank_first_stage(const IrModule *m);
void ir_rank_coords(const IrModule *m, int rank, int coord[IR_NAXES]);
int ir_rank_of(const IrModule *m, const int coord[IR_NAXES]);
/* The shape one rank holds: every split dim divided by its axis size. */
void ir_local_shape(const IrModule *m, const IrPlacement *pl, const IrShape *global,
                    IrShape *local);
int64_t ir_local_numel(const IrModule *m, const IrValue *v);
/* all_reduce, all_gather, reduce_scatter, all_to_all (not all_slice). */
bool ir_op_is_collective(IrOp op);
/* Elements one rank sends in a collective node (ring algorithms:
 * all_reduce 2t(n-1)/n, all_gather and reduce_scatter t(n-1)/n with t the
 * full tensor on the group, all_to_all t(n-1)/n of the local piece); *msg
 * gets t, the tensor on the group. 0 for other ops. */
int64_t ir_collective_elems(const IrModule *m, const IrNode *n, int64_t *msg);

/* One rank's program: local shapes (shape attributes too), the rank's mesh
 * coordinates in the header, the ranks of each collective's group. */
void ir_print_module_rank(FILE *out, const IrModule *m, int rank);

#endif
