/* The `lora` pass: low-rank adapters on chosen Linear layers, the base
 * frozen (LoRA, Hu et al. 2021; PyTorch's peft.LoraLayer).
 *
 * The train section's `lora = lora(rank = r, alpha = a, targets = [...],
 * layers = [...])` arrives checked in the module's settings (IrModule.train.lora):
 * `modules` are the paths of the Linear instances it matched. For every linear node whose
 * weight is the parameter `<module>.weight` of one of them, the pass adds
 *
 *   param @<module>.lora_a : DT[r, in]  init(fan_in, 1)   (PyTorch's kaiming_uniform(a = sqrt(5)))
 *   param @<module>.lora_b : DT[out, r] init(zeros)
 *
 * (DT the weight's dtype, group and layer the weight's; they follow the
 * module's own parameters in the parameter list) and makes the Linear's
 * result y into
 *
 *   %a = linear(%x, @<module>.lora_a)           [..., r]
 *   %b = linear(%a, @<module>.lora_b)           [..., out]
 *   %s = mul_scalar(%b) {value = a / r}
 *   %y2 = add(%y, %s)                           every later use of %y reads %y2
 *
 * ordinary ops with the scope, layer and location of the original linear.
 * y is the Linear's output: the linear's result, or when its only use is the
 * add of `<module>.bias` that add's result (so the adapter is added after the
 * bias, as peft does, and the codegen still folds the bias into the kernel).
 * At initialisation B = 0, so the forward is unchanged.
 *
 * Then every parameter that is not an adapter is frozen: LoRA trains the
 * adapters alone. Adapters are recognised by name: a parameter whose name
 * ends in `.lora_a` or `.lora_b` (what the trainer saves as "the adapters").
 *
 * Runs before autodiff, on every function of the module. A setting that
 * matches Linear layers no linear node uses is an error at the setting. */
#include <string.h>

#include "pass.h"

typedef struct Site {
  IrNode *lin;    /* the linear node */
  IrValue *a, *b; /* its adapters */
} Site;

typedef struct Lora {
  IrModule *m;
  Diag *d;
  const MmLora *cfg;
  Arena scratch;
  IrMap owners;   /* the matched module paths (strings) */
  IrMap adapters; /* module path -> p: IrValue *[2] (a, b), created once per module */
  int nadapted;
  char err[512];
} Lora;

/* The owner of a weight `<path>.weight` when path is a matched module, else NULL. */
static const char *owner_of(Lora *l, const IrValue *w) {
  if (w->def || w->role != IR_ROLE_PARAM || !w->name) return NULL;
  size_t n = strlen(w->name);
  if (n <= 7 || strcmp(w->name + n - 7, ".weight") != 0) return NULL;
  const char *path = arena_strndup(&l->scratch, w->name, n - 7);
  IrMapSlot *s = ir_map_get(&l->owners, path);
  return s ? s->key : NULL;
}

static IrValue *adapter(Lora *l, const IrValue *w, const char *suffix, const IrShape *s,
                        IrInit init) {
  size_t n = strlen(w->name) - 7; /* "<module>" of "<module>.weight" */
  const char *name = arena_printf(&l->scratch, "%.*s.%s", (int)n, w->name, suffix);
  if (ir_module_param(l->m, name)) {
    diag_error(l->d, l->cfg->loc, "lora: the parameter @%s exists already", name);
    return NULL;
  }
  IrValue *v = ir_add_param(l->m, name, w->dtype, s, init, l->cfg->loc.file ? l->cfg->loc : w->loc);
  v->group = w->group;
  v->layer = w->layer;
  return v;
}

/* The adapters of the module owning w, created on first use. */
static bool adapters_of(Lora *l, const char *owner, const IrValue *w, IrValue **a, IrValue **b) {
  IrMapSlot *s = ir_map_put(&l->adapters, owner);
  if (!s->p) {
    int64_t out = w->shape.d[0], in = w->shape.d[1], r = l->cfg->rank;
    IrShape sa = {.rank = 2, .d = {r, in}}, sb = {.rank = 2, .d = {out, r}};
    IrValue **ab = ARENA_ARRAY(&l->scratch, IrValue *, 2);
    ab[0] = adapter(l, w, "lora_a", &sa, (IrInit){IR_INIT_FAN_IN, 1.0, 0});
    ab[1] = ab[0] ? adapter(l, w, "lora_b", &sb, (IrInit){IR_INIT_ZEROS, 0, 0}) : NULL;
    if (!ab[1]) return false;
    s->p = ab;
    l->nadapted++;
  }
  IrValue **ab = s->p;
  *a = ab[0];
  *b = ab[1];
  return true;
}

/* Builds the adapter path after the node just pushed; returns y2. */
static IrValue *emit(Lora *l, IrFunc *f, const Site *st, IrValue *y) {
  IrNode *n = st->lin;
  IrBuilder b = {.m = l->m, .f = f, .scope = n->scope, .group = n->group, .layer = n->layer};
  IrValue *in[2] = {n->in[0], st->a};
  IrNode *na = ir_build(&b, IR_OP_LINEAR, in, 2, NULL, n->loc, l->err, sizeof l->err, NULL);
  IrNode *nb = NULL, *ns = NULL, *ny = NULL;
  if (na) {
    in[0] = na->out[0];
    in[1] = st->b;
    nb = ir_build(&b, IR_OP_LINEAR, in, 2, NULL, n->loc, l->err, sizeof l->err, NULL);
  }
  if (nb) {
    IrAttrs sc = {0};
    ir_attrs_set_float(&sc, IR_ATTR_VALUE, l->cfg->alpha / l->cfg->rank);
    ns = ir_build(&b, IR_OP_MUL_SCALAR, nb->out, 1, &sc, n->loc, l->err, sizeof l->err, NULL);
  }
  if (ns) {
    in[0] = y;
    in[1] = ns->out[0];
    ny = ir_build(&b, IR_OP_ADD, in, 2, NULL, n->loc, l->err, sizeof l->err, NULL);
  }
  if (!ny) {
    diag_error(l->d, n->loc, "lora: cannot adapt this linear: %s", l->err);
    return NULL;
  }
  return ny->out[0];
}

/* Whether v is the bias parameter of the module owning w. */
static bool is_bias_of(const IrValue *v, const IrValue *w) {
  if (v->def || v->role != IR_ROLE_PARAM || !v->name) return false;
  size_t n = strlen(w->name) - 7; /* "<module>" */
  return strncmp(v->name, w->name, n) == 0 && strcmp(v->name + n, ".bias") == 0;
}

static bool rewrite(Lora *l, IrFunc *f) {
  int nn = f->nodes.len;
  if (nn == 0) return true;
  IrNode **orig = ARENA_ARRAY(&l->scratch, IrNode *, nn);
  memcpy(orig, f->nodes.items, sizeof(IrNode *) * (size_t)nn);
  /* uses of each value (operands and results) */
  IrMap uses, anchor, repl;
  ir_map_init(&uses, &l->scratch, false);
  ir_map_init(&anchor, &l->scratch, false); /* node -> p: the Site whose adapter follows it */
  ir_map_init(&repl, &l->scratch, false);   /* value -> p: the value that replaces it */
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < orig[i]->nin; k++) ir_map_put(&uses, orig[i]->in[k])->i++;
  for (int i = 0; i < f->results.len; i++) ir_map_put(&uses, f->results.items[i])->i++;
  IrMap user; /* value -> p: its one user node */
  ir_map_init(&user, &l->scratch, false);
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < orig[i]->nin; k++) ir_map_put(&user, orig[i]->in[k])->p = orig[i];

  for (int i = 0; i < nn; i++) {
    IrNode *n = orig[i];
    if (n->op != IR_OP_LINEAR) continue;
    IrValue *w = n->in[1];
    const char *owner = owner_of(l, w);
    if (!owner || w->shape.rank != 2) continue;
    Site *st = ARENA_NEW(&l->scratch, Site);
    st->lin = n;
    if (!adapters_of(l, owner, w, &st->a, &st->b)) return false;
    IrNode *at = n;
    IrMapSlot *u = ir_map_get(&uses, n->out[0]);
    IrNode *next = u && u->i == 1 ? ir_map_get(&user, n->out[0])->p : NULL;
    if (next && next->op == IR_OP_ADD && next->nin == 2) {
      IrValue *other = next->in[0] == n->out[0] ? next->in[1] : next->in[0];
      if (other != n->out[0] && is_bias_of(other, w)) at = next;
    }
    ir_map_put(&anchor, at)->p = st;
  }

  f->nodes.len = 0;
  for (int i = 0; i < nn; i++) {
    IrNode *n = orig[i];
    for (int k = 0; k < n->nin; k++) {
      IrMapSlot *s = ir_map_get(&repl, n->in[k]);
      if (s) n->in[k] = s->p;
    }
    ptrvec_push(&l->m->arena, &f->nodes, n);
    IrMapSlot *s = ir_map_get(&anchor, n);
    if (!s) continue;
    IrValue *y = n->out[0], *y2 = emit(l, f, s->p, y);
    if (!y2) return false;
    ir_map_put(&repl, y)->p = y2;
  }
  for (int i = 0; i < f->results.len; i++) {
    IrMapSlot *s = ir_map_get(&repl, f->results.items[i]);
    if (s) f->results.items[i] = s->p;
  }
  ir_func_renumber(f);
  return true;
}

static bool is_adapter(const IrValue *p) {
  size_t n = strlen(p->name);
  return n > 7 &&
         (strcmp(p->name + n - 7, ".lora_a") == 0 || strcmp(p->name + n - 7, ".lora_b") == 0);
}

/* The module path of a parameter ("h.0.fc" of "h.0.fc.weight"), or NULL. */
static const char *module_of(Lora *l, const IrValue *p) {
  const char *dot = strrchr(p->name, '.');
  return dot ? arena_strndup(&l->scratch, p->name, (size_t)(dot - p->name)) : NULL;
}

/* Moves each module's adapters right after the module's own parameters. */
static void reorder(Lora *l) {
  IrModule *m = l->m;
  int np = m->params.len;
  IrValue **all = ARENA_ARRAY(&l->scratch, IrValue *, np);
  memcpy(all, m->params.items, sizeof(IrValue *) * (size_t)np);
  for (int i = 0; i < np; i++) { /* adapters.i: 1 + the index of the module's last own parameter */
    const char *mod = module_of(l, all[i]);
    IrMapSlot *s = mod && !is_adapter(all[i]) ? ir_map_get(&l->adapters, mod) : NULL;
    if (s) s->i = i + 1;
  }
  m->params.len = 0;
  for (int i = 0; i < np; i++) {
    IrValue *p = all[i];
    const char *mod = module_of(l, p);
    IrMapSlot *s = mod ? ir_map_get(&l->adapters, mod) : NULL;
    if (s && is_adapter(p) && s->i > 0) continue; /* placed with its module */
    ptrvec_push(&m->arena, &m->params, p);
    if (s && s->i == i + 1) {
      IrValue **ab = s->p;
      ptrvec_push(&m->arena, &m->params, ab[0]);
      ptrvec_push(&m->arena, &m->params, ab[1]);
    }
  }
  MM_ASSERT(m->params.len == np);
}

bool pass_lora(IrModule *m, PassCtx *cx) {
  const MmLora *cfg = &m->train.lora;
  if (cfg->rank < 1) return true;
  Lora l = {.m = m, .d = cx->d ? cx->d : m->diag, .cfg = cfg};
  arena_init(&l.scratch);
  ir_map_init(&l.owners, &l.scratch, true);
  ir_map_init(&l.adapters, &l.scratch, true);
  for (int i = 0; i < cfg->nmodules; i++) ir_map_put(&l.owners, cfg->modules[i]);
  bool ok = true;
  for (int i = 0; i < m->funcs.len && ok; i++) ok = rewrite(&l, m->funcs.items[i]);
  if (ok && l.nadapted == 0) {
    diag_error(l.d, cfg->loc,
               "lora: no linear op uses the weight of the %d Linear layer%s it names",
               cfg->nmodules, cfg->nmodules == 1 ? "" : "s");
    ok = false;
  }
  if (ok) {
    reorder(&l);
    for (int i = 0; i < m->params.len; i++) {
      IrValue *p = m->params.items[i];
      if (p->role == IR_ROLE_PARAM) p->frozen = !is_adapter(p);
    }
  }
  arena_free(&l.scratch);
  return ok;
}
