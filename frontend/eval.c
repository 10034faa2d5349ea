/* Evaluation of expressions: compile-time arithmetic on hyper-parameters
 * (ints, floats, bools, strings, lists) and tensor expressions, which emit
 * IR through the builder. Errors are reported once, at the expression, and
 * the value becomes V_ERR, which every consumer passes on silently. */
#include <math.h>
#include <string.h>

#include "fe_internal.h"

Val *val_new(FeProgram *p, VKind k) {
  Val *v = ARENA_NEW(&p->ast, Val);
  v->k = k;
  return v;
}
Val *val_int(FeProgram *p, int64_t i) {
  Val *v = val_new(p, V_INT);
  v->i = i;
  return v;
}
Val *val_float(FeProgram *p, double f) {
  Val *v = val_new(p, V_FLOAT);
  v->f = f;
  return v;
}
Val *val_bool(FeProgram *p, bool b) {
  Val *v = val_new(p, V_BOOL);
  v->b = b;
  return v;
}
Val *val_str(FeProgram *p, const char *s) {
  Val *v = val_new(p, V_STR);
  v->s = s;
  return v;
}
Val *val_err(FeProgram *p) {
  return val_new(p, V_ERR);
}
Val *val_tensor(FeProgram *p, IrValue *t) {
  if (!t) return val_err(p);
  Val *v = val_new(p, V_TENSOR);
  v->t = t;
  return v;
}

const char *val_kind_name(VKind k) {
  switch (k) {
    case V_ERR: return "error";
    case V_NONE: return "nothing";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_BOOL: return "bool";
    case V_STR: return "string";
    case V_SYM: return "name";
    case V_LIST: return "list";
    case V_TENSOR: return "tensor";
    case V_INST: return "module instance";
    case V_SLICE: return "stack slice";
    case V_UNITS: return "stage list";
  }
  return "?";
}

bool val_is_num(const Val *v) {
  return v->k == V_INT || v->k == V_FLOAT;
}
double val_num(const Val *v) {
  return v->k == V_INT ? (double)v->i : v->f;
}

void env_bind(FeProgram *p, Env *e, const char *name, Val *v, SrcLoc loc) {
  Binding *b = ARENA_NEW(&p->ast, Binding);
  b->name = name;
  b->val = v;
  b->loc = loc;
  b->next = e->head;
  e->head = b;
  names_put(&p->ast, &e->map, name, b);
}

Binding *env_lookup_local(Env *e, const char *name) {
  return names_get(&e->map, name);
}

Binding *env_lookup(Env *e, const char *name) {
  for (; e; e = e->parent) {
    Binding *b = env_lookup_local(e, name);
    if (b) return b;
  }
  return NULL;
}

/* ---- expression text for messages ---- */

static int prec(const AstExpr *x) {
  if (x->kind == AST_COND) return 1;
  if (x->kind == AST_BINARY) switch (x->op) {
      case OP_OR: return 2;
      case OP_AND: return 3;
      case OP_EQ:
      case OP_NE:
      case OP_LT:
      case OP_LE:
      case OP_GT:
      case OP_GE: return 5;
      case OP_ADD:
      case OP_SUB: return 6;
      case OP_POW: return 9;
      default: return 7;
    }
  if (x->kind == AST_UNARY) return x->op == OP_NOT ? 4 : 8;
  return 10;
}

static const char *text(FeProgram *p, AstExpr *x, int ctx) {
  if (!x) return "";
  const char *s = "?";
  switch (x->kind) {
    case AST_INT: s = arena_printf(&p->ast, "%lld", (long long)x->ival); break;
    case AST_FLOAT: s = arena_printf(&p->ast, "%g", x->fval); break;
    case AST_STRING: s = arena_printf(&p->ast, "\"%s\"", x->str); break;
    case AST_BOOL: s = x->bval ? "true" : "false"; break;
    case AST_NAME: s = x->name; break;
    case AST_UNARY:
      s = arena_printf(&p->ast, "%s%s", x->op == OP_NOT ? "not " : "-", text(p, x->lhs, prec(x)));
      break;
    case AST_BINARY:
      s = arena_printf(&p->ast, "%s %s %s", text(p, x->lhs, prec(x)), ast_op_str(x->op),
                       text(p, x->rhs, prec(x) + 1));
      break;
    case AST_FIELD: s = arena_printf(&p->ast, "%s.%s", text(p, x->lhs, 10), x->name); break;
    case AST_CALL: {
      s = arena_printf(&p->ast, "%s(", text(p, x->lhs, 10));
      for (int i = 0; i < x->args.len; i++) {
        AstArg *a = x->args.items[i];
        s = arena_printf(&p->ast, "%s%s%s%s%s", s, i ? ", " : "", a->name ? a->name : "",
                         a->name ? " = " : "", text(p, a->value, 0));
      }
      s = arena_printf(&p->ast, "%s)", s);
      break;
    }
    default: s = "..."; break;
  }
  if (prec(x) < ctx) s = arena_printf(&p->ast, "(%s)", s);
  return s;
}

const char *fe_expr_text(FeProgram *p, AstExpr *x) {
  return text(p, x, 0);
}

char *fe_shape_str(FeProgram *p, const IrShape *s) {
  char *r = arena_strdup(&p->ast, "[");
  for (int i = 0; i < s->rank; i++)
    r = arena_printf(&p->ast, "%s%s%lld", r, i ? ", " : "", (long long)s->d[i]);
  return arena_printf(&p->ast, "%s]", r);
}

/* ---- compile-time arithmetic ---- */

static Val *arith_int(FeProgram *p, AstExpr *x, AstOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case OP_ADD:
      if (__builtin_add_overflow(a, b, &r)) goto ovf;
      return val_int(p, r);
    case OP_SUB:
      if (__builtin_sub_overflow(a, b, &r)) goto ovf;
      return val_int(p, r);
    case OP_MUL:
      if (__builtin_mul_overflow(a, b, &r)) goto ovf;
      return val_int(p, r);
    case OP_DIV:
    case OP_FLOORDIV:
    case OP_MOD:
      if (b == 0) {
        diag_error(p->d, x->loc, "division by zero in '%s'", fe_expr_text(p, x));
        diag_note(p->d, x->rhs->loc, "'%s' is 0", fe_expr_text(p, x->rhs));
        return val_err(p);
      }
      if (a == INT64_MIN && b == -1) goto ovf;
      if (op == OP_DIV) {
        if (a % b == 0) return val_int(p, a / b);
        return val_float(p, (double)a / (double)b);
      } else {
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          q -= 1;
          m += b;
        }
        return val_int(p, op == OP_FLOORDIV ? q : m);
      }
    case OP_POW: {
      if (b < 0) return val_float(p, pow((double)a, (double)b));
      r = 1;
      for (int64_t i = 0; i < b; i++) {
        if (__builtin_mul_overflow(r, a, &r)) goto ovf;
        if (r == 0 || r == 1) break;
      }
      return val_int(p, r);
    }
    case OP_EQ: return val_bool(p, a == b);
    case OP_NE: return val_bool(p, a != b);
    case OP_LT: return val_bool(p, a < b);
    case OP_LE: return val_bool(p, a <= b);
    case OP_GT: return val_bool(p, a > b);
    case OP_GE: return val_bool(p, a >= b);
    default: break;
  }
  diag_error(p->d, x->loc, "operator '%s' does not apply to integers", ast_op_str(op));
  return val_err(p);
ovf:
  diag_error(p->d, x->loc, "integer overflow in '%s'", fe_expr_text(p, x));
  return val_err(p);
}

static Val *arith_float(FeProgram *p, AstExpr *x, AstOp op, double a, double b) {
  switch (op) {
    case OP_ADD: return val_float(p, a + b);
    case OP_SUB: return val_float(p, a - b);
    case OP_MUL: return val_float(p, a * b);
    case OP_DIV:
    case OP_FLOORDIV:
    case OP_MOD:
      if (b == 0) {
        diag_error(p->d, x->loc, "division by zero in '%s'", fe_expr_text(p, x));
        return val_err(p);
      }
      if (op == OP_DIV) return val_float(p, a / b);
      if (op == OP_FLOORDIV) return val_float(p, floor(a / b));
      return val_float(p, a - b * floor(a / b));
    case OP_POW: return val_float(p, pow(a, b));
    case OP_EQ: return val_bool(p, a == b);
    case OP_NE: return val_bool(p, a != b);
    case OP_LT: return val_bool(p, a < b);
    case OP_LE: return val_bool(p, a <= b);
    case OP_GT: return val_bool(p, a > b);
    case OP_GE: return val_bool(p, a >= b);
    default: break;
  }
  diag_error(p->d, x->loc, "operator '%s' does not apply to numbers", ast_op_str(op));
  return val_err(p);
}

IrValue *fe_emit(FeProgram *p, IrOp op, IrValue **in, int nin, const IrAttrs *a, SrcLoc loc) {
  char err[512];
  int bad = -1;
  IrAttrs none = {0};
  IrNode *n = ir_build(&p->b, op, in, nin, a ? a : &none, loc, err, sizeof err, &bad);
  if (!n) {
    diag_error(p->d, loc, "%s", err);
    /* notes: where each parameter or input operand was declared, with its
     * declared (symbolic) shape; the one at fault first */
    for (int k = -1; k < nin; k++) {
      int i = k < 0 ? bad : k;
      if (i < 0 || (k >= 0 && k == bad) || !in[i]->loc.file) continue;
      if (in[i]->role != IR_ROLE_PARAM && in[i]->role != IR_ROLE_INPUT) continue;
      IrMapSlot *sl = ir_map_get(&p->decl_shape, in[i]);
      const char *decl = sl ? (const char *)sl->p : NULL;
      const char *shape = fe_shape_str(p, &in[i]->shape);
      if (decl && strcmp(decl, shape) != 0)
        diag_note(p->d, in[i]->loc, "%s'%s' declared here as %s = %s",
                  in[i]->role == IR_ROLE_INPUT ? "input " : "", in[i]->name, decl, shape);
      else
        diag_note(p->d, in[i]->loc, "%s'%s' declared here as %s",
                  in[i]->role == IR_ROLE_INPUT ? "input " : "", in[i]->name, shape);
    }
    return NULL;
  }
  return n->nout ? n->out[0] : in[0]; /* an in-place op: the value it updated */
}

IrValue *fe_emit1(FeProgram *p, IrOp op, IrValue *x, const IrAttrs *a, SrcLoc loc) {
  return fe_emit(p, op, &x, 1, a, loc);
}

static IrValue *scalar_op(FeProgram *p, IrOp op, IrValue *t, double c, SrcLoc loc) {
  IrAttrs a = {0};
  ir_attrs_set_float(&a, IR_ATTR_VALUE, c);
  return fe_emit1(p, op, t, &a, loc);
}

static Val *tensor_binary(FeProgram *p, AstExpr *x, AstOp op, Val *l, Val *r) {
  SrcLoc at = x->loc;
  if (l->k == V_TENSOR && r->k == V_TENSOR) {
    IrValue *in[2] = {l->t, r->t};
    IrOp o;
    switch (op) {
      case OP_ADD: o = IR_OP_ADD; break;
      case OP_SUB: o = IR_OP_SUB; break;
      case OP_MUL: o = IR_OP_MUL; break;
      case OP_DIV: o = IR_OP_DIV; break;
      case OP_POW: o = IR_OP_POW; break;
      case OP_MATMUL: o = IR_OP_MATMUL; break;
      default:
        diag_error(p->d, at, "operator '%s' does not apply to tensors", ast_op_str(op));
        return val_err(p);
    }
    return val_tensor(p, fe_emit(p, o, in, 2, NULL, at));
  }
  bool left = l->k == V_TENSOR;
  IrValue *t = left ? l->t : r->t;
  Val *other = left ? r : l;
  if (!val_is_num(other)) {
    diag_error(p->d, at, "operator '%s' between a tensor and a %s", ast_op_str(op),
               val_kind_name(other->k));
    return val_err(p);
  }
  double c = val_num(other);
  switch (op) {
    case OP_ADD: return val_tensor(p, scalar_op(p, IR_OP_ADD_SCALAR, t, c, at));
    case OP_MUL: return val_tensor(p, scalar_op(p, IR_OP_MUL_SCALAR, t, c, at));
    case OP_SUB:
      if (left) return val_tensor(p, scalar_op(p, IR_OP_ADD_SCALAR, t, -c, at));
      {
        IrValue *n = fe_emit1(p, IR_OP_NEG, t, NULL, at);
        return val_tensor(p, n ? scalar_op(p, IR_OP_ADD_SCALAR, n, c, at) : NULL);
      }
    case OP_DIV:
      if (left) {
        if (c == 0) {
          diag_error(p->d, at, "division of a tensor by zero");
          return val_err(p);
        }
        return val_tensor(p, scalar_op(p, IR_OP_MUL_SCALAR, t, 1.0 / c, at));
      } else {
        IrValue *inv = scalar_op(p, IR_OP_POW_SCALAR, t, -1.0, at);
        return val_tensor(p, inv ? scalar_op(p, IR_OP_MUL_SCALAR, inv, c, at) : NULL);
      }
    case OP_POW:
      if (left) return val_tensor(p, scalar_op(p, IR_OP_POW_SCALAR, t, c, at));
      diag_error(p->d, at,
                 "a number raised to a tensor power is not supported; use exp(x * log(c))");
      return val_err(p);
    default:
      diag_error(p->d, at, "operator '%s' between a tensor and a number", ast_op_str(op));
      return val_err(p);
  }
}

static Val *binary(FeProgram *p, Env *e, AstExpr *x) {
  if (x->op == OP_AND || x->op == OP_OR) {
    Val *l = fe_eval(p, e, x->lhs);
    if (l->k == V_ERR) return l;
    if (l->k != V_BOOL) {
      diag_error(p->d, x->lhs->loc, "'%s' needs a bool, not a %s", ast_op_str(x->op),
                 val_kind_name(l->k));
      return val_err(p);
    }
    if (x->op == OP_AND && !l->b) return l;
    if (x->op == OP_OR && l->b) return l;
    Val *r = fe_eval(p, e, x->rhs);
    if (r->k == V_ERR) return r;
    if (r->k != V_BOOL) {
      diag_error(p->d, x->rhs->loc, "'%s' needs a bool, not a %s", ast_op_str(x->op),
                 val_kind_name(r->k));
      return val_err(p);
    }
    return r;
  }
  Val *l = fe_eval(p, e, x->lhs);
  Val *r = fe_eval(p, e, x->rhs);
  if (l->k == V_ERR || r->k == V_ERR) return val_err(p);
  if (l->k == V_INT && r->k == V_INT) return arith_int(p, x, x->op, l->i, r->i);
  if (val_is_num(l) && val_is_num(r)) return arith_float(p, x, x->op, val_num(l), val_num(r));
  if (p->in_stages && x->op == OP_ADD) {
    bool lu = l->k == V_INST || l->k == V_SLICE || l->k == V_UNITS ||
              (l->k == V_TENSOR && l->t->role == IR_ROLE_PARAM);
    bool ru = r->k == V_INST || r->k == V_SLICE || r->k == V_UNITS ||
              (r->k == V_TENSOR && r->t->role == IR_ROLE_PARAM);
    if (lu && ru) {
      Val *u = val_new(p, V_UNITS);
      int n = (l->k == V_UNITS ? l->n : 1) + (r->k == V_UNITS ? r->n : 1);
      u->items = ARENA_ARRAY(&p->ast, Val *, n);
      Val *parts[2] = {l, r};
      for (int k = 0; k < 2; k++) {
        if (parts[k]->k == V_UNITS)
          for (int i = 0; i < parts[k]->n; i++) u->items[u->n++] = parts[k]->items[i];
        else
          u->items[u->n++] = parts[k];
      }
      return u;
    }
    diag_error(p->d, x->loc,
               "a stage joins sub-models, layer slices and parameters with '+', not a %s and a %s",
               val_kind_name(l->k), val_kind_name(r->k));
    return val_err(p);
  }
  if (l->k == V_TENSOR || r->k == V_TENSOR) return tensor_binary(p, x, x->op, l, r);
  if (l->k == V_BOOL && r->k == V_BOOL && (x->op == OP_EQ || x->op == OP_NE))
    return val_bool(p, (l->b == r->b) == (x->op == OP_EQ));
  if ((l->k == V_STR || l->k == V_SYM) && (r->k == V_STR || r->k == V_SYM)) {
    if (x->op == OP_EQ || x->op == OP_NE)
      return val_bool(p, (strcmp(l->s, r->s) == 0) == (x->op == OP_EQ));
    if (x->op == OP_ADD) return val_str(p, arena_printf(&p->ast, "%s%s", l->s, r->s));
  }
  if (x->op == OP_ADD && l->k == V_LIST && r->k == V_LIST) {
    Val *u = val_new(p, V_LIST);
    u->items = ARENA_ARRAY(&p->ast, Val *, l->n + r->n + 1);
    for (int i = 0; i < l->n; i++) u->items[u->n++] = l->items[i];
    for (int i = 0; i < r->n; i++) u->items[u->n++] = r->items[i];
    return u;
  }
  diag_error(p->d, x->loc, "operator '%s' does not apply to a %s and a %s", ast_op_str(x->op),
             val_kind_name(l->k), val_kind_name(r->k));
  return val_err(p);
}

/* ---- indexing ---- */

static bool norm_index(FeProgram *p, AstExpr *at, int64_t i, int64_t n, bool is_stop,
                       int64_t *out) {
  int64_t r = i < 0 ? i + n : i;
  int64_t max = is_stop ? n : n - 1;
  if (r < 0 || r > max) {
    diag_error(p->d, at->loc, "index %lld is out of range for a dimension of size %lld",
               (long long)i, (long long)n);
    return false;
  }
  *out = r;
  return true;
}

static bool slice_bounds(FeProgram *p, Env *e, AstExpr *sl, int64_t n, int64_t *lo, int64_t *hi,
                         int64_t *step) {
  *lo = 0;
  *hi = n;
  *step = 1;
  if (sl->start &&
      (!fe_eval_int(p, e, sl->start, lo) || !norm_index(p, sl->start, *lo, n, true, lo)))
    return false;
  if (sl->stop && (!fe_eval_int(p, e, sl->stop, hi) || !norm_index(p, sl->stop, *hi, n, true, hi)))
    return false;
  if (sl->step && !fe_eval_int(p, e, sl->step, step)) return false;
  if (*step < 1) {
    diag_error(p->d, sl->step->loc, "slice step must be at least 1, not %lld", (long long)*step);
    return false;
  }
  if (*lo >= *hi) {
    diag_error(p->d, sl->loc, "empty slice %lld:%lld of a dimension of size %lld", (long long)*lo,
               (long long)*hi, (long long)n);
    return false;
  }
  return true;
}

static Val *index_tensor(FeProgram *p, Env *e, AstExpr *x, IrValue *t) {
  if (x->items.len > t->shape.rank) {
    diag_error(p->d, x->loc, "%d indices for a tensor of rank %d", x->items.len, t->shape.rank);
    return val_err(p);
  }
  IrShape keep = {0};
  bool drop = false;
  IrValue *cur = t;
  for (int ax = 0; ax < x->items.len; ax++) {
    AstExpr *it = x->items.items[ax];
    int64_t n = t->shape.d[ax], lo, hi, step = 1;
    if (it->kind == AST_SLICE) {
      if (!slice_bounds(p, e, it, n, &lo, &hi, &step)) return val_err(p);
    } else {
      if (!fe_eval_int(p, e, it, &lo)) return val_err(p);
      if (!norm_index(p, it, lo, n, false, &lo)) return val_err(p);
      hi = lo + 1;
      drop = true;
    }
    if (!(lo == 0 && hi == n && step == 1)) {
      IrAttrs a = {0};
      ir_attrs_set_int(&a, IR_ATTR_AXIS, ax);
      ir_attrs_set_int(&a, IR_ATTR_START, lo);
      ir_attrs_set_int(&a, IR_ATTR_STOP, hi);
      if (step != 1) ir_attrs_set_int(&a, IR_ATTR_STEP, step);
      cur = fe_emit1(p, IR_OP_SLICE, cur, &a, x->loc);
      if (!cur) return val_err(p);
    }
  }
  if (drop) {
    for (int ax = 0; ax < cur->shape.rank; ax++) {
      bool dropped = ax < x->items.len && ((AstExpr *)x->items.items[ax])->kind != AST_SLICE;
      if (!dropped) keep.d[keep.rank++] = cur->shape.d[ax];
    }
    IrAttrs a = {0};
    ir_attrs_set_ints(&a, IR_ATTR_SHAPE, keep.d, keep.rank);
    cur = fe_emit1(p, IR_OP_RESHAPE, cur, &a, x->loc);
  }
  return val_tensor(p, cur);
}

static Val *index_val(FeProgram *p, Env *e, AstExpr *x) {
  Val *base = fe_eval(p, e, x->lhs);
  if (base->k == V_ERR) return base;
  if (base->k == V_TENSOR) return index_tensor(p, e, x, base->t);
  if (x->items.len != 1) {
    diag_error(p->d, x->loc, "a %s takes one index", val_kind_name(base->k));
    return val_err(p);
  }
  AstExpr *it = x->items.items[0];
  int64_t n;
  if (base->k == V_LIST)
    n = base->n;
  else if (base->k == V_INST && base->inst->is_stack)
    n = base->inst->nlayers;
  else if (base->k == V_SLICE)
    n = base->hi - base->lo;
  else {
    diag_error(p->d, x->loc, "a %s cannot be indexed", val_kind_name(base->k));
    return val_err(p);
  }
  if (it->kind == AST_SLICE) {
    int64_t lo, hi, step;
    if (!slice_bounds(p, e, it, n, &lo, &hi, &step)) return val_err(p);
    if (base->k == V_LIST) {
      Val *r = val_new(p, V_LIST);
      r->items = ARENA_ARRAY(&p->ast, Val *, hi - lo + 1);
      for (int64_t i = lo; i < hi; i += step) r->items[r->n++] = base->items[i];
      return r;
    }
    if (step != 1) {
      diag_error(p->d, it->loc, "a slice of layers cannot have a step");
      return val_err(p);
    }
    Val *r = val_new(p, V_SLICE);
    r->inst = base->inst;
    int off = base->k == V_SLICE ? base->lo : 0;
    r->lo = off + (int)lo;
    r->hi = off + (int)hi;
    return r;
  }
  int64_t i;
  if (!fe_eval_int(p, e, it, &i) || !norm_index(p, it, i, n, false, &i)) return val_err(p);
  if (base->k == V_LIST) return base->items[i];
  Val *r = val_new(p, V_INST);
  r->inst = base->inst->layers[(base->k == V_SLICE ? base->lo : 0) + i];
  return r;
}

/* ---- calls and fields ---- */

static Val *field(FeProgram *p, Env *e, AstExpr *x) {
  Val *base = fe_eval(p, e, x->lhs);
  if (base->k == V_ERR) return base;
  if (base->k == V_INST) return fe_inst_member(p, base->inst, x->name, x->loc);
  if (base->k == V_TENSOR) {
    IrValue *t = base->t;
    if (strcmp(x->name, "shape") == 0) {
      Val *l = val_new(p, V_LIST);
      l->items = ARENA_ARRAY(&p->ast, Val *, t->shape.rank + 1);
      for (int i = 0; i < t->shape.rank; i++) l->items[l->n++] = val_int(p, t->shape.d[i]);
      return l;
    }
    if (strcmp(x->name, "T") == 0) {
      if (t->shape.rank != 2) {
        diag_error(p->d, x->loc, ".T needs a 2-D tensor, this one is %s",
                   fe_shape_str(p, &t->shape));
        return val_err(p);
      }
      IrAttrs a = {0};
      int64_t perm[2] = {1, 0};
      ir_attrs_set_ints(&a, IR_ATTR_PERM, perm, 2);
      return val_tensor(p, fe_emit1(p, IR_OP_TRANSPOSE, t, &a, x->loc));
    }
    if (strcmp(x->name, "ndim") == 0) return val_int(p, t->shape.rank);
    diag_error(p->d, x->loc, "a tensor has no field '%s' (methods need parentheses)", x->name);
    return val_err(p);
  }
  if (base->k == V_LIST && strcmp(x->name, "len") == 0) return val_int(p, base->n);
  diag_error(p->d, x->loc, "a %s has no field '%s'", val_kind_name(base->k), x->name);
  return val_err(p);
}

static Val *call(FeProgram *p, Env *e, AstExpr *x) {
  AstExpr *c = x->lhs;
  if (c->kind == AST_NAME) {
    Binding *b = env_lookup(e, c->name);
    if (b) {
      Val *f = b->val;
      if (f->k == V_ERR) return f;
      if (f->k == V_INST || f->k == V_SLICE) {
        return fe_call_inst(p, e, x, f, NULL);
      }
      diag_error(p->d, c->loc, "'%s' is a %s, not something callable", c->name,
                 val_kind_name(f->k));
      return val_err(p);
    }
    if (p->cur_inst && !p->cur_inst->is_stack && fe_find_forward(p->cur_inst->decl, c->name) &&
        !fe_is_builtin(c->name)) {
      Val *self = val_new(p, V_INST);
      self->inst = p->cur_inst;
      return fe_call_inst(p, e, x, self, c->name);
    }
    return fe_call_builtin(p, e, x, c->name, NULL);
  }
  if (c->kind == AST_FIELD) {
    Val *obj = fe_eval(p, e, c->lhs);
    if (obj->k == V_ERR) return obj;
    if (obj->k == V_TENSOR) return fe_call_builtin(p, e, x, c->name, obj);
    if (obj->k == V_INST && !obj->inst->is_stack) {
      /* a named forward of the instance, else a member that is callable */
      AstDecl *dcl = obj->inst->decl;
      for (int i = 0; dcl && i < dcl->members.len; i++) {
        AstStmt *st = dcl->members.items[i];
        if (st->kind == ST_FORWARD && st->name && strcmp(st->name, c->name) == 0)
          return fe_call_inst(p, e, x, obj, c->name);
      }
    }
    Val *f = fe_eval(p, e, c);
    if (f->k == V_ERR) return f;
    if (f->k == V_INST || f->k == V_SLICE) return fe_call_inst(p, e, x, f, NULL);
    diag_error(p->d, c->loc, "'%s' is a %s, not something callable", c->name, val_kind_name(f->k));
    return val_err(p);
  }
  Val *f = fe_eval(p, e, c);
  if (f->k == V_ERR) return f;
  if (f->k == V_INST || f->k == V_SLICE) return fe_call_inst(p, e, x, f, NULL);
  diag_error(p->d, c->loc, "a %s is not callable", val_kind_name(f->k));
  return val_err(p);
}

Val *fe_eval(FeProgram *p, Env *e, AstExpr *x) {
  switch (x->kind) {
    case AST_INT: return val_int(p, x->ival);
    case AST_FLOAT: return val_float(p, x->fval);
    case AST_STRING: return val_str(p, x->str);
    case AST_BOOL: return val_bool(p, x->bval);
    case AST_NAME: {
      Binding *b = env_lookup(e, x->name);
      if (b) return b->val;
      if (p->allow_sym) {
        Val *v = val_new(p, V_SYM);
        v->s = x->name;
        return v;
      }
      diag_error(p->d, x->loc, "unknown name '%s'", x->name);
      return val_err(p);
    }
    case AST_LIST: {
      Val *l = val_new(p, V_LIST);
      l->items = ARENA_ARRAY(&p->ast, Val *, x->items.len + 1);
      for (int i = 0; i < x->items.len; i++) {
        Val *v = fe_eval(p, e, x->items.items[i]);
        if (v->k == V_ERR) return v;
        l->items[l->n++] = v;
      }
      return l;
    }
    case AST_UNARY: {
      Val *v = fe_eval(p, e, x->lhs);
      if (v->k == V_ERR) return v;
      if (x->op == OP_NOT) {
        if (v->k != V_BOOL) {
          diag_error(p->d, x->loc, "'not' needs a bool, not a %s", val_kind_name(v->k));
          return val_err(p);
        }
        return val_bool(p, !v->b);
      }
      if (v->k == V_INT) {
        if (v->i == INT64_MIN) {
          diag_error(p->d, x->loc, "integer overflow in '%s'", fe_expr_text(p, x));
          return val_err(p);
        }
        return val_int(p, -v->i);
      }
      if (v->k == V_FLOAT) return val_float(p, -v->f);
      if (v->k == V_TENSOR) return val_tensor(p, fe_emit1(p, IR_OP_NEG, v->t, NULL, x->loc));
      diag_error(p->d, x->loc, "unary '-' does not apply to a %s", val_kind_name(v->k));
      return val_err(p);
    }
    case AST_BINARY: return binary(p, e, x);
    case AST_COND: {
      Val *c = fe_eval(p, e, x->cond);
      if (c->k == V_ERR) return c;
      if (c->k != V_BOOL) {
        diag_error(p->d, x->cond->loc, "a condition must be a compile-time bool, not a %s",
                   val_kind_name(c->k));
        return val_err(p);
      }
      return fe_eval(p, e, c->b ? x->lhs : x->rhs);
    }
    case AST_CALL: return call(p, e, x);
    case AST_FIELD: return field(p, e, x);
    case AST_INDEX: return index_val(p, e, x);
    case AST_SLICE:
      diag_error(p->d, x->loc, "a slice is only allowed inside [ ]");
      return val_err(p);
  }
  return val_err(p);
}

bool fe_eval_int(FeProgram *p, Env *e, AstExpr *x, int64_t *out) {
  Val *v = fe_eval(p, e, x);
  if (v->k == V_ERR) return false;
  if (v->k == V_INT) {
    *out = v->i;
    return true;
  }
  if (v->k == V_FLOAT && v->f == floor(v->f) && fabs(v->f) < 9e15) {
    *out = (int64_t)v->f;
    return true;
  }
  diag_error(p->d, x->loc, "expected an integer, but '%s' is a %s", fe_expr_text(p, x),
             val_kind_name(v->k));
  return false;
}

bool fe_eval_num(FeProgram *p, Env *e, AstExpr *x, double *out) {
  Val *v = fe_eval(p, e, x);
  if (v->k == V_ERR) return false;
  if (val_is_num(v)) {
    *out = val_num(v);
    return true;
  }
  diag_error(p->d, x->loc, "expected a number, but '%s' is a %s", fe_expr_text(p, x),
             val_kind_name(v->k));
  return false;
}
