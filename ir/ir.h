/* The mmc IR: a module of parameters and SSA functions over tensors.
 *
 * Every value has a dtype, a concrete shape, a role and a placement per mesh
 * axis (S(d) split along dim d, B replicated, P partial sum). Every op is
 * declared once in ops.def; the enum, names, shape rules, parser, printer and
 * verifier come from that table. All memory of a module lives in its arena.
 *
 * Text form (print -> parse -> print is byte-identical):
 *
 *   module @GPT2Tiny mesh(dp = 1, cp = 1, tp = 1)
 *   param @wte.weight : f32[256, 64]{dp:B, cp:B, tp:B} init(normal, 0.02) loc("gpt2.mm":12:3)
 *   func @forward(%tokens : i32[4, 64]{dp:B, cp:B, tp:B} loc("gpt2.mm":40:11)) {
 *     %0 = embedding(%tokens, @wte.weight) : f32[4, 64, 64]{dp:B, cp:B, tp:B} scope("wte") loc("gpt2.mm":30:7)
 *     %1 = layer_norm(%0, @h.0.ln_1.weight, @h.0.ln_1.bias) {eps = 1e-05} : f32[4, 64, 64]{...} layer("h", 0) scope("h.0.ln_1") loc(...)
 *     return %1
 *   }
 */
#ifndef MM_IR_IR_H
#define MM_IR_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../support/arena.h"
#include "../support/diag.h"

#define IR_MAX_RANK 8

typedef enum IrDType { IR_F32, IR_BF16, IR_F16, IR_I32, IR_I64, IR_U8, IR_BOOL, IR_DTYPE_COUNT } IrDType;
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
typedef enum IrAxis { IR_AX_DP, IR_AX_CP, IR_AX_TP, IR_NAXES } IrAxis;
const char *ir_axis_name(IrAxis a);

typedef enum IrPlaceKind { IR_PL_B, IR_PL_S, IR_PL_P } IrPlaceKind;
typedef struct IrPlacement {
  IrPlaceKind kind;
  int dim; /* for S */
} IrPlacement;

typedef enum IrRole { IR_ROLE_ACT, IR_ROLE_INPUT, IR_ROLE_PARAM, IR_ROLE_GRAD, IR_ROLE_OPT, IR_ROLE_COUNT } IrRole;
const char *ir_role_name(IrRole r);

typedef enum IrInitKind {
  IR_INIT_NONE, IR_INIT_ZEROS, IR_INIT_ONES, IR_INIT_FILL,   /* fill(a) */
  IR_INIT_NORMAL,  /* normal(a = std) */
  IR_INIT_UNIFORM, /* uniform(a, b) */
  IR_INIT_FAN_IN,  /* uniform(-a/sqrt(fan_in), a/sqrt(fan_in)), fan_in = numel / dim 0 */
} IrInitKind;
typedef struct IrInit {
  IrInitKind kind;
  double a, b;
} IrInit;

/* ---- attributes ---- */
typedef enum IrAttrKind { IR_AK_INT, IR_AK_INTS, IR_AK_FLOAT, IR_AK_BOOL, IR_AK_STR, IR_AK_DTYPE } IrAttrKind;
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
/* ints are copied into the module arena when the node is built */
void ir_attrs_set_ints(IrAttrs *a, IrAttrId id, const int64_t *v, int n);
bool ir_attrs_has(const IrAttrs *a, IrAttrId id);

/* ---- the op table ---- */
typedef enum IrOp {
#define OP(N, ...) IR_OP_##N,
#include "ops.def"
#undef OP
  IR_OP_COUNT
} IrOp;

enum {
  OPF_ELEMWISE = 1 << 0,    /* same-shape (after broadcast) pointwise: fusible */
  OPF_COMMUTATIVE = 1 << 1,
  OPF_VIEW = 1 << 2,        /* result may alias the operand's storage */
  OPF_LOSS = 1 << 3,        /* scalar loss */
  OPF_INPLACE = 1 << 4,     /* side effect: updates the OPF_WRITES operands in place (never dead) */
};
/* Operand i (< 16) of an OPF_INPLACE op is updated in place. */
#define OPF_WRITES(i) (1u << (16 + (i)))
#define IR_OP_WRITES(op, i) ((i) < 16 && (ir_ops[op].flags & OPF_WRITES(i)))

/* FLOP classes (the cost rule is in ir_flops) */
typedef enum IrFlopKind {
  IR_FL_NONE, IR_FL_ELEM, IR_FL_MATMUL, IR_FL_LINEAR, IR_FL_CONV, IR_FL_ATTENTION,
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
  IrGradFn grad;     /* vector-Jacobian rule, or NULL (ops.def: NOGRAD) */
} IrOpInfo;
extern const IrOpInfo ir_ops[IR_OP_COUNT];
bool ir_op_parse(const char *name, IrOp *out);

/* ---- values, nodes, functions, modules ---- */
typedef struct IrNode IrNode;
typedef struct IrValue {
  int id;            /* printing number within its function; params use name */
  IrDType dtype;
  IrShape shape;
  IrRole role;
  IrPlacement pl[IR_NAXES];
  const char *name;  /* params: hierarchical name; inputs: argument name; else NULL */
  IrNode *def;       /* producing node (NULL for params and inputs) */
  SrcLoc loc;
  /* params only */
  IrInit init;
  bool frozen;       /* no gradient, no optimizer state */
  struct IrValue *grad_of; /* role GRAD: the parameter this is the gradient of (printed grad(@name)) */
  int group, layer;  /* stack group index and layer in it, or -1 */
  void *aux;         /* free slot for passes (cleared by each user) */
  /* memory plan (passes/memplan.c): the arena (named by its role) and byte
   * offset of the storage; printed as mem(act, 4096) once planned */
  bool mem_planned;
  IrRole mem_arena;
  int64_t mem_offset;
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
};

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
  Diag *diag;      /* for loc file names; not owned */
  const char *name;
  int mesh[IR_NAXES];
  PtrVec params;   /* IrValue* (role PARAM) */
  PtrVec groups;   /* IrGroup* */
  PtrVec funcs;    /* IrFunc* */
} IrModule;

IrModule *ir_module_new(Diag *diag, const char *name);
void ir_module_free(IrModule *m);
IrFunc *ir_func_new(IrModule *m, const char *name);
IrFunc *ir_module_func(IrModule *m, const char *name); /* or NULL */
IrValue *ir_module_param(IrModule *m, const char *name); /* or NULL */
int ir_module_group(IrModule *m, const char *name, int nlayers); /* finds or adds */

IrValue *ir_add_param(IrModule *m, const char *name, IrDType dt, const IrShape *s, IrInit init, SrcLoc loc);
IrValue *ir_add_input(IrModule *m, IrFunc *f, const char *name, IrDType dt, const IrShape *s, SrcLoc loc);

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
  const IrNode *node;        /* op and attrs */
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
const char *ir_init_name(IrInitKind k); /* "none", "zeros", "ones", "fill", "normal", "uniform", "fan_in" */
bool ir_init_parse(const char *s, IrInitKind *out);

/* "[4, 64, 768]" into buf (truncated to n); returns buf. */
char *ir_shape_str(char *buf, size_t n, const IrShape *s);
/* Rank in 0..IR_MAX_RANK, every dim >= 1 and the element count <= 2^53. */
bool ir_shape_valid(const IrShape *s);

/* Appends v to the function's returned values. */
void ir_func_add_result(IrModule *m, IrFunc *f, IrValue *v);
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

/* The shape rule of each op (ir_shape.c), as named in ops.def. */
#define OP(N, ...) bool ir_shape_##N(IrShapeCtx *cx);
#include "ops.def"
#undef OP

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
/* The gradient rule of each GRAD op (ir_grad.c). */
#define OP(N, ...) bool ir_grad_##N(IrGradCtx *cx);
#include "ops.def"
#undef OP

#endif
