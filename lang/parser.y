/* The .mm grammar (bison, pure, LALR(1) with LAC for exact "expected" sets).
 *
 * Builds the AST of frontend/ast.h into the arena given to fe_parse. Syntax
 * errors go to diag with what was found and what was expected; the parser
 * recovers at statement terminators and at '}' (error rules in every block),
 * and at top level by skipping to the next import/module/model, so one run
 * reports every independent error. All semantic values live in the arena,
 * so nothing needs a destructor when bison discards them.
 *
 * Limits (so nothing overflows here or downstream): at most MM_MAX_NESTING
 * open brackets (the lexer stops the parse beyond), expression trees at most
 * MM_MAX_EXPR_DEPTH deep, and the bison stacks at most YYMAXDEPTH entries. */

%define api.pure full
%define api.prefix {mm}
%define api.location.type {MmLoc}
%define parse.error custom
%define parse.lac full
%locations
%param {ParseState *ps}
%expect 0

%code requires {
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>

#include "frontend/ast.h"

#define MM_MAX_NESTING 256     /* open ( [ { at once */
#define MM_MAX_EXPR_DEPTH 1000 /* levels of one expression tree */

/* A bison location: a range of bytes, 1-based, last_column one past the end. */
typedef struct MmLoc {
  uint32_t file, first_line, first_column, last_line, last_column;
} MmLoc;

typedef struct ParseOpen {
  char c; /* ( [ or { */
  MmLoc loc;
} ParseOpen;

/* Shared by the lexer and the parser of one file. */
typedef struct ParseState {
  Arena *arena;
  Diag *d;
  uint32_t file_id;
  const char *path;
  const SrcFile *src;
  AstFile *file;
  void *scanner;
  /* lexer */
  uint32_t line, col;          /* running position */
  uint32_t tok_line, tok_col;  /* where the current token starts */
  size_t off, tok_off;         /* byte offsets of the same two positions */
  uint32_t end_line, end_col;  /* just after the last token (not a newline) */
  int last_tok;                /* last token returned (0 before the first) */
  ParseOpen open[MM_MAX_NESTING];
  int nopen;
  ParseOpen open_before;       /* innermost open bracket before the lookahead */
  bool has_open_before;
  MmLoc comment_start;
  bool comment_nl;
  int gap;                     /* spaces since the last token (more after a newline or comment) */
  bool bad_char;               /* a bad character was skipped since the last token */
  bool after_bad_char;         /* ... right before the current token */
  /* parser */
  bool skip_decl;              /* top-level recovery: skip to import/module/model */
  bool skip_block;             /* recovery discarded a '{': skip to its '}' */
  int skip_block_to;           /* ... i.e. until nopen falls back to this */
  MmLoc last_loc;              /* location of the last token read */
  bool depth_reported;
  bool fatal;                  /* stop: nesting limit or scanner failure */
  jmp_buf fatal_jmp;
} ParseState;
}

%code provides {
SrcLoc fe_loc(MmLoc l);
MmLoc fe_eof_loc(const ParseState *ps);
int mmlxlex(MMSTYPE *lval, MMLTYPE *lloc, void *scanner);
}

%code {
#include <string.h>

#define YYMAXDEPTH 10000
#define YYINITDEPTH 256

#define YYLLOC_DEFAULT(Cur, Rhs, N)                              \
  do {                                                           \
    if (N) {                                                     \
      (Cur).file = YYRHSLOC(Rhs, 1).file;                        \
      (Cur).first_line = YYRHSLOC(Rhs, 1).first_line;            \
      (Cur).first_column = YYRHSLOC(Rhs, 1).first_column;        \
      (Cur).last_line = YYRHSLOC(Rhs, N).last_line;              \
      (Cur).last_column = YYRHSLOC(Rhs, N).last_column;          \
    } else {                                                     \
      (Cur).file = YYRHSLOC(Rhs, 0).file;                        \
      (Cur).first_line = (Cur).last_line = YYRHSLOC(Rhs, 0).last_line;       \
      (Cur).first_column = (Cur).last_column = YYRHSLOC(Rhs, 0).last_column; \
    }                                                            \
  } while (0)

static int mmlex(MMSTYPE *lval, MMLTYPE *lloc, ParseState *ps);
static void mmerror(const MMLTYPE *loc, ParseState *ps, const char *msg);

/* Every expression is allocated with its tree depth right behind it, so that
 * depth limits cost O(1) per node without a field in the public AST. */
typedef struct PExpr {
  AstExpr e;
  int depth;
} PExpr;

static int edepth(const AstExpr *e) { return e ? ((const PExpr *)e)->depth : 0; }

static AstExpr *mk_expr(ParseState *ps, AstExprKind k, MmLoc loc) {
  PExpr *p = ARENA_NEW(ps->arena, PExpr);
  p->e.kind = k;
  p->e.loc = fe_loc(loc);
  p->depth = 1;
  return &p->e;
}

/* Records the depth of e from its children; returns false (after one
 * report per file) when the tree is too deep to hand to later stages. */
static bool set_depth(ParseState *ps, AstExpr *e, int child_depth) {
  ((PExpr *)e)->depth = child_depth + 1;
  if (child_depth + 1 <= MM_MAX_EXPR_DEPTH) return true;
  if (!ps->depth_reported)
    diag_error(ps->d, e->loc, "expression nested too deeply (more than %d levels)",
               MM_MAX_EXPR_DEPTH);
  ps->depth_reported = true;
  return false;
}

static int max2(int a, int b) { return a > b ? a : b; }

static AstExpr *mk_binary(ParseState *ps, AstOp op, AstExpr *l, AstExpr *r, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_BINARY, loc);
  e->op = op;
  e->lhs = l;
  e->rhs = r;
  return set_depth(ps, e, max2(edepth(l), edepth(r))) ? e : l;
}

static AstExpr *mk_unary(ParseState *ps, AstOp op, AstExpr *x, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_UNARY, loc);
  e->op = op;
  e->lhs = x;
  return set_depth(ps, e, edepth(x)) ? e : x;
}

static AstExpr *mk_cond(ParseState *ps, AstExpr *then_, AstExpr *c, AstExpr *else_, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_COND, loc);
  e->lhs = then_;
  e->cond = c;
  e->rhs = else_;
  return set_depth(ps, e, max2(edepth(then_), max2(edepth(c), edepth(else_)))) ? e : then_;
}

static int vec_depth(const PtrVec *v, bool args) {
  int m = 0;
  for (int i = 0; i < v->len; i++)
    m = max2(m, args ? edepth(((AstArg *)v->items[i])->value) : edepth(v->items[i]));
  return m;
}

static AstExpr *mk_call(ParseState *ps, AstExpr *callee, PtrVec args, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_CALL, loc);
  e->lhs = callee;
  e->args = args;
  const AstArg *kw = NULL;
  for (int i = 0; i < args.len; i++) {
    AstArg *a = args.items[i];
    if (a->name) {
      if (!kw) kw = a;
    } else if (kw) {
      diag_error(ps->d, a->loc, "positional argument after keyword argument '%s'", kw->name);
      break; /* one report per call */
    }
  }
  return set_depth(ps, e, max2(edepth(callee), vec_depth(&args, true))) ? e : callee;
}

static AstExpr *mk_index(ParseState *ps, AstExpr *base, PtrVec items, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_INDEX, loc);
  e->lhs = base;
  e->items = items;
  return set_depth(ps, e, max2(edepth(base), vec_depth(&items, false))) ? e : base;
}

static AstExpr *mk_slice(ParseState *ps, AstExpr *a, AstExpr *b, AstExpr *c, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_SLICE, loc);
  e->start = a;
  e->stop = b;
  e->step = c;
  set_depth(ps, e, max2(edepth(a), max2(edepth(b), edepth(c))));
  return e;
}

static AstExpr *mk_list(ParseState *ps, PtrVec items, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_LIST, loc);
  e->items = items;
  if (!set_depth(ps, e, vec_depth(&items, false))) {
    e->items = (PtrVec){0};
    ((PExpr *)e)->depth = 1;
  }
  return e;
}

static AstExpr *mk_field(ParseState *ps, AstExpr *base, const char *name, MmLoc loc) {
  AstExpr *e = mk_expr(ps, AST_FIELD, loc);
  e->lhs = base;
  e->name = name;
  return set_depth(ps, e, edepth(base)) ? e : base;
}

static AstArg *mk_arg(ParseState *ps, const char *name, AstExpr *v, MmLoc loc) {
  AstArg *a = ARENA_NEW(ps->arena, AstArg);
  a->loc = fe_loc(loc);
  a->name = name;
  a->value = v;
  return a;
}

static AstStmt *mk_stmt(ParseState *ps, AstStmtKind k, MmLoc loc, const char *name, MmLoc name_loc) {
  AstStmt *s = ARENA_NEW(ps->arena, AstStmt);
  s->kind = k;
  s->loc = fe_loc(loc);
  s->name = name;
  s->name_loc = fe_loc(name_loc);
  return s;
}

static AstType *mk_type(ParseState *ps, AstTypeKind k, MmLoc loc) {
  AstType *t = ARENA_NEW(ps->arena, AstType);
  t->kind = k;
  t->loc = fe_loc(loc);
  return t;
}

static AstDecl *mk_decl(ParseState *ps, AstDeclKind k, MmLoc loc, const char *name, MmLoc name_loc) {
  AstDecl *dcl = ARENA_NEW(ps->arena, AstDecl);
  dcl->kind = k;
  dcl->loc = fe_loc(loc);
  dcl->name = name;
  dcl->name_loc = fe_loc(name_loc);
  dcl->file = ps->file;
  return dcl;
}

static PtrVec vec1(ParseState *ps, void *p) {
  PtrVec v = {0};
  ptrvec_push(ps->arena, &v, p);
  return v;
}

static PtrVec vec_add(ParseState *ps, PtrVec v, void *p) {
  ptrvec_push(ps->arena, &v, p);
  return v;
}

static const char *const dtype_names[] = {"f32", "bf16", "f16", "i32", "i64", "u8", "bool"};

static const char *check_dtype(ParseState *ps, const char *name, MmLoc loc) {
  for (size_t i = 0; i < sizeof dtype_names / sizeof *dtype_names; i++)
    if (strcmp(name, dtype_names[i]) == 0) return name;
  diag_error(ps->d, fe_loc(loc), "unknown dtype '%s' (expected f32, bf16, f16, i32, i64, u8 or bool)",
             name);
  return name;
}

static AstType *mk_htype(ParseState *ps, const char *name, AstType *elem, MmLoc name_loc, MmLoc loc) {
  static const struct { const char *name; AstTypeKind kind; } kinds[] = {
      {"int", AT_INT}, {"float", AT_FLOAT}, {"bool", AT_BOOL}, {"string", AT_STRING}, {"list", AT_LIST}};
  AstTypeKind k = AT_INT;
  bool found = false;
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (strcmp(name, kinds[i].name) == 0) {
      k = kinds[i].kind;
      found = true;
    }
  if (!found) {
    diag_error(ps->d, fe_loc(name_loc),
               "unknown hyper-parameter type '%s' (expected int, float, bool, string or list[T])", name);
  } else if (k == AT_LIST && !elem) {
    diag_error(ps->d, fe_loc(loc), "'list' needs an element type, e.g. list[int]");
  } else if (k != AT_LIST && elem) {
    diag_error(ps->d, fe_loc(loc), "only 'list' takes an element type, not '%s'", name);
    elem = NULL;
  }
  AstType *t = mk_type(ps, k, loc);
  t->elem = elem;
  return t;
}

static AstType *mk_tensor_type(ParseState *ps, const char *dtype, MmLoc dtype_loc, PtrVec dims, MmLoc loc) {
  AstType *t = mk_type(ps, AT_TENSOR, loc);
  t->dtype = dtype ? check_dtype(ps, dtype, dtype_loc) : NULL;
  t->dims = dims;
  return t;
}

/* A name or a dotted name (a.b.c): what a module instance may call. */
static bool is_module_ref(const AstExpr *e) {
  while (e->kind == AST_FIELD) e = e->lhs;
  return e->kind == AST_NAME;
}

/* `name = expr (x repeat)?` in a module or model body. */
static AstStmt *mk_instance(ParseState *ps, const char *name, MmLoc name_loc, AstExpr *call,
                            MmLoc call_loc, AstExpr *repeat) {
  AstStmt *s = mk_stmt(ps, ST_INSTANCE, name_loc, name, name_loc);
  s->value = call;
  s->repeat = repeat;
  if (call->kind == AST_BINARY && call->op == OP_FLOORDIV && call->lhs->kind == AST_CALL) {
    diag_error(ps->d, call->loc,
               "expected a module instance 'Name(...)' after '%s =', found a floor division "
               "('//' right after a value is division: put two spaces before a comment)", name);
  } else if (call->kind != AST_CALL) {
    diag_error(ps->d, call->loc,
               "expected a module instance 'Name(...)' or 'param' after '%s =' "
               "(use 'let %s = ...' for a compile-time value)", name, name);
  } else if (!is_module_ref(call->lhs)) {
    diag_error(ps->d, call->lhs->loc, "a module instance must call a module by name");
  }
  return s;
}
}

%union {
  const char *str;
  int64_t ival;
  double fval;
  AstExpr *expr;
  AstArg *arg;
  AstStmt *stmt;
  AstDecl *decl;
  AstType *type;
  AstParam *param;
  PtrVec vec;
}

%token <str> IDENT "identifier"
%token <str> STRING "string"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token NEWLINE "end of line"
%token IMPORT "'import'" MODULE "'module'" MODEL "'model'" LET "'let'" PARAM "'param'"
%token FORWARD "'forward'" RETURN "'return'" IF "'if'" ELSE "'else'" TRUE "'true'" FALSE "'false'"
%token AND "'and'" OR "'or'" NOT "'not'" TRAIN "'train'" PARALLEL "'parallel'"
%token DATA "'data'"
%token POW "'**'" FLOORDIV "'//'" EQ "'=='" NE "'!='" LE "'<='" GE "'>='" ARROW "'->'"

%type <expr> expr cond or_expr and_expr not_expr cmp arith term unary power postfix primary
%type <expr> index opt_expr opt_extends
%type <arg> arg
%type <vec> args_opt arg_list indices list_opt expr_list
%type <vec> members members_block stmts stmts_block settings settings_block
%type <vec> hparams_opt hparam_list opt_hparams targs_opt targ_list else_members else_stmts
%type <stmt> member stmt setting sub_block if_member if_stmt
%type <decl> decl
%type <type> htype ttype opt_ret
%type <param> hparam targ
%type <str> opt_name

/* When error recovery throws away a '{' that was just read, throw away the
 * whole block with it: otherwise its statements would be parsed one level
 * too high and produce a cascade of errors. */
%destructor {
  if (@$.first_line == ps->last_loc.first_line && @$.first_column == ps->last_loc.first_column &&
      ps->nopen > 0 && ps->open[ps->nopen - 1].c == '{') {
    ps->skip_block = true;
    ps->skip_block_to = ps->nopen - 1;
  }
} '{'

%%

file
  : %empty
  | file eos
  | file decl         { ptrvec_push(ps->arena, &ps->file->decls, $2); }
  | file error        {
      /* skip the rest of a broken declaration, unless the lookahead
       * already starts the next one */
      int t = ps->last_tok;
      if (t != IMPORT && t != MODULE && t != MODEL && t != 0) ps->skip_decl = true;
    }
  ;

eos: NEWLINE | ';' ;

/* '{' as its own symbol, so that its destructor (above) fires only for a
 * discarded lookahead. */
lbrace: '{' ;

decl
  : IMPORT STRING     { $$ = mk_decl(ps, DECL_IMPORT, @1, $2, @2); }
  | MODULE IDENT opt_hparams opt_extends members_block {
      $$ = mk_decl(ps, DECL_MODULE, @1, $2, @2);
      $$->hparams = $3;
      $$->members = $5;
      if ($4)
        diag_error(ps->d, $4->loc,
                   "module '%s' cannot extend '%s': only a model can extend another model", $2, $4->name);
    }
  | MODEL IDENT opt_hparams opt_extends members_block {
      $$ = mk_decl(ps, DECL_MODEL, @1, $2, @2);
      $$->hparams = $3;
      $$->members = $5;
      if ($4) {
        $$->base = $4->name;
        $$->base_loc = $4->loc;
      }
    }
  ;

/* `extends Base`: `extends` is not reserved, it is a name in this place
 * only (the base is resolved, and the members merged, in frontend/load.c). */
opt_extends
  : %empty                  { $$ = NULL; }
  | IDENT IDENT {
      if (strcmp($1, "extends") != 0)
        diag_error(ps->d, fe_loc(@1), "unexpected name '%s' after the declaration's name, expected "
                   "'extends' or '{'", $1);
      $$ = mk_expr(ps, AST_NAME, @2);
      $$->name = $2;
    }
  | IDENT {
      if (strcmp($1, "extends") == 0)
        diag_error(ps->d, fe_loc(@1), "expected the name of a model after 'extends'");
      else
        diag_error(ps->d, fe_loc(@1), "unexpected name '%s' after the declaration's name, expected "
                   "'extends' or '{'", $1);
      $$ = NULL;
    }
  ;

opt_hparams
  : %empty                  { $$ = (PtrVec){0}; }
  | '(' hparams_opt ')'     { $$ = $2; }
  ;

hparams_opt
  : %empty                  { $$ = (PtrVec){0}; }
  | hparam_list
  | hparam_list ','
  ;

hparam_list
  : hparam                  { $$ = vec1(ps, $1); }
  | hparam_list ',' hparam  { $$ = vec_add(ps, $1, $3); }
  ;

hparam
  : IDENT ':' htype {
      $$ = ARENA_NEW(ps->arena, AstParam);
      $$->loc = fe_loc(@1); $$->name = $1; $$->type = $3;
    }
  | IDENT ':' htype '=' expr {
      $$ = ARENA_NEW(ps->arena, AstParam);
      $$->loc = fe_loc(@1); $$->name = $1; $$->type = $3; $$->dflt = $5;
    }
  ;

htype
  : IDENT                   { $$ = mk_htype(ps, $1, NULL, @1, @$); }
  | IDENT '[' htype ']'     { $$ = mk_htype(ps, $1, $3, @1, @$); }
  ;

/* ---- module and model bodies ---- */

members_block
  : lbrace members '}'         { $$ = $2; }
  | lbrace members member '}'  { $$ = vec_add(ps, $2, $3); }
  | lbrace members error '}'   { $$ = $2; yyerrok; }
  ;

members
  : %empty                  { $$ = (PtrVec){0}; }
  | members eos
  | members member eos     { $$ = vec_add(ps, $1, $2); }
  | members error eos      { $$ = $1; yyerrok; }
  ;

member
  : LET IDENT '=' expr {
      $$ = mk_stmt(ps, ST_LET, @1, $2, @2);
      $$->value = $4;
    }
  | IDENT '=' PARAM ttype {
      $$ = mk_stmt(ps, ST_PARAM, @1, $1, @1);
      $$->ptype = $4;
      if (!$4->dtype) diag_error(ps->d, $4->loc, "a parameter needs a dtype, e.g. 'param f32[...]'");
    }
  | IDENT '=' PARAM ttype '=' expr {
      $$ = mk_stmt(ps, ST_PARAM, @1, $1, @1);
      $$->ptype = $4;
      $$->value = $6;
      if (!$4->dtype) diag_error(ps->d, $4->loc, "a parameter needs a dtype, e.g. 'param f32[...]'");
      if ($6->kind != AST_NAME && $6->kind != AST_CALL)
        diag_error(ps->d, $6->loc, "expected an initialiser such as zeros, ones, normal(0.02) or fill(x)");
    }
  | IDENT '=' expr          { $$ = mk_instance(ps, $1, @1, $3, @3, NULL); }
  | IDENT '=' expr IDENT expr {
      if (strcmp($4, "x") != 0)
        diag_error(ps->d, fe_loc(@4),
                   "unexpected identifier '%s' after a module instance (a stack of layers is written "
                   "'Block(...) x depth')", $4);
      $$ = mk_instance(ps, $1, @1, $3, @3, $5);
    }
  | if_member
  | FORWARD opt_name '(' targs_opt ')' opt_ret stmts_block {
      $$ = mk_stmt(ps, ST_FORWARD, @1, $2, $2 ? @2 : @1);
      $$->params = $4;
      $$->ret = $6;
      $$->body = $7;
    }
  | TRAIN settings_block {
      $$ = mk_stmt(ps, ST_SECTION, @1, "train", @1);
      $$->body = $2;
    }
  | PARALLEL settings_block {
      $$ = mk_stmt(ps, ST_SECTION, @1, "parallel", @1);
      $$->body = $2;
    }
  | DATA settings_block {
      $$ = mk_stmt(ps, ST_SECTION, @1, "data", @1);
      $$->body = $2;
    }
  ;

if_member
  : IF expr members_block else_members {
      $$ = mk_stmt(ps, ST_IF, @1, NULL, @1);
      $$->cond = $2;
      $$->body = $3;
      $$->else_body = $4;
    }
  ;

else_members
  : %empty                  { $$ = (PtrVec){0}; }
  | ELSE members_block      { $$ = $2; }
  | ELSE if_member          { $$ = vec1(ps, $2); }
  ;

opt_name
  : %empty                  { $$ = NULL; }
  | IDENT
  ;

targs_opt
  : %empty                  { $$ = (PtrVec){0}; }
  | targ_list
  | targ_list ','
  ;

targ_list
  : targ                    { $$ = vec1(ps, $1); }
  | targ_list ',' targ      { $$ = vec_add(ps, $1, $3); }
  ;

targ
  : IDENT {
      $$ = ARENA_NEW(ps->arena, AstParam);
      $$->loc = fe_loc(@1); $$->name = $1;
    }
  | IDENT ':' ttype {
      $$ = ARENA_NEW(ps->arena, AstParam);
      $$->loc = fe_loc(@1); $$->name = $1; $$->type = $3;
    }
  ;

ttype
  : IDENT '[' list_opt ']'  { $$ = mk_tensor_type(ps, $1, @1, $3, @$); }
  | '[' list_opt ']'        { $$ = mk_tensor_type(ps, NULL, @1, $2, @$); }
  ;

opt_ret
  : %empty                  { $$ = NULL; }
  | ARROW ttype             { $$ = $2; }
  | ARROW IDENT {
      $$ = mk_type(ps, AT_LOSS, @2);
      if (strcmp($2, "loss") != 0)
        diag_error(ps->d, fe_loc(@2), "expected a tensor type such as [B, T, dim] or 'loss', found '%s'", $2);
    }
  ;

/* ---- forward bodies ---- */

stmts_block
  : lbrace stmts '}'           { $$ = $2; }
  | lbrace stmts stmt '}'      { $$ = vec_add(ps, $2, $3); }
  | lbrace stmts error '}'     { $$ = $2; yyerrok; }
  ;

stmts
  : %empty                  { $$ = (PtrVec){0}; }
  | stmts eos
  | stmts stmt eos         { $$ = vec_add(ps, $1, $2); }
  | stmts error eos        { $$ = $1; yyerrok; }
  ;

stmt
  : LET IDENT '=' expr {
      $$ = mk_stmt(ps, ST_LET, @1, $2, @2);
      $$->value = $4;
    }
  | IDENT '=' expr {
      $$ = mk_stmt(ps, ST_ASSIGN, @1, $1, @1);
      $$->value = $3;
    }
  | RETURN expr {
      $$ = mk_stmt(ps, ST_RETURN, @1, NULL, @1);
      $$->value = $2;
    }
  | if_stmt
  ;

if_stmt
  : IF expr stmts_block else_stmts {
      $$ = mk_stmt(ps, ST_IF, @1, NULL, @1);
      $$->cond = $2;
      $$->body = $3;
      $$->else_body = $4;
    }
  ;

else_stmts
  : %empty                  { $$ = (PtrVec){0}; }
  | ELSE stmts_block        { $$ = $2; }
  | ELSE if_stmt            { $$ = vec1(ps, $2); }
  ;

/* ---- train { } and parallel { } ---- */

settings_block
  : lbrace settings '}'        { $$ = $2; }
  | lbrace settings setting '}' { $$ = vec_add(ps, $2, $3); }
  | lbrace settings error '}'  { $$ = $2; yyerrok; }
  ;

settings
  : %empty                  { $$ = (PtrVec){0}; }
  | settings eos
  | settings setting eos   { $$ = vec_add(ps, $1, $2); }
  | settings sub_block      { $$ = vec_add(ps, $1, $2); }
  | settings error eos     { $$ = $1; yyerrok; }
  ;

setting
  : IDENT '=' expr {
      $$ = mk_stmt(ps, ST_SETTING, @1, $1, @1);
      $$->value = $3;
    }
  ;

/* a sub-model's own settings inside a section: parallel { vision { dp = 2 } llm { tp = 2 } } */
sub_block
  : IDENT settings_block {
      $$ = mk_stmt(ps, ST_SECTION, @1, $1, @1);
      $$->body = $2;
    }
  ;

/* ---- expressions, lowest precedence first ---- */

expr: cond ;

cond
  : or_expr
  | or_expr IF or_expr ELSE cond { $$ = mk_cond(ps, $1, $3, $5, @$); }
  ;

or_expr
  : and_expr
  | or_expr OR and_expr     { $$ = mk_binary(ps, OP_OR, $1, $3, @$); }
  ;

and_expr
  : not_expr
  | and_expr AND not_expr   { $$ = mk_binary(ps, OP_AND, $1, $3, @$); }
  ;

not_expr
  : cmp
  | NOT not_expr            { $$ = mk_unary(ps, OP_NOT, $2, @$); }
  ;

cmp
  : arith
  | arith EQ arith          { $$ = mk_binary(ps, OP_EQ, $1, $3, @$); }
  | arith NE arith          { $$ = mk_binary(ps, OP_NE, $1, $3, @$); }
  | arith '<' arith         { $$ = mk_binary(ps, OP_LT, $1, $3, @$); }
  | arith LE arith          { $$ = mk_binary(ps, OP_LE, $1, $3, @$); }
  | arith '>' arith         { $$ = mk_binary(ps, OP_GT, $1, $3, @$); }
  | arith GE arith          { $$ = mk_binary(ps, OP_GE, $1, $3, @$); }
  ;

arith
  : term
  | arith '+' term          { $$ = mk_binary(ps, OP_ADD, $1, $3, @$); }
  | arith '-' term          { $$ = mk_binary(ps, OP_SUB, $1, $3, @$); }
  ;

term
  : unary
  | term '*' unary          { $$ = mk_binary(ps, OP_MUL, $1, $3, @$); }
  | term '/' unary          { $$ = mk_binary(ps, OP_DIV, $1, $3, @$); }
  | term FLOORDIV unary     { $$ = mk_binary(ps, OP_FLOORDIV, $1, $3, @$); }
  | term '%' unary          { $$ = mk_binary(ps, OP_MOD, $1, $3, @$); }
  | term '@' unary          { $$ = mk_binary(ps, OP_MATMUL, $1, $3, @$); }
  ;

unary
  : power
  | '-' unary               { $$ = mk_unary(ps, OP_NEG, $2, @$); }
  ;

/* '**' is right associative, binds tighter than a unary minus on its left
 * (-x**2 is -(x**2)) and takes one on its right (2**-1). */
power
  : postfix
  | postfix POW unary       { $$ = mk_binary(ps, OP_POW, $1, $3, @$); }
  ;

postfix
  : primary
  | postfix '(' args_opt ')'  { $$ = mk_call(ps, $1, $3, @$); }
  | postfix '.' IDENT         { $$ = mk_field(ps, $1, $3, @$); }
  | postfix '[' indices ']'   { $$ = mk_index(ps, $1, $3, @$); }
  ;

primary
  : INT                     { $$ = mk_expr(ps, AST_INT, @1); $$->ival = $1; }
  | FLOAT                   { $$ = mk_expr(ps, AST_FLOAT, @1); $$->fval = $1; }
  | STRING                  { $$ = mk_expr(ps, AST_STRING, @1); $$->str = $1; }
  | TRUE                    { $$ = mk_expr(ps, AST_BOOL, @1); $$->bval = true; }
  | FALSE                   { $$ = mk_expr(ps, AST_BOOL, @1); $$->bval = false; }
  | IDENT                   { $$ = mk_expr(ps, AST_NAME, @1); $$->name = $1; }
  | '(' expr ')'            { $$ = $2; }
  | '[' list_opt ']'        { $$ = mk_list(ps, $2, @$); }
  ;

args_opt
  : %empty                  { $$ = (PtrVec){0}; }
  | arg_list
  | arg_list ','
  ;

arg_list
  : arg                     { $$ = vec1(ps, $1); }
  | arg_list ',' arg        { $$ = vec_add(ps, $1, $3); }
  ;

arg
  : expr                    { $$ = mk_arg(ps, NULL, $1, @$); }
  | IDENT '=' expr          { $$ = mk_arg(ps, $1, $3, @$); }
  ;

indices
  : index                   { $$ = vec1(ps, $1); }
  | indices ',' index       { $$ = vec_add(ps, $1, $3); }
  ;

index
  : expr
  | opt_expr ':' opt_expr   { $$ = mk_slice(ps, $1, $3, NULL, @$); }
  | opt_expr ':' opt_expr ':' opt_expr { $$ = mk_slice(ps, $1, $3, $5, @$); }
  ;

opt_expr
  : %empty                  { $$ = NULL; }
  | expr
  ;

list_opt
  : %empty                  { $$ = (PtrVec){0}; }
  | expr_list
  | expr_list ','
  ;

expr_list
  : expr                    { $$ = vec1(ps, $1); }
  | expr_list ',' expr      { $$ = vec_add(ps, $1, $3); }
  ;

%%

SrcLoc fe_loc(MmLoc l) {
  SrcLoc s = {l.file, l.first_line, l.first_column, 1};
  if (l.last_line == l.first_line && l.last_column > l.first_column)
    s.len = l.last_column - l.first_column;
  return s;
}

/* End of file is reported just after the last token, where the missing
 * text belongs, rather than on a trailing empty line. */
MmLoc fe_eof_loc(const ParseState *ps) {
  uint32_t line = ps->end_line ? ps->end_line : 1, col = ps->end_line ? ps->end_col : 1;
  MmLoc l = {ps->file_id, line, col, line, col};
  return l;
}

/* Reads the next token; handles the top-level skip after a broken
 * declaration and stops at a fatal condition. */
static int mmlex(MMSTYPE *lval, MMLTYPE *lloc, ParseState *ps) {
  for (;;) {
    if (ps->fatal) {
      *lloc = fe_eof_loc(ps);
      return 0;
    }
    ps->has_open_before = ps->nopen > 0;
    if (ps->has_open_before) ps->open_before = ps->open[ps->nopen - 1];
    int t = mmlxlex(lval, lloc, ps->scanner);
    ps->last_loc = *lloc;
    if (ps->skip_block && t != 0) {
      if (ps->nopen <= ps->skip_block_to) ps->skip_block = false; /* the matching '}': drop it too */
      continue;
    }
    if (!ps->skip_decl) return t;
    if (t == 0 || (ps->nopen == 0 && (t == IMPORT || t == MODULE || t == MODEL))) {
      ps->skip_decl = false;
      return t;
    }
  }
}

static void mmerror(const MMLTYPE *loc, ParseState *ps, const char *msg) {
  if (ps->fatal) return;
  /* the only error bison reports itself is its stack limit */
  diag_error(ps->d, fe_loc(*loc), "nesting too deep for the parser (%s)", msg);
  ps->fatal = true;
}

/* ---- syntax error messages ---- */

/* The symbol kind of a one-character token. */
#define CH(c) ((yysymbol_kind_t)YYTRANSLATE(c))


static bool is_token(const yysymbol_kind_t *v, int n, yysymbol_kind_t k) {
  for (int i = 0; i < n; i++)
    if (v[i] == k) return true;
  return false;
}

/* Removes kinds in `drop` from v; returns the new count. */
static int drop_tokens(yysymbol_kind_t *v, int n, const yysymbol_kind_t *drop, int ndrop) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!is_token(drop, ndrop, v[i])) v[k++] = v[i];
  return k;
}

static const char *sym_name(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_YYEOF: return "end of file";
  case YYSYMBOL_IDENT: return "a name";
  case YYSYMBOL_STRING: return "a string";
  case YYSYMBOL_INT: return "an integer";
  case YYSYMBOL_FLOAT: return "a number";
  case YYSYMBOL_NEWLINE: return "end of line";
  default: return yysymbol_name(k);
  }
}

/* Describes the token at loc as found in the source. */
static void describe_found(ParseState *ps, yysymbol_kind_t k, const MmLoc *loc, char *buf, size_t cap) {
  const char *text = NULL;
  int len = 0;
  if (loc->first_line >= 1 && loc->first_line <= ps->src->nlines) {
    size_t off = ps->src->line_start[loc->first_line - 1] + loc->first_column - 1;
    if (off <= ps->src->size) {
      text = ps->src->text + off;
      len = loc->last_line == loc->first_line ? (int)(loc->last_column - loc->first_column) : 1;
      if (off + (size_t)len > ps->src->size) len = (int)(ps->src->size - off);
    }
  }
  if (len > 40) len = 40;
  switch (k) {
  case YYSYMBOL_YYEOF: snprintf(buf, cap, "end of file"); return;
  case YYSYMBOL_NEWLINE:
    snprintf(buf, cap, text && *text == '\n' ? "end of line" : "end of line (after a comment)");
    return;
  case YYSYMBOL_IDENT: snprintf(buf, cap, "name '%.*s'", len, text ? text : ""); return;
  case YYSYMBOL_INT:
  case YYSYMBOL_FLOAT: snprintf(buf, cap, "number '%.*s'", len, text ? text : ""); return;
  case YYSYMBOL_STRING: snprintf(buf, cap, "string %.*s", len, text ? text : ""); return;
  default: snprintf(buf, cap, "%s", yysymbol_name(k)); return;
  }
}

static char closer_of(char c) { return c == '(' ? ')' : c == '[' ? ']' : '}'; }

static yysymbol_kind_t closer_sym(char c) {
  return c == '(' ? CH(')') : c == '[' ? CH(']') : CH('}');
}

static int yyreport_syntax_error(const yypcontext_t *ctx, ParseState *ps) {
  if (ps->fatal) return 0;
  /* `return h $ 2`: the skipped '$' was reported; the error at '2' is its echo */
  if (ps->after_bad_char) return 0;
  yysymbol_kind_t found = yypcontext_token(ctx);
  const MmLoc *loc = yypcontext_location(ctx);
  SrcLoc at = fe_loc(*loc);

  /* EOF inside a bracket: name the bracket and point at it. */
  if (found == YYSYMBOL_YYEOF && ps->nopen > 0) {
    const ParseOpen *o = &ps->open[ps->nopen - 1];
    diag_error(ps->d, at, "unexpected end of file, expected '%c' to close '%c'", closer_of(o->c), o->c);
    diag_note(ps->d, fe_loc(o->loc), "'%c' opened here", o->c);
    return 0;
  }

  yysymbol_kind_t exp[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
  if (n < 0) n = 0;

  const char *groups[4];
  int ng = 0;
  const yysymbol_kind_t expr_start[] = {
      YYSYMBOL_IDENT, YYSYMBOL_INT, YYSYMBOL_FLOAT, YYSYMBOL_STRING, YYSYMBOL_TRUE,
      YYSYMBOL_FALSE, CH('('), CH('['), CH('-'), YYSYMBOL_NOT};
  const yysymbol_kind_t ops[] = {
      CH('+'), CH('-'), CH('*'), CH('/'), YYSYMBOL_FLOORDIV, CH('%'),
      CH('@'), YYSYMBOL_POW, YYSYMBOL_EQ, YYSYMBOL_NE, CH('<'), YYSYMBOL_LE,
      CH('>'), YYSYMBOL_GE, YYSYMBOL_AND, YYSYMBOL_OR, YYSYMBOL_IF, CH('('),
      CH('.'), CH('[')};
  const yysymbol_kind_t member_start[] = {YYSYMBOL_LET, YYSYMBOL_IDENT, YYSYMBOL_IF,
                                                 YYSYMBOL_FORWARD, YYSYMBOL_TRAIN, YYSYMBOL_PARALLEL};
  const yysymbol_kind_t stmt_start[] = {YYSYMBOL_LET, YYSYMBOL_IDENT, YYSYMBOL_IF,
                                               YYSYMBOL_RETURN};
  const yysymbol_kind_t terms[] = {YYSYMBOL_NEWLINE, CH(';')};
#define COUNT(a) ((int)(sizeof a / sizeof *a))

  if (is_token(exp, n, YYSYMBOL_LET) && is_token(exp, n, YYSYMBOL_FORWARD)) {
    groups[ng++] = "a member ('let', 'forward', 'if', 'train', 'parallel' or 'name = ...')";
    n = drop_tokens(exp, n, member_start, COUNT(member_start));
  } else if (is_token(exp, n, YYSYMBOL_LET) && is_token(exp, n, YYSYMBOL_RETURN)) {
    groups[ng++] = "a statement";
    n = drop_tokens(exp, n, stmt_start, COUNT(stmt_start));
  }
  if (is_token(exp, n, YYSYMBOL_INT) && is_token(exp, n, CH('(')) &&
      is_token(exp, n, YYSYMBOL_IDENT)) {
    groups[ng++] = "an expression";
    n = drop_tokens(exp, n, expr_start, COUNT(expr_start));
  }
  bool saw_ops = is_token(exp, n, YYSYMBOL_EQ);
  if (is_token(exp, n, CH('+')) && is_token(exp, n, CH('*'))) {
    groups[ng++] = "an operator";
    n = drop_tokens(exp, n, ops, COUNT(ops));
  }
  bool want_term = is_token(exp, n, YYSYMBOL_NEWLINE) || is_token(exp, n, CH(';'));
  if (is_token(exp, n, YYSYMBOL_IMPORT)) want_term = false; /* top level: blank lines are noise */
  n = drop_tokens(exp, n, terms, COUNT(terms));
  /* end of file is always acceptable at top level: listing it is noise */
  if (n + ng > 1 || want_term) n = drop_tokens(exp, n, (yysymbol_kind_t[]){YYSYMBOL_YYEOF}, 1);
#undef COUNT

  /* In a declaration's header (`model M` or `model M(...)`) the only name
   * that may follow is the word `extends`: say so rather than "a name".
   * Nowhere else is a name expected together with '{' but not an expression. */
  bool header = is_token(exp, n, CH('{')) && is_token(exp, n, YYSYMBOL_IDENT) && ng == 0;

  const char *items[YYNTOKENS + 5];
  int ni = 0;
  for (int i = 0; i < ng; i++) items[ni++] = groups[i];
  for (int i = 0; i < n; i++) items[ni++] = header && exp[i] == YYSYMBOL_IDENT ? "'extends'" : sym_name(exp[i]);
  if (want_term) items[ni++] = "end of line";

  char what[64];
  describe_found(ps, found, loc, what, sizeof what);
  char list[512];
  size_t len = 0;
  list[0] = 0;
  for (int i = 0; i < ni && len < sizeof list; i++) {
    const char *sep = i == 0 ? "" : i == ni - 1 ? " or " : ", ";
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", sep, items[i]);
  }
  /* `if a = b {`: the usual slip */
  const char *hint = found == CH('=') && saw_ops ? " (use '==' to compare)" : "";
  if (ni == 0)
    diag_error(ps->d, at, "unexpected %s%s", what, hint);
  else
    diag_error(ps->d, at, "unexpected %s, expected %s%s", what, list, hint);

  /* A missing closer: point at the bracket it should close. */
  if (ps->has_open_before) {
    const ParseOpen *o = &ps->open_before;
    bool found_closer = found == CH(')') || found == CH(']') || found == CH('}');
    for (int i = 0; i < n; i++)
      if (exp[i] == closer_sym(o->c) &&
          o->c != '{' && (found_closer || o->loc.first_line != loc->first_line)) {
        diag_note(ps->d, fe_loc(o->loc), "to match this '%c'", o->c);
        break;
      }
  }
  return 0;
}
