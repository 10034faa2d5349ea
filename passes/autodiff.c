/* The `autodiff` pass: reverse mode over @forward, building @train.
 *
 * @train(inputs of @forward..., %lr : f32[], %step : f32[]) is a copy of the
 * forward nodes followed by the backward nodes, and returns the loss. The
 * backward walks the copied nodes in reverse from the loss (seed: full(1.0)
 * f32[]) and asks each node's gradient rule (ir_ops[op].grad, ir_grad.c) for
 * the cotangents of its operands; cotangents of a value used several times
 * accumulate with add. Only values on a path from a trainable parameter to
 * the loss get one: frozen parameters, integer values and values the loss
 * does not depend on are skipped. An op without a rule on such a path is an
 * error at the node's location naming the op and a parameter that needs it.
 *
 * The gradient of each trainable parameter is a value of @train with role
 * grad and grad_of = the parameter (printed grad(@name)). It is a value
 * produced for that parameter alone: when the accumulated cotangent is also
 * used otherwise (another parameter's, another value's cotangent, an operand)
 * a copy (mul_scalar 1) is made. A trainable parameter the loss does not
 * depend on gets no gradient (and the optimizer leaves it alone).
 *
 * @forward stays as it is (evaluation). A module whose @forward does not
 * return one f32[] loss is inference-only: the pass leaves it unchanged.
 *
 * A gan module (train setting gan, frontend/plan.h MmGan) returns three
 * f32[] values from @forward: the loss, the generator's adversarial term g
 * and the discriminator's loss d. @train then has two loss roots, each with
 * its own backward:
 *   %gate = relu(%step - start) - relu(%step - start - 1)   1 from step start + 1, else 0
 *   %total = loss + g * (%gate * weight)   -> the other parameters' gradients
 *   %disc  = d * %gate                      -> the discriminator's gradients
 * and returns [%total, %disc]. The first backward seeds %total and walks
 * from every trainable parameter outside the discriminator (the
 * discriminator's own gradients of g are not computed: its optimizer does
 * not take them, as the reference's generator step); the second seeds %disc
 * from every trainable parameter, and a cotangent reaching a parameter
 * outside the discriminator is an error: d must read the generator's output
 * through detach() (which passes no gradient). */
#include <string.h>

#include "pass.h"

typedef struct Ad {
  IrModule *m;
  const char *disc; /* gan: the discriminator's path; NULL: no gan */
  int side;         /* gan: 0 the generator's root, 1 the discriminator's */
  Diag *d;
  IrFunc *fwd, *train;
  IrMap map;     /* forward value -> @train value (p) */
  IrMap needs;   /* @train value -> p: the parameter it depends on (trainable, float path) */
  IrMap useful;  /* @train value: the loss depends on it */
  IrMap ct;      /* @train value -> its cotangent (p) */
  IrMap uses;    /* @train value -> number of node operands that read it (i), after the backward */
  Arena scratch; /* the maps */
} Ad;

static IrValue *mapped(Ad *a, IrValue *v) {
  IrMapSlot *s = ir_map_get(&a->map, v);
  return s ? s->p : v; /* params map to themselves */
}

/* Parameters are the only values without a node whose role is param. */
static bool is_param(const IrValue *v) {
  return !v->def && v->role == IR_ROLE_PARAM;
}

/* @train's inputs: the forward's, then %lr and %step. */
static bool make_inputs(Ad *a) {
  for (int i = 0; i < a->fwd->inputs.len; i++) {
    IrValue *v = a->fwd->inputs.items[i];
    if (!strcmp(v->name, "lr") || !strcmp(v->name, "step")) {
      diag_error(a->d, v->loc,
                 "autodiff: @forward has an input named '%s', which @train needs for itself",
                 v->name);
      return false;
    }
    IrValue *c = ir_add_input(a->m, a->train, v->name, v->dtype, &v->shape, v->loc);
    memcpy(c->pl, v->pl, sizeof c->pl);
    c->role = v->role;
    ir_map_put(&a->map, v)->p = c;
  }
  IrShape scalar = {0};
  SrcLoc none = {0};
  ir_add_input(a->m, a->train, "lr", IR_F32, &scalar, none);
  ir_add_input(a->m, a->train, "step", IR_F32, &scalar, none);
  return true;
}

static bool copy_forward(Ad *a) {
  char err[512];
  for (int i = 0; i < a->fwd->nodes.len; i++) {
    IrNode *n = a->fwd->nodes.items[i];
    IrValue *in[64];
    for (int k = 0; k < n->nin; k++) in[k] = mapped(a, n->in[k]);
    IrBuilder b = {
        .m = a->m, .f = a->train, .scope = n->scope, .group = n->group, .layer = n->layer};
    IrNode *c = ir_build(&b, n->op, in, n->nin, &n->attrs, n->loc, err, sizeof err, NULL);
    if (!c) {
      diag_error(a->d, n->loc, "autodiff: cannot copy %s into @train: %s", ir_ops[n->op].name, err);
      return false;
    }
    for (int j = 0; j < n->nout; j++) {
      memcpy(c->out[j]->pl, n->out[j]->pl, sizeof c->out[j]->pl);
      c->out[j]->role = n->out[j]->role;
      ir_map_put(&a->map, n->out[j])->p = c->out[j];
    }
  }
  return true;
}

/* Whether parameter p is the discriminator's (under its path). */
static bool in_disc(const Ad *a, const IrValue *p) {
  size_t n = strlen(a->disc);
  return strncmp(p->name, a->disc, n) == 0 && p->name[n] == '.';
}

/* needs: forward from the trainable float parameters (a gan's generator
 * root: those outside the discriminator); useful: backward from the loss. */
static void mark(Ad *a, IrValue *loss, int nfwd) {
  for (int i = 0; i < a->m->params.len; i++) {
    IrValue *p = a->m->params.items[i];
    if (p->role == IR_ROLE_PARAM && !p->frozen && ir_dtype_is_float(p->dtype) &&
        !(a->disc && a->side == 0 && in_disc(a, p)))
      ir_map_put(&a->needs, p)->p = p;
  }
  for (int i = 0; i < nfwd; i++) {
    IrNode *n = a->train->nodes.items[i];
    IrValue *src = NULL;
    for (int k = 0; k < n->nin && !src; k++) {
      IrMapSlot *s = ir_map_get(&a->needs, n->in[k]);
      if (s) src = s->p;
    }
    if (!src) continue;
    for (int j = 0; j < n->nout; j++)
      if (ir_dtype_is_float(n->out[j]->dtype)) ir_map_put(&a->needs, n->out[j])->p = src;
  }
  ir_map_put(&a->useful, loss);
  for (int i = nfwd - 1; i >= 0; i--) {
    IrNode *n = a->train->nodes.items[i];
    bool u = false;
    for (int j = 0; j < n->nout; j++) u = u || ir_map_get(&a->useful, n->out[j]);
    if (u)
      for (int k = 0; k < n->nin; k++) ir_map_put(&a->useful, n->in[k]);
  }
}

static bool on_path(Ad *a, IrValue *v) {
  return ir_map_get(&a->needs, v) && ir_map_get(&a->useful, v);
}

/* Every node on a param -> loss path must have a rule; reports each one
 * that has none. */
static bool check_rules(Ad *a, int nfwd) {
  bool ok = true;
  for (int i = 0; i < nfwd; i++) {
    IrNode *n = a->train->nodes.items[i];
    if (ir_ops[n->op].grad) continue;
    IrValue *src = NULL;
    for (int j = 0; j < n->nout && !src; j++)
      if (on_path(a, n->out[j])) src = ir_map_get(&a->needs, n->out[j])->p;
    if (!src) continue;
    diag_error(a->d, n->loc, "no gradient rule for op '%s' (needed by the gradient of @%s)",
               ir_ops[n->op].name, src->name);
    ok = false;
  }
  return ok;
}

static IrValue *add(Ad *a, IrBuilder *b, IrValue *x, IrValue *y, SrcLoc loc) {
  char err[512];
  IrValue *in[2] = {x, y};
  IrNode *n = ir_build(b, IR_OP_ADD, in, 2, NULL, loc, err, sizeof err, NULL);
  if (!n) {
    diag_error(a->d, loc, "autodiff: cannot accumulate cotangents: %s", err);
    return NULL;
  }
  return n->out[0];
}

static bool backward(Ad *a, IrValue *loss, int nfwd) {
  char err[512];
  IrBuilder b = {.m = a->m, .f = a->train, .group = -1, .layer = -1};
  IrAttrs one = {0};
  ir_attrs_set_ints(&one, IR_ATTR_SHAPE, NULL, 0);
  ir_attrs_set_float(&one, IR_ATTR_VALUE, 1.0);
  ir_attrs_set_dtype(&one, IR_ATTR_DTYPE, IR_F32);
  IrNode *seed = ir_build(&b, IR_OP_FULL, NULL, 0, &one, loss->def ? loss->def->loc : (SrcLoc){0},
                          err, sizeof err, NULL);
  MM_ASSERT(seed != NULL);
  ir_map_put(&a->ct, loss)->p = seed->out[0];

  for (int i = nfwd - 1; i >= 0; i--) {
    IrNode *n = a->train->nodes.items[i];
    IrGradCtx g;
    memset(&g, 0, sizeof g);
    bool any_out = false, any_in = false;
    for (int j = 0; j < n->nout; j++) {
      IrMapSlot *s = ir_map_get(&a->ct, n->out[j]);
      g.dout[j] = s ? s->p : NULL;
      any_out = any_out || g.dout[j];
    }
    for (int k = 0; k < n->nin; k++) {
      g.need[k] = on_path(a, n->in[k]);
      any_in = any_in || g.need[k];
    }
    if (!any_out || !any_in) continue;
    MM_ASSERT(ir_ops[n->op].grad != NULL); /* check_rules */
    IrBuilder nb = {
        .m = a->m, .f = a->train, .scope = n->scope, .group = n->group, .layer = n->layer};
    err[0] = 0;
    g.b = &nb;
    g.node = n;
    g.err = err;
    g.errlen = sizeof err;
    if (!g.dout[0] && n->nout > 1) {
      diag_error(
          a->d, n->loc,
          "autodiff: only the saved statistics of %s reach the loss; they are not differentiable",
          ir_ops[n->op].name);
      return false;
    }
    if (!ir_ops[n->op].grad(&g)) {
      diag_error(a->d, n->loc, "autodiff: %s", err[0] ? err : "gradient rule failed");
      return false;
    }
    for (int k = 0; k < n->nin; k++) {
      IrValue *d = g.din[k], *x = n->in[k];
      if (!g.need[k] || !d) continue;
      if (d->dtype != x->dtype || !ir_shape_eq(&d->shape, &x->shape)) {
        char s1[200], s2[200];
        diag_error(a->d, n->loc,
                   "autodiff: the gradient rule of %s gave operand %d a cotangent %s%s for %s%s",
                   ir_ops[n->op].name, k, ir_dtype_name(d->dtype),
                   ir_shape_str(s1, sizeof s1, &d->shape), ir_dtype_name(x->dtype),
                   ir_shape_str(s2, sizeof s2, &x->shape));
        return false;
      }
      IrMapSlot *s = ir_map_put(&a->ct, x);
      if (!s->p) {
        s->p = d;
      } else {
        s->p = add(a, &nb, s->p, d, n->loc);
        if (!s->p) return false;
      }
    }
  }
  return true;
}

/* Marks each trainable parameter's cotangent as its gradient, copying it
 * when it is not the parameter's alone. */
static bool link_grads(Ad *a) {
  IrMap claimed, other; /* values that are a gradient already; cotangents of non-parameters */
  ir_map_init(&claimed, &a->scratch, false);
  ir_map_init(&other, &a->scratch, false);
  for (int i = 0; i < a->ct.cap; i++) {
    IrMapSlot *s = &a->ct.slots[i];
    if (s->key && !is_param((const IrValue *)s->key)) ir_map_put(&other, s->p);
  }
  for (int i = 0; i < a->train->nodes.len; i++) {
    IrNode *n = a->train->nodes.items[i];
    for (int k = 0; k < n->nin; k++) ir_map_put(&a->uses, n->in[k])->i++;
  }
  for (int i = 0; i < a->m->params.len; i++) {
    IrValue *p = a->m->params.items[i];
    IrMapSlot *s = ir_map_get(&a->ct, p);
    if (!s || !ir_map_get(&a->needs, p)) continue;
    if (a->disc && a->side == 1 && !in_disc(a, p)) {
      diag_error(a->d, a->m->train.gan.loc,
                 "gan: the discriminator's loss reaches @%s, a parameter outside the "
                 "discriminator '%s': give the discriminator the generator's output through "
                 "detach(...)",
                 p->name, a->disc);
      return false;
    }
    IrValue *g = s->p;
    IrMapSlot *u = ir_map_get(&a->uses, g);
    if (ir_map_get(&claimed, g) || ir_map_get(&other, g) || (u && u->i > 0) || !g->def ||
        g->role != IR_ROLE_ACT) {
      char err[512];
      IrBuilder b = {.m = a->m,
                     .f = a->train,
                     .scope = g->def ? g->def->scope : NULL,
                     .group = p->group,
                     .layer = p->layer};
      IrAttrs one = {0};
      ir_attrs_set_float(&one, IR_ATTR_VALUE, 1.0);
      IrNode *n = ir_build(&b, IR_OP_MUL_SCALAR, &g, 1, &one, p->loc, err, sizeof err, NULL);
      if (!n) {
        diag_error(a->d, p->loc, "autodiff: cannot copy the gradient of @%s: %s", p->name, err);
        return false;
      }
      g = n->out[0];
    }
    ir_map_put(&claimed, g);
    g->role = IR_ROLE_GRAD;
    g->grad_of = p;
    memcpy(g->pl, p->pl, sizeof g->pl);
  }
  return true;
}

/* One node of a gan's step arithmetic (scope "gan"). */
static IrValue *gan_node(Ad *a, IrOp op, IrValue *x, IrValue *y, double value) {
  char err[512];
  IrBuilder b = {.m = a->m, .f = a->train, .scope = "gan", .group = -1, .layer = -1};
  IrAttrs at = {0};
  IrValue *in[2] = {x, y};
  if (op == IR_OP_ADD_SCALAR || op == IR_OP_MUL_SCALAR)
    ir_attrs_set_float(&at, IR_ATTR_VALUE, value);
  IrNode *n = ir_build(&b, op, in, y ? 2 : 1, &at, a->m->train.gan.loc, err, sizeof err, NULL);
  if (!n) {
    diag_error(a->d, a->m->train.gan.loc, "autodiff: gan: %s", err);
    return NULL;
  }
  return n->out[0];
}

IrValue *pass_gan_gate(IrModule *m, IrFunc *f, IrValue *step, Diag *d) {
  Ad a = {.m = m, .d = d, .train = f};
  double s = m->train.gan.start;
  IrValue *on = gan_node(&a, IR_OP_ADD_SCALAR, step, NULL, -s);
  IrValue *past = on ? gan_node(&a, IR_OP_ADD_SCALAR, step, NULL, -s - 1) : NULL;
  IrValue *r1 = past ? gan_node(&a, IR_OP_RELU, on, NULL, 0) : NULL;
  IrValue *r2 = r1 ? gan_node(&a, IR_OP_RELU, past, NULL, 0) : NULL;
  return r2 ? gan_node(&a, IR_OP_SUB, r1, r2, 0) : NULL;
}

/* roots[0] = loss + g * gate * weight, roots[1] = d * gate */
static bool gan_roots(Ad *a, IrValue *g, IrValue *d, IrValue **roots) {
  IrValue *step = NULL;
  for (int i = 0; i < a->train->inputs.len; i++)
    if (!strcmp(((IrValue *)a->train->inputs.items[i])->name, "step"))
      step = a->train->inputs.items[i];
  IrValue *gate = pass_gan_gate(a->m, a->train, step, a->d);
  IrValue *gw = gate ? gan_node(a, IR_OP_MUL_SCALAR, gate, NULL, a->m->train.gan.weight) : NULL;
  IrValue *gt = gw ? gan_node(a, IR_OP_MUL, g, gw, 0) : NULL;
  roots[0] = gt ? gan_node(a, IR_OP_ADD, roots[0], gt, 0) : NULL;
  roots[1] = roots[0] ? gan_node(a, IR_OP_MUL, d, gate, 0) : NULL;
  return roots[1] != NULL;
}

bool pass_autodiff(IrModule *m, PassCtx *cx) {
  IrFunc *fwd = ir_module_func(m, "forward");
  if (!fwd || ir_module_func(m, "train")) return true; /* nothing to do, or done already */
  if (m->inference) return true;                       /* an executable that does not train */
  bool gan = m->train.gan.ndisc > 0;
  if (fwd->results.len != (gan ? 3 : 1)) return true;
  IrValue *loss = fwd->results.items[0];
  if (loss->dtype != IR_F32 || loss->shape.rank != 0) return true; /* inference-only */
  Ad a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.disc = gan ? m->train.gan.disc[0] : NULL;
  a.d = cx && cx->d ? cx->d : m->diag;
  a.fwd = fwd;
  arena_init(&a.scratch);
  ir_map_init(&a.map, &a.scratch, false);
  ir_map_init(&a.needs, &a.scratch, false);
  ir_map_init(&a.useful, &a.scratch, false);
  ir_map_init(&a.ct, &a.scratch, false);
  ir_map_init(&a.uses, &a.scratch, false);
  a.train = ir_func_new(m, "train");
  bool ok = make_inputs(&a) && copy_forward(&a);
  IrValue *roots[2] = {mapped(&a, loss), NULL};
  if (ok && gan)
    ok = gan_roots(&a, mapped(&a, fwd->results.items[1]), mapped(&a, fwd->results.items[2]), roots);
  int nfwd = a.train->nodes.len;
  for (int r = 0; ok && r < (gan ? 2 : 1); r++) {
    a.side = r;
    if (r) { /* the second root: its own marks and cotangents */
      ir_map_init(&a.needs, &a.scratch, false);
      ir_map_init(&a.useful, &a.scratch, false);
      ir_map_init(&a.ct, &a.scratch, false);
      ir_map_init(&a.uses, &a.scratch, false);
    }
    mark(&a, roots[r], nfwd);
    ok = check_rules(&a, nfwd) &&
         (!ir_map_get(&a.needs, roots[r]) || backward(&a, roots[r], nfwd)) && link_grads(&a);
    if (ok) ir_func_add_result(m, a.train, roots[r]);
  }
  arena_free(&a.scratch);
  return ok;
}
