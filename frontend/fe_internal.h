/* Frontend internals shared by load.c (imports, resolution), eval.c
 * (compile-time values), elab.c (instantiation, forward lowering),
 * builtins.c (tensor builtins) and plan.c (train/parallel sections). */
#ifndef MM_FRONTEND_FE_INTERNAL_H
#define MM_FRONTEND_FE_INTERNAL_H

#include "sema.h"

/* ---- compile-time values ---- */
typedef enum VKind {
  V_ERR, /* an error was already reported: propagate silently */
  V_NONE,
  V_INT,
  V_FLOAT,
  V_BOOL,
  V_STR,
  V_SYM, /* a bare name with no binding (settings such as `selective`) */
  V_LIST,
  V_TENSOR, /* an IR value */
  V_INST,   /* a module instance (or a whole stack) */
  V_SLICE,  /* a slice of a stack: layers [lo, hi) */
  V_UNITS,  /* a sum of instances/slices (pipeline stage lists) */
} VKind;

typedef struct Inst Inst;
typedef struct Val Val;
struct Val {
  VKind k;
  int64_t i;
  double f;
  bool b;
  const char *s;
  Val **items;
  int n;
  IrValue *t;
  Inst *inst;
  int lo, hi;
};

/* A name -> value scope, chained to its parent; map holds each name's
 * newest binding. */
typedef struct Binding {
  const char *name;
  Val *val;
  SrcLoc loc; /* where it was declared (for notes) */
  struct Binding *next;
} Binding;
typedef struct Env {
  Binding *head;
  NameMap map;
  struct Env *parent;
} Env;

/* A module instance: its decl, its path ("llm.blocks.3"), its scope of
 * hyper-parameters, lets, params and sub-instances. A stack is an Inst with
 * layers and no decl body of its own. */
struct Inst {
  AstDecl *decl;
  const char *path; /* "" for the root model */
  Env env;          /* hparams, lets, members */
  bool is_stack;
  Inst **layers;
  int nlayers;
  int group;          /* IR group index for a stack, or the group this layer is in (-1) */
  int layer;          /* index within its stack, or -1 */
  SrcLoc loc;         /* where it was instantiated */
  AstStmt *attn_note; /* unused */
};

/* Record of attention heads seen while lowering (for the plan checks). */
typedef struct AttnSite {
  int64_t heads, kv_heads;
  int64_t seq, kv_seq; /* query and key/value sequence lengths */
  bool causal;
  SrcLoc loc;
  const char *path;
} AttnSite;

struct FeProgram {
  Arena ast; /* AST, values, instances: everything of this program */
  Diag *d;
  FeOptions opts;
  AstFile *root;
  PtrVec files;      /* AstFile* */
  PtrVec loading;    /* files being loaded (import cycle check) */
  PtrVec loading_at; /* SrcLoc* of the import that loaded each of them */
  /* during elaboration */
  IrModule *ir;
  IrBuilder b;
  PtrVec inst_stack; /* AstDecl* being instantiated (recursion check) */
  int call_depth;
  PtrVec attn; /* AttnSite* */
  Inst *root_inst;
  bool allow_sym;   /* bare unknown names evaluate to symbols (sections) */
  int fwd_depth;    /* nesting of forward calls (recursion guard) */
  Inst *cur_inst;   /* the instance whose forward is running */
  bool in_stages;   /* evaluating a stage list: '+' joins instances, layers and parameters */
  NameMap params;   /* the parameters of p->ir by name (ir_module_param, hashed) */
  IrMap decl_shape; /* IrValue* -> declared shape text ("[3 * dim, dim]") for notes */
  /* KV-cache elaboration (fe_elaborate_cached): the mode, the cache length
   * and the function's `pos` input once made */
  FeMode mode;
  int64_t cache_len;
  int64_t mb_factor; /* micro_batches: the inputs hold 1/mb_factor of a step's batch (0: 1) */
  IrValue *pos;
  const char *fwd_name; /* the model's forward being elaborated (NULL: the unnamed one) */
  PtrVec caches;        /* FE_ENCODE*: causal_pad's cache results, in call order */
  SrcLoc user_call;     /* the innermost call made by the root model's forward */
  bool unmet;           /* a require() failed: the forwards stop (no errors that follow from it) */
};

static inline bool fe_mode_cached(const FeProgram *p) { /* a KV-cache mode */
  return p->mode == FE_PREFILL || p->mode == FE_DECODE;
}
static inline bool fe_mode_chunked(const FeProgram *p) { /* a chunked encoder */
  return p->mode == FE_ENCODE || p->mode == FE_ENCODE_NEXT;
}

/* builtins.c: the `pos` input of the function being built in a cached mode */
IrValue *fe_cache_pos(FeProgram *p, int64_t batch, SrcLoc loc);

/* load.c */
#define FE_MAX_EXTENDS 256 /* models in one chain of `extends` */
AstDecl *fe_find_decl(FeProgram *p, AstFile *from, const char *name);
/* The module/model of that name declared in f itself (the first), or NULL. */
AstDecl *fe_file_decl(FeProgram *p, AstFile *f, const char *name);

/* eval.c */
Val *val_new(FeProgram *p, VKind k);
Val *val_int(FeProgram *p, int64_t i);
Val *val_float(FeProgram *p, double f);
Val *val_bool(FeProgram *p, bool b);
Val *val_str(FeProgram *p, const char *s);
Val *val_err(FeProgram *p);
Val *val_tensor(FeProgram *p, IrValue *t);
const char *val_kind_name(VKind k);
bool val_is_num(const Val *v);
double val_num(const Val *v);
void env_bind(FeProgram *p, Env *e, const char *name, Val *v, SrcLoc loc);
Binding *env_lookup(Env *e, const char *name);
Binding *env_lookup_local(Env *e, const char *name);
/* Evaluates any expression (compile-time or tensor) in env. */
Val *fe_eval(FeProgram *p, Env *e, AstExpr *x);
/* Compile-time helpers that report errors at x. */
bool fe_eval_int(FeProgram *p, Env *e, AstExpr *x, int64_t *out);
bool fe_eval_num(FeProgram *p, Env *e, AstExpr *x, double *out);
/* Formats an expression back to source-like text (for messages). */
const char *fe_expr_text(FeProgram *p, AstExpr *x);
char *fe_shape_str(FeProgram *p, const IrShape *s);

/* builtins.c */
bool fe_is_builtin(const char *name);
Val *fe_call_builtin(FeProgram *p, Env *e, AstExpr *call, const char *name, Val *self);
/* Emits an IR op at loc; reports the shape rule's message there on failure. */
IrValue *fe_emit(FeProgram *p, IrOp op, IrValue **in, int nin, const IrAttrs *a, SrcLoc loc);
IrValue *fe_emit1(FeProgram *p, IrOp op, IrValue *x, const IrAttrs *a, SrcLoc loc);

/* elab.c */
/* Calls an instance (V_INST) or a stack slice (V_SLICE): its forward named
 * fn (NULL = forward), arguments evaluated from call->args in e. */
Val *fe_call_inst(FeProgram *p, Env *e, AstExpr *call, Val *callee, const char *fn);
/* The forward named fn (NULL: the unnamed one) of a module, or NULL. */
AstStmt *fe_find_forward(AstDecl *dcl, const char *fn);
Val *fe_inst_member(FeProgram *p, Inst *inst, const char *name, SrcLoc at);

/* plan.c */
bool fe_read_sections(FeProgram *p, Inst *root, FeResult *out);

#endif
