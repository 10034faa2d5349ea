/* The sub-program of a `fused` node (see ir_fused.h): its parser, its
 * printer and the shape rule of the `fused` op, which runs the shape rule
 * of every instruction. Nothing here trusts the text: it comes from parsed
 * IR, which is fuzzed. */
#include "ir_fused.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Lex {
  const char *s;
  char *err;
  size_t errlen;
  bool failed;
} Lex;

static bool fail(Lex *l, const char *fmt, const char *arg) {
  if (!l->failed) snprintf(l->err, l->errlen, fmt, arg);
  l->failed = true;
  return false;
}

static void blanks(Lex *l) {
  while (*l->s == ' ') l->s++;
}

static bool punct(Lex *l, char c) {
  blanks(l);
  if (*l->s != c) return false;
  l->s++;
  return true;
}

static bool expect(Lex *l, char c) {
  char what[2] = {c, 0};
  if (!punct(l, c)) return fail(l, "expected '%s'", what);
  return true;
}

/* [A-Za-z_][A-Za-z0-9_]* into buf */
static bool ident(Lex *l, char *buf, size_t n) {
  blanks(l);
  size_t k = 0;
  const char *p = l->s;
  if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_'))
    return fail(l, "expected a name at '%.12s'", p);
  while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
         *p == '_') {
    if (k + 1 >= n) return fail(l, "name too long at '%.12s'", l->s);
    buf[k++] = *p++;
  }
  buf[k] = 0;
  l->s = p;
  return true;
}

/* tK or iK: K into *k */
static bool ref(Lex *l, char kind, int *k) {
  blanks(l);
  if (*l->s != kind || l->s[1] < '0' || l->s[1] > '9') return false;
  char *end;
  long v = strtol(l->s + 1, &end, 10);
  if (v < 0 || v > 1 << 20) return fail(l, "reference out of range at '%.12s'", l->s);
  *k = (int)v;
  l->s = end;
  return true;
}

static bool number(Lex *l, double *f, int64_t *i, bool *is_int) {
  blanks(l);
  char *end;
  *f = strtod(l->s, &end);
  if (end == l->s) return fail(l, "expected a number at '%.12s'", l->s);
  *is_int = true;
  for (const char *p = l->s; p < end; p++)
    if (*p == '.' || *p == 'e' || *p == 'E' || *p == 'n' || *p == 'i') *is_int = false;
  *i = *is_int ? strtoll(l->s, NULL, 10) : 0;
  l->s = end;
  return true;
}

/* {name = value, ...} for the scalar attribute kinds */
static bool attrs(Lex *l, IrAttrs *a) {
  if (!punct(l, '{')) return true;
  for (int k = 0; !punct(l, '}'); k++) {
    if (k && !expect(l, ',')) return false;
    char name[32];
    if (!ident(l, name, sizeof name)) return false;
    int id = -1;
    for (int j = 0; j < IR_ATTR_COUNT; j++)
      if (strcmp(ir_attrs[j].name, name) == 0) id = j;
    if (id < 0) return fail(l, "unknown attribute '%s'", name);
    if (ir_attrs_has(a, (IrAttrId)id)) return fail(l, "attribute '%s' given twice", name);
    if (!expect(l, '=')) return false;
    double f = 0;
    int64_t i = 0;
    bool is_int = false;
    char word[16];
    switch (ir_attrs[id].kind) {
      case IR_AK_INT:
        if (!number(l, &f, &i, &is_int)) return false;
        if (!is_int) return fail(l, "attribute '%s' takes an integer", name);
        ir_attrs_set_int(a, (IrAttrId)id, i);
        break;
      case IR_AK_FLOAT:
        blanks(l);
        if (strncmp(l->s, "inf", 3) == 0 || strncmp(l->s, "nan", 3) == 0) {
          ir_attrs_set_float(a, (IrAttrId)id, l->s[0] == 'i' ? HUGE_VAL : NAN);
          l->s += 3;
          break;
        }
        if (!number(l, &f, &i, &is_int)) return false;
        ir_attrs_set_float(a, (IrAttrId)id, f);
        break;
      case IR_AK_BOOL:
        if (!ident(l, word, sizeof word)) return false;
        if (strcmp(word, "true") && strcmp(word, "false"))
          return fail(l, "attribute '%s' takes true or false", name);
        ir_attrs_set_bool(a, (IrAttrId)id, word[0] == 't');
        break;
      case IR_AK_DTYPE: {
        IrDType t;
        if (!ident(l, word, sizeof word)) return false;
        if (!ir_dtype_parse(word, &t)) return fail(l, "unknown dtype '%s'", word);
        ir_attrs_set_dtype(a, (IrAttrId)id, t);
        break;
      }
      default: return fail(l, "attribute '%s' cannot appear in a fused program", name);
    }
  }
  return true;
}

bool ir_fused_parse(const char *text, int nin, const IrDType *dtypes, const IrShape *const *shapes,
                    IrFusedProg *out, Arena *a, char *err, size_t errlen) {
  Lex l = {.s = text ? text : "", .err = err, .errlen = errlen};
  int cap = 8;
  out->n = 0;
  out->ins = ARENA_ARRAY(a, IrFusedInstr, cap);
  bool *used_in = ARENA_ARRAY(a, bool, nin + 1);
  while (!l.failed) {
    blanks(&l);
    if (!*l.s) break;
    if (out->n && !expect(&l, ';')) break;
    int t = -1;
    if (!ref(&l, 't', &t)) {
      fail(&l, "expected tN = op(...) at '%.12s'", l.s);
      break;
    }
    if (t != out->n) {
      snprintf(err, errlen, "instruction %d is named t%d (they are numbered in order)", out->n, t);
      return false;
    }
    char name[32];
    IrOp op;
    if (!expect(&l, '=') || !ident(&l, name, sizeof name)) break;
    if (!ir_op_parse(name, &op)) {
      fail(&l, "unknown op '%s'", name);
      break;
    }
    if (!(ir_ops[op].flags & OPF_ELEMWISE) || ir_ops[op].nout != 1 ||
        ir_ops[op].max_in > IR_FUSED_MAX_ARGS) {
      fail(&l, "'%s' is not an elementwise op", name);
      break;
    }
    if (out->n == cap) {
      out->ins = arena_realloc(a, out->ins, sizeof(IrFusedInstr) * (size_t)cap,
                               sizeof(IrFusedInstr) * (size_t)cap * 2);
      cap *= 2;
    }
    IrFusedInstr *in = &out->ins[out->n];
    memset(in, 0, sizeof *in);
    in->op = op;
    if (!expect(&l, '(')) break;
    while (!l.failed && !punct(&l, ')')) {
      if (in->nargs && !expect(&l, ',')) break;
      if (in->nargs == IR_FUSED_MAX_ARGS) {
        fail(&l, "too many arguments to '%s'", name);
        break;
      }
      int k;
      if (ref(&l, 't', &k)) {
        if (k >= out->n) {
          snprintf(err, errlen, "t%d: t%d is used before it is defined", out->n, k);
          return false;
        }
        in->arg[in->nargs++] = k;
      } else if (ref(&l, 'i', &k)) {
        if (k >= nin) {
          snprintf(err, errlen, "t%d: i%d is not an operand (the node has %d)", out->n, k, nin);
          return false;
        }
        used_in[k] = true;
        in->arg[in->nargs++] = -1 - k;
      } else {
        fail(&l, "expected iN or tN at '%.12s'", l.s);
      }
    }
    if (l.failed || !attrs(&l, &in->attrs)) break;
    const IrOpInfo *info = &ir_ops[op];
    if (in->nargs < info->min_in || in->nargs > info->max_in) {
      snprintf(err, errlen, "t%d: %s takes %d operand%s, got %d", out->n, info->name, info->min_in,
               info->min_in == 1 ? "" : "s", in->nargs);
      return false;
    }
    uint64_t missing = info->req_attrs & ~in->attrs.set,
             extra = in->attrs.set & ~(info->req_attrs | info->opt_attrs);
    if (missing || extra) {
      snprintf(err, errlen, "t%d: %s attribute '%s'", out->n, missing ? "missing" : "unexpected",
               ir_attrs[__builtin_ctzll(missing ? missing : extra)].name);
      return false;
    }
    if (dtypes && shapes) { /* the op's own shape rule gives the type */
      IrNode fake;
      memset(&fake, 0, sizeof fake);
      fake.op = op;
      fake.attrs = in->attrs;
      fake.nin = in->nargs;
      IrShapeCtx cx;
      memset(&cx, 0, sizeof cx);
      cx.node = &fake;
      cx.nin = in->nargs;
      for (int k = 0; k < in->nargs; k++) {
        int r = in->arg[k];
        cx.in_dtype[k] = r >= 0 ? out->ins[r].dtype : dtypes[-1 - r];
        cx.in_shape[k] = r >= 0 ? &out->ins[r].shape : shapes[-1 - r];
      }
      char sub[256] = "";
      cx.err = sub;
      cx.errlen = sizeof sub;
      cx.bad_operand = -1;
      if (!info->shape(&cx)) {
        snprintf(err, errlen, "t%d: %s", out->n, sub[0] ? sub : "invalid operands");
        return false;
      }
      in->dtype = cx.out_dtype[0];
      in->shape = cx.out_shape[0];
    }
    out->n++;
  }
  if (l.failed) return false;
  if (out->n == 0) {
    snprintf(err, errlen, "empty program");
    return false;
  }
  for (int k = 0; k < nin; k++)
    if (!used_in[k]) {
      snprintf(err, errlen, "operand i%d is not used", k);
      return false;
    }
  /* every instruction but the last feeds another: the result depends on all */
  bool *used = ARENA_ARRAY(a, bool, out->n);
  for (int i = 0; i < out->n; i++)
    for (int k = 0; k < out->ins[i].nargs; k++)
      if (out->ins[i].arg[k] >= 0) used[out->ins[i].arg[k]] = true;
  for (int i = 0; i + 1 < out->n; i++)
    if (!used[i]) {
      snprintf(err, errlen, "t%d is not used", i);
      return false;
    }
  return true;
}

/* Shortest %.Ng that reads back exactly (as the IR printer does). */
static void fmt_float(char *buf, size_t n, double x) {
  if (isnan(x)) {
    snprintf(buf, n, "nan");
    return;
  }
  if (isinf(x)) {
    snprintf(buf, n, x > 0 ? "inf" : "-inf");
    return;
  }
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, x);
    if (strtod(buf, NULL) == x) break;
  }
}

char *ir_fused_format(const IrFusedProg *p, Arena *a) {
  size_t cap = 256, len = 0;
  char *s = arena_alloc(a, cap);
#define PUT(...)                                                                                   \
  do {                                                                                             \
    int k_ = snprintf(s + len, cap - len, __VA_ARGS__);                                            \
    while (len + (size_t)k_ + 1 > cap) {                                                           \
      s = arena_realloc(a, s, cap, cap * 2);                                                       \
      cap *= 2;                                                                                    \
      k_ = snprintf(s + len, cap - len, __VA_ARGS__);                                              \
    }                                                                                              \
    len += (size_t)k_;                                                                             \
  } while (0)
  for (int i = 0; i < p->n; i++) {
    const IrFusedInstr *in = &p->ins[i];
    PUT("%st%d = %s(", i ? "; " : "", i, ir_ops[in->op].name);
    for (int k = 0; k < in->nargs; k++) {
      int r = in->arg[k];
      PUT("%s%c%d", k ? ", " : "", r >= 0 ? 't' : 'i', r >= 0 ? r : -1 - r);
    }
    PUT(")");
    bool first = true;
    for (int id = 0; id < IR_ATTR_COUNT; id++) {
      if (!ir_attrs_has(&in->attrs, (IrAttrId)id)) continue;
      const IrAttrVal *v = &in->attrs.v[id];
      PUT("%s%s = ", first ? " {" : ", ", ir_attrs[id].name);
      first = false;
      char num[40];
      switch (ir_attrs[id].kind) {
        case IR_AK_INT: PUT("%lld", (long long)v->i); break;
        case IR_AK_FLOAT:
          fmt_float(num, sizeof num, v->f);
          PUT("%s", num);
          break;
        case IR_AK_BOOL: PUT("%s", v->i ? "true" : "false"); break;
        case IR_AK_DTYPE: PUT("%s", ir_dtype_name((IrDType)v->i)); break;
        default: break;
      }
    }
    if (!first) PUT("}");
  }
#undef PUT
  return s;
}

void ir_fused_of(const IrNode *n, IrFusedProg *out, Arena *a) {
  MM_ASSERT(n->op == IR_OP_FUSED && ir_attrs_has(&n->attrs, IR_ATTR_PROG));
  IrDType *dt = ARENA_ARRAY(a, IrDType, n->nin + 1);
  const IrShape **sh = ARENA_ARRAY(a, const IrShape *, n->nin + 1);
  for (int i = 0; i < n->nin; i++) {
    dt[i] = n->in[i]->dtype;
    sh[i] = &n->in[i]->shape;
  }
  char err[256];
  if (!ir_fused_parse(n->attrs.v[IR_ATTR_PROG].s, n->nin, dt, sh, out, a, err, sizeof err))
    mm_die(__FILE__, __LINE__, "invalid fused node: %s", err);
}

/* The shape rule of `fused`: the type of its last instruction. */
bool ir_shape_FUSED(IrShapeCtx *cx) {
  Arena a;
  arena_init(&a);
  IrFusedProg p;
  char err[256];
  bool ok = ir_fused_parse(cx->node->attrs.v[IR_ATTR_PROG].s, cx->nin, cx->in_dtype, cx->in_shape,
                           &p, &a, err, sizeof err);
  if (ok) {
    cx->out_dtype[0] = p.ins[p.n - 1].dtype;
    cx->out_shape[0] = p.ins[p.n - 1].shape;
  } else {
    snprintf(cx->err, cx->errlen, "fused: %s", err);
  }
  arena_free(&a);
  return ok;
}
