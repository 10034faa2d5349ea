/* The `optimizer` pass: appends the parameter update to @train.
 *
 *   %n = grad_norm(g0, g1, ...)                 the global gradient norm
 *   %s = clip_scale(%n) {value = clip}           clip > 0, else full(1.0)
 *   adamw(@p, g, @adamw.m.p, @adamw.v.p, %lr, %step, %s) {beta1, beta2, eps, weight_decay}
 *   or sgd(@p, g, @sgd.momentum.p, %lr, %s) {momentum, weight_decay}
 *
 * one update per parameter with a gradient (grad(@p) values of @train, in
 * parameter order). grad_norm takes at most 64 operands, so more gradients
 * are normed in chunks of 64 and the chunk norms normed again (a norm of
 * norms is the norm of the whole). Optimizer state is module params with
 * role opt, init zeros, the parameter's dtype, shape, placement and layer.
 *
 * Settings come from the module's train settings (IrModule.train). Weight decay applies to every
 * trainable parameter, biases and norm weights included, as PyTorch's AdamW does with one parameter
 * group: decoupled for AdamW (param -= lr * wd * param), coupled (L2, added to the gradient) for
 * SGD as torch.optim.SGD. */
#include <string.h>

#include "pass.h"

typedef struct Opt {
  IrModule *m;
  Diag *d;
  IrFunc *f;
  char err[512];
} Opt;

static IrNode *build(Opt *o, IrBuilder *b, IrOp op, IrValue **in, int nin, const IrAttrs *a,
                     SrcLoc loc) {
  IrNode *n = ir_build(b, op, in, nin, a, loc, o->err, sizeof o->err, NULL);
  if (!n) diag_error(o->d, loc, "optimizer: %s", o->err);
  return n;
}

static IrValue *input(Opt *o, const char *name) {
  for (int i = 0; i < o->f->inputs.len; i++) {
    IrValue *v = o->f->inputs.items[i];
    if (!strcmp(v->name, name) && v->dtype == IR_F32 && v->shape.rank == 0) return v;
  }
  diag_error(o->d, (SrcLoc){0}, "optimizer: @train has no input %%%s : f32[]", name);
  return NULL;
}

/* role opt, zeros, like p */
static IrValue *state(Opt *o, const char *prefix, IrValue *p) {
  const char *name = arena_printf(&o->m->arena, "%s.%s", prefix, p->name);
  if (ir_module_param(o->m, name)) {
    diag_error(o->d, p->loc, "optimizer: the state @%s exists already", name);
    return NULL;
  }
  IrValue *s = ir_add_param(o->m, name, p->dtype, &p->shape, (IrInit){IR_INIT_ZEROS, 0, 0}, p->loc);
  s->role = IR_ROLE_OPT;
  s->rows = p->rows;
  memcpy(s->pl, p->pl, sizeof s->pl);
  s->group = p->group;
  s->layer = p->layer;
  return s;
}

/* The module path of a parameter ("h.0.fc" of "h.0.fc.weight"), the scope
 * of its update. */
static const char *owner(Opt *o, const IrValue *p) {
  const char *dot = strrchr(p->name, '.');
  return dot ? arena_strndup(&o->m->arena, p->name, (size_t)(dot - p->name)) : NULL;
}

/* The update of one set of parameters: their gradients' global norm, the
 * clip scale and one adamw (sgd) per parameter with this lr and step. */
static bool update(Opt *o, Arena *scratch, IrValue **params, IrValue **grads, int np, IrValue *lr,
                   IrValue *step) {
  IrModule *m = o->m;
  IrFunc *f = o->f;
  const MmTrain *t = &m->train;
  bool ok = true;
  IrBuilder b = {.m = m, .f = f, .scope = "optimizer", .group = -1, .layer = -1};
  SrcLoc none = {0};
  /* grad_norm in chunks of 64, then of the chunk norms */
  IrValue **level = grads;
  int nlevel = np;
  while (ok) {
    int nnext = 0;
    IrValue **next = ARENA_ARRAY(scratch, IrValue *, (nlevel + 63) / 64);
    for (int k = 0; k < nlevel && ok; k += 64) {
      int c = nlevel - k < 64 ? nlevel - k : 64;
      IrNode *n = build(o, &b, IR_OP_GRAD_NORM, level + k, c, NULL, none);
      if (n) next[nnext++] = n->out[0];
      ok = n != NULL;
    }
    level = next;
    nlevel = nnext;
    if (nlevel == 1) break;
  }
  IrValue *scale = NULL;
  if (ok) {
    IrAttrs a = {0};
    IrNode *n;
    if (t->clip > 0) {
      ir_attrs_set_float(&a, IR_ATTR_VALUE, t->clip);
      n = build(o, &b, IR_OP_CLIP_SCALE, level, 1, &a, none);
    } else {
      ir_attrs_set_ints(&a, IR_ATTR_SHAPE, NULL, 0);
      ir_attrs_set_float(&a, IR_ATTR_VALUE, 1.0);
      ir_attrs_set_dtype(&a, IR_ATTR_DTYPE, IR_F32);
      n = build(o, &b, IR_OP_FULL, NULL, 0, &a, none);
    }
    ok = n != NULL;
    if (ok) scale = n->out[0];
  }

  for (int i = 0; i < np && ok; i++) {
    IrValue *p = params[i];
    IrBuilder pb = {.m = m, .f = f, .scope = owner(o, p), .group = p->group, .layer = p->layer};
    IrAttrs a = {0};
    if (t->optim == MM_OPT_ADAMW) {
      IrValue *mo = state(o, "adamw.m", p), *v = state(o, "adamw.v", p);
      if (!mo || !v) {
        ok = false;
        break;
      }
      ir_attrs_set_float(&a, IR_ATTR_BETA1, t->beta1);
      ir_attrs_set_float(&a, IR_ATTR_BETA2, t->beta2);
      ir_attrs_set_float(&a, IR_ATTR_EPS, t->eps);
      ir_attrs_set_float(&a, IR_ATTR_WEIGHT_DECAY, t->weight_decay);
      IrValue *in[7] = {p, grads[i], mo, v, lr, step, scale};
      ok = build(o, &pb, IR_OP_ADAMW, in, 7, &a, p->loc) != NULL;
    } else {
      IrValue *mom = state(o, "sgd.momentum", p);
      if (!mom) {
        ok = false;
        break;
      }
      ir_attrs_set_float(&a, IR_ATTR_MOMENTUM, t->momentum);
      ir_attrs_set_float(&a, IR_ATTR_WEIGHT_DECAY, t->weight_decay);
      IrValue *in[5] = {p, grads[i], mom, lr, scale};
      ok = build(o, &pb, IR_OP_SGD, in, 5, &a, p->loc) != NULL;
    }
  }
  return ok;
}

bool pass_optimizer(IrModule *m, PassCtx *cx) {
  IrFunc *f = ir_module_func(m, "train");
  if (!f) return true; /* inference-only */
  Opt o = {.m = m, .d = cx && cx->d ? cx->d : m->diag, .f = f};

  /* the gradients, in parameter order */
  Arena scratch;
  arena_init(&scratch);
  IrMap grad_of;
  ir_map_init(&grad_of, &scratch, false);
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++)
      if (n->out[j]->grad_of) ir_map_put(&grad_of, n->out[j]->grad_of)->p = n->out[j];
  }
  int np = 0;
  IrValue **params = ARENA_ARRAY(&scratch, IrValue *, m->params.len + 1);
  IrValue **grads = ARENA_ARRAY(&scratch, IrValue *, m->params.len + 1);
  for (int i = 0; i < m->params.len; i++) {
    IrMapSlot *s = ir_map_get(&grad_of, m->params.items[i]);
    if (!s) continue;
    params[np] = m->params.items[i];
    grads[np++] = s->p;
  }
  bool ok = true;
  IrValue *lr = NULL, *step = NULL;
  if (np == 0 || !(lr = input(&o, "lr")) || !(step = input(&o, "step"))) {
    arena_free(&scratch);
    return np == 0;
  }
  if (m->train.gan.ndisc == 0) {
    ok = update(&o, &scratch, params, grads, np, lr, step);
  } else {
    /* a gan: the discriminator's parameters apart, with their own norm and
     * clip, the learning rate times the gate and their own step count
     * relu(step - start - 1) + 1 (its first step is 1, as an optimizer
     * that starts there) */
    const char *disc = m->train.gan.disc[0];
    size_t dl = strlen(disc);
    int nd = 0, ng = 0;
    IrValue **dp = ARENA_ARRAY(&scratch, IrValue *, np + 1);
    IrValue **dg = ARENA_ARRAY(&scratch, IrValue *, np + 1);
    for (int i = 0; i < np; i++) {
      bool d = strncmp(params[i]->name, disc, dl) == 0 && params[i]->name[dl] == '.';
      if (d)
        dp[nd] = params[i], dg[nd++] = grads[i];
      else
        params[ng] = params[i], grads[ng++] = grads[i];
    }
    ok = ng == 0 || update(&o, &scratch, params, grads, ng, lr, step);
    IrBuilder b = {.m = m, .f = f, .scope = "gan", .group = -1, .layer = -1};
    SrcLoc at = m->train.gan.loc;
    IrValue *gate = ok && nd ? pass_gan_gate(m, f, step, o.d) : NULL;
    IrNode *dlr = gate ? build(&o, &b, IR_OP_MUL, (IrValue *[]){lr, gate}, 2, NULL, at) : NULL;
    IrAttrs a1 = {0}, a2 = {0};
    ir_attrs_set_float(&a1, IR_ATTR_VALUE, -(double)m->train.gan.start - 1);
    ir_attrs_set_float(&a2, IR_ATTR_VALUE, 1.0);
    IrNode *s1 = dlr ? build(&o, &b, IR_OP_ADD_SCALAR, &step, 1, &a1, at) : NULL;
    IrNode *s2 = s1 ? build(&o, &b, IR_OP_RELU, s1->out, 1, NULL, at) : NULL;
    IrNode *s3 = s2 ? build(&o, &b, IR_OP_ADD_SCALAR, s2->out, 1, &a2, at) : NULL;
    if (nd) ok = s3 && update(&o, &scratch, dp, dg, nd, dlr->out[0], s3->out[0]);
  }
  arena_free(&scratch);
  return ok;
}
