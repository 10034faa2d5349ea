/* Elaboration (the `lower` stage): instantiate a model's modules with their
 * hyper-parameters, create its parameters with hierarchical names, and run
 * its forward symbolically so that every tensor expression becomes an IR op
 * whose shapes are checked. Stacks record their layer grouping. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fe_internal.h"

#define MAX_INST_DEPTH 64
#define MAX_FWD_DEPTH  256

static const char *join(FeProgram *p, const char *path, const char *name) {
  return path[0] ? arena_printf(&p->ast, "%s.%s", path, name) : arena_strdup(&p->ast, name);
}

/* ---- hyper-parameter types ---- */

static const char *type_name(FeProgram *p, const AstType *t) {
  switch (t->kind) {
    case AT_INT: return "int";
    case AT_FLOAT: return "float";
    case AT_BOOL: return "bool";
    case AT_STRING: return "string";
    case AT_LIST: return arena_printf(&p->ast, "list[%s]", t->elem ? type_name(p, t->elem) : "?");
    default: return "tensor";
  }
}

/* Converts v to type t (int -> float is allowed); NULL if it does not fit. */
static Val *coerce(FeProgram *p, const AstType *t, Val *v) {
  switch (t->kind) {
    case AT_INT: return v->k == V_INT ? v : NULL;
    case AT_FLOAT: return v->k == V_FLOAT ? v : v->k == V_INT ? val_float(p, (double)v->i) : NULL;
    case AT_BOOL: return v->k == V_BOOL ? v : NULL;
    case AT_STRING:
      if (v->k == V_STR) return v;
      if (v->k == V_SYM) return val_str(p, v->s);
      return NULL;
    case AT_LIST: {
      if (v->k != V_LIST) return NULL;
      Val *r = val_new(p, V_LIST);
      r->items = ARENA_ARRAY(&p->ast, Val *, v->n + 1);
      for (int i = 0; i < v->n; i++) {
        Val *c = t->elem ? coerce(p, t->elem, v->items[i]) : v->items[i];
        if (!c) return NULL;
        r->items[r->n++] = c;
      }
      return r;
    }
    default: return NULL;
  }
}

static Val *parse_override(FeProgram *p, const char *s) {
  char *end;
  long long i = strtoll(s, &end, 0);
  if (*s && !*end) return val_int(p, i);
  double f = strtod(s, &end);
  if (*s && !*end) return val_float(p, f);
  if (strcmp(s, "true") == 0) return val_bool(p, true);
  if (strcmp(s, "false") == 0) return val_bool(p, false);
  return val_str(p, s);
}

static Val *find_override(FeProgram *p, const char *name, bool *used) {
  for (int i = 0; i < p->opts.noverrides; i++)
    if (strcmp(p->opts.overrides[i].name, name) == 0) {
      used[i] = true;
      return parse_override(p, p->opts.overrides[i].value);
    }
  return NULL;
}

/* ---- instantiation ---- */

static Inst *instantiate(FeProgram *p, AstDecl *dcl, AstExpr *call, Env *caller, const char *path,
                         SrcLoc at, bool *ovr_used);

static bool bind_hparams(FeProgram *p, Inst *in, AstExpr *call, Env *caller, bool *ovr_used) {
  AstDecl *dcl = in->decl;
  int n = dcl->hparams.len;
  Val **vals = ARENA_ARRAY(&p->ast, Val *, n + 1);
  SrcLoc *locs = ARENA_ARRAY(&p->ast, SrcLoc, n + 1);
  bool ok = true;
  int npos = 0;
  for (int i = 0; call && i < call->args.len; i++) {
    AstArg *a = call->args.items[i];
    int slot = -1;
    if (!a->name) {
      slot = npos++;
      if (slot >= n) {
        diag_error(p->d, a->value->loc, "'%s' takes %d hyper-parameter%s, but more were given",
                   dcl->name, n, n == 1 ? "" : "s");
        diag_note(p->d, dcl->name_loc, "'%s' declared here", dcl->name);
        ok = false;
        break;
      }
    } else {
      for (int j = 0; j < n; j++)
        if (strcmp(((AstParam *)dcl->hparams.items[j])->name, a->name) == 0) slot = j;
      if (slot < 0) {
        diag_error(p->d, a->loc, "'%s' has no hyper-parameter named '%s'", dcl->name, a->name);
        diag_note(p->d, dcl->name_loc, "'%s' declared here", dcl->name);
        ok = false;
        continue;
      }
      if (vals[slot]) {
        diag_error(p->d, a->loc, "hyper-parameter '%s' of '%s' is given twice", a->name, dcl->name);
        ok = false;
        continue;
      }
    }
    Val *v = fe_eval(p, caller, a->value);
    if (v->k == V_ERR) {
      ok = false;
      continue;
    }
    vals[slot] = v;
    locs[slot] = a->value->loc;
  }
  if (!ok) return false;
  for (int j = 0; j < n; j++) {
    AstParam *hp = dcl->hparams.items[j];
    Val *v = vals[j];
    SrcLoc vloc = locs[j];
    if (!v && !call && ovr_used) v = find_override(p, hp->name, ovr_used), vloc = hp->loc;
    if (!v) {
      if (!hp->dflt) {
        diag_error(p->d, call ? call->loc : in->loc, "missing hyper-parameter '%s' of '%s'",
                   hp->name, dcl->name);
        diag_note(p->d, hp->loc, "'%s' declared here without a default", hp->name);
        ok = false;
        continue;
      }
      v = fe_eval(p, &in->env, hp->dflt);
      vloc = hp->dflt->loc;
      if (v->k == V_ERR) {
        ok = false;
        continue;
      }
    }
    Val *c = coerce(p, hp->type, v);
    if (!c) {
      diag_error(p->d, vloc, "hyper-parameter '%s' of '%s' is a %s, but the value given is a %s",
                 hp->name, dcl->name, type_name(p, hp->type),
                 v->k == V_LIST ? "list of other types" : val_kind_name(v->k));
      diag_note(p->d, hp->loc, "'%s' declared here", hp->name);
      ok = false;
      continue;
    }
    env_bind(p, &in->env, hp->name, c, hp->loc);
  }
  return ok;
}

static bool init_from(FeProgram *p, Env *e, AstExpr *x, IrInit *out) {
  memset(out, 0, sizeof *out);
  if (!x) {
    out->kind = IR_INIT_ZEROS;
    return true;
  }
  const char *name = x->kind == AST_NAME                                 ? x->name
                     : (x->kind == AST_CALL && x->lhs->kind == AST_NAME) ? x->lhs->name
                                                                         : NULL;
  static const struct {
    const char *name;
    IrInitKind k;
    int nargs, nopt;
  } kinds[] = {
      {"zeros", IR_INIT_ZEROS, 0, 0},     {"ones", IR_INIT_ONES, 0, 0},
      {"fill", IR_INIT_FILL, 1, 0},       {"normal", IR_INIT_NORMAL, 1, 0},
      {"uniform", IR_INIT_UNIFORM, 2, 0}, {"fan_in", IR_INIT_FAN_IN, 0, 1},
  };
  for (size_t i = 0; name && i < sizeof kinds / sizeof kinds[0]; i++) {
    if (strcmp(kinds[i].name, name) != 0) continue;
    int given = x->kind == AST_CALL ? x->args.len : 0;
    if (given < kinds[i].nargs || given > kinds[i].nargs + kinds[i].nopt) {
      diag_error(p->d, x->loc, "initialiser '%s' takes %d argument%s, %d given", name,
                 kinds[i].nargs + kinds[i].nopt, kinds[i].nargs + kinds[i].nopt == 1 ? "" : "s",
                 given);
      return false;
    }
    out->kind = kinds[i].k;
    out->a = kinds[i].k == IR_INIT_FAN_IN ? 1.0 : 0.0;
    double args[2] = {0, 0};
    for (int j = 0; j < given; j++) {
      AstArg *a = x->args.items[j];
      if (a->name) {
        diag_error(p->d, a->loc, "initialiser '%s' takes positional arguments only", name);
        return false;
      }
      if (!fe_eval_num(p, e, a->value, &args[j])) return false;
    }
    if (given > 0) out->a = args[0];
    if (given > 1) out->b = args[1];
    if (out->kind == IR_INIT_NORMAL && out->a < 0) {
      diag_error(p->d, x->loc, "normal() needs a non-negative standard deviation, not %g", out->a);
      return false;
    }
    if (out->kind == IR_INIT_UNIFORM && !(out->a <= out->b)) {
      diag_error(p->d, x->loc, "uniform(a, b) needs a <= b, got %g and %g", out->a, out->b);
      return false;
    }
    return true;
  }
  diag_error(p->d, x->loc,
             "unknown initialiser '%s' (expected zeros, ones, fill(x), normal(std), uniform(a, b) "
             "or fan_in(gain))",
             name ? name : fe_expr_text(p, x));
  return false;
}

/* Keeps the declared shape text of a param or input for diagnostics. */
static void remember_shape(FeProgram *p, IrValue *v, AstType *t) {
  char *s = arena_strdup(&p->ast, "[");
  for (int i = 0; i < t->dims.len; i++)
    s = arena_printf(&p->ast, "%s%s%s", s, i ? ", " : "", fe_expr_text(p, t->dims.items[i]));
  ir_map_put(&p->decl_shape, v)->p = arena_printf(&p->ast, "%s]", s);
}

static void make_param(FeProgram *p, Inst *in, AstStmt *st) {
  IrDType dt;
  if (!ir_dtype_parse(st->ptype->dtype ? st->ptype->dtype : "f32", &dt)) {
    diag_error(p->d, st->ptype->loc, "unknown dtype '%s'", st->ptype->dtype);
    env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
    return;
  }
  IrShape s = {0};
  bool ok = true;
  if (st->ptype->dims.len > IR_MAX_RANK) {
    diag_error(p->d, st->ptype->loc, "a parameter has at most %d dimensions", IR_MAX_RANK);
    ok = false;
  }
  int64_t numel = 1;
  for (int i = 0; ok && i < st->ptype->dims.len; i++) {
    AstExpr *dx = st->ptype->dims.items[i];
    int64_t v;
    if (!fe_eval_int(p, &in->env, dx, &v)) {
      ok = false;
      break;
    }
    if (v <= 0) {
      diag_error(p->d, dx->loc, "dimension '%s' of parameter '%s' must be positive, but it is %lld",
                 fe_expr_text(p, dx), st->name, (long long)v);
      ok = false;
      break;
    }
    if (__builtin_mul_overflow(numel, v, &numel) || numel > ((int64_t)1 << 40)) {
      diag_error(p->d, st->ptype->loc, "parameter '%s' has too many elements (more than 2^40)",
                 st->name);
      ok = false;
      break;
    }
    s.d[s.rank++] = v;
  }
  IrInit init;
  if (ok) ok = init_from(p, &in->env, st->value, &init);
  if (!ok) {
    env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
    return;
  }
  const char *name = join(p, in->path, st->name);
  IrValue *v = names_get(&p->params, name); /* elaborating again into a module that has it */
  if (v && (v->dtype != dt || !ir_shape_eq(&v->shape, &s))) {
    diag_error(p->d, st->name_loc, "parameter '%s' is %s%s here but %s%s in the module", name,
               ir_dtype_name(dt), fe_shape_str(p, &s), ir_dtype_name(v->dtype),
               fe_shape_str(p, &v->shape));
    env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
    return;
  }
  if (!v) {
    v = ir_add_param(p->ir, name, dt, &s, init, st->name_loc);
    names_put(&p->ast, &p->params, v->name, v);
  }
  remember_shape(p, v, st->ptype);
  v->group = p->b.group;
  v->layer = p->b.layer;
  env_bind(p, &in->env, st->name, val_tensor(p, v), st->name_loc);
}

static void make_instance(FeProgram *p, Inst *in, AstStmt *st) {
  AstExpr *c = st->value;
  if (!c || c->kind != AST_CALL || c->lhs->kind != AST_NAME) {
    env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
    return;
  }
  AstDecl *dcl = fe_find_decl(p, in->decl->file, c->lhs->name);
  if (!dcl) { /* reported by the static check */
    env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
    return;
  }
  const char *path = join(p, in->path, st->name);
  Val *v = val_new(p, V_INST);
  if (st->repeat) {
    int64_t depth;
    if (!fe_eval_int(p, &in->env, st->repeat, &depth)) {
      env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
      return;
    }
    if (depth < 1 || depth > 100000) {
      diag_error(p->d, st->repeat->loc, "a stack needs between 1 and 100000 layers, not %lld",
                 (long long)depth);
      env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
      return;
    }
    Inst *stack = ARENA_NEW(&p->ast, Inst);
    stack->decl = dcl;
    stack->path = path;
    stack->is_stack = true;
    stack->nlayers = (int)depth;
    stack->layers = ARENA_ARRAY(&p->ast, Inst *, depth);
    stack->group = ir_module_group(p->ir, path, (int)depth);
    stack->layer = -1;
    stack->loc = st->name_loc;
    int sg = p->b.group, sl = p->b.layer;
    for (int64_t i = 0; i < depth; i++) {
      p->b.group = stack->group;
      p->b.layer = (int)i;
      Inst *l =
          instantiate(p, dcl, c, &in->env, arena_printf(&p->ast, "%s.%lld", path, (long long)i),
                      st->name_loc, NULL);
      if (!l) {
        p->b.group = sg;
        p->b.layer = sl;
        env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
        return;
      }
      l->group = stack->group;
      l->layer = (int)i;
      stack->layers[i] = l;
    }
    p->b.group = sg;
    p->b.layer = sl;
    v->inst = stack;
  } else {
    Inst *sub = instantiate(p, dcl, c, &in->env, path, st->name_loc, NULL);
    if (!sub) {
      env_bind(p, &in->env, st->name, val_err(p), st->name_loc);
      return;
    }
    v->inst = sub;
  }
  env_bind(p, &in->env, st->name, v, st->name_loc);
}

static void run_members(FeProgram *p, Inst *in, PtrVec *members, bool *ovr_used) {
  for (int i = 0; i < members->len; i++) {
    AstStmt *st = members->items[i];
    switch (st->kind) {
      case ST_LET: {
        Val *v = ovr_used ? find_override(p, st->name, ovr_used) : NULL;
        if (!v) v = fe_eval(p, &in->env, st->value);
        env_bind(p, &in->env, st->name, v, st->name_loc);
        break;
      }
      case ST_PARAM: make_param(p, in, st); break;
      case ST_INSTANCE: make_instance(p, in, st); break;
      case ST_IF: {
        Val *c = fe_eval(p, &in->env, st->cond);
        if (c->k == V_ERR) break;
        if (c->k != V_BOOL) {
          diag_error(p->d, st->cond->loc, "an 'if' condition must be a compile-time bool, not a %s",
                     val_kind_name(c->k));
          break;
        }
        run_members(p, in, c->b ? &st->body : &st->else_body, ovr_used);
        break;
      }
      default: break;
    }
  }
}

static Inst *instantiate(FeProgram *p, AstDecl *dcl, AstExpr *call, Env *caller, const char *path,
                         SrcLoc at, bool *ovr_used) {
  for (int i = 0; i < p->inst_stack.len; i++) {
    if (p->inst_stack.items[i] == dcl) {
      diag_error(p->d, at, "recursive module: '%s' contains itself", dcl->name);
      for (int j = i; j < p->inst_stack.len; j++) {
        AstDecl *o = p->inst_stack.items[j];
        diag_note(p->d, o->name_loc, "'%s' is being instantiated here", o->name);
      }
      return NULL;
    }
  }
  if (p->inst_stack.len >= MAX_INST_DEPTH) {
    diag_error(p->d, at, "modules nest more than %d deep", MAX_INST_DEPTH);
    return NULL;
  }
  Inst *in = ARENA_NEW(&p->ast, Inst);
  in->decl = dcl;
  in->path = path;
  in->group = p->b.group;
  in->layer = p->b.layer;
  in->loc = at;
  int before = p->d->errors;
  if (!bind_hparams(p, in, call, caller, ovr_used)) return NULL;
  ptrvec_push(&p->ast, &p->inst_stack, dcl);
  run_members(p, in, &dcl->members, ovr_used);
  p->inst_stack.len--;
  if (p->d->errors > before && p->inst_stack.len > 0) {
    /* keep going with what we have; errors are already reported */
  }
  return in;
}

Val *fe_inst_member(FeProgram *p, Inst *inst, const char *name, SrcLoc at) {
  if (inst->is_stack) {
    diag_error(p->d, at, "'%s' is a stack of %d layers; index a layer first, e.g. %s[0].%s",
               inst->path, inst->nlayers, inst->path, name);
    return val_err(p);
  }
  Binding *b = env_lookup_local(&inst->env, name);
  if (!b) {
    diag_error(p->d, at, "'%s' (a %s) has no member '%s'",
               inst->path[0] ? inst->path : inst->decl->name, inst->decl->name, name);
    diag_note(p->d, inst->decl->name_loc, "'%s' declared here", inst->decl->name);
    return val_err(p);
  }
  return b->val;
}

/* ---- forward calls ---- */

AstStmt *fe_find_forward(AstDecl *dcl, const char *fn) {
  for (int i = 0; i < dcl->members.len; i++) {
    AstStmt *st = dcl->members.items[i];
    if (st->kind != ST_FORWARD) continue;
    if ((!fn && (!st->name || strcmp(st->name, "forward") == 0)) ||
        (fn && st->name && strcmp(st->name, fn) == 0))
      return st;
  }
  return NULL;
}

/* Checks a tensor against a declared type, binding shape variables in fenv.
 * `what` names the thing (argument 'x' of ViTBlock.forward). */
static bool match_type(FeProgram *p, Inst *in, Env *fenv, AstType *t, IrValue *v, const char *what,
                       SrcLoc at) {
  if (t->kind == AT_LOSS) {
    if (v->shape.rank != 0) {
      diag_error(p->d, at, "%s must be a scalar loss, but it has shape %s", what,
                 fe_shape_str(p, &v->shape));
      diag_note(p->d, t->loc, "declared '-> loss' here");
      return false;
    }
    return true;
  }
  if (t->kind != AT_TENSOR) return true;
  if (t->dtype) {
    IrDType dt;
    if (!ir_dtype_parse(t->dtype, &dt)) {
      diag_error(p->d, t->loc, "unknown dtype '%s'", t->dtype);
      return false;
    }
    if (dt != v->dtype) {
      diag_error(p->d, at, "%s must be %s, but it is %s", what, t->dtype, ir_dtype_name(v->dtype));
      diag_note(p->d, t->loc, "type declared here");
      return false;
    }
  }
  if (t->dims.len != v->shape.rank) {
    diag_error(p->d, at, "%s must have rank %d, but it has shape %s (rank %d)", what, t->dims.len,
               fe_shape_str(p, &v->shape), v->shape.rank);
    diag_note(p->d, t->loc, "type declared here");
    return false;
  }
  for (int i = 0; i < t->dims.len; i++) {
    AstExpr *dx = t->dims.items[i];
    int64_t got = v->shape.d[i];
    if (dx->kind == AST_NAME && !env_lookup(fenv, dx->name)) {
      env_bind(p, fenv, dx->name, val_int(p, got), dx->loc);
      continue;
    }
    if (dx->kind == AST_NAME && env_lookup_local(fenv, dx->name) &&
        !env_lookup(&in->env, dx->name)) {
      /* a shape variable bound by an earlier argument */
      Binding *b = env_lookup_local(fenv, dx->name);
      if (b->val->k == V_INT && b->val->i != got) {
        diag_error(p->d, at, "dimension %d of %s is %lld, but %s = %lld from an earlier argument",
                   i, what, (long long)got, dx->name, (long long)b->val->i);
        diag_note(p->d, dx->loc, "'%s' used here", dx->name);
        return false;
      }
      continue;
    }
    int64_t want;
    if (!fe_eval_int(p, fenv, dx, &want)) return false;
    if (want != got) {
      diag_error(p->d, at, "dimension %d of %s is %lld, but the declared size %s = %lld", i, what,
                 (long long)got, fe_expr_text(p, dx), (long long)want);
      diag_note(p->d, dx->loc, "declared here");
      return false;
    }
  }
  return true;
}

typedef struct Ret {
  Val *v;
  bool done;
} Ret;

static void run_body(FeProgram *p, Env *fenv, PtrVec *body, Ret *r) {
  for (int i = 0; i < body->len && !r->done && !p->unmet; i++) {
    AstStmt *st = body->items[i];
    switch (st->kind) {
      case ST_LET:
      case ST_ASSIGN: env_bind(p, fenv, st->name, fe_eval(p, fenv, st->value), st->name_loc); break;
      case ST_RETURN:
        r->v = fe_eval(p, fenv, st->value);
        r->done = true;
        break;
      case ST_IF: {
        Val *c = fe_eval(p, fenv, st->cond);
        if (c->k == V_ERR) break;
        if (c->k != V_BOOL) {
          diag_error(p->d, st->cond->loc, "an 'if' condition must be a compile-time bool, not a %s",
                     val_kind_name(c->k));
          break;
        }
        run_body(p, fenv, c->b ? &st->body : &st->else_body, r);
        break;
      }
      default: break;
    }
  }
}

static Val *call_forward(FeProgram *p, Inst *in, AstStmt *fwd, Val **args, SrcLoc *locs, int nargs,
                         SrcLoc at) {
  const char *fname = fwd->name ? fwd->name : "forward";
  const char *who = arena_printf(&p->ast, "%s.%s", in->decl->name, fname);
  if (nargs != fwd->params.len) {
    diag_error(p->d, at, "%s takes %d argument%s, %d given", who, fwd->params.len,
               fwd->params.len == 1 ? "" : "s", nargs);
    diag_note(p->d, fwd->loc, "'%s' declared here", who);
    return val_err(p);
  }
  if (++p->fwd_depth > MAX_FWD_DEPTH) {
    p->fwd_depth--;
    diag_error(p->d, at, "forward calls nest more than %d deep", MAX_FWD_DEPTH);
    return val_err(p);
  }
  SrcLoc saved_call = p->user_call;
  if (p->fwd_depth == 2) p->user_call = at; /* a call in the root model's forward */
  Env *fenv = ARENA_NEW(&p->ast, Env);
  fenv->parent = &in->env;
  bool ok = true;
  for (int i = 0; i < nargs; i++) {
    AstParam *prm = fwd->params.items[i];
    Val *a = args[i];
    if (a->k == V_ERR) {
      ok = false;
      continue;
    }
    if (prm->type && prm->type->kind == AT_TENSOR) {
      if (a->k != V_TENSOR) {
        diag_error(p->d, locs[i], "argument '%s' of %s must be a tensor, not a %s", prm->name, who,
                   val_kind_name(a->k));
        ok = false;
        continue;
      }
      const char *what = arena_printf(&p->ast, "argument '%s' of %s", prm->name, who);
      if (!match_type(p, in, fenv, prm->type, a->t, what, locs[i])) {
        ok = false;
        continue;
      }
    }
    env_bind(p, fenv, prm->name, a, prm->loc);
  }
  Val *result = val_err(p);
  if (ok) {
    IrBuilder saved = p->b;
    Inst *saved_inst = p->cur_inst;
    p->cur_inst = in;
    p->b.scope = in->path[0] ? in->path : NULL;
    p->b.group = in->group;
    p->b.layer = in->layer;
    Ret r = {0};
    int before = p->d->errors;
    run_body(p, fenv, &fwd->body, &r);
    p->b = saved;
    p->cur_inst = saved_inst;
    if (p->unmet) {
      /* a require() failed and said why */
    } else if (!r.done) {
      if (p->d->errors == before) {
        diag_error(p->d, fwd->loc, "%s ends without 'return'", who);
      }
    } else if (r.v->k != V_ERR) {
      result = r.v;
      if (fwd->ret && r.v->k == V_TENSOR) {
        const char *what = arena_printf(&p->ast, "the result of %s", who);
        if (!match_type(p, in, fenv, fwd->ret, r.v->t, what, at)) result = val_err(p);
      } else if (fwd->ret && fwd->ret->kind == AT_LOSS && r.v->k == V_LIST && p->fwd_depth == 1) {
        /* a gan model's [loss, generator term, discriminator loss]: checked by the caller */
      } else if (fwd->ret && r.v->k != V_TENSOR) {
        diag_error(p->d, at, "%s returns a %s, but declares a tensor", who, val_kind_name(r.v->k));
        result = val_err(p);
      }
    }
  }
  p->fwd_depth--;
  p->user_call = saved_call;
  return result;
}

Val *fe_call_inst(FeProgram *p, Env *e, AstExpr *call, Val *callee, const char *fn) {
  int n = call->args.len;
  Val **args = ARENA_ARRAY(&p->ast, Val *, n + 1);
  SrcLoc *locs = ARENA_ARRAY(&p->ast, SrcLoc, n + 1);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    AstArg *a = call->args.items[i];
    if (a->name) {
      diag_error(p->d, a->loc, "module forwards take positional arguments only");
      ok = false;
      continue;
    }
    args[i] = fe_eval(p, e, a->value);
    locs[i] = a->value->loc;
    if (args[i]->k == V_ERR) ok = false;
  }
  if (!ok) return val_err(p);
  Inst *in = callee->inst;
  if (callee->k == V_SLICE || in->is_stack) {
    int lo = callee->k == V_SLICE ? callee->lo : 0;
    int hi = callee->k == V_SLICE ? callee->hi : in->nlayers;
    if (n < 1) {
      diag_error(p->d, call->loc, "a stack of layers is called with at least one tensor");
      return val_err(p);
    }
    Val *cur = args[0];
    for (int l = lo; l < hi; l++) {
      Inst *layer = in->layers[l];
      AstStmt *fwd = fe_find_forward(layer->decl, fn);
      if (!fwd) {
        diag_error(p->d, call->loc, "module '%s' has no %s%s", layer->decl->name,
                   fn ? "forward named " : "forward", fn ? fn : "");
        return val_err(p);
      }
      args[0] = cur;
      cur = call_forward(p, layer, fwd, args, locs, n, call->loc);
      if (cur->k == V_ERR) return cur;
    }
    return cur;
  }
  AstStmt *fwd = fe_find_forward(in->decl, fn);
  if (!fwd) {
    diag_error(p->d, call->loc, "module '%s' has no %s%s", in->decl->name,
               fn ? "forward named " : "forward", fn ? fn : "");
    diag_note(p->d, in->decl->name_loc, "'%s' declared here", in->decl->name);
    return val_err(p);
  }
  return call_forward(p, in, fwd, args, locs, n, call->loc);
}

/* ---- models ---- */

static AstDecl *root_decl(FeProgram *p, const char *name) {
  return fe_file_decl(p, p->root, name);
}

static bool elaborate(FeProgram *p, const char *name, FeResult *out, IrModule *into,
                      const char *func) {
  memset(out, 0, sizeof *out);
  if (p->d->errors) return false;
  AstDecl *dcl = root_decl(p, name);
  if (!dcl) {
    diag_error_plain(p->d, "'%s' declares no model or module named '%s'", p->root->path, name);
    return false;
  }
  int before = p->d->errors;
  if (p->ir) ir_module_free(p->ir);
  p->ir = into ? into : ir_module_new(p->d, name);
  p->pos = NULL;
  p->b = (IrBuilder){.m = p->ir, .f = NULL, .scope = NULL, .group = -1, .layer = -1};
  p->inst_stack.len = 0;
  p->attn.len = 0;
  p->params = (NameMap){0};
  for (int i = 0; i < p->ir->params.len; i++) {
    IrValue *v = p->ir->params.items[i];
    names_put(&p->ast, &p->params, v->name, v);
  }
  ir_map_init(&p->decl_shape, &p->ast, false);
  bool *used = ARENA_ARRAY(&p->ast, bool, p->opts.noverrides + 1);
  Inst *root = instantiate(p, dcl, NULL, NULL, "", dcl->name_loc, used);
  p->root_inst = root;
  bool is_model = dcl->kind == DECL_MODEL;
  for (int i = 0; i < p->opts.noverrides; i++)
    if (!used[i])
      diag_error_plain(p->d, "--set %s: '%s' has no let or hyper-parameter named '%s'",
                       p->opts.overrides[i].name, name, p->opts.overrides[i].name);
  if (!root || p->d->errors > before) return false;

  AstStmt *fwd = fe_find_forward(dcl, p->fwd_name);
  if (!fwd) {
    diag_error(p->d, dcl->name_loc, "%s '%s' has no forward%s%s", is_model ? "model" : "module",
               name, p->fwd_name ? " named " : "", p->fwd_name ? p->fwd_name : "");
    return false;
  }
  IrFunc *f = ir_func_new(p->ir, func);
  p->caches.len = 0;
  p->unmet = false;
  p->b.f = f;
  int n = fwd->params.len;
  Val **args = ARENA_ARRAY(&p->ast, Val *, n + 1);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    AstParam *prm = fwd->params.items[i];
    AstType *t = prm->type;
    if (!t || t->kind != AT_TENSOR) {
      diag_error(p->d, prm->loc, "input '%s' needs a tensor type such as f32[B, 3, 224, 224]",
                 prm->name);
      ok = false;
      continue;
    }
    IrDType dt = IR_F32;
    if (t->dtype && !ir_dtype_parse(t->dtype, &dt)) {
      diag_error(p->d, t->loc, "unknown dtype '%s'", t->dtype);
      ok = false;
      continue;
    }
    IrShape s = {0};
    if (t->dims.len > IR_MAX_RANK) {
      diag_error(p->d, t->loc, "an input has at most %d dimensions", IR_MAX_RANK);
      ok = false;
      continue;
    }
    int64_t numel = 1;
    for (int j = 0; j < t->dims.len; j++) {
      AstExpr *dx = t->dims.items[j];
      int64_t v = 1;
      if (dx->kind == AST_NAME && !env_lookup(&root->env, dx->name)) {
        if (is_model) {
          diag_error(p->d, dx->loc, "size '%s' of input '%s' is not bound", dx->name, prm->name);
          diag_note(p->d, dcl->name_loc, "declare 'let %s = ...' in model '%s', or pass --set %s=N",
                    dx->name, name, dx->name);
          ok = false;
          break;
        }
        v = 1; /* a module on its own: one sample */
      } else if (!fe_eval_int(p, &root->env, dx, &v)) {
        ok = false;
        break;
      }
      if (v <= 0) {
        diag_error(p->d, dx->loc, "size '%s' of input '%s' must be positive, but it is %lld",
                   fe_expr_text(p, dx), prm->name, (long long)v);
        ok = false;
        break;
      }
      if (__builtin_mul_overflow(numel, v, &numel) || numel > ((int64_t)1 << 40)) {
        diag_error(p->d, t->loc, "input '%s' has too many elements (more than 2^40)", prm->name);
        ok = false;
        break;
      }
      s.d[s.rank++] = v;
    }
    if (!ok) continue;
    args[i] = val_tensor(p, ir_add_input(p->ir, f, prm->name, dt, &s, prm->loc));
    remember_shape(p, args[i]->t, t);
  }
  if (!ok) return false;
  SrcLoc *locs = ARENA_ARRAY(&p->ast, SrcLoc, n + 1);
  for (int i = 0; i < n; i++) locs[i] = ((AstParam *)fwd->params.items[i])->loc;
  Val *r = call_forward(p, root, fwd, args, locs, n, fwd->loc);
  if (r->k == V_ERR || p->d->errors > before) return false;
  /* a gan model's training forward: [loss, generator term, discriminator loss] */
  int nlosses = 0;
  IrValue *losses[3];
  if (r->k == V_LIST && is_model && !p->fwd_name) {
    for (int i = 0; i < r->n; i++) {
      Val *v = r->items[i];
      if (r->n != 3 || v->k != V_TENSOR || v->t->shape.rank != 0 || v->t->dtype != IR_F32) {
        diag_error(p->d, fwd->loc,
                   "the forward of model '%s' returns a list: a gan model's forward returns three "
                   "f32 scalars [loss, generator term, discriminator loss]%s",
                   name, r->n != 3 ? "" : ", but one of them is not");
        return false;
      }
      losses[nlosses++] = v->t;
    }
    r = r->items[0];
  }
  if (r->k != V_TENSOR) {
    diag_error(p->d, fwd->loc, "the forward of '%s' must return a tensor, not a %s", name,
               val_kind_name(r->k));
    return false;
  }
  if (is_model && !p->fwd_name && r->t->shape.rank != 0) {
    diag_error(p->d, fwd->loc,
               "the forward of model '%s' must return a scalar loss, but returns shape %s", name,
               fe_shape_str(p, &r->t->shape));
    return false;
  }
  ptrvec_push(&p->ir->arena, &f->results, r->t);
  for (int i = 1; i < nlosses; i++) ptrvec_push(&p->ir->arena, &f->results, losses[i]);
  for (int i = 0; i < p->caches.len; i++)
    ptrvec_push(&p->ir->arena, &f->results, p->caches.items[i]);
  if (!fe_read_sections(p, root, out)) return false;
  if (is_model && !p->fwd_name && (nlosses > 0) != (out->train.gan.ndisc > 0)) {
    if (nlosses)
      diag_error(p->d, fwd->loc,
                 "the forward of model '%s' returns [loss, generator term, discriminator loss], "
                 "but its train section has no gan = gan(discriminator = ..., weight = ...)",
                 name);
    else
      diag_error(p->d, out->train.gan.loc,
                 "gan: the forward of model '%s' must return [loss, generator term, "
                 "discriminator loss], not one loss",
                 name);
    return false;
  }
  if (!into) ir_module_set_settings(p->ir, &out->plan, &out->train); /* what the passes read */
  out->ir = p->ir;
  p->ir = NULL; /* the caller owns it now */
  if (!ir_verify(out->ir)) return false;
  return p->d->errors == before;
}

/* micro_batches = M: the step's batch (dim 0 of every input, a let of the
 * model such as B) is split into M micro-batches, so the model is
 * elaborated again with that let set to B / M; the trainer runs M of them
 * per step (the descriptor's batch stays B). The name of the let, or NULL
 * after a message. */
static const char *batch_let(FeProgram *p, AstDecl *dcl, const FeResult *r, int64_t *B) {
  AstStmt *fwd = fe_find_forward(dcl, NULL);
  const char *name = NULL;
  IrFunc *f = ir_module_func(r->ir, "forward");
  SrcLoc at =
      r->plan.loc[MM_SET_MICRO_BATCHES].file ? r->plan.loc[MM_SET_MICRO_BATCHES] : dcl->name_loc;
  for (int i = 0; fwd && f && i < fwd->params.len && i < f->inputs.len; i++) {
    AstParam *prm = fwd->params.items[i];
    IrValue *x = f->inputs.items[i];
    AstExpr *dx = prm->type && prm->type->dims.len ? prm->type->dims.items[0] : NULL;
    if (!dx || dx->kind != AST_NAME || (name && strcmp(name, dx->name) != 0)) {
      diag_error(p->d, prm->loc,
                 "micro_batches splits the batch, the first dimension of every input, which must "
                 "be one let of the model (e.g. B), but input '%s' has %s",
                 prm->name, dx ? fe_expr_text(p, dx) : "none");
      diag_note(p->d, at, "micro_batches = %d set here", r->plan.micro_batches);
      return NULL;
    }
    name = dx->name;
    *B = x->shape.d[0];
  }
  if (!name) {
    diag_error(p->d, at, "micro_batches needs a model whose forward takes batched inputs");
    return NULL;
  }
  if (*B % r->plan.micro_batches != 0) {
    diag_error(p->d, at, "micro_batches = %d does not divide the batch %s = %lld",
               r->plan.micro_batches, name, (long long)*B);
    return NULL;
  }
  return name;
}

bool fe_elaborate(FeProgram *p, const char *name, FeResult *out) {
  p->mode = FE_TRAIN;
  p->mb_factor = 0;
  if (!elaborate(p, name, out, NULL, "forward")) return false;
  int M = out->plan.micro_batches;
  AstDecl *dcl = root_decl(p, name);
  if (M <= 1 || !dcl || dcl->kind != DECL_MODEL) return true;
  int64_t B = 0;
  const char *let = batch_let(p, dcl, out, &B);
  if (!let) return false;
  FeOptions saved = p->opts;
  FeOverride *ov = ARENA_ARRAY(&p->ast, FeOverride, saved.noverrides + 1);
  int n = 0;
  for (int i = 0; i < saved.noverrides; i++)
    if (strcmp(saved.overrides[i].name, let) != 0) ov[n++] = saved.overrides[i];
  char *val = ARENA_ARRAY(&p->ast, char, 32);
  snprintf(val, 32, "%lld", (long long)(B / M));
  ov[n++] = (FeOverride){let, val};
  p->opts.overrides = ov;
  p->opts.noverrides = n;
  p->mb_factor = M;
  ir_module_free(out->ir);
  bool ok = elaborate(p, name, out, NULL, "forward");
  p->opts = saved;
  return ok;
}

/* The let `name` set to `value` (as --set name=value would), replacing any
 * --set of it, until the caller restores p->opts. */
static void override_size(FeProgram *p, const char *name, const char *value) {
  FeOptions o = p->opts;
  FeOverride *ov = ARENA_ARRAY(&p->ast, FeOverride, o.noverrides + 1);
  int n = 0;
  for (int i = 0; i < o.noverrides; i++)
    if (strcmp(o.overrides[i].name, name) != 0) ov[n++] = o.overrides[i];
  ov[n++] = (FeOverride){name, value};
  p->opts.overrides = ov;
  p->opts.noverrides = n;
}

/* Forward fwd (NULL: the unnamed one) of model `name` in `mode` as function
 * func of `into`; then the options back to *saved and the mode to FE_TRAIN. */
static bool elaborate_into(FeProgram *p, const char *name, IrModule *into, const char *func,
                           FeMode mode, const char *fwd, const FeOptions *saved) {
  p->mode = mode;
  p->fwd_name = fwd;
  FeResult r;
  bool ok = elaborate(p, name, &r, into, func);
  p->opts = *saved;
  p->mode = FE_TRAIN;
  p->fwd_name = NULL;
  p->ir = NULL; /* `into` stays the caller's, even on error */
  return ok;
}

/* The forward's input `text` and the name of the size of its dim 1. */
static const char *text_len_name(FeProgram *p, AstDecl *dcl, SrcLoc *loc) {
  AstStmt *fwd = fe_find_forward(dcl, NULL);
  for (int i = 0; fwd && i < fwd->params.len; i++) {
    AstParam *prm = fwd->params.items[i];
    if (strcmp(prm->name, "text") != 0) continue;
    *loc = prm->loc;
    if (prm->type && prm->type->kind == AT_TENSOR && prm->type->dims.len == 2) {
      AstExpr *dx = prm->type->dims.items[1];
      if (dx->kind == AST_NAME) return dx->name;
    }
    diag_error(
        p->d, prm->loc,
        "decoding needs the text input as text: i32[B, T] with T a name (a let of the model)");
    return NULL;
  }
  diag_error(
      p->d, dcl->name_loc,
      "decoding needs an input named 'text' (the token ids, i32[B, T]) in the forward of '%s'",
      dcl->name);
  return NULL;
}

bool fe_elaborate_cached(FeProgram *p, const char *name, IrModule *into, const char *func,
                         FeMode mode, int64_t cache_len) {
  if (p->d->errors) return false;
  AstDecl *dcl = root_decl(p, name);
  if (!dcl || dcl->kind != DECL_MODEL) {
    diag_error_plain(p->d, "'%s' declares no model named '%s'", p->root->path, name);
    return false;
  }
  SrcLoc tloc = dcl->name_loc;
  const char *tname = text_len_name(p, dcl, &tloc);
  if (!tname) return false;
  FeOptions saved = p->opts;
  if (mode == FE_DECODE) override_size(p, tname, "1"); /* the text is one token long */
  p->cache_len = cache_len;
  if (!elaborate_into(p, name, into, func, mode, NULL, &saved)) return false;
  IrFunc *f = ir_module_func(into, func);
  IrValue *loss = f->results.items[0];
  if (!loss->def || loss->def->op != IR_OP_CROSS_ENTROPY) {
    diag_error(p->d, dcl->name_loc,
               "decoding needs the forward of '%s' to return a cross_entropy of the logits", name);
    return false;
  }
  f->results.items[0] = loss->def->in[0]; /* the logits */
  ir_func_dce(f);
  bool cached = false;
  for (int i = 0; i < f->inputs.len; i++) {
    IrValue *v = f->inputs.items[i];
    size_t n = strlen(v->name);
    if (n > 8 && strcmp(v->name + n - 8, ".k_cache") == 0) cached = true;
    if (mode == FE_DECODE && strcmp(v->name, "text") == 0) v->name = "token";
  }
  for (int i = 0; mode == FE_DECODE && i < f->nodes.len; i++) {
    IrNode *nd = f->nodes.items[i];
    if (nd->op == IR_OP_ATTENTION) {
      diag_error(p->d, nd->loc,
                 "cannot decode incrementally: this attention is not causal and sees the text");
      return false;
    }
  }
  if (!cached) {
    diag_error(p->d, dcl->name_loc,
               "model '%s' has no causal attention on its text: there is nothing to cache", name);
    return false;
  }
  ir_func_renumber(f);
  return ir_verify(into);
}

bool fe_has_forward(FeProgram *p, const char *name, const char *fwd) {
  AstDecl *dcl = root_decl(p, name);
  return dcl && dcl->kind == DECL_MODEL && fe_find_forward(dcl, fwd) != NULL;
}

bool fe_elaborate_named(FeProgram *p, const char *name, IrModule *into, const char *fwd,
                        const char *func, FeMode mode, int64_t frames, const char *rename) {
  if (p->d->errors) return false;
  AstDecl *dcl = root_decl(p, name);
  AstStmt *st = dcl && dcl->kind == DECL_MODEL ? fe_find_forward(dcl, fwd) : NULL;
  if (!st) {
    diag_error_plain(p->d, "'%s' declares no model '%s' with a forward named '%s'", p->root->path,
                     name, fwd);
    return false;
  }
  FeOptions saved = p->opts;
  if (frames >= 1) { /* the frames of the first input: a name, overridden */
    AstParam *prm = st->params.len ? st->params.items[0] : NULL;
    AstExpr *dx = prm && prm->type && prm->type->kind == AT_TENSOR && prm->type->dims.len >= 3
                      ? prm->type->dims.items[2]
                      : NULL;
    if (!dx || dx->kind != AST_NAME) {
      diag_error(p->d, prm ? prm->loc : st->loc,
                 "chunked encoding needs the first input of forward '%s' as [B, C, F, ...] with F "
                 "a name (a let of the model: the frames)",
                 fwd);
      return false;
    }
    override_size(p, dx->name, arena_printf(&p->ast, "%lld", (long long)frames));
  }
  if (!elaborate_into(p, name, into, func, mode, fwd, &saved)) return false;
  IrFunc *f = ir_module_func(into, func);
  if (rename && f->inputs.len) ((IrValue *)f->inputs.items[0])->name = rename;
  return ir_verify(into);
}

bool fe_check_all(FeProgram *p) {
  if (p->d->errors) return false;
  bool ok = true;
  for (int i = 0; i < p->root->decls.len; i++) {
    AstDecl *dcl = p->root->decls.items[i];
    if (dcl->kind != DECL_MODEL) continue;
    FeResult r;
    if (!fe_elaborate(p, dcl->name, &r)) ok = false;
    if (r.ir) ir_module_free(r.ir);
  }
  return ok && p->d->errors == 0;
}
