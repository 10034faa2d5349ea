/* Parser of the IR text form (ir.h): a hand-written lexer and a recursive-
 * descent parser over one Diag file. Nodes are rebuilt through ir_build, so
 * arity, attributes and shapes are checked exactly as for the frontend, and
 * each declared result type must equal the inferred one.
 *
 * The first error is reported (with its line and column in the IR text) and
 * parsing stops; nothing here trusts the input, which is fuzzed. File names
 * in loc(...) are registered in the Diag: a name already loaded reuses its
 * index, any other becomes an empty buffer of that name. `//` starts a
 * comment to the end of the line (for hand-written tests; never printed). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir_settings.h"

typedef enum TokKind {
  T_EOF,
  T_IDENT,  /* [A-Za-z_][A-Za-z0-9_]* */
  T_INT,    /* -?[0-9]+ */
  T_FLOAT,  /* with '.', an exponent, or -inf */
  T_STRING, /* "..." (decoded into s) */
  T_AT,     /* @name or @"name" */
  T_PCT,    /* %name or %"name"; numbered when bare digits */
  T_PUNCT,  /* ( ) { } [ ] , : = */
} TokKind;

typedef struct Tok {
  TokKind kind;
  const char *text; /* raw span in the source */
  size_t len;
  SrcLoc loc;
  char *s;       /* IDENT, STRING, AT, PCT: decoded, NUL-terminated (scratch) */
  bool numbered; /* PCT: bare digits, a result number */
  int64_t i;     /* INT */
  double f;      /* INT, FLOAT */
} Tok;

typedef struct Parser {
  Diag *d;
  uint32_t file;
  const char *cur, *end;
  uint32_t line, col;
  Tok tok;
  bool failed;
  Arena scratch;
  IrModule *m;
  IrMap files;  /* path -> Diag file index (i) */
  IrMap params; /* name -> IrValue* (p) */
  IrMap groups; /* name -> group index (i) */
  IrMap funcs;  /* name -> IrFunc* (p) */
  IrMap named;  /* this function's %name values */
  IrMap number; /* this function's %N values */
} Parser;

/* ---- errors ---- */

static bool error(Parser *p, SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool error(Parser *p, SrcLoc at, const char *fmt, ...) {
  if (p->failed) return false;
  p->failed = true;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(p->d, at, "%s", msg);
  return false;
}

/* The current token as a message shows it: 'text' or "end of file". */
static const char *tok_desc(Parser *p) {
  if (p->tok.kind == T_EOF) return "end of file";
  size_t n = p->tok.len > 24 ? 24 : p->tok.len;
  char *s = arena_alloc(&p->scratch, n + 6);
  size_t k = 0;
  s[k++] = '\'';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p->tok.text[i];
    s[k++] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
  }
  if (n < p->tok.len) s[k++] = '.', s[k++] = '.', s[k++] = '.';
  s[k++] = '\'';
  s[k] = 0;
  return s;
}

/* ---- the lexer ---- */

static int peekc(const Parser *p, size_t k) {
  return p->cur + k < p->end ? (unsigned char)p->cur[k] : -1;
}

static void advance(Parser *p) {
  if (p->cur >= p->end) return;
  if (*p->cur == '\n') {
    p->line++;
    p->col = 1;
  } else {
    p->col++;
  }
  p->cur++;
}

static bool is_digit(int c) {
  return c >= '0' && c <= '9';
}
static bool is_alpha(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_bare(int c) {
  return is_alpha(c) || is_digit(c) || c == '.' || c == '$' || c == '-';
}
static int hexval(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* A quoted string at p->cur, decoded into the scratch arena. */
static bool lex_string(Parser *p, char **out) {
  SrcLoc open = {p->file, p->line, p->col, 1};
  advance(p); /* " */
  size_t cap = 16, n = 0;
  char *s = arena_alloc(&p->scratch, cap);
  for (;;) {
    int c = peekc(p, 0);
    if (c < 0 || c == '\n') return error(p, open, "unterminated string");
    SrcLoc at = {p->file, p->line, p->col, 1};
    advance(p);
    if (c == '"') break;
    if (c == '\\') {
      int a = peekc(p, 0);
      if (a == '"' || a == '\\') {
        c = a;
        advance(p);
      } else {
        int h = hexval(a), l = hexval(peekc(p, 1));
        if (h < 0 || l < 0)
          return error(p, at, "invalid escape in string (use \\\\, \\\" or two hex digits)");
        c = h * 16 + l;
        if (c == 0) return error(p, at, "a string cannot contain \\00");
        advance(p);
        advance(p);
      }
    } else if (c == 0) {
      return error(p, at, "NUL byte in string");
    }
    if (n + 1 >= cap) {
      s = arena_realloc(&p->scratch, s, cap, cap * 2);
      cap *= 2;
    }
    s[n++] = (char)c;
  }
  s[n] = 0;
  *out = s;
  return true;
}

static bool lex_number(Parser *p) {
  Tok *t = &p->tok;
  const char *s = p->cur;
  bool flt = false;
  if (peekc(p, 0) == '-') advance(p);
  if (peekc(p, 0) == 'i' && peekc(p, 1) == 'n' && peekc(p, 2) == 'f' && !is_bare(peekc(p, 3))) {
    advance(p), advance(p), advance(p);
    t->kind = T_FLOAT;
    t->f = -HUGE_VAL;
    return true;
  }
  if (!is_digit(peekc(p, 0))) return error(p, t->loc, "expected a digit after '-'");
  while (is_digit(peekc(p, 0))) advance(p);
  if (peekc(p, 0) == '.') {
    flt = true;
    advance(p);
    while (is_digit(peekc(p, 0))) advance(p);
  }
  if (peekc(p, 0) == 'e' || peekc(p, 0) == 'E') {
    flt = true;
    advance(p);
    if (peekc(p, 0) == '+' || peekc(p, 0) == '-') advance(p);
    if (!is_digit(peekc(p, 0)))
      return error(p, t->loc, "expected digits in the exponent of a number");
    while (is_digit(peekc(p, 0))) advance(p);
  }
  size_t n = (size_t)(p->cur - s);
  t->loc.len = (uint32_t)n;
  if (is_bare(peekc(p, 0))) return error(p, t->loc, "invalid number");
  char *buf = arena_strndup(&p->scratch, s, n);
  char *e;
  errno = 0;
  t->f = strtod(buf, &e);
  if (e != buf + n) return error(p, t->loc, "invalid number");
  if (flt) {
    t->kind = T_FLOAT;
    return true;
  }
  t->kind = T_INT;
  errno = 0;
  long long v = strtoll(buf, &e, 10);
  if (errno == ERANGE || e != buf + n) return error(p, t->loc, "integer %s is out of range", buf);
  t->i = v;
  return true;
}

/* Reads the next token into p->tok. */
static bool next(Parser *p) {
  if (p->failed) return false;
  for (;;) { /* blanks and // comments */
    int c = peekc(p, 0);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance(p);
    } else if (c == '/' && peekc(p, 1) == '/') {
      while (peekc(p, 0) >= 0 && peekc(p, 0) != '\n') advance(p);
    } else {
      break;
    }
  }
  Tok *t = &p->tok;
  memset(t, 0, sizeof *t);
  t->text = p->cur;
  t->loc = (SrcLoc){p->file, p->line, p->col, 1};
  int c = peekc(p, 0);
  if (c < 0) {
    t->kind = T_EOF;
    return true;
  }
  if (is_alpha(c)) {
    while (is_alpha(peekc(p, 0)) || is_digit(peekc(p, 0))) advance(p);
    t->kind = T_IDENT;
    t->s = arena_strndup(&p->scratch, t->text, (size_t)(p->cur - t->text));
  } else if (is_digit(c) || c == '-') {
    if (!lex_number(p)) return false;
  } else if (c == '"') {
    t->kind = T_STRING;
    if (!lex_string(p, &t->s)) return false;
  } else if (c == '@' || c == '%') {
    advance(p);
    t->kind = c == '@' ? T_AT : T_PCT;
    if (peekc(p, 0) == '"') {
      if (!lex_string(p, &t->s)) return false;
    } else {
      const char *s = p->cur;
      bool digits = true;
      while (is_bare(peekc(p, 0))) {
        if (!is_digit(peekc(p, 0))) digits = false;
        advance(p);
      }
      if (p->cur == s) return error(p, t->loc, "expected a name after '%c'", c);
      t->s = arena_strndup(&p->scratch, s, (size_t)(p->cur - s));
      t->numbered = c == '%' && digits;
    }
  } else if (strchr("(){}[],:=", c) && c != 0) {
    advance(p);
    t->kind = T_PUNCT;
  } else {
    if (c >= 0x20 && c < 0x7f) return error(p, t->loc, "unexpected character '%c'", c);
    return error(p, t->loc, "unexpected byte 0x%02x", c);
  }
  t->len = (size_t)(p->cur - t->text);
  t->loc.len = t->len > UINT32_MAX ? UINT32_MAX : (uint32_t)t->len;
  return true;
}

/* ---- token tests ---- */

static bool is_punct(const Parser *p, char c) {
  return p->tok.kind == T_PUNCT && p->tok.text[0] == c;
}
static bool is_kw(const Parser *p, const char *kw) {
  return p->tok.kind == T_IDENT && strcmp(p->tok.s, kw) == 0;
}

static bool expect_punct(Parser *p, char c, const char *ctx) {
  if (!is_punct(p, c))
    return error(p, p->tok.loc, "expected '%c' %s, found %s", c, ctx, tok_desc(p));
  return next(p);
}

/* A closing bracket, naming the opening one when it is missing. */
static bool expect_close(Parser *p, char c, SrcLoc open) {
  if (!is_punct(p, c))
    return error(p, p->tok.loc, "expected '%c' (to close the one at %u:%u), found %s", c, open.line,
                 open.col, tok_desc(p));
  return next(p);
}

static bool expect_kw(Parser *p, const char *kw) {
  if (!is_kw(p, kw)) return error(p, p->tok.loc, "expected '%s', found %s", kw, tok_desc(p));
  return next(p);
}

static bool parse_int(Parser *p, int64_t lo, int64_t hi, const char *what, int64_t *out) {
  if (p->tok.kind != T_INT)
    return error(p, p->tok.loc, "expected %s (an integer), found %s", what, tok_desc(p));
  if (p->tok.i < lo || p->tok.i > hi)
    return error(p, p->tok.loc, "%s %lld is out of range [%lld, %lld]", what, (long long)p->tok.i,
                 (long long)lo, (long long)hi);
  *out = p->tok.i;
  return next(p);
}

static bool parse_float(Parser *p, const char *what, double *out) {
  if (p->tok.kind == T_INT || p->tok.kind == T_FLOAT) {
    *out = p->tok.f;
  } else if (is_kw(p, "inf")) {
    *out = HUGE_VAL;
  } else if (is_kw(p, "nan")) {
    *out = NAN;
  } else {
    return error(p, p->tok.loc, "expected %s (a number), found %s", what, tok_desc(p));
  }
  return next(p);
}

static bool parse_string(Parser *p, const char *what, char **out) {
  if (p->tok.kind != T_STRING)
    return error(p, p->tok.loc, "expected %s (a string), found %s", what, tok_desc(p));
  *out = p->tok.s;
  return next(p);
}

/* ---- types and annotations ---- */

/* The roles each kind of value may have (as the verifier checks them). */
#define ROLES_PARAM (1u << IR_ROLE_PARAM | 1u << IR_ROLE_OPT | 1u << IR_ROLE_GRAD)
#define ROLES_INPUT                                                                                \
  (1u << IR_ROLE_INPUT | 1u << IR_ROLE_ACT | 1u << IR_ROLE_GRAD | 1u << IR_ROLE_OPT)
#define ROLES_RESULT (1u << IR_ROLE_ACT | 1u << IR_ROLE_GRAD | 1u << IR_ROLE_OPT)

typedef struct Type {
  IrDType dtype;
  IrShape shape;
  IrPlacement pl[IR_NAXES];
  SrcLoc loc;
} Type;

static bool parse_axis(Parser *p, IrAxis *out) {
  for (int a = 0; a < IR_NAXES; a++)
    if (is_kw(p, ir_axis_name((IrAxis)a))) {
      *out = (IrAxis)a;
      return next(p);
    }
  return error(p, p->tok.loc, "expected a mesh axis (dp, cp or tp), found %s", tok_desc(p));
}

/* {dp:B, cp:S(1), tp:P}; axes not named stay B. */
static bool parse_placement(Parser *p, Type *t) {
  SrcLoc open = p->tok.loc;
  bool seen[IR_NAXES] = {0};
  if (!next(p)) return false;
  for (int k = 0; !is_punct(p, '}'); k++) {
    if (k && !expect_punct(p, ',', "between placements")) return false;
    IrAxis a = IR_AX_DP;
    SrcLoc at = p->tok.loc;
    if (!parse_axis(p, &a)) return false;
    if (seen[a]) return error(p, at, "placement for axis %s given twice", ir_axis_name(a));
    seen[a] = true;
    if (!expect_punct(p, ':', "after the mesh axis")) return false;
    IrPlacement *pl = &t->pl[a];
    if (is_kw(p, "B") || is_kw(p, "P")) {
      pl->kind = is_kw(p, "B") ? IR_PL_B : IR_PL_P;
      if (!next(p)) return false;
    } else if (is_kw(p, "S")) {
      int64_t d = 0;
      if (!next(p) || !expect_punct(p, '(', "after S")) return false;
      SrcLoc dl = p->tok.loc;
      if (!parse_int(p, 0, IR_MAX_RANK - 1, "split dim", &d)) return false;
      if (d >= t->shape.rank)
        return error(p, dl, "split dim %lld is out of range for rank %d", (long long)d,
                     t->shape.rank);
      pl->kind = IR_PL_S;
      pl->dim = (int)d;
      if (!expect_punct(p, ')', "after the split dim")) return false;
    } else {
      return error(p, p->tok.loc, "expected a placement (B, P or S(dim)), found %s", tok_desc(p));
    }
  }
  return expect_close(p, '}', open);
}

/* dtype[d0, d1, ...] with an optional placement. */
static bool parse_type(Parser *p, Type *t) {
  memset(t, 0, sizeof *t);
  t->loc = p->tok.loc;
  if (p->tok.kind != T_IDENT || !ir_dtype_parse(p->tok.s, &t->dtype))
    return error(p, p->tok.loc, "expected a dtype (f32, bf16, f16, i32, i64, u8, bool), found %s",
                 tok_desc(p));
  if (!next(p)) return false;
  SrcLoc open = p->tok.loc;
  if (!expect_punct(p, '[', "after the dtype")) return false;
  while (!is_punct(p, ']')) {
    if (t->shape.rank && !expect_punct(p, ',', "between dims")) return false;
    if (t->shape.rank == IR_MAX_RANK) return error(p, p->tok.loc, "more than %d dims", IR_MAX_RANK);
    int64_t d = 0;
    if (!parse_int(p, 1, INT64_MAX, "dim", &d)) return false;
    t->shape.d[t->shape.rank++] = d;
  }
  if (!expect_close(p, ']', open)) return false;
  t->loc = srcloc_span(t->loc, open);
  if (!ir_shape_valid(&t->shape)) {
    char buf[200];
    return error(p, t->loc, "shape %s has too many elements",
                 ir_shape_str(buf, sizeof buf, &t->shape));
  }
  if (is_punct(p, '{') && !parse_placement(p, t)) return false;
  /* the ranks of the axes that split a dim must divide it (v1 has no padding) */
  for (int d = 0; d < t->shape.rank; d++) {
    int64_t ways = 1;
    for (int a = 0; a < IR_NAXES; a++)
      if (t->pl[a].kind == IR_PL_S && t->pl[a].dim == d) ways *= p->m->mesh[a];
    if (t->shape.d[d] % ways) {
      char buf[200];
      return error(p, t->loc, "dim %d of %s is split %lld ways, which does not divide it", d,
                   ir_shape_str(buf, sizeof buf, &t->shape), (long long)ways);
    }
  }
  return true;
}

/* role(name), where `allowed` is a mask of 1 << IrRole and `what` names
 * the kind of value for the message. */
static bool parse_role(Parser *p, IrRole *r, unsigned allowed, const char *what) {
  if (!next(p) || !expect_punct(p, '(', "after 'role'")) return false;
  if (p->tok.kind != T_IDENT || !ir_role_parse(p->tok.s, r))
    return error(p, p->tok.loc, "expected a role (act, input, param, grad, opt), found %s",
                 tok_desc(p));
  if (!(allowed >> *r & 1)) return error(p, p->tok.loc, "%s cannot have role %s", what, p->tok.s);
  if (!next(p)) return false;
  return expect_punct(p, ')', "after the role");
}

/* mem(arena, offset), the memory plan's placement of a value */
typedef struct Mem {
  bool planned;
  IrRole arena;
  int64_t offset;
} Mem;

static bool parse_mem(Parser *p, Mem *m) {
  int64_t off = 0;
  if (!next(p) || !expect_punct(p, '(', "after 'mem'")) return false;
  if (p->tok.kind != T_IDENT || !ir_role_parse(p->tok.s, &m->arena))
    return error(p, p->tok.loc, "expected an arena (act, input, param, grad, opt), found %s",
                 tok_desc(p));
  if (!next(p) || !expect_punct(p, ',', "after the arena") ||
      !parse_int(p, 0, INT64_C(1) << 62, "offset", &off) ||
      !expect_punct(p, ')', "after the offset"))
    return false;
  m->planned = true;
  m->offset = off;
  return true;
}

/* pp(stage, F|I|W) or pp(U): the pipeline pass's stage and part of a node
 * (passes/pp_stage.h), the stage one of the plan's pp * vpp */
static bool parse_pp(Parser *p, IrPpPart *part, int64_t *stage) {
  SrcLoc at = p->tok.loc;
  if (!next(p) || !expect_punct(p, '(', "after 'pp'")) return false;
  int64_t S = (int64_t)p->m->plan.pp * (p->m->plan.vpp > 1 ? p->m->plan.vpp : 1);
  if (p->m->plan.pp <= 1)
    return error(p, at, "a pipeline fact pp(...), but the plan has pp = %d (no pipeline)",
                 p->m->plan.pp);
  if (is_kw(p, "U")) {
    *part = IR_PP_U;
    return next(p) && expect_punct(p, ')', "after the update's part U");
  }
  if (!parse_int(p, 0, S - 1, "pipeline stage", stage) || !expect_punct(p, ',', "after the stage"))
    return false;
  if (p->tok.kind != T_IDENT || !ir_pp_part_parse(p->tok.s, part) || *part == IR_PP_U)
    return error(p, p->tok.loc,
                 "expected a stage's part (F forward, I input gradient, W weight gradient), "
                 "found %s",
                 tok_desc(p));
  return next(p) && expect_punct(p, ')', "after the part");
}

static void set_mem(IrValue *v, const Mem *m) {
  v->mem_planned = m->planned;
  v->mem_arena = m->arena;
  v->mem_offset = m->offset;
}

/* grad(@param): the value is the gradient of that (already declared)
 * parameter */
static bool parse_grad(Parser *p, IrValue **out) {
  if (!next(p) || !expect_punct(p, '(', "after 'grad'")) return false;
  if (p->tok.kind != T_AT)
    return error(p, p->tok.loc, "expected a parameter @name, found %s", tok_desc(p));
  IrMapSlot *s = ir_map_get(&p->params, p->tok.s);
  if (!s) return error(p, p->tok.loc, "gradient of undefined parameter @%s", p->tok.s);
  *out = s->p;
  if (!next(p)) return false;
  return expect_punct(p, ')', "after the parameter");
}

/* loc("file":line:col) */
static bool parse_loc(Parser *p, SrcLoc *loc) {
  char *name = NULL;
  int64_t line = 0, col = 0;
  if (!next(p) || !expect_punct(p, '(', "after 'loc'") || !parse_string(p, "a file name", &name) ||
      !expect_punct(p, ':', "after the file name") || !parse_int(p, 0, UINT32_MAX, "line", &line) ||
      !expect_punct(p, ':', "after the line") || !parse_int(p, 0, UINT32_MAX, "column", &col) ||
      !expect_punct(p, ')', "after the column"))
    return false;
  IrMapSlot *s = ir_map_put(&p->files, name);
  if (!s->p) {
    s->i = diag_add_buffer(p->d, name, "", 0);
    s->p = (void *)1;
  }
  *loc = (SrcLoc){(uint32_t)s->i, (uint32_t)line, (uint32_t)col, 0};
  return true;
}

/* layer("group", index) */
static bool parse_layer(Parser *p, int *group, int *layer) {
  char *name = NULL;
  if (!next(p) || !expect_punct(p, '(', "after 'layer'")) return false;
  SrcLoc at = p->tok.loc;
  if (!parse_string(p, "a layer group name", &name)) return false;
  IrMapSlot *s = ir_map_get(&p->groups, name);
  if (!s) return error(p, at, "unknown layer group \"%s\" (declare it with a 'group' line)", name);
  const IrGroup *g = p->m->groups.items[s->i];
  int64_t l = 0;
  if (!expect_punct(p, ',', "after the group name")) return false;
  at = p->tok.loc;
  if (!parse_int(p, 0, INT_MAX, "layer", &l)) return false;
  if (l >= g->nlayers)
    return error(p, at, "layer %lld is out of range for group \"%s\" of %d layers", (long long)l,
                 g->name, g->nlayers);
  *group = (int)s->i;
  *layer = (int)l;
  return expect_punct(p, ')', "after the layer");
}

/* ---- top level ---- */

static bool parse_mesh(Parser *p) {
  bool seen[IR_NAXES] = {0};
  if (!expect_kw(p, "mesh")) return false;
  SrcLoc open = p->tok.loc;
  if (!expect_punct(p, '(', "after 'mesh'")) return false;
  for (int k = 0; !is_punct(p, ')'); k++) {
    if (k && !expect_punct(p, ',', "between mesh axes")) return false;
    IrAxis a = IR_AX_DP;
    SrcLoc at = p->tok.loc;
    int64_t n = 0;
    if (!parse_axis(p, &a)) return false;
    if (seen[a]) return error(p, at, "mesh axis %s given twice", ir_axis_name(a));
    seen[a] = true;
    if (!expect_punct(p, '=', "after the mesh axis") || !parse_int(p, 1, 1 << 20, "mesh size", &n))
      return false;
    p->m->mesh[a] = (int)n;
  }
  return expect_close(p, ')', open);
}

/* ---- settings: plan(...), train(...), passes(...) (ir_settings.h) ---- */

/* [item, ...], each read by item() and pushed onto v (scratch) */
typedef bool (*ListItem)(Parser *p, void **out);
static bool parse_list(Parser *p, const char *what, ListItem item, PtrVec *v) {
  SrcLoc open = p->tok.loc;
  if (!expect_punct(p, '[', what)) return false;
  while (!is_punct(p, ']')) {
    void *x = NULL;
    if (v->len && !expect_punct(p, ',', "between list items")) return false;
    if (v->len == 1 << 20) return error(p, p->tok.loc, "list of more than 2^20 items");
    if (!item(p, &x)) return false;
    ptrvec_push(&p->scratch, v, x);
  }
  return expect_close(p, ']', open);
}

static bool str_item(Parser *p, void **out) {
  char *s = NULL;
  if (!parse_string(p, "a name", &s)) return false;
  *out = arena_strdup(&p->m->arena, s);
  return true;
}

/* ["a", "b"], copied into the module */
static bool parse_strs(Parser *p, const char ***out, int *count) {
  PtrVec v = {0};
  if (!parse_list(p, "to open a list of strings", str_item, &v)) return false;
  *out = ARENA_ARRAY(&p->m->arena, const char *, v.len + 1);
  for (int i = 0; i < v.len; i++) (*out)[i] = v.items[i];
  *count = v.len;
  return true;
}

static bool stage_item(Parser *p, void **out) {
  MmStage *st = ARENA_NEW(&p->scratch, MmStage);
  *out = st;
  return parse_strs(p, &st->units, &st->nunits);
}

static bool parse_fields(Parser *p, const IrSetting *fields, const char *line) {
  SrcLoc open = p->tok.loc;
  bool seen[64] = {0};
  if (!expect_punct(p, '(', "after the settings name")) return false;
  for (int k = 0; !is_punct(p, ')'); k++) {
    if (k && !expect_punct(p, ',', "between settings")) return false;
    if (p->tok.kind != T_IDENT)
      return error(p, p->tok.loc, "expected a setting name, found %s", tok_desc(p));
    const IrSetting *f = fields;
    while (f->name && strcmp(f->name, p->tok.s) != 0) f++;
    if (!f->name) {
      char known[512];
      size_t n = 0;
      known[0] = 0;
      for (const IrSetting *g = fields; g->name && n < sizeof known; g++)
        n +=
            (size_t)snprintf(known + n, sizeof known - n, "%s%s", g == fields ? "" : ", ", g->name);
      return error(p, p->tok.loc, "unknown setting '%s' in %s(...) (known: %s)", p->tok.s, line,
                   known);
    }
    if (seen[f - fields]) return error(p, p->tok.loc, "setting '%s' given twice", f->name);
    seen[f - fields] = true;
    char *at = (char *)p->m + f->off;
    if (f->kind == IR_SK_LOC) {
      if (!parse_loc(p, (SrcLoc *)at)) return false;
      continue;
    }
    SrcLoc vloc;
    if (!next(p) || !expect_punct(p, '=', "after the setting name")) return false;
    vloc = p->tok.loc;
    int *count = f->count_off ? (int *)((char *)p->m + f->count_off) : NULL;
    switch (f->kind) {
      case IR_SK_INT: {
        int64_t v = 0;
        if (!parse_int(p, (int64_t)f->lo, (int64_t)f->hi, f->name, &v)) return false;
        *(int *)at = (int)v;
        break;
      }
      case IR_SK_BOOL:
        if (!is_kw(p, "true") && !is_kw(p, "false"))
          return error(p, vloc, "expected true or false for '%s', found %s", f->name, tok_desc(p));
        *(bool *)at = is_kw(p, "true");
        if (!next(p)) return false;
        break;
      case IR_SK_FLOAT: {
        double v = 0;
        if (!parse_float(p, f->name, &v)) return false;
        if (!(v >= f->lo && v <= f->hi))
          return error(p, vloc, "%s = %g is out of range [%g, %g]", f->name, v, f->lo, f->hi);
        *(double *)at = v;
        break;
      }
      case IR_SK_ENUM: {
        int i = 0;
        if (p->tok.kind == T_IDENT || p->tok.kind == T_STRING)
          while (f->names[i] && strcmp(f->names[i], p->tok.s) != 0) i++;
        if (!f->names[i] || (p->tok.kind != T_IDENT && p->tok.kind != T_STRING)) {
          char known[256];
          size_t n = 0;
          for (int j = 0; f->names[j] && n < sizeof known; j++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", j ? ", " : "", f->names[j]);
          return error(p, vloc, "expected %s for '%s', found %s", known, f->name, tok_desc(p));
        }
        *(int *)at = i;
        if (!next(p)) return false;
        break;
      }
      case IR_SK_STRS:
        if (!parse_strs(p, (const char ***)at, count)) return false;
        break;
      case IR_SK_STAGES: {
        PtrVec v = {0};
        if (!parse_list(p, "to open the list of stages", stage_item, &v)) return false;
        MmStage *st = ARENA_ARRAY(&p->m->arena, MmStage, v.len + 1);
        for (int i = 0; i < v.len; i++) st[i] = *(MmStage *)v.items[i];
        *(MmStage **)at = st;
        *count = v.len;
        break;
      }
      case IR_SK_SUB:
        if (!expect_kw(p, f->name) || !parse_fields(p, f->sub, f->name)) return false;
        break;
      case IR_SK_LOC: break;
      case IR_SK_STR:
        if (p->tok.kind != T_STRING)
          return error(p, vloc, "expected a string for '%s', found %s", f->name, tok_desc(p));
        *(const char **)at = arena_strdup(&p->m->arena, p->tok.s);
        if (!next(p)) return false;
        break;
    }
  }
  return expect_close(p, ')', open);
}

/* plan(...) or train(...) (the current token names it), once each */
static bool parse_settings(Parser *p, const IrSetLine *line, bool *seen) {
  if (*seen) return error(p, p->tok.loc, "a module has one %s(...) line", line->name);
  *seen = true;
  return next(p) && parse_fields(p, line->fields, line->name);
}

/* passes(verify, lora, ...): the passes that have run, in order */
static bool parse_passes(Parser *p, bool *seen) {
  if (*seen) return error(p, p->tok.loc, "a module has one passes(...) line");
  *seen = true;
  if (!next(p)) return false;
  SrcLoc open = p->tok.loc;
  if (!expect_punct(p, '(', "after 'passes'")) return false;
  for (int k = 0; !is_punct(p, ')'); k++) {
    if (k && !expect_punct(p, ',', "between pass names")) return false;
    if (p->tok.kind != T_IDENT)
      return error(p, p->tok.loc, "expected a pass name, found %s", tok_desc(p));
    if (ir_module_ran(p->m, p->tok.s))
      return error(p, p->tok.loc, "pass '%s' named twice", p->tok.s);
    ir_module_mark_ran(p->m, p->tok.s);
    if (!next(p)) return false;
  }
  return expect_close(p, ')', open);
}

static bool parse_group(Parser *p) {
  SrcLoc at;
  char *name = NULL;
  int64_t n = 0;
  if (!next(p)) return false;
  at = p->tok.loc;
  if (!parse_string(p, "a group name", &name) || !expect_kw(p, "layers") ||
      !parse_int(p, 1, INT_MAX, "layer count", &n))
    return false;
  IrMapSlot *s = ir_map_put(&p->groups, name);
  if (s->p) return error(p, at, "layer group \"%s\" declared twice", name);
  s->p = (void *)1;
  s->i = ir_module_group(p->m, name, (int)n);
  return true;
}

static bool parse_param(Parser *p) {
  if (!next(p)) return false;
  if (p->tok.kind != T_AT)
    return error(p, p->tok.loc, "expected a parameter name @name, found %s", tok_desc(p));
  char *name = p->tok.s;
  SrcLoc at = p->tok.loc;
  if (ir_map_get(&p->params, name)) return error(p, at, "redefinition of parameter @%s", name);
  Type t;
  IrRole role = IR_ROLE_PARAM;
  IrInit init = {IR_INIT_NONE, 0, 0};
  bool frozen = false;
  int group = -1, layer = -1;
  SrcLoc loc = {0};
  if (!next(p) || !expect_punct(p, ':', "after the parameter name") || !parse_type(p, &t))
    return false;
  if (is_kw(p, "role") && !parse_role(p, &role, ROLES_PARAM, "a parameter")) return false;
  IrValue *grad_of = NULL;
  if (is_kw(p, "grad") && !parse_grad(p, &grad_of)) return false;
  Mem mem = {0};
  if (is_kw(p, "mem") && !parse_mem(p, &mem)) return false;
  if (is_kw(p, "init")) {
    if (!next(p)) return false;
    SrcLoc open = p->tok.loc;
    if (!expect_punct(p, '(', "after 'init'")) return false;
    if (p->tok.kind != T_IDENT || !ir_init_parse(p->tok.s, &init.kind))
      return error(p, p->tok.loc,
                   "expected an init kind (zeros, ones, fill, normal, uniform, fan_in), found %s",
                   tok_desc(p));
    if (init.kind == IR_INIT_NONE)
      return error(p, p->tok.loc, "write no init(...) for a parameter without one");
    if (!next(p)) return false;
    int nargs = init.kind == IR_INIT_ZEROS || init.kind == IR_INIT_ONES ? 0
                : init.kind == IR_INIT_UNIFORM                          ? 2
                                                                        : 1;
    if (nargs >= 1 && (!expect_punct(p, ',', "after the init kind") ||
                       !parse_float(p, "an init argument", &init.a)))
      return false;
    if (nargs >= 2 && (!expect_punct(p, ',', "between init arguments") ||
                       !parse_float(p, "an init argument", &init.b)))
      return false;
    if (!expect_close(p, ')', open)) return false;
  }
  if (is_kw(p, "frozen")) {
    frozen = true;
    if (!next(p)) return false;
  }
  int64_t rows = 0;
  if (is_kw(p, "rows")) {
    SrcLoc rat = p->tok.loc;
    if (!next(p) || !expect_punct(p, '(', "after 'rows'") ||
        !parse_int(p, 1, INT64_MAX, "rows", &rows) || !expect_punct(p, ')', "after the rows"))
      return false;
    if (t.shape.rank < 1 || rows > t.shape.d[0])
      return error(p, rat, "rows(%lld): the real rows must fit dim 0 of the parameter",
                   (long long)rows);
  }
  if (is_kw(p, "layer") && !parse_layer(p, &group, &layer)) return false;
  if (is_kw(p, "loc") && !parse_loc(p, &loc)) return false;
  IrValue *v = ir_add_param(p->m, name, t.dtype, &t.shape, init, loc);
  v->rows = rows;
  memcpy(v->pl, t.pl, sizeof v->pl);
  v->role = role;
  v->frozen = frozen;
  v->grad_of = grad_of;
  set_mem(v, &mem);
  v->group = group;
  v->layer = layer;
  ir_map_put(&p->params, v->name)->p = v;
  return true;
}

/* %name or %N or @param, already defined. */
static bool parse_ref(Parser *p, IrValue **out) {
  Tok *t = &p->tok;
  if (t->kind == T_AT) {
    IrMapSlot *s = ir_map_get(&p->params, t->s);
    if (!s) return error(p, t->loc, "use of undefined parameter @%s", t->s);
    *out = s->p;
  } else if (t->kind == T_PCT) {
    IrMapSlot *s = ir_map_get(t->numbered ? &p->number : &p->named, t->s);
    if (!s) return error(p, t->loc, "use of undefined value %%%s", t->s);
    *out = s->p;
  } else {
    return error(p, t->loc, "expected a value (%%name or @param), found %s", tok_desc(p));
  }
  return next(p);
}

static bool parse_attr_value(Parser *p, IrAttrId id, IrAttrs *a) {
  const char *name = ir_attrs[id].name;
  switch (ir_attrs[id].kind) {
    case IR_AK_INT: {
      int64_t v = 0;
      if (!parse_int(p, INT64_MIN, INT64_MAX, name, &v)) return false;
      ir_attrs_set_int(a, id, v);
      return true;
    }
    case IR_AK_FLOAT: {
      double v = 0;
      if (!parse_float(p, name, &v)) return false;
      ir_attrs_set_float(a, id, v);
      return true;
    }
    case IR_AK_BOOL:
      if (!is_kw(p, "true") && !is_kw(p, "false"))
        return error(p, p->tok.loc, "expected true or false for '%s', found %s", name, tok_desc(p));
      ir_attrs_set_bool(a, id, is_kw(p, "true"));
      return next(p);
    case IR_AK_DTYPE: {
      IrDType t = IR_F32;
      if (p->tok.kind != T_IDENT || !ir_dtype_parse(p->tok.s, &t))
        return error(p, p->tok.loc, "expected a dtype for '%s', found %s", name, tok_desc(p));
      ir_attrs_set_dtype(a, id, t);
      return next(p);
    }
    case IR_AK_MESH: {
      IrAxis ax = IR_AX_DP;
      if (!parse_axis(p, &ax)) return false;
      ir_attrs_set_mesh(a, id, ax);
      return true;
    }
    case IR_AK_STR: {
      char *s = NULL;
      if (!parse_string(p, name, &s)) return false;
      a->set |= 1ull << id;
      a->v[id].s = s;
      return true;
    }
    case IR_AK_INTS: {
      SrcLoc open = p->tok.loc;
      if (!expect_punct(p, '[', "to open a list of integers")) return false;
      int n = 0, cap = 8;
      int64_t *v = ARENA_ARRAY(&p->scratch, int64_t, cap);
      while (!is_punct(p, ']')) {
        if (n && !expect_punct(p, ',', "between list items")) return false;
        if (n == 1 << 20) return error(p, p->tok.loc, "list of more than 2^20 integers");
        if (n == cap) {
          v = arena_realloc(&p->scratch, v, sizeof *v * (size_t)cap, sizeof *v * (size_t)cap * 2);
          cap *= 2;
        }
        if (!parse_int(p, INT64_MIN, INT64_MAX, name, &v[n])) return false;
        n++;
      }
      ir_attrs_set_ints(a, id, v, n);
      return expect_close(p, ']', open);
    }
  }
  return false;
}

/* {name = value, ...} */
static bool parse_attrs(Parser *p, IrAttrs *a) {
  SrcLoc open = p->tok.loc;
  if (!next(p)) return false;
  for (int k = 0; !is_punct(p, '}'); k++) {
    if (k && !expect_punct(p, ',', "between attributes")) return false;
    if (p->tok.kind != T_IDENT)
      return error(p, p->tok.loc, "expected an attribute name, found %s", tok_desc(p));
    int id = -1;
    for (int i = 0; i < IR_ATTR_COUNT; i++)
      if (strcmp(ir_attrs[i].name, p->tok.s) == 0) id = i;
    if (id < 0) return error(p, p->tok.loc, "unknown attribute '%s'", p->tok.s);
    if (ir_attrs_has(a, (IrAttrId)id))
      return error(p, p->tok.loc, "attribute '%s' given twice", p->tok.s);
    if (!next(p) || !expect_punct(p, '=', "after the attribute name") ||
        !parse_attr_value(p, (IrAttrId)id, a))
      return false;
  }
  return expect_close(p, '}', open);
}

typedef struct Label {
  char *name;
  bool numbered;
  SrcLoc loc;
} Label;

static bool defined(Parser *p, const Label *l) {
  return ir_map_get(l->numbered ? &p->number : &p->named, l->name) != NULL;
}

/* %a, %b = op(operands) {attrs} : types layer(...) scope(...) loc(...), or
 * for an op without results: op(operands) {attrs} layer(...) scope(...) loc(...) */
static bool parse_node(Parser *p, IrFunc *f) {
  Label labels[4];
  int nlab = 0;
  SrcLoc start = p->tok.loc;
  while (nlab || p->tok.kind != T_IDENT) { /* an op name first: a node without results */
    if (p->tok.kind != T_PCT)
      return error(p, p->tok.loc, "expected a result name %%N, found %s", tok_desc(p));
    if (nlab == 4) return error(p, p->tok.loc, "too many results");
    Label *l = &labels[nlab++];
    *l = (Label){p->tok.s, p->tok.numbered, p->tok.loc};
    if (defined(p, l)) return error(p, l->loc, "redefinition of %%%s", l->name);
    for (int i = 0; i < nlab - 1; i++)
      if (labels[i].numbered == l->numbered && !strcmp(labels[i].name, l->name))
        return error(p, l->loc, "redefinition of %%%s", l->name);
    if (!next(p)) return false;
    if (!is_punct(p, ',')) {
      if (!expect_punct(p, '=', "after the result names")) return false;
      break;
    }
    if (!next(p)) return false;
  }
  if (p->tok.kind != T_IDENT)
    return error(p, p->tok.loc, "expected an op name, found %s", tok_desc(p));
  IrOp op;
  SrcLoc op_loc = p->tok.loc;
  if (!ir_op_parse(p->tok.s, &op)) return error(p, op_loc, "unknown op '%s'", p->tok.s);
  const IrOpInfo *info = &ir_ops[op];
  if (nlab != info->nout)
    return error(p, start, "%s has %d result%s, but %d %s named", info->name, info->nout,
                 info->nout == 1 ? "" : "s", nlab, nlab == 1 ? "is" : "are");
  if (!next(p)) return false;

  SrcLoc open = p->tok.loc;
  if (!expect_punct(p, '(', "after the op name")) return false;
  int nin = 0, cap = 4;
  IrValue **in = ARENA_ARRAY(&p->scratch, IrValue *, cap);
  SrcLoc *in_loc = ARENA_ARRAY(&p->scratch, SrcLoc, cap);
  while (!is_punct(p, ')')) {
    if (nin && !expect_punct(p, ',', "between operands")) return false;
    if (nin == info->max_in)
      return error(p, p->tok.loc, "%s takes at most %d operand%s", info->name, info->max_in,
                   info->max_in == 1 ? "" : "s");
    if (nin == cap) {
      in = arena_realloc(&p->scratch, in, sizeof *in * (size_t)cap, sizeof *in * (size_t)cap * 2);
      in_loc = arena_realloc(&p->scratch, in_loc, sizeof *in_loc * (size_t)cap,
                             sizeof *in_loc * (size_t)cap * 2);
      cap *= 2;
    }
    in_loc[nin] = p->tok.loc;
    if (!parse_ref(p, &in[nin])) return false;
    nin++;
  }
  if (!expect_close(p, ')', open)) return false;

  IrAttrs attrs;
  memset(&attrs, 0, sizeof attrs);
  if (is_punct(p, '{') && !parse_attrs(p, &attrs)) return false;
  if (nlab && !expect_punct(p, ':', "before the result types")) return false;
  if (!nlab && is_punct(p, ':'))
    return error(p, p->tok.loc, "%s has no results, so no types follow it", info->name);
  Type types[4];
  IrRole roles[4];
  IrValue *grads[4] = {0};
  Mem mems[4] = {{0}};
  for (int j = 0; j < nlab; j++) {
    if (j && !expect_punct(p, ',', "between result types")) return false;
    roles[j] = IR_ROLE_ACT;
    if (!parse_type(p, &types[j])) return false;
    if (is_kw(p, "role") && !parse_role(p, &roles[j], ROLES_RESULT, "a node result")) return false;
    if (is_kw(p, "grad") && !parse_grad(p, &grads[j])) return false;
    if (is_kw(p, "mem") && !parse_mem(p, &mems[j])) return false;
  }
  int64_t ws[2] = {0, 0}; /* ws(offset, bytes): the node's scratch */
  if (is_kw(p, "ws")) {
    if (!next(p) || !expect_punct(p, '(', "after 'ws'") ||
        !parse_int(p, 0, INT64_C(1) << 62, "offset", &ws[0]) ||
        !expect_punct(p, ',', "after the offset") ||
        !parse_int(p, 1, INT64_C(1) << 62, "bytes", &ws[1]) ||
        !expect_punct(p, ')', "after the bytes"))
      return false;
  }
  IrPpPart pp_part = IR_PP_NONE;
  int64_t pp_stage = 0;
  if (is_kw(p, "pp") && !parse_pp(p, &pp_part, &pp_stage)) return false;
  IrBuilder b = {.m = p->m, .f = f, .group = -1, .layer = -1};
  SrcLoc loc = {0};
  if (is_kw(p, "layer") && !parse_layer(p, &b.group, &b.layer)) return false;
  if (is_kw(p, "scope")) {
    char *scope = NULL;
    if (!next(p) || !expect_punct(p, '(', "after 'scope'") || !parse_string(p, "a scope", &scope) ||
        !expect_punct(p, ')', "after the scope"))
      return false;
    b.scope = scope;
  }
  if (is_kw(p, "loc") && !parse_loc(p, &loc)) return false;

  char err[512];
  int bad = -1;
  IrNode *n = ir_build(&b, op, in, nin, &attrs, loc, err, sizeof err, &bad);
  if (!n) return error(p, bad >= 0 && bad < nin ? in_loc[bad] : op_loc, "%s", err);
  for (int j = 0; j < nlab; j++) {
    IrValue *v = n->out[j];
    if (v->dtype != types[j].dtype || !ir_shape_eq(&v->shape, &types[j].shape)) {
      char a[200], c[200];
      return error(p, types[j].loc, "declared type %s%s of %%%s differs from the inferred %s%s",
                   ir_dtype_name(types[j].dtype), ir_shape_str(a, sizeof a, &types[j].shape),
                   labels[j].name, ir_dtype_name(v->dtype), ir_shape_str(c, sizeof c, &v->shape));
    }
    memcpy(v->pl, types[j].pl, sizeof v->pl);
    v->role = roles[j];
    v->grad_of = grads[j];
    set_mem(v, &mems[j]);
    ir_map_put(labels[j].numbered ? &p->number : &p->named, labels[j].name)->p = v;
  }
  n->ws_offset = ws[0];
  n->ws_bytes = ws[1];
  n->pp_part = pp_part;
  n->pp_stage = (int)pp_stage;
  /* placements must follow the op's sharding rule (as the verifier checks) */
  if (!ir_shard_check_node(p->m, n, err, sizeof err))
    return error(p, nlab ? types[0].loc : op_loc, "%s", err);
  return true;
}

/* %name : type role(...) loc(...) */
static bool parse_input(Parser *p, IrFunc *f) {
  if (p->tok.kind != T_PCT)
    return error(p, p->tok.loc, "expected an input %%name, found %s", tok_desc(p));
  Label l = {p->tok.s, p->tok.numbered, p->tok.loc};
  if (l.numbered) return error(p, l.loc, "function input %%%s needs a name, not a number", l.name);
  if (defined(p, &l)) return error(p, l.loc, "redefinition of %%%s", l.name);
  Type t;
  IrRole role = IR_ROLE_INPUT;
  SrcLoc loc = {0};
  if (!next(p) || !expect_punct(p, ':', "after the input name") || !parse_type(p, &t)) return false;
  if (is_kw(p, "role") && !parse_role(p, &role, ROLES_INPUT, "a function input")) return false;
  IrValue *grad_of = NULL;
  if (is_kw(p, "grad") && !parse_grad(p, &grad_of)) return false;
  Mem mem = {0};
  if (is_kw(p, "mem") && !parse_mem(p, &mem)) return false;
  if (is_kw(p, "loc") && !parse_loc(p, &loc)) return false;
  IrValue *v = ir_add_input(p->m, f, l.name, t.dtype, &t.shape, loc);
  v->grad_of = grad_of;
  set_mem(v, &mem);
  memcpy(v->pl, t.pl, sizeof v->pl);
  v->role = role;
  ir_map_put(&p->named, v->name)->p = v;
  return true;
}

static bool parse_func(Parser *p) {
  if (!next(p)) return false;
  if (p->tok.kind != T_AT)
    return error(p, p->tok.loc, "expected a function name @name, found %s", tok_desc(p));
  IrMapSlot *s = ir_map_put(&p->funcs, p->tok.s);
  if (s->p) return error(p, p->tok.loc, "redefinition of function @%s", p->tok.s);
  IrFunc *f = ir_func_new(p->m, p->tok.s);
  s->p = f;
  ir_map_init(&p->named, &p->scratch, true);
  ir_map_init(&p->number, &p->scratch, true);
  if (!next(p)) return false;
  SrcLoc open = p->tok.loc;
  if (!expect_punct(p, '(', "after the function name")) return false;
  for (int k = 0; !is_punct(p, ')'); k++) {
    if (k && !expect_punct(p, ',', "between inputs")) return false;
    if (!parse_input(p, f)) return false;
  }
  if (!expect_close(p, ')', open)) return false;
  open = p->tok.loc;
  if (!expect_punct(p, '{', "to open the function body")) return false;
  while (!is_kw(p, "return")) {
    if (p->tok.kind != T_PCT && p->tok.kind != T_IDENT)
      return error(p, p->tok.loc, "expected a node or 'return' in @%s, found %s", f->name,
                   tok_desc(p));
    if (!parse_node(p, f)) return false;
  }
  if (!next(p)) return false;
  if (p->tok.kind == T_PCT || p->tok.kind == T_AT) {
    for (;;) {
      IrValue *v;
      if (!parse_ref(p, &v)) return false;
      ir_func_add_result(p->m, f, v);
      if (!is_punct(p, ',')) break;
      if (!next(p)) return false;
    }
  }
  return expect_close(p, '}', open);
}

IrModule *ir_parse(Diag *diag, uint32_t file_id) {
  const SrcFile *sf = diag_file(diag, file_id);
  if (!sf) {
    diag_error_plain(diag, "IR text: no such file #%u", file_id);
    return NULL;
  }
  Parser p;
  memset(&p, 0, sizeof p);
  p.d = diag;
  p.file = file_id;
  p.cur = sf->text;
  p.end = sf->text + sf->size;
  p.line = p.col = 1;
  arena_init(&p.scratch);
  ir_map_init(&p.files, &p.scratch, true);
  ir_map_init(&p.params, &p.scratch, true);
  ir_map_init(&p.groups, &p.scratch, true);
  ir_map_init(&p.funcs, &p.scratch, true);
  for (uint32_t i = 1; i < diag->nfiles; i++) { /* loaded files keep their index */
    IrMapSlot *s = ir_map_put(&p.files, arena_strdup(&p.scratch, diag->files[i]->path));
    if (!s->p) {
      s->i = i;
      s->p = (void *)1;
    }
  }

  if (next(&p) && expect_kw(&p, "module")) {
    if (p.tok.kind != T_AT) {
      error(&p, p.tok.loc, "expected a module name @name, found %s", tok_desc(&p));
    } else {
      p.m = ir_module_new(diag, p.tok.s);
      if (next(&p) && parse_mesh(&p)) {
        bool seen[8] = {0}, seen_passes = false;
        while (!p.failed && p.tok.kind != T_EOF) {
          int line = 0;
          while (line < ir_set_nlines && !is_kw(&p, ir_set_lines[line].name)) line++;
          if (line < ir_set_nlines)
            parse_settings(&p, &ir_set_lines[line], &seen[line]);
          else if (is_kw(&p, "passes"))
            parse_passes(&p, &seen_passes);
          else if (is_kw(&p, "group"))
            parse_group(&p);
          else if (is_kw(&p, "param"))
            parse_param(&p);
          else if (is_kw(&p, "func"))
            parse_func(&p);
          else
            error(&p, p.tok.loc,
                  "expected 'plan', 'train', 'passes', 'group', 'param' or 'func', found %s",
                  tok_desc(&p));
        }
      }
    }
  }
  arena_free(&p.scratch);
  if (p.failed) {
    ir_module_free(p.m);
    return NULL;
  }
  return p.m;
}
