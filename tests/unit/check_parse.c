/* Lexer and parser: AST shapes (as S-expressions), operator precedence,
 * newline rules, locations, and syntax errors with their messages,
 * positions and recovery. Ends with a small fuzz smoke test (truncations and
 * byte mutations must not crash or hang; run under ASan in CI). */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "frontend/sema.h"

/* ---- harness ---- */

typedef struct Parsed {
  Arena arena;
  Diag d;
  AstFile *file;
  char *out; /* the diagnostics as printed */
  size_t outlen;
  FILE *fp;
} Parsed;

static Parsed *P; /* the current test's parse, freed in teardown */

static void teardown(void) {
  if (!P) return;
  arena_free(&P->arena);
  diag_free(&P->d);
  free(P->out);
  free(P);
  P = NULL;
}

static Parsed *parse_n(const char *src, size_t n) {
  teardown();
  P = calloc(1, sizeof *P);
  arena_init(&P->arena);
  diag_init(&P->d);
  P->fp = open_memstream(&P->out, &P->outlen);
  P->d.out = P->fp;
  uint32_t id = diag_add_buffer(&P->d, "t.mm", src, n);
  P->file = fe_parse(&P->arena, &P->d, id);
  fclose(P->fp);
  P->d.out = stderr;
  ck_assert_ptr_nonnull(P->file);
  return P;
}

static Parsed *parse(const char *src) {
  return parse_n(src, strlen(src));
}

static int errors(void) {
  return P->d.errors;
}

/* Asserts the diagnostics contain `s`. */
#define ck_diag_has(s)                                                                             \
  ck_assert_msg(strstr(P->out, (s)) != NULL, "diagnostics lack \"%s\":\n%.1500s", (s), P->out)

static AstDecl *decl(int i) {
  ck_assert_int_gt(P->file->decls.len, i);
  return P->file->decls.items[i];
}

static AstStmt *member(int di, int mi) {
  AstDecl *d = decl(di);
  ck_assert_int_gt(d->members.len, mi);
  return d->members.items[mi];
}

/* ---- an S-expression printer for AST shapes ---- */

typedef struct Buf {
  char s[4096];
  size_t n;
} Buf;

static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (b->n < sizeof b->s) b->n += (size_t)vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
  va_end(ap);
}

static void sx(Buf *b, const AstExpr *e) {
  if (!e) {
    put(b, "_");
    return;
  }
  switch (e->kind) {
    case AST_INT: put(b, "%lld", (long long)e->ival); break;
    case AST_FLOAT: put(b, "%g", e->fval); break;
    case AST_STRING: put(b, "\"%s\"", e->str); break;
    case AST_BOOL: put(b, e->bval ? "true" : "false"); break;
    case AST_NAME: put(b, "%s", e->name); break;
    case AST_LIST:
      put(b, "[");
      for (int i = 0; i < e->items.len; i++) {
        if (i) put(b, " ");
        sx(b, e->items.items[i]);
      }
      put(b, "]");
      break;
    case AST_UNARY:
      put(b, "(%s ", ast_op_str(e->op));
      sx(b, e->lhs);
      put(b, ")");
      break;
    case AST_BINARY:
      put(b, "(%s ", ast_op_str(e->op));
      sx(b, e->lhs);
      put(b, " ");
      sx(b, e->rhs);
      put(b, ")");
      break;
    case AST_COND:
      put(b, "(if ");
      sx(b, e->cond);
      put(b, " ");
      sx(b, e->lhs);
      put(b, " ");
      sx(b, e->rhs);
      put(b, ")");
      break;
    case AST_CALL:
      put(b, "(call ");
      sx(b, e->lhs);
      for (int i = 0; i < e->args.len; i++) {
        const AstArg *a = e->args.items[i];
        put(b, " ");
        if (a->name) put(b, "%s=", a->name);
        sx(b, a->value);
      }
      put(b, ")");
      break;
    case AST_FIELD:
      put(b, "(. ");
      sx(b, e->lhs);
      put(b, " %s)", e->name);
      break;
    case AST_INDEX:
      put(b, "(index ");
      sx(b, e->lhs);
      for (int i = 0; i < e->items.len; i++) {
        put(b, " ");
        sx(b, e->items.items[i]);
      }
      put(b, ")");
      break;
    case AST_SLICE:
      put(b, "(: ");
      sx(b, e->start);
      put(b, " ");
      sx(b, e->stop);
      put(b, " ");
      sx(b, e->step);
      put(b, ")");
      break;
  }
}

static const char *sexpr(const AstExpr *e) {
  static Buf b;
  b.n = 0;
  b.s[0] = 0;
  sx(&b, e);
  return b.s;
}

/* Parses `let v = <src>` in a module and returns the value's S-expression. */
static const char *expr_of(const char *src) {
  static char text[8192];
  snprintf(text, sizeof text, "module M() {\n  let v = %s\n}\n", src);
  parse(text);
  ck_assert_msg(errors() == 0, "errors in '%.200s':\n%.1500s", src, P->out);
  AstStmt *s = member(0, 0);
  ck_assert_int_eq(s->kind, ST_LET);
  return sexpr(s->value);
}

#define ck_expr(src, want) ck_assert_str_eq(expr_of(src), (want))

/* ---- expressions ---- */

START_TEST(t_precedence) {
  ck_expr("a + b * c", "(+ a (* b c))");
  ck_expr("a - b - c", "(- (- a b) c)");
  ck_expr("a * b / c//d % e @ f", "(@ (% (// (/ (* a b) c) d) e) f)");
  ck_expr("-x**2", "(- (** x 2))");
  ck_expr("2**-1", "(** 2 (- 1))");
  ck_expr("a**b**c", "(** a (** b c))");
  ck_expr("-a * b", "(* (- a) b)");
  ck_expr("--a", "(- (- a))");
  ck_expr("(a + b) * c", "(* (+ a b) c)");
  ck_expr("a + b < c * d", "(< (+ a b) (* c d))");
  ck_expr("a == b and c != d or not e", "(or (and (== a b) (!= c d)) (not e))");
  ck_expr("not a == b", "(not (== a b))");
  ck_expr("a <= b", "(<= a b)");
  ck_expr("a >= b", "(>= a b)");
  ck_expr("a > b", "(> a b)");
  ck_expr("x @ w + b", "(+ (@ x w) b)");
}
END_TEST

START_TEST(t_conditional) {
  ck_expr("a if c else b", "(if c a b)");
  ck_expr("a if c else b if d else e", "(if c a (if d b e))");
  ck_expr("x + 1 if n > 2 and ok else 0", "(if (and (> n 2) ok) (+ x 1) 0)");
  ck_expr("(a if c else b) * 2", "(* (if c a b) 2)");
}
END_TEST

START_TEST(t_literals) {
  ck_expr("42", "42");
  ck_expr("0x1F", "31");
  ck_expr("1.5", "1.5");
  ck_expr("1e-6", "1e-06");
  ck_expr("2e-5", "2e-05");
  ck_expr("1e6", "1e+06");
  ck_expr("true", "true");
  ck_expr("false", "false");
  ck_expr("\"a\\tb\\n\\\\\\\"\"", "\"a\tb\n\\\"\"");
  ck_expr("1f1b", "1f1b");
  ck_expr("[1, 2, 3,]", "[1 2 3]");
  ck_expr("[]", "[]");
  ck_expr("[[1, 2], [3]]", "[[1 2] [3]]");
  ck_expr("9223372036854775807", "9223372036854775807");
  AstStmt *s = member(0, 0);
  ck_assert_int_eq(s->value->kind, AST_INT);
  ck_assert(s->value->ival == INT64_MAX);
}
END_TEST

START_TEST(t_postfix) {
  ck_expr("embed(p).flatten(2).transpose(1, 2)",
          "(call (. (call (. (call embed p) flatten) 2) transpose) 1 2)");
  ck_expr("f(a, b = 2, c = x + 1)", "(call f a b=2 c=(+ x 1))");
  ck_expr("f()", "(call f)");
  ck_expr("f(a,)", "(call f a)");
  ck_expr("llm.blocks[0:8]", "(index (. llm blocks) (: 0 8 _))");
  ck_expr("x[:, 1:]", "(index x (: _ _ _) (: 1 _ _))");
  ck_expr("x[::2, :-1, 3]", "(index x (: _ _ 2) (: _ (- 1) _) 3)");
  ck_expr("x[1:2:3]", "(index x (: 1 2 3))");
  ck_expr("x[i][j]", "(index (index x i) j)");
  ck_expr("-x.y(1)[0]**2", "(- (** (index (call (. x y) 1) 0) 2))");
  ck_expr("concat([a, b.expand(B, 1, d)], axis = 1)",
          "(call concat [a (call (. b expand) B 1 d)] axis=1)");
  ck_expr("x.reshape(B, (g / f) ** 2, d * f * f)",
          "(call (. x reshape) B (** (/ g f) 2) (* (* d f) f))");
}
END_TEST

START_TEST(t_floordiv_vs_comment) {
  ck_expr("a//b", "(// a b)");
  ck_expr("a // b", "(// a b)");
  ck_expr("f(x)//2", "(// (call f x) 2)");
  ck_expr("(g // 2) ** 2", "(** (// g 2) 2)");
  ck_expr("a // -b + c", "(+ (// a (- b)) c)");
  ck_expr("a // b // c", "(// (// a b) c)");
  ck_expr("a // f(b, c)", "(// a (call f b c))");
  /* prose, shapes, two spaces, or no operand before: a comment */
  ck_expr("a // b is a comment", "a");
  ck_expr("a  // b", "a");
  ck_expr("a\t// b", "a");
  ck_expr("a // [B, T, C]", "a");
  ck_expr("a // (B, T, C)", "a");
  ck_expr("a // note:", "a");
  ck_expr("a // don't", "a");
  ck_expr("a // b  // c", "(// a b)");
  ck_expr("(a + // b\n  1)", "(+ a 1)");
  ck_expr("a /* inline */ + b", "(+ a b)");
  parse("module M(d: int,\n  h: int = d // 2,\n  k: int = 3) {\n"
        "  blocks = B(d // 2) x d // 4\n"
        "  fc = Linear(d, d) // projection\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_assert_str_eq(sexpr(((AstParam *)decl(0)->hparams.items[1])->dflt), "(// d 2)");
  ck_assert_str_eq(sexpr(member(0, 0)->value), "(call B (// d 2))");
  ck_assert_str_eq(sexpr(member(0, 0)->repeat), "(// d 4)");
  ck_diag_has("t.mm:5:8: error: expected a module instance 'Name(...)' after 'fc =', found a floor "
              "division ('//' right after a value is division: put two spaces before a comment)");
}
END_TEST

/* ---- newlines ---- */

START_TEST(t_newlines_in_brackets) {
  ck_expr("f(a,\n    b = 2,\n  )", "(call f a b=2)");
  ck_expr("(1 +\n 2)", "(+ 1 2)");
  ck_expr("[1,\n\n 2]", "[1 2]");
  ck_expr("f(a, // a comment\n  b)", "(call f a b)");
  parse("module M() {\n  let v = 1 +\n 2\n}\n");
  ck_assert_int_ge(errors(), 1);
  ck_diag_has("t.mm:2:14: error: unexpected end of line, expected an expression");
}
END_TEST

START_TEST(t_terminators) {
  parse("\n\n// header\n\nmodule M() {\n\n\n  let a = 1; let b = 2;;\n  let c = 3 }\n\n");
  ck_assert_int_eq(errors(), 0);
  ck_assert_int_eq(decl(0)->members.len, 3);
  parse("module M() { }  module N() {\n}\nmodel X { let a = 1 }");
  ck_assert_int_eq(errors(), 0);
  ck_assert_int_eq(P->file->decls.len, 3);
  ck_assert_int_eq(decl(2)->kind, DECL_MODEL);
  /* a block comment spanning lines ends a statement like a newline */
  parse("module M() {\n  let a = 1 /* one\n two */ let b = 2\n}\n");
  ck_assert_int_eq(errors(), 0);
  ck_assert_int_eq(decl(0)->members.len, 2);
  parse("");
  ck_assert_int_eq(errors(), 0);
  ck_assert_int_eq(P->file->decls.len, 0);
}
END_TEST

/* ---- declarations and members ---- */

START_TEST(t_module_members) {
  parse(
      "import \"nn.mm\"\n"
      "module Block(dim: int, eps: float = 1e-6, names: list[string] = [\"a\"], on: bool = true,\n"
      "             s: string = \"x\",) {\n"
      "  let grid = dim / 2\n"
      "  norm = LayerNorm(dim, eps)\n"
      "  w = param f32[dim, 3 * dim] = normal(0.02)\n"
      "  b = param bf16[dim] = zeros\n"
      "  c = param i32[]\n"
      "  blocks = nn.Block(dim, heads = 4) x depth\n"
      "}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  ck_assert_int_eq(P->file->decls.len, 2);
  AstDecl *imp = decl(0);
  ck_assert_int_eq(imp->kind, DECL_IMPORT);
  ck_assert_str_eq(imp->name, "nn.mm");
  ck_assert_uint_eq(imp->name_loc.col, 8);
  AstDecl *m = decl(1);
  ck_assert_int_eq(m->kind, DECL_MODULE);
  ck_assert_str_eq(m->name, "Block");
  ck_assert_uint_eq(m->loc.line, 2);
  ck_assert_uint_eq(m->loc.col, 1);
  ck_assert_uint_eq(m->name_loc.col, 8);
  ck_assert_uint_eq(m->name_loc.len, 5);
  ck_assert_ptr_eq(m->file, P->file);
  ck_assert_int_eq(m->hparams.len, 5);
  AstParam *h0 = m->hparams.items[0], *h1 = m->hparams.items[1], *h2 = m->hparams.items[2];
  ck_assert_str_eq(h0->name, "dim");
  ck_assert_int_eq(h0->type->kind, AT_INT);
  ck_assert_ptr_null(h0->dflt);
  ck_assert_int_eq(h1->type->kind, AT_FLOAT);
  ck_assert_str_eq(sexpr(h1->dflt), "1e-06");
  ck_assert_int_eq(h2->type->kind, AT_LIST);
  ck_assert_int_eq(h2->type->elem->kind, AT_STRING);
  ck_assert_int_eq(((AstParam *)m->hparams.items[3])->type->kind, AT_BOOL);

  ck_assert_int_eq(m->members.len, 6);
  AstStmt *let = member(1, 0);
  ck_assert_int_eq(let->kind, ST_LET);
  ck_assert_str_eq(let->name, "grid");
  ck_assert_uint_eq(let->loc.col, 3);
  ck_assert_uint_eq(let->name_loc.col, 7);
  AstStmt *inst = member(1, 1);
  ck_assert_int_eq(inst->kind, ST_INSTANCE);
  ck_assert_str_eq(sexpr(inst->value), "(call LayerNorm dim eps)");
  ck_assert_ptr_null(inst->repeat);
  AstStmt *w = member(1, 2);
  ck_assert_int_eq(w->kind, ST_PARAM);
  ck_assert_str_eq(w->ptype->dtype, "f32");
  ck_assert_int_eq(w->ptype->dims.len, 2);
  ck_assert_str_eq(sexpr(w->ptype->dims.items[1]), "(* 3 dim)");
  ck_assert_str_eq(sexpr(w->value), "(call normal 0.02)");
  ck_assert_str_eq(sexpr(member(1, 3)->value), "zeros");
  ck_assert_int_eq(member(1, 4)->ptype->dims.len, 0);
  ck_assert_ptr_null(member(1, 4)->value);
  AstStmt *stack = member(1, 5);
  ck_assert_int_eq(stack->kind, ST_INSTANCE);
  ck_assert_str_eq(sexpr(stack->value), "(call (. nn Block) dim heads=4)");
  ck_assert_str_eq(sexpr(stack->repeat), "depth");
}
END_TEST

START_TEST(t_stack_repeat) {
  parse("module M(d: int) {\n  blocks = Block(d) x 2 * d\n  x = Linear(d, d)\n}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  ck_assert_str_eq(sexpr(member(0, 0)->repeat), "(* 2 d)");
  ck_assert_str_eq(member(0, 1)->name, "x"); /* `x` is an ordinary name */
  parse("module M(d: int) {\n  blocks = Block(d) y 3\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:21: error: unexpected identifier 'y' after a module instance");
  /* `x` is not an operator in expressions, and not a repeat on the next line */
  parse("module M(d: int) {\n  blocks = Block(d)\n  x 3\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:3:5: error: unexpected number '3', expected '='");
}
END_TEST

START_TEST(t_forward) {
  parse("module M(dim: int) {\n"
        "  forward(x: [B, S, dim], m: bf16[B, S], s: f32[]) -> [B, S, dim] {\n"
        "    let k = dim * 2\n"
        "    h = x + attn(norm(x))\n"
        "    if k > 2 { h = h * 2 } else if k > 1 { h = h } else { h = -h }\n"
        "    return h\n"
        "  }\n"
        "  forward decode(h: [B, T, dim],) -> loss { return head(h) }\n"
        "  forward loss2() { return 0 }\n"
        "}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  AstStmt *f = member(0, 0);
  ck_assert_int_eq(f->kind, ST_FORWARD);
  ck_assert_ptr_null(f->name);
  ck_assert_int_eq(f->params.len, 3);
  AstParam *x = f->params.items[0], *m = f->params.items[1], *s = f->params.items[2];
  ck_assert_str_eq(x->name, "x");
  ck_assert_int_eq(x->type->kind, AT_TENSOR);
  ck_assert_ptr_null(x->type->dtype);
  ck_assert_int_eq(x->type->dims.len, 3);
  ck_assert_uint_eq(x->loc.col, 11);
  ck_assert_uint_eq(x->type->loc.col, 14);
  ck_assert_uint_eq(x->type->loc.len, 11);
  ck_assert_str_eq(m->type->dtype, "bf16");
  ck_assert_uint_eq(m->type->loc.len, 10);
  ck_assert_int_eq(s->type->dims.len, 0);
  ck_assert_int_eq(f->ret->kind, AT_TENSOR);
  ck_assert_int_eq(f->body.len, 4);
  AstStmt *b0 = f->body.items[0], *b1 = f->body.items[1], *b2 = f->body.items[2],
          *b3 = f->body.items[3];
  ck_assert_int_eq(b0->kind, ST_LET);
  ck_assert_int_eq(b1->kind, ST_ASSIGN); /* a call is an ordinary value in a forward */
  ck_assert_str_eq(sexpr(b1->value), "(+ x (call attn (call norm x)))");
  ck_assert_int_eq(b2->kind, ST_IF);
  ck_assert_str_eq(sexpr(b2->cond), "(> k 2)");
  ck_assert_int_eq(b2->body.len, 1);
  ck_assert_int_eq(b2->else_body.len, 1);
  AstStmt *elif = b2->else_body.items[0];
  ck_assert_int_eq(elif->kind, ST_IF);
  ck_assert_int_eq(elif->else_body.len, 1);
  ck_assert_int_eq(((AstStmt *)elif->else_body.items[0])->kind, ST_ASSIGN);
  ck_assert_int_eq(b3->kind, ST_RETURN);
  ck_assert_uint_eq(b3->loc.line, 6);
  ck_assert_uint_eq(b3->loc.col, 5);

  AstStmt *d = member(0, 1);
  ck_assert_str_eq(d->name, "decode");
  ck_assert_uint_eq(d->name_loc.col, 11);
  ck_assert_int_eq(d->ret->kind, AT_LOSS);
  ck_assert_int_eq(d->body.len, 1);
  ck_assert_ptr_null(member(0, 2)->ret);
  /* untyped arguments take any tensor */
  parse("module M() {\n  forward(x, y: [B]) { return x }\n}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  AstStmt *u = member(0, 0);
  ck_assert_int_eq(u->params.len, 2);
  ck_assert_ptr_null(((AstParam *)u->params.items[0])->type);
  ck_assert_ptr_nonnull(((AstParam *)u->params.items[1])->type);
}
END_TEST

START_TEST(t_if_members_and_else_newline) {
  parse("module M(big: bool) {\n"
        "  if big {\n"
        "    fc = Linear(8, 8)\n"
        "  }\n"
        "  // a comment between\n"
        "  else if not big {\n"
        "    fc = Linear(4, 4)\n"
        "  } else {\n"
        "  }\n"
        "  elsewhere = Linear(1, 1)\n"
        "}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  ck_assert_int_eq(decl(0)->members.len, 2);
  AstStmt *s = member(0, 0);
  ck_assert_int_eq(s->kind, ST_IF);
  ck_assert_int_eq(s->body.len, 1);
  ck_assert_int_eq(((AstStmt *)s->body.items[0])->kind, ST_INSTANCE);
  AstStmt *e = s->else_body.items[0];
  ck_assert_int_eq(e->kind, ST_IF);
  ck_assert_str_eq(sexpr(e->cond), "(not big)");
  ck_assert_int_eq(e->else_body.len, 0);
  ck_assert_str_eq(member(0, 1)->name, "elsewhere");
}
END_TEST

START_TEST(t_model_sections) {
  parse("model VLM(steps: int = 10) {\n"
        "  vision = ViT(depth = 2)\n"
        "  train {\n"
        "    freeze = [vision]\n"
        "    optimizer = adamw(lr = 2e-5, betas = [0.9, 0.999])\n"
        "  }\n"
        "  parallel { tp = 2; sp = true; schedule = 1f1b\n"
        "    stages = [vision + llm.blocks[0:8], llm.blocks[8:24]]; zero = 1 }\n"
        "}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  AstDecl *m = decl(0);
  ck_assert_int_eq(m->kind, DECL_MODEL);
  ck_assert_int_eq(m->hparams.len, 1);
  AstStmt *t = member(0, 1), *p = member(0, 2);
  ck_assert_int_eq(t->kind, ST_SECTION);
  ck_assert_str_eq(t->name, "train");
  ck_assert_int_eq(t->body.len, 2);
  AstStmt *opt = t->body.items[1];
  ck_assert_int_eq(opt->kind, ST_SETTING);
  ck_assert_str_eq(opt->name, "optimizer");
  ck_assert_str_eq(sexpr(opt->value), "(call adamw lr=2e-05 betas=[0.9 0.999])");
  ck_assert_str_eq(p->name, "parallel");
  ck_assert_int_eq(p->body.len, 5);
  ck_assert_str_eq(sexpr(((AstStmt *)p->body.items[2])->value), "1f1b");
  ck_assert_str_eq(
      sexpr(((AstStmt *)p->body.items[3])->value),
      "[(+ vision (index (. llm blocks) (: 0 8 _))) (index (. llm blocks) (: 8 24 _))]");
  AstStmt *zero = p->body.items[4];
  ck_assert_uint_eq(zero->loc.line, 8);
}
END_TEST

START_TEST(t_model_extends) {
  parse("model D extends Base {\n"
        "  let extends = 2\n" /* `extends` is a name everywhere else */
        "  train { optimizer = sgd(lr = 0.1) }\n"
        "}\n"
        "model Base {\n"
        "  forward(x) { return x }\n"
        "}\n");
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  AstDecl *d = decl(0);
  ck_assert_str_eq(d->name, "D");
  ck_assert_str_eq(d->base, "Base");
  ck_assert_uint_eq(d->base_loc.line, 1);
  ck_assert_uint_eq(d->base_loc.col, 17);
  ck_assert_uint_eq(d->base_loc.len, 4);
  ck_assert_int_eq(d->members.len, 2);
  ck_assert_str_eq(member(0, 0)->name, "extends");
  ck_assert_ptr_null(decl(1)->base);

  parse("module M extends Base {\n}\n"
        "model N foo {\n}\n"
        "model O extends {\n}\n");
  ck_assert_int_eq(errors(), 3);
  ck_diag_has(
      "t.mm:1:18: error: module 'M' cannot extend 'Base': only a model can extend another model");
  ck_diag_has("t.mm:3:9: error: unexpected name 'foo' after the declaration's name, expected "
              "'extends' or '{'");
  ck_diag_has("t.mm:5:9: error: expected the name of a model after 'extends'");
  ck_assert_int_eq(P->file->decls.len, 3); /* each still declared */

  parse("model M = {\n}\n");
  ck_diag_has("t.mm:1:9: error: unexpected '=', expected 'extends', '{' or '('");
  parse("model M(n: int) extends B C {\n}\n");
  ck_diag_has("t.mm:1:27: error: unexpected name 'C', expected '{'");
}
END_TEST

/* ---- extension through the loader: the merged model elaborates to the IR
 * of the same model written out ---- */

static char *g_ext_out;

/* Elaborates `name` and returns its IR text without the module line and
 * the source locations (inherited members keep the base's). */
static char *ir_text(FeProgram *p, const char *name) {
  FeResult r = {0};
  ck_assert_msg(fe_elaborate(p, name, &r), "elaborate %s: %s", name, g_ext_out);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ir_print_module(f, r.ir);
  fclose(f);
  ir_module_free(r.ir);
  char *o = text, *w = text;
  while (*o && *o != '\n') o++; /* module @name ... */
  while (*o) {
    if (strncmp(o, " loc(\"", 6) == 0) {
      char *e = strchr(o, ')');
      if (e) {
        o = e + 1;
        continue;
      }
    }
    *w++ = *o++;
  }
  *w = 0;
  return text;
}

static const char ext_src[] =
    "model Base {\n"
    "  let B = 2\n"
    "  let d = 4\n"
    "  a = param f32[d] = ones\n"
    "  b = param f32[3, d] = normal(0.02)\n"
    "  forward(x: f32[B, d]) -> loss { return mean(x * a) }\n"
    "  train { freeze = [a]; optimizer = sgd(lr = 0.5) }\n"
    "  parallel { dp = 2 }\n"
    "}\n"
    "model Derived extends Base {\n"
    "  train { optimizer = adamw(lr = 0.25); clip = 2.0 }\n"
    "  c = param f32[d] = zeros\n"
    "  let d = 8\n"
    "  forward(x: f32[B, d]) -> loss { return mean(x * a + c) + mean(b) }\n"
    "}\n"
    "model Chained extends Derived {\n"
    "  let B = 4\n"
    "}\n"
    "model Flat {\n" /* Chained written out */
    "  let B = 4\n"
    "  let d = 8\n"
    "  a = param f32[d] = ones\n"
    "  b = param f32[3, d] = normal(0.02)\n"
    "  forward(x: f32[B, d]) -> loss { return mean(x * a + c) + mean(b) }\n"
    "  train { optimizer = adamw(lr = 0.25); clip = 2.0 }\n"
    "  parallel { dp = 2 }\n"
    "  c = param f32[d] = zeros\n"
    "}\n";

START_TEST(t_extends_elaborates_as_written_out) {
  Diag d;
  diag_init(&d);
  size_t outlen = 0;
  FILE *fp = open_memstream(&g_ext_out, &outlen);
  d.out = fp;
  FeOptions fo = {0};
  FeProgram *p = fe_load_buffer(&d, "ext.mm", ext_src, strlen(ext_src), &fo);
  ck_assert_ptr_nonnull(p);
  fflush(fp);
  ck_assert_msg(d.errors == 0, "%s", g_ext_out);
  char *chained = ir_text(p, "Chained"), *flat = ir_text(p, "Flat");
  ck_assert_str_eq(chained, flat);
  /* in member order: a, b (Base's places, d replaced), then c appended */
  char *pa = strstr(chained, "param @a : f32[8]"), *pb = strstr(chained, "param @b : f32[3, 8]"),
       *pc = strstr(chained, "param @c : f32[8]");
  ck_assert_msg(pa && pb && pc && pa < pb && pb < pc, "%s", chained);
  ck_assert_ptr_nonnull(strstr(chained, "f32[4, 8]")); /* x: B = 4 from Chained */
  /* the train section replaced as a whole: no freeze, adamw; parallel inherited */
  FeResult r = {0};
  ck_assert(fe_elaborate(p, "Chained", &r));
  ck_assert_int_eq(r.train.nfreeze, 0);
  ck_assert_int_eq(r.train.optim, MM_OPT_ADAMW);
  ck_assert(r.train.lr == 0.25 && r.train.clip == 2.0);
  ck_assert_int_eq(r.plan.dp, 2);
  FeResult rb = {0};
  ck_assert(fe_elaborate(p, "Base", &rb));
  ck_assert_int_eq(rb.train.nfreeze, 1);
  ck_assert_int_eq(rb.train.optim, MM_OPT_SGD);
  ir_module_free(r.ir);
  ir_module_free(rb.ir);
  free(chained);
  free(flat);
  fe_free(p);
  fclose(fp);
  free(g_ext_out);
  g_ext_out = NULL;
  diag_free(&d);
}
END_TEST

START_TEST(t_locations) {
  parse("module M() {\n  let v = a + b * c\n  let w = f(x,\n    y)\n}\n");
  ck_assert_int_eq(errors(), 0);
  AstExpr *v = member(0, 0)->value;
  ck_assert_uint_eq(v->loc.line, 2);
  ck_assert_uint_eq(v->loc.col, 11);
  ck_assert_uint_eq(v->loc.len, 9); /* a + b * c */
  ck_assert_uint_eq(v->rhs->loc.col, 15);
  ck_assert_uint_eq(v->rhs->loc.len, 5);
  ck_assert_uint_eq(v->lhs->loc.len, 1);
  AstExpr *w = member(0, 1)->value; /* spans two lines: starts right, single caret */
  ck_assert_uint_eq(w->loc.line, 3);
  ck_assert_uint_eq(w->loc.col, 11);
  ck_assert_uint_le(w->loc.len, 1);
  AstArg *a1 = w->args.items[1];
  ck_assert_uint_eq(a1->loc.line, 4);
  ck_assert_uint_eq(a1->loc.col, 5);
  ck_assert_uint_eq(member(0, 0)->loc.line, 2);
  /* tabs count as one byte */
  parse("module M() {\n\tlet v = 1\n}\n");
  ck_assert_uint_eq(member(0, 0)->loc.col, 2);
  ck_assert_uint_eq(member(0, 0)->value->loc.col, 10);
}
END_TEST

/* ---- errors ---- */

START_TEST(t_err_missing_brace) {
  parse("module M() {\n  let a = 1\n  forward(x: [B]) -> [B] {\n    return x\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:4:13: error: unexpected end of file, expected '}' to close '{'");
  ck_diag_has("t.mm:3:26: note: '{' opened here");
  parse("module M() {\n  x = f(1, 2\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:13: error: unexpected end of file, expected ')' to close '('");
  ck_diag_has("t.mm:2:8: note: '(' opened here");
}
END_TEST

START_TEST(t_err_stray_token) {
  parse("module M() {\n  let a = 1 )\n  let b = 2\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:13: error: unexpected ')', expected an operator, '}' or end of line");
  ck_assert_int_eq(decl(0)->members.len, 1); /* b survives the recovery */
  parse("module M() {\n  let a = (1 + 2]\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:17: error: unexpected ']', expected an operator or ')'");
  ck_diag_has("t.mm:2:11: note: to match this '('");
  parse("}\nmodule M() {}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:1:1: error: unexpected '}', expected 'import', 'module' or 'model'");
  ck_assert_int_eq(P->file->decls.len, 1);
  parse("module M() {\n  let = 3\n}\n");
  ck_diag_has("t.mm:2:7: error: unexpected '=', expected a name");
  parse("module M() {\n  1 + 2\n}\n");
  ck_diag_has("t.mm:2:3: error: unexpected number '1', expected a member");
  parse("module M() {\n  forward() {\n    f(x)\n  }\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:3:6: error: unexpected '(', expected '='");
}
END_TEST

START_TEST(t_err_member_not_instance) {
  parse("module M() {\n  y = 3 + 4\n  z = f(1)(2)\n  w = Linear(1)\n}\n");
  ck_assert_int_eq(errors(), 2);
  ck_diag_has("t.mm:2:7: error: expected a module instance 'Name(...)' or 'param' after 'y =' "
              "(use 'let y = ...' for a compile-time value)");
  ck_diag_has("t.mm:3:7: error: a module instance must call a module by name");
  ck_assert_int_eq(decl(0)->members.len, 3);
}
END_TEST

START_TEST(t_err_unterminated_comment) {
  parse("module M() {\n  let a = 1\n}\n/* not closed\n module N() {}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:4:1: error: unterminated comment");
  ck_assert_int_eq(P->file->decls.len, 1);
}
END_TEST

START_TEST(t_err_unterminated_string) {
  parse("import \"nn.mm\nmodule M() {}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:1:8: error: unterminated string");
  ck_assert_int_eq(P->file->decls.len, 2);
  ck_assert_str_eq(decl(0)->name, "nn.mm");
  parse("import \"a\\qb\"\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:1:10: error: unknown escape sequence '\\q'");
}
END_TEST

START_TEST(t_err_three_independent) {
  parse("module M(d: int) {\n"
        "  let a = 1 +\n" /* 1: expression ends early */
        "  let b = 2\n"
        "  c = Linear(d, d) 7\n" /* 2: stray number */
        "  forward(x: [B, d]) -> [B, d] {\n"
        "    h = x * * 2\n" /* 3: missing operand */
        "    return h\n"
        "  }\n"
        "}\n"
        "module N() { let ok = 1 }\n");
  ck_assert_int_eq(errors(), 3);
  ck_diag_has("t.mm:2:14: error: unexpected end of line, expected an expression");
  ck_diag_has("t.mm:4:20: error: unexpected number '7'");
  ck_diag_has("t.mm:6:13: error: unexpected '*', expected an expression");
  ck_assert_int_eq(P->file->decls.len, 2);
  AstDecl *m = decl(0);
  ck_assert_int_eq(m->members.len, 2); /* b and the forward */
  AstStmt *f = m->members.items[1];
  ck_assert_int_eq(f->kind, ST_FORWARD);
  ck_assert_int_eq(f->body.len, 1); /* the return */
}
END_TEST

START_TEST(t_err_recovery_blocks) {
  /* a broken forward header: its body is skipped, not parsed as members */
  parse("module M() {\n  forward(x: [B) -> loss {\n    h = x\n    return h\n  }\n  let b = 2\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:16: error: unexpected ')', expected an operator, ',' or ']'");
  ck_diag_has("t.mm:2:14: note: to match this '['");
  ck_assert_int_eq(decl(0)->members.len, 1);
  ck_assert_str_eq(member(0, 0)->name, "b");
  /* a broken condition: the block after it goes with it */
  parse("module M() {\n  forward() {\n    if a + { h = 1 }\n    return x *\n  }\n}\n");
  ck_assert_int_eq(errors(), 2);
  ck_diag_has("t.mm:3:12: error: unexpected '{', expected an expression");
  ck_diag_has("t.mm:4:15: error: unexpected end of line, expected an expression");
  /* a broken declaration header: skip to the next declaration */
  parse("module M(d int) {\n  x = L(d)\n  forward() { return 1 }\n}\nmodule N() {\n  let q = \n}\n"
        "modul O {\n}\nmodel P { }\n");
  ck_assert_int_eq(errors(), 3);
  ck_diag_has("t.mm:1:12: error: unexpected name 'int', expected ':'");
  ck_diag_has("t.mm:6:11: error: unexpected end of line, expected an expression");
  ck_diag_has("t.mm:8:1: error: unexpected name 'modul', expected 'import', 'module' or 'model'");
  ck_assert_int_eq(P->file->decls.len, 2);
  ck_assert_str_eq(decl(0)->name, "N");
  ck_assert_str_eq(decl(1)->name, "P");
  /* a missing ')' does not swallow the rest of the block */
  parse("module M() {\n  x = Linear(1, 2\n  let y = 3\n  let z = 4\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:3:3: error: unexpected 'let', expected an operator, ')' or ','");
  ck_diag_has("t.mm:2:13: note: to match this '('");
  ck_assert_int_eq(decl(0)->members.len, 1);
  ck_assert_str_eq(member(0, 0)->name, "z");
}
END_TEST

START_TEST(t_err_bad_char) {
  parse("module M() {\n  let a = 1 $ 2\n  let b = 3\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:13: error: unexpected character '$'");
  parse("module M() {\n  let a = b # c\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("unexpected character '#'");
  parse("module M() {\n  let a = \x01\n}\n");
  ck_diag_has("t.mm:2:11: error: unexpected character '\\x01'");
  parse("module M() {\n  let \xc3\xa9 = 1\n}\n");
  ck_diag_has("t.mm:2:7: error: unexpected character '\xc3\xa9' (U+00E9)");
  parse("module M() {\n  let a = \xff\n}\n");
  ck_diag_has("unexpected character '\\xFF'");
  parse("module M() {\n  let a = b && c\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:13: error: unexpected '&&' (use 'and')");
  parse_n("module M() {\0}\n", 15);
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("unexpected character '\\x00'");
}
END_TEST

START_TEST(t_err_literals_and_types) {
  parse("module M() {\n  let a = 99999999999999999999\n  let b = 0x8000000000000000\n}\n");
  ck_assert_int_eq(errors(), 2);
  ck_diag_has("t.mm:2:11: error: integer literal too large");
  parse("module M(a: integer, b: list, c: int[int]) {\n"
        "  w = param f64[3]\n"
        "  v = param [3]\n"
        "  forward(x: q8[3]) -> logits { return x }\n"
        "}\n");
  ck_assert_int_eq(errors(), 7);
  ck_diag_has("t.mm:1:13: error: unknown hyper-parameter type 'integer'");
  ck_diag_has("t.mm:1:25: error: 'list' needs an element type");
  ck_diag_has("only 'list' takes an element type");
  ck_diag_has("t.mm:2:13: error: unknown dtype 'f64'");
  ck_diag_has("t.mm:3:13: error: a parameter needs a dtype, e.g. 'param f32[...]'");
  ck_diag_has("t.mm:4:14: error: unknown dtype 'q8'");
  ck_diag_has(
      "t.mm:4:24: error: expected a tensor type such as [B, T, dim] or 'loss', found 'logits'");
}
END_TEST

START_TEST(t_err_hints) {
  parse("module M() {\n  let a = .5\n  let b = x.0\n}\n");
  ck_assert_int_eq(errors(), 2);
  ck_diag_has("t.mm:2:11: error: a number needs a digit before the point: write 0.5");
  ck_assert_str_eq(sexpr(member(0, 0)->value), "0.5");
  ck_diag_has("t.mm:3:13: error: unexpected number '0', expected a name"); /* x[0], not x.0 */
  parse("module M() {\n  forward() {\n    if a = b { return 1 }\n  }\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has(
      "t.mm:3:10: error: unexpected '=', expected an operator or '{' (use '==' to compare)");
}
END_TEST

START_TEST(t_err_keyword_args) {
  parse("module M() {\n  a = Linear(in = 1, 2)\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:22: error: positional argument after keyword argument 'in'");
  parse("module M() {\n  let a = b < c < d\n}\n");
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:17: error: unexpected '<'");
}
END_TEST

static char *repeat3(const char *pre, const char *mid, int n, const char *post) {
  size_t lp = strlen(pre), lm = strlen(mid), lq = strlen(post);
  char *s = malloc(lp + lm * (size_t)n + lq + 1);
  memcpy(s, pre, lp);
  for (int i = 0; i < n; i++) memcpy(s + lp + lm * (size_t)i, mid, lm);
  memcpy(s + lp + lm * (size_t)n, post, lq + 1);
  return s;
}

/* The depth of an expression tree (what a recursive later stage would use). */
static int tree_depth(const AstExpr *e) {
  if (!e) return 0;
  int m = 0;
  const AstExpr *kids[] = {e->lhs, e->rhs, e->cond, e->start, e->stop, e->step};
  for (size_t i = 0; i < sizeof kids / sizeof *kids; i++) {
    int d = tree_depth(kids[i]);
    if (d > m) m = d;
  }
  for (int i = 0; i < e->items.len; i++) {
    int d = tree_depth(e->items.items[i]);
    if (d > m) m = d;
  }
  for (int i = 0; i < e->args.len; i++) {
    int d = tree_depth(((AstArg *)e->args.items[i])->value);
    if (d > m) m = d;
  }
  return m + 1;
}

/* Every expression of the first declaration's members is at most 1000 deep. */
static void ck_bounded_trees(void) {
  for (int i = 0; i < P->file->decls.len; i++) {
    AstDecl *d = decl(i);
    for (int j = 0; j < d->members.len; j++)
      ck_assert_int_le(tree_depth(((AstStmt *)d->members.items[j])->value), 1000);
  }
}

START_TEST(t_err_deep_nesting) {
  /* 256 levels are fine */
  char *ok = repeat3("module M() {\n  let a = ", "(", 250, "1");
  char *ok2 = repeat3(ok, ")", 250, "\n}\n");
  parse(ok2);
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  free(ok);
  free(ok2);
  char *s = repeat3("module M() {\n  let a = ", "(", 100000, "1\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("t.mm:2:266: error: nesting too deep (more than 256 levels of brackets)");
  s = repeat3("module M() {\n  let a = ", "[", 5000, "\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  s = repeat3("module M() {\n  forward() {\n", "if a {\n", 1000, "\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("nesting too deep");
  /* long operator chains without brackets: bounded trees, no overflow */
  s = repeat3("module M() {\n  let a = ", "-", 50000, "1\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("nest");
  s = repeat3("module M() {\n  let a = 1", " + 1", 50000, "\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  ck_diag_has("expression nested too deeply");
  s = repeat3("module M() {\n  let a = 1", " ** 1", 50000, "\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  s = repeat3("module M() {\n  let a = 1", " if c else 1", 50000, "\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
  s = repeat3("module M() {\n  let a = x", ".f(1)", 50000, "\n}\n");
  parse(s);
  free(s);
  ck_bounded_trees();
  ck_assert_int_eq(errors(), 1);
}
END_TEST

START_TEST(t_err_max_errors) {
  char *s = repeat3("module M() {\n", "  let = \n", 500, "}\n");
  parse(s);
  free(s);
  ck_assert_int_eq(errors(), 500);
}
END_TEST

/* ---- fuzz smoke: every truncation and random mutations of a sample ---- */

static const char *sample = "import \"nn.mm\"  // x\n"
                            "module B(d: int, e: float = 1e-6, l: list[int] = [1, 2]) {\n"
                            "  let g = d // 2 if d > 2 else -d**2\n"
                            "  w = param f32[d, 3*d] = normal(0.02)\n"
                            "  s = Blk(d, a = \"s\\n\") x 2\n"
                            "  if g > 1 { n = L(d) } else { n = L(1) }\n"
                            "  forward f(x: bf16[B, d]) -> loss {\n"
                            "    h = x.t(1, 2)[:, 1:, ::2] @ w /* c */ + s(x)\n"
                            "    return -h\n"
                            "  }\n"
                            "}\n"
                            "model M { train { lr = 1 }; parallel { tp = 2; schedule = 1f1b } }\n"
                            "model N extends M { train { lr = 2 } }\n";

START_TEST(t_fuzz_smoke) {
  size_t n = strlen(sample);
  for (size_t i = 0; i <= n; i++) parse_n(sample, i);
  parse(sample);
  ck_assert_msg(errors() == 0, "%.1500s", P->out);
  unsigned seed = 12345;
  char *buf = malloc(n + 1);
  static const char alphabet[] = "(){}[],:;=+-*/\"\n x0.\\#\x80\xff";
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(buf, sample, n + 1);
    int muts = 1 + (int)(rand_r(&seed) % 4);
    for (int k = 0; k < muts; k++) {
      size_t at = (size_t)rand_r(&seed) % n;
      buf[at] = (rand_r(&seed) & 1) ? (char)(rand_r(&seed) & 0xff)
                                    : alphabet[(size_t)rand_r(&seed) % (sizeof alphabet - 1)];
    }
    parse_n(buf, n);
  }
  free(buf);
}
END_TEST

Suite *parse_suite(void) {
  Suite *s = suite_create("parse");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, t_precedence);
  tcase_add_test(tc, t_conditional);
  tcase_add_test(tc, t_literals);
  tcase_add_test(tc, t_postfix);
  tcase_add_test(tc, t_floordiv_vs_comment);
  tcase_add_test(tc, t_newlines_in_brackets);
  tcase_add_test(tc, t_terminators);
  tcase_add_test(tc, t_module_members);
  tcase_add_test(tc, t_stack_repeat);
  tcase_add_test(tc, t_forward);
  tcase_add_test(tc, t_if_members_and_else_newline);
  tcase_add_test(tc, t_model_sections);
  tcase_add_test(tc, t_model_extends);
  tcase_add_test(tc, t_extends_elaborates_as_written_out);
  tcase_add_test(tc, t_locations);
  tcase_add_test(tc, t_err_missing_brace);
  tcase_add_test(tc, t_err_stray_token);
  tcase_add_test(tc, t_err_member_not_instance);
  tcase_add_test(tc, t_err_unterminated_comment);
  tcase_add_test(tc, t_err_unterminated_string);
  tcase_add_test(tc, t_err_three_independent);
  tcase_add_test(tc, t_err_recovery_blocks);
  tcase_add_test(tc, t_err_bad_char);
  tcase_add_test(tc, t_err_literals_and_types);
  tcase_add_test(tc, t_err_hints);
  tcase_add_test(tc, t_err_keyword_args);
  tcase_add_test(tc, t_err_deep_nesting);
  tcase_add_test(tc, t_err_max_errors);
  tcase_add_test(tc, t_fuzz_smoke);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(parse_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
