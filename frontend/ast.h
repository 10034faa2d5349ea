/* The AST of a .mm file. Built by the bison parser (lang/parser.y) into the
 * AST arena, read by sema/elaboration. Every node carries its SrcLoc.
 * Lists are PtrVec of node pointers. The AST is never mutated after parsing,
 * with one exception: load.c resolves `model D extends B` by giving D the
 * merged member list (and B's hyper-parameters), so that everything after
 * loading sees an extending model as if it had been written out in full. */
#ifndef MM_FRONTEND_AST_H
#define MM_FRONTEND_AST_H

#include <stdbool.h>
#include <stdint.h>

#include "../support/arena.h"
#include "../support/diag.h"

/* ---- expressions ---- */
typedef enum AstExprKind {
  AST_INT,    /* ival */
  AST_FLOAT,  /* fval */
  AST_STRING, /* str (unescaped) */
  AST_BOOL,   /* bval */
  AST_NAME,   /* name */
  AST_LIST,   /* items: [a, b, c] */
  AST_UNARY,  /* op ('-' or '!' for not), lhs */
  AST_BINARY, /* op, lhs, rhs */
  AST_COND,   /* then_ if cond else else_  (cond, lhs = then, rhs = else) */
  AST_CALL,   /* lhs = callee (NAME or FIELD for methods), args (AstArg) */
  AST_FIELD,  /* lhs.name */
  AST_INDEX,  /* lhs[items]: items are exprs or AST_SLICE */
  AST_SLICE,  /* start:stop:step, each may be NULL (inside AST_INDEX only) */
} AstExprKind;

/* Binary/unary operators. */
typedef enum AstOp {
  OP_ADD,
  OP_SUB,
  OP_MUL,
  OP_DIV,
  OP_FLOORDIV,
  OP_MOD,
  OP_POW,
  OP_MATMUL,
  OP_EQ,
  OP_NE,
  OP_LT,
  OP_LE,
  OP_GT,
  OP_GE,
  OP_AND,
  OP_OR,
  OP_NEG,
  OP_NOT,
} AstOp;

typedef struct AstExpr AstExpr;
typedef struct AstArg {
  SrcLoc loc;
  const char *name; /* keyword, or NULL for a positional argument */
  AstExpr *value;
} AstArg;

struct AstExpr {
  AstExprKind kind;
  SrcLoc loc; /* the whole expression's range where it fits on one line */
  AstOp op;
  int64_t ival;
  double fval;
  bool bval;
  const char *str;  /* AST_STRING */
  const char *name; /* AST_NAME, AST_FIELD */
  AstExpr *lhs, *rhs, *cond;
  AstExpr *start, *stop, *step; /* AST_SLICE */
  PtrVec items;                 /* AST_LIST, AST_INDEX: AstExpr* */
  PtrVec args;                  /* AST_CALL: AstArg* */
};

/* ---- types ---- */
typedef enum AstTypeKind {
  AT_INT,
  AT_FLOAT,
  AT_BOOL,
  AT_STRING,
  AT_LIST,   /* hyper-parameter types */
  AT_TENSOR, /* dtype[dims] or [dims] */
  AT_LOSS,   /* '-> loss' */
} AstTypeKind;

typedef struct AstType {
  AstTypeKind kind;
  SrcLoc loc;
  struct AstType *elem; /* AT_LIST: element type (list[int]) */
  const char *dtype;    /* AT_TENSOR: "f32", "bf16", "i32", ... or NULL (any float) */
  PtrVec dims;          /* AT_TENSOR: AstExpr* (names, ints, arithmetic) */
} AstType;

/* ---- statements and members (one node type for both) ---- */
typedef enum AstStmtKind {
  ST_LET,      /* let name = value                         (module, model, forward) */
  ST_PARAM,    /* name = param dtype[dims] (= init)?       init: NULL, NAME or CALL */
  ST_INSTANCE, /* name = Callee(args) (x repeat)?          callee may be dotted */
  ST_ASSIGN,   /* name = value                             (forward body) */
  ST_RETURN,   /* return value */
  ST_IF,       /* if cond { body } else { else_body } ; else_body may hold one ST_IF */
  ST_FORWARD,  /* forward NAME? (params) -> ret { body } */
  ST_SECTION,  /* train / parallel / data { settings }: name = "train"|"parallel"|"data";
                  inside a section's body, a sub-model's block (NAME { settings }) */
  ST_SETTING,  /* name = value inside a section */
} AstStmtKind;

typedef struct AstParam { /* a typed argument of a forward or a hyper-parameter */
  SrcLoc loc;
  const char *name;
  AstType *type;
  AstExpr *dflt; /* hyper-parameter default, or NULL */
} AstParam;

typedef struct AstStmt AstStmt;
struct AstStmt {
  AstStmtKind kind;
  SrcLoc loc; /* the statement's start (name position) */
  const char *name;
  SrcLoc name_loc;
  AstExpr *value;  /* LET, ASSIGN, RETURN, SETTING: value; INSTANCE: the call; PARAM: init */
  AstExpr *repeat; /* INSTANCE: the stack depth after 'x', or NULL */
  AstType *ptype;  /* PARAM: dtype and dims */
  AstExpr *cond;   /* IF */
  PtrVec body;     /* IF then-branch, FORWARD body, SECTION settings: AstStmt* */
  PtrVec else_body;
  PtrVec params; /* FORWARD: AstParam* */
  AstType *ret;  /* FORWARD: return type or NULL */
};

/* ---- top level ---- */
typedef enum AstDeclKind { DECL_IMPORT, DECL_MODULE, DECL_MODEL } AstDeclKind;

/* A string -> pointer hash table in an arena (frontend/names.c); the keys
 * are not copied. names_put replaces the value of a key already there. */
typedef struct NameMap {
  const char **keys;
  void **vals;
  uint32_t cap, n;
} NameMap;
void *names_get(const NameMap *m, const char *key);
void names_put(Arena *a, NameMap *m, const char *key, void *val);

typedef struct AstDecl {
  AstDeclKind kind;
  SrcLoc loc, name_loc;
  const char *name;          /* module/model name, or the import path */
  PtrVec hparams;            /* AstParam* */
  PtrVec members;            /* AstStmt*; after loading, an extending model's merged list */
  const char *base;          /* `extends Base`: the base model's name, or NULL */
  SrcLoc base_loc;           /* ... and where it is written */
  PtrVec own;                /* an extending model's members as written (set by load.c) */
  struct AstDecl *base_decl; /* the resolved base (set by load.c), or NULL */
  struct AstFile *file;
  unsigned ext_flags;       /* load.c's extension and name-check state (EXT_* there) */
  struct AstFile *imported; /* an import: the file it loaded (set by load.c), or NULL */
} AstDecl;

typedef struct AstFile {
  const char *path;
  uint32_t file_id;      /* Diag file index */
  PtrVec decls;          /* AstDecl* in source order, imports included */
  const char *real_path; /* canonical path (identity of the file); `path` is for display */
  NameMap decl_map;      /* module/model name -> its first AstDecl (load.c, built on first use) */
  PtrVec imported;       /* AstFile* its imports loaded, in import order (set with decl_map) */
  bool decl_map_built;
} AstFile;

/* Parses one loaded file (diag file index) into the arena. Syntax errors go
 * to diag; the parser recovers at statement boundaries. Returns the AstFile
 * (possibly partial) even when there were errors. Never NULL. */
AstFile *fe_parse(Arena *ast, Diag *d, uint32_t file_id);

const char *ast_op_str(AstOp op);

#endif
