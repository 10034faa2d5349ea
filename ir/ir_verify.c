/* The IR verifier, run after every pass in debug builds.
 *
 * It checks what passes may break: SSA (every operand is a parameter, an
 * input of the function or a result of an earlier node; every value is
 * defined once), the op table (arity, attributes), the stored types (dtype,
 * a valid shape, legal placements that divide their dims) against the shape
 * rule re-run on the operands, placements against the op's sharding rule
 * (ir_shard.c; collectives against their attributes), roles, layer groups,
 * gradient links (a grad(@p) value has role grad and p's type, one per
 * function) and in-place
 * updates (an OPF_WRITES operand is a parameter). Every problem is one
 * diag_error at the node's source location naming the node as printed
 * ("%7 = matmul: ..."); the verifier goes on after an error so that one run
 * shows them all, and returns false if there was any. */
#include <stdarg.h>
#include <string.h>

#include "ir.h"

typedef struct Verifier {
  const IrModule *m;
  Diag *d;
  int errors;
  Arena scratch;
  IrMap kind;   /* IrValue* -> p: VK_*, i: print number (results) */
  IrMap params; /* the module's params */
  IrMap pos;    /* result IrValue* -> index of its node in the function */
} Verifier;

enum { VK_PARAM = 1, VK_INPUT, VK_RESULT };

static void report(Verifier *v, SrcLoc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(Verifier *v, SrcLoc at, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(v->d, at, "%s", msg);
  v->errors++;
}

/* How a value prints: %3, %tokens, @w, or a description when it is not
 * part of the function being checked. */
static const char *vname(Verifier *v, const IrValue *x) {
  if (!x) return "(null)";
  const IrMapSlot *s = ir_map_get(&v->kind, x);
  if (s && s->p == (void *)VK_RESULT) return arena_printf(&v->scratch, "%%%lld", (long long)s->i);
  if (s)
    return arena_printf(&v->scratch, "%c%s", s->p == (void *)VK_PARAM ? '@' : '%',
                        x->name ? x->name : "?");
  if (x->def) return arena_printf(&v->scratch, "%%%d", x->id);
  return arena_printf(&v->scratch, "%c%s", x->role == IR_ROLE_PARAM ? '@' : '%',
                      x->name ? x->name : "?");
}

static const char *node_name(Verifier *v, const IrNode *n) {
  const char *op = (unsigned)n->op < IR_OP_COUNT ? ir_ops[n->op].name : "?";
  if (n->nout < 1 || !n->out || !n->out[0]) return arena_printf(&v->scratch, "%s", op);
  return arena_printf(&v->scratch, "%s = %s", vname(v, n->out[0]), op);
}

static const char *shape_s(Verifier *v, const IrShape *s) {
  char buf[200];
  return arena_strdup(&v->scratch, ir_shape_str(buf, sizeof buf, s));
}

/* dtype, shape and placements of a value; `who` prefixes the message. */
static bool check_type(Verifier *v, const IrValue *x, SrcLoc at, const char *who) {
  bool ok = true;
  if ((unsigned)x->dtype >= IR_DTYPE_COUNT) {
    report(v, at, "%s: invalid dtype #%d", who, (int)x->dtype);
    ok = false;
  }
  if (x->shape.rank < 0 || x->shape.rank > IR_MAX_RANK) {
    report(v, at, "%s: invalid rank %d", who, x->shape.rank);
    return false;
  }
  if (!ir_shape_valid(&x->shape)) {
    report(v, at, "%s: invalid shape %s (dims must be >= 1, at most 2^53 elements)", who,
           shape_s(v, &x->shape));
    return false;
  }
  int64_t split[IR_MAX_RANK];
  for (int i = 0; i < IR_MAX_RANK; i++) split[i] = 1;
  for (int a = 0; a < IR_NAXES; a++) {
    const IrPlacement *pl = &x->pl[a];
    if (pl->kind == IR_PL_S) {
      if (pl->dim < 0 || pl->dim >= x->shape.rank) {
        report(v, at, "%s: placement S(%d) on %s is out of range for shape %s", who, pl->dim,
               ir_axis_name((IrAxis)a), shape_s(v, &x->shape));
        ok = false;
      } else {
        split[pl->dim] *= v->m->mesh[a];
      }
    } else if (pl->kind != IR_PL_B && pl->kind != IR_PL_P) {
      report(v, at, "%s: invalid placement kind on %s", who, ir_axis_name((IrAxis)a));
      ok = false;
    }
  }
  for (int i = 0; i < x->shape.rank; i++)
    if (x->shape.d[i] % split[i]) {
      report(v, at, "%s: dim %d of %s is split %lld ways, which does not divide it", who, i,
             shape_s(v, &x->shape), (long long)split[i]);
      ok = false;
    }
  return ok;
}

/* grad(@p): x has role grad and p's dtype and shape, p is a trainable
 * parameter of the module, and no other value of `seen` (this function's
 * values, or the params) claims p. */
static void check_grad_link(Verifier *v, const IrValue *x, SrcLoc at, const char *who,
                            IrMap *seen) {
  const IrValue *p = x->grad_of;
  if (!p) return;
  const IrMapSlot *s = ir_map_get(&v->params, p);
  if (!s) {
    report(v, at, "%s: grad(...) names a value that is not a parameter of the module", who);
    return;
  }
  if (x->role != IR_ROLE_GRAD)
    report(v, at, "%s: a gradient of @%s must have role grad, not %s", who, p->name,
           ir_role_name(x->role));
  if (p->role != IR_ROLE_PARAM)
    report(v, at, "%s: @%s has role %s; only params have gradients", who, p->name,
           ir_role_name(p->role));
  if (x->dtype != p->dtype || !ir_shape_eq(&x->shape, &p->shape))
    report(v, at, "%s: type %s%s differs from its parameter @%s, %s%s", who,
           ir_dtype_name(x->dtype), shape_s(v, &x->shape), p->name, ir_dtype_name(p->dtype),
           shape_s(v, &p->shape));
  if (seen) {
    IrMapSlot *c = ir_map_put(seen, p);
    if (c->p) report(v, at, "%s: @%s already has a gradient here", who, p->name);
    c->p = (void *)1;
  }
}

static void check_layer(Verifier *v, int group, int layer, SrcLoc at, const char *who) {
  if (group == -1 && layer == -1) return;
  if (group < 0 || group >= v->m->groups.len) {
    report(v, at, "%s: invalid layer group #%d", who, group);
    return;
  }
  const IrGroup *g = v->m->groups.items[group];
  if (layer < 0 || layer >= g->nlayers)
    report(v, at, "%s: layer %d is out of range for group \"%s\" of %d layers", who, layer, g->name,
           g->nlayers);
}

static void check_module(Verifier *v) {
  const IrModule *m = v->m;
  SrcLoc none = {0};
  for (int a = 0; a < IR_NAXES; a++)
    if (m->mesh[a] < 1 || m->mesh[a] > 1 << 20)
      report(v, none, "module @%s: mesh size %s = %d is out of range [1, 2^20]", m->name,
             ir_axis_name((IrAxis)a), m->mesh[a]);
  IrMap names;
  ir_map_init(&names, &v->scratch, true);
  for (int i = 0; i < m->groups.len; i++) {
    const IrGroup *g = m->groups.items[i];
    if (!g || !g->name) {
      report(v, none, "layer group #%d has no name", i);
      continue;
    }
    if (g->nlayers < 1) report(v, none, "layer group \"%s\" has %d layers", g->name, g->nlayers);
    IrMapSlot *s = ir_map_put(&names, g->name);
    if (s->p) report(v, none, "layer group \"%s\" is declared twice", g->name);
    s->p = (void *)1;
  }
  ir_map_init(&v->params, &v->scratch, false);
  for (int i = 0; i < m->params.len; i++)
    if (m->params.items[i]) ir_map_put(&v->params, m->params.items[i]);
  IrMap grads;
  ir_map_init(&grads, &v->scratch, false);
  ir_map_init(&names, &v->scratch, true);
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *x = m->params.items[i];
    if (!x || !x->name) {
      report(v, none, "parameter #%d is %s", i, x ? "unnamed" : "missing");
      continue;
    }
    const char *who = arena_printf(&v->scratch, "param @%s", x->name);
    IrMapSlot *s = ir_map_put(&names, x->name);
    if (s->p) report(v, x->loc, "%s is declared twice", who);
    s->p = (void *)1;
    if (x->def) report(v, x->loc, "%s has a defining node", who);
    if (x->role != IR_ROLE_PARAM && x->role != IR_ROLE_OPT && x->role != IR_ROLE_GRAD)
      report(v, x->loc, "%s has role %s (a parameter is param, opt or grad state)", who,
             ir_role_name(x->role));
    if ((unsigned)x->init.kind > IR_INIT_FAN_IN)
      report(v, x->loc, "%s: invalid init kind #%d", who, (int)x->init.kind);
    check_type(v, x, x->loc, who);
    check_layer(v, x->group, x->layer, x->loc, who);
    check_grad_link(v, x, x->loc, who, &grads);
  }
  ir_map_init(&names, &v->scratch, true);
  for (int i = 0; i < m->funcs.len; i++) {
    const IrFunc *f = m->funcs.items[i];
    IrMapSlot *s = ir_map_put(&names, f->name);
    if (s->p) report(v, none, "function @%s is defined twice", f->name);
    s->p = (void *)1;
  }
}

/* Arity, attributes and the shape rule; operands are known to be non-NULL. */
static void check_node_types(Verifier *v, const IrNode *n, const char *who) {
  const IrOpInfo *info = &ir_ops[n->op];
  uint64_t missing = info->req_attrs & ~n->attrs.set,
           extra = n->attrs.set & ~(info->req_attrs | info->opt_attrs);
  if (missing) {
    report(v, n->loc, "%s: missing attribute '%s'", who, ir_attrs[__builtin_ctzll(missing)].name);
    return;
  }
  if (extra) {
    int k = __builtin_ctzll(extra);
    report(v, n->loc, "%s: unexpected attribute '%s'", who,
           k < IR_ATTR_COUNT ? ir_attrs[k].name : "?");
    return;
  }
  for (int k = 0; k < IR_ATTR_COUNT; k++)
    if ((n->attrs.set >> k & 1) && ir_attrs[k].kind == IR_AK_INTS &&
        (n->attrs.v[k].nints < 0 || (n->attrs.v[k].nints && !n->attrs.v[k].ints))) {
      report(v, n->loc, "%s: attribute '%s' has no storage", who, ir_attrs[k].name);
      return;
    }
  IrShapeCtx cx;
  memset(&cx, 0, sizeof cx);
  char err[512] = "";
  cx.node = n;
  cx.nin = n->nin;
  for (int i = 0; i < n->nin; i++) {
    if (!ir_shape_valid(&n->in[i]->shape) || (unsigned)n->in[i]->dtype >= IR_DTYPE_COUNT)
      return; /* reported at its definition */
    cx.in_dtype[i] = n->in[i]->dtype;
    cx.in_shape[i] = &n->in[i]->shape;
  }
  cx.err = err;
  cx.errlen = sizeof err;
  cx.bad_operand = -1;
  if (!info->shape(&cx)) {
    size_t k = strlen(info->name); /* the rule's message starts with "op: " */
    const char *msg =
        !strncmp(err, info->name, k) && !strncmp(err + k, ": ", 2) ? err + k + 2 : err;
    report(v, n->loc, "%s: %s", who, msg);
    return;
  }
  for (int j = 0; j < n->nout; j++) {
    const IrValue *x = n->out[j];
    if (x->dtype != cx.out_dtype[j] || !ir_shape_eq(&x->shape, &cx.out_shape[j]))
      report(v, n->loc, "%s: stored type %s%s of %s differs from the inferred %s%s", who,
             ir_dtype_name(x->dtype), shape_s(v, &x->shape), vname(v, x),
             ir_dtype_name(cx.out_dtype[j]), shape_s(v, &cx.out_shape[j]));
  }
}

/* The placements against the op's sharding rule (ir_shard.c): some
 * strategy per mesh axis must explain them, so that no placement change
 * happens anywhere but in a collective or reshard. Checked only when the
 * types are right (the rule reads the shapes). */
static void check_placements(Verifier *v, const IrNode *n, const char *who) {
  char err[512];
  for (int i = 0; i < n->nin; i++)
    if (!ir_shape_valid(&n->in[i]->shape)) return;
  if (!ir_shard_check_node(v->m, n, err, sizeof err)) report(v, n->loc, "%s: %s", who, err);
}

static void check_func(Verifier *v, const IrFunc *f) {
  const IrModule *m = v->m;
  SrcLoc none = {0};
  ir_map_init(&v->kind, &v->scratch, false);
  ir_map_init(&v->pos, &v->scratch, false);
  for (int i = 0; i < m->params.len; i++)
    if (m->params.items[i]) ir_map_put(&v->kind, m->params.items[i])->p = (void *)VK_PARAM;

  IrMap names, grads;
  ir_map_init(&names, &v->scratch, true);
  ir_map_init(&grads, &v->scratch, false);
  for (int i = 0; i < f->inputs.len; i++) {
    IrValue *x = f->inputs.items[i];
    if (!x || !x->name) {
      report(v, none, "@%s: input #%d is %s", f->name, i, x ? "unnamed" : "missing");
      continue;
    }
    const char *who = arena_printf(&v->scratch, "@%s: input %%%s", f->name, x->name);
    IrMapSlot *s = ir_map_put(&v->kind, x);
    if (s->p) report(v, x->loc, "%s is also a parameter or another input", who);
    s->p = (void *)VK_INPUT;
    s = ir_map_put(&names, x->name);
    if (s->p) report(v, x->loc, "%s: the name is used twice", who);
    s->p = (void *)1;
    if (x->def) report(v, x->loc, "%s has a defining node", who);
    if (x->role == IR_ROLE_PARAM)
      report(v, x->loc, "%s has role param (parameters belong to the module)", who);
    check_type(v, x, x->loc, who);
    check_grad_link(v, x, x->loc, who, &grads);
  }

  /* number the results as the printer does, and find values defined twice */
  int id = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!n || (n->nout > 0 && !n->out)) continue;
    for (int j = 0; j < n->nout; j++) {
      IrValue *x = n->out[j];
      if (!x) continue;
      IrMapSlot *s = ir_map_put(&v->kind, x);
      if (s->p) {
        report(v, n->loc, "@%s: %s = %s redefines %s", f->name, vname(v, x),
               (unsigned)n->op < IR_OP_COUNT ? ir_ops[n->op].name : "?", vname(v, x));
        id++;
        continue;
      }
      s->p = (void *)VK_RESULT;
      s->i = id++;
      ir_map_put(&v->pos, x)->i = i;
    }
  }

  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!n) {
      report(v, none, "@%s: node #%d is missing", f->name, i);
      continue;
    }
    if ((unsigned)n->op >= IR_OP_COUNT) {
      report(v, n->loc, "@%s: node #%d has an invalid op #%d", f->name, i, (int)n->op);
      continue;
    }
    const IrOpInfo *info = &ir_ops[n->op];
    const char *who = node_name(v, n);
    if (n->nout != info->nout || (n->nout && !n->out)) {
      report(v, n->loc, "%s: has %d results, the op has %d", who, n->nout, info->nout);
      continue;
    }
    if (n->nin < info->min_in || n->nin > info->max_in || (n->nin && !n->in)) {
      report(v, n->loc, "%s: has %d operands, the op takes %d to %d", who, n->nin, info->min_in,
             info->max_in);
      continue;
    }
    bool ok = true;
    for (int k = 0; k < n->nin; k++) {
      const IrValue *x = n->in[k];
      const IrMapSlot *s = x ? ir_map_get(&v->kind, x) : NULL;
      if (!x) {
        report(v, n->loc, "%s: operand %d is missing", who, k);
        ok = false;
      } else if (!s) {
        report(v, n->loc, "%s: operand %d (%s) is not a parameter, an input or a result of @%s",
               who, k, vname(v, x), f->name);
        ok = false;
      } else if (s->p == (void *)VK_RESULT && ir_map_get(&v->pos, x)->i >= i) {
        report(v, n->loc, "%s: operand %d (%s) is used before its definition", who, k, vname(v, x));
        ok = false;
      } else if (IR_OP_WRITES(n->op, k) &&
                 !((ir_ops[n->op].flags & OPF_WRITES_STATE) ? x->role == IR_ROLE_INPUT
                                                            : s->p == (void *)VK_PARAM)) {
        report(v, n->loc, "%s: operand %d (%s) is updated in place, so it must be %s", who, k,
               vname(v, x),
               (ir_ops[n->op].flags & OPF_WRITES_STATE) ? "an input holding state (a KV cache)"
                                                        : "a parameter");
        ok = false;
      }
    }
    for (int j = 0; j < n->nout; j++) {
      const IrValue *x = n->out[j];
      if (!x) {
        report(v, n->loc, "%s: result %d is missing", who, j);
        ok = false;
        continue;
      }
      if (x->def != n)
        report(v, n->loc, "%s: result %s does not point back to its node", who, vname(v, x));
      if (x->role != IR_ROLE_ACT && x->role != IR_ROLE_GRAD && x->role != IR_ROLE_OPT)
        report(v, n->loc, "%s: result %s has role %s (a node produces act, grad or opt values)",
               who, vname(v, x), ir_role_name(x->role));
      if (!check_type(v, x, n->loc, who)) ok = false;
      check_grad_link(v, x, n->loc, who, &grads);
    }
    check_layer(v, n->group, n->layer, n->loc, who);
    if (ok) check_node_types(v, n, who);
    if (ok) check_placements(v, n, who);
  }

  for (int i = 0; i < f->results.len; i++) {
    const IrValue *x = f->results.items[i];
    if (!x || !ir_map_get(&v->kind, x))
      report(v, none, "@%s: returned value %d (%s) is not defined in the function", f->name, i,
             vname(v, x));
  }
}

bool ir_verify(const IrModule *m) {
  Diag local;
  Verifier v;
  memset(&v, 0, sizeof v);
  v.m = m;
  v.d = m->diag;
  if (!v.d) {
    diag_init(&local);
    v.d = &local;
  }
  arena_init(&v.scratch);
  check_module(&v);
  for (int i = 0; i < m->funcs.len; i++) check_func(&v, m->funcs.items[i]);
  arena_free(&v.scratch);
  if (!m->diag) diag_free(&local);
  return v.errors == 0;
}
