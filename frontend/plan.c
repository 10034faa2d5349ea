/* The train { } and parallel { } sections of a model: read, typed and
 * checked against the lowered graph. Every check here needs no running:
 * head counts against tp and cp, kv heads against tp, the batch against dp,
 * the stage list against the parameters, micro-batches against pp, sp
 * against tp. A setting that would change nothing is refused (refuse_inert). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fe_internal.h"

static AstStmt *section(AstDecl *dcl, const char *name, AstStmt **dup) {
  AstStmt *found = NULL;
  *dup = NULL;
  for (int i = 0; i < dcl->members.len; i++) {
    AstStmt *st = dcl->members.items[i];
    if (st->kind == ST_SECTION && strcmp(st->name, name) == 0) {
      if (found)
        *dup = st;
      else
        found = st;
    }
  }
  return found;
}

static bool pos_int(FeProgram *p, Env *e, AstStmt *s, int lo, int hi, int *out) {
  int64_t v;
  if (!fe_eval_int(p, e, s->value, &v)) return false;
  if (v < lo || v > hi) {
    diag_error(p->d, s->value->loc, "%s must be between %d and %d, not %lld", s->name, lo, hi,
               (long long)v);
    return false;
  }
  *out = (int)v;
  return true;
}

static bool get_num(FeProgram *p, Env *e, AstExpr *x, double *out) {
  return fe_eval_num(p, e, x, out);
}

static const char *sym_of(FeProgram *p, Env *e, AstExpr *x) {
  p->allow_sym = true;
  Val *v = fe_eval(p, e, x);
  p->allow_sym = false;
  if (v->k == V_SYM || v->k == V_STR) return v->s;
  if (v->k != V_ERR)
    diag_error(p->d, x->loc, "expected a name such as 'selective', not a %s", val_kind_name(v->k));
  return NULL;
}

/* The row of settings.def whose `.mm` key in a section of owner own is key. */
static const MmSetDesc *row_of_key(MmSetOwner own, const char *key) {
  for (int i = 0; i < MM_SET_COUNT; i++)
    if (mm_settings[i].owner == own && mm_settings[i].key[0] &&
        strcmp(mm_settings[i].key, key) == 0)
      return &mm_settings[i];
  return NULL;
}

/* The keys of a section, for "unknown ... setting" ("tp, pp, ..."). */
static const char *keys_of(FeProgram *p, MmSetOwner own) {
  const char *out = "";
  for (int i = 0; i < MM_SET_COUNT; i++)
    if (mm_settings[i].owner == own && mm_settings[i].key[0])
      out = arena_printf(&p->ast, "%s%s%s", out, out[0] ? ", " : "", mm_settings[i].key);
  return out;
}

/* An INT, FLOAT, BOOL or ENUM setting of settings.def: its value into base
 * (the section's struct), checked against the row's range or names. */
static bool read_row(FeProgram *p, Env *e, AstStmt *s, const MmSetDesc *d, void *base) {
  switch (d->kind) {
    case IR_SK_INT: {
      int v;
      if (!pos_int(p, e, s, (int)d->lo, (int)d->hi, &v)) return false;
      mm_setting_put(d, base, v);
      return true;
    }
    case IR_SK_FLOAT: {
      double v;
      if (!get_num(p, e, s->value, &v)) return false;
      if (!(v >= d->lo && v <= d->hi)) {
        diag_error(p->d, s->value->loc, "%s must be between %.15g and %.15g%s, not %.15g", s->name,
                   d->lo, d->hi, d->what, v);
        return false;
      }
      mm_setting_put(d, base, v);
      return true;
    }
    case IR_SK_BOOL: {
      Val *v = fe_eval(p, e, s->value);
      if (v->k != V_BOOL) {
        if (v->k != V_ERR) diag_error(p->d, s->value->loc, "%s must be true or false", s->name);
        return false;
      }
      mm_setting_put(d, base, v->b);
      return true;
    }
    case IR_SK_ENUM: {
      const char *k = sym_of(p, e, s->value);
      if (!k) return false;
      int i = mm_enum_index(d->names, k);
      if (i < 0) {
        char list[256];
        diag_error(p->d, s->value->loc, "unknown %s '%s' (expected %s)", d->what, k,
                   mm_enum_list(d->names, list, sizeof list));
        return false;
      }
      mm_setting_put(d, base, i);
      return true;
    }
    case IR_SK_STR: {
      Val *v = fe_eval(p, e, s->value);
      if (v->k != V_STR) {
        if (v->k != V_ERR) diag_error(p->d, s->value->loc, "%s must be a string", s->name);
        return false;
      }
      *(const char **)((char *)base + d->off) = v->s;
      return true;
    }
    default: return false; /* the section reader handles the others */
  }
}

/* optimizer = adamw(lr = 1e-3, betas = [0.9, 0.95], weight_decay = 0.1, eps = 1e-8, clip = 1.0)
 * optimizer = sgd(lr = 0.1, momentum = 0.9) */
static bool read_optimizer(FeProgram *p, Env *e, AstExpr *x, MmTrain *t) {
  if (x->kind != AST_CALL || x->lhs->kind != AST_NAME) {
    diag_error(p->d, x->loc, "expected adamw(...) or sgd(...)");
    return false;
  }
  const char *kind = x->lhs->name;
  int k = mm_enum_index(mm_optim_names, kind);
  if (k < 0) {
    char list[64];
    diag_error(p->d, x->lhs->loc, "unknown optimizer '%s' (expected %s)", kind,
               mm_enum_list(mm_optim_names, list, sizeof list));
    return false;
  }
  t->optim = (MmOptim)k;
  bool ok = true;
  for (int i = 0; i < x->args.len; i++) {
    AstArg *a = x->args.items[i];
    if (!a->name) {
      diag_error(p->d, a->value->loc, "%s takes keyword arguments (lr = ..., ...)", kind);
      ok = false;
      continue;
    }
    double v = 0;
    if (strcmp(a->name, "betas") == 0 && t->optim == MM_OPT_ADAMW) {
      Val *l = fe_eval(p, e, a->value);
      if (l->k != V_LIST || l->n != 2 || !val_is_num(l->items[0]) || !val_is_num(l->items[1])) {
        if (l->k != V_ERR) diag_error(p->d, a->value->loc, "betas must be a list of two numbers");
        ok = false;
        continue;
      }
      t->beta1 = val_num(l->items[0]);
      t->beta2 = val_num(l->items[1]);
      if (!(t->beta1 >= 0 && t->beta1 < 1 && t->beta2 >= 0 && t->beta2 < 1)) {
        diag_error(p->d, a->value->loc, "betas must be in [0, 1)");
        ok = false;
      }
      continue;
    }
    if (!get_num(p, e, a->value, &v)) {
      ok = false;
      continue;
    }
    if (strcmp(a->name, "lr") == 0)
      t->lr = v;
    else if (strcmp(a->name, "weight_decay") == 0)
      t->weight_decay = v;
    else if (strcmp(a->name, "eps") == 0 && t->optim == MM_OPT_ADAMW)
      t->eps = v;
    else if (strcmp(a->name, "clip") == 0)
      t->clip = v;
    else if (strcmp(a->name, "momentum") == 0 && t->optim == MM_OPT_SGD)
      t->momentum = v;
    else {
      diag_error(p->d, a->loc, "%s has no setting '%s'", kind, a->name);
      ok = false;
      continue;
    }
    if (v < 0 || (strcmp(a->name, "lr") == 0 && v <= 0)) {
      diag_error(p->d, a->value->loc, "%s must be positive", a->name);
      ok = false;
    }
  }
  return ok;
}

static bool read_schedule(FeProgram *p, Env *e, AstExpr *x, MmTrain *t) {
  const char *kind = x->kind == AST_NAME                                 ? x->name
                     : (x->kind == AST_CALL && x->lhs->kind == AST_NAME) ? x->lhs->name
                                                                         : NULL;
  int k = kind ? mm_enum_index(mm_lr_sched_names, kind) : -1;
  if (k < 0) {
    diag_error(p->d, x->loc,
               "expected constant(warmup = N), cosine(warmup = N, min_lr = X) or linear(warmup = "
               "N, min_lr = X)");
    return false;
  }
  t->lr_sched = (MmLrSched)k;
  bool ok = true;
  for (int i = 0; x->kind == AST_CALL && i < x->args.len; i++) {
    AstArg *a = x->args.items[i];
    int64_t iv;
    double dv;
    if (a->name && strcmp(a->name, "warmup") == 0) {
      if (!fe_eval_int(p, e, a->value, &iv))
        ok = false;
      else if (iv < 0) {
        diag_error(p->d, a->value->loc, "warmup must not be negative");
        ok = false;
      } else
        t->warmup = (int)iv;
    } else if (a->name && strcmp(a->name, "min_lr") == 0 && t->lr_sched != MM_LR_CONSTANT) {
      if (!get_num(p, e, a->value, &dv))
        ok = false;
      else
        t->min_lr = dv;
    } else {
      diag_error(p->d, a->loc, "%s has no setting '%s'", kind, a->name ? a->name : "(positional)");
      ok = false;
    }
  }
  return ok;
}

/* ---- lora = lora(rank = 8, alpha = 16, targets = [llm], layers = ["q_proj", "v_proj"]) ---- */

/* "a" or "an" before a word. */
static const char *article(const char *w) {
  return w[0] && strchr("aeiou", w[0]) ? "an" : "a";
}

/* x is a call of the builtin named name: gan(...), lora(...), by_module(...) */
static bool is_call(const AstExpr *x, const char *name) {
  return x->kind == AST_CALL && x->lhs->kind == AST_NAME && strcmp(x->lhs->name, name) == 0;
}

/* gan = gan(discriminator = disc, weight = 0.5, start = 5) (plan.h MmGan) */
static bool read_gan(FeProgram *p, Env *e, AstStmt *s, MmGan *g) {
  AstExpr *x = s->value;
  const char *shape = "gan(discriminator = sub-model, weight = X, start = N)";
  if (!is_call(x, "gan")) {
    diag_error(p->d, x->loc, "expected %s", shape);
    return false;
  }
  g->loc = s->name_loc;
  bool ok = true, has_weight = false;
  AstArg *disc = NULL;
  for (int i = 0; i < x->args.len; i++) {
    AstArg *a = x->args.items[i];
    if (!a->name) {
      diag_error(p->d, a->value->loc, "gan takes keyword arguments: %s", shape);
      ok = false;
    } else if (strcmp(a->name, "discriminator") == 0) {
      disc = a;
      Val *v = fe_eval(p, e, a->value);
      if (v->k == V_ERR) {
        ok = false;
      } else if (v->k != V_INST || !v->inst || !v->inst->path[0]) {
        const char *kind = v->k == V_TENSOR ? "parameter" : val_kind_name(v->k);
        diag_error(p->d, a->value->loc,
                   "gan: the discriminator is %s %s, not a sub-model of the model (e.g. "
                   "discriminator = disc)",
                   article(kind), kind);
        ok = false;
      } else {
        g->disc = ARENA_ARRAY(&p->ast, const char *, 1);
        g->disc[0] = v->inst->path;
        g->ndisc = 1;
      }
    } else if (strcmp(a->name, "weight") == 0) {
      double v;
      if (!get_num(p, e, a->value, &v))
        ok = false;
      else if (!(v > 0)) {
        diag_error(p->d, a->value->loc,
                   "gan weight must be positive, not %g (leave the setting out for no "
                   "discriminator)",
                   v);
        ok = false;
      } else
        g->weight = v, has_weight = true;
    } else if (strcmp(a->name, "start") == 0) {
      int64_t v;
      if (!fe_eval_int(p, e, a->value, &v))
        ok = false;
      else if (v < 0 || v > INT32_MAX) {
        diag_error(p->d, a->value->loc, "gan start is a number of steps (0 or more), not %lld",
                   (long long)v);
        ok = false;
      } else
        g->start = (int)v;
    } else {
      diag_error(p->d, a->loc, "gan has no setting '%s' (expected discriminator, weight, start)",
                 a->name);
      ok = false;
    }
  }
  if (ok && (!disc || !has_weight)) {
    diag_error(p->d, x->loc, "gan needs %s", !disc ? "discriminator = sub-model" : "weight = X");
    ok = false;
  }
  if (!ok) g->ndisc = 0;
  return ok;
}

/* The items of a list setting with a location each: the elements of a list
 * literal located one by one, else the evaluated list located as a whole.
 * NULL (reported) when x is not a list. */
static Val **list_items(FeProgram *p, Env *e, AstExpr *x, const char *what, int *n, SrcLoc **locs) {
  if (x->kind == AST_LIST) {
    *n = x->items.len;
    Val **out = ARENA_ARRAY(&p->ast, Val *, *n + 1);
    *locs = ARENA_ARRAY(&p->ast, SrcLoc, *n + 1);
    for (int i = 0; i < *n; i++) {
      AstExpr *it = x->items.items[i];
      out[i] = fe_eval(p, e, it);
      (*locs)[i] = it->loc;
    }
    return out;
  }
  Val *l = fe_eval(p, e, x);
  if (l->k == V_ERR) return NULL;
  if (l->k != V_LIST) {
    diag_error(p->d, x->loc, "lora: %s takes a list, not %s %s", what, article(val_kind_name(l->k)),
               val_kind_name(l->k));
    return NULL;
  }
  *n = l->n;
  *locs = ARENA_ARRAY(&p->ast, SrcLoc, *n + 1);
  for (int i = 0; i < *n; i++) (*locs)[i] = x->loc;
  return l->items;
}

/* Every Linear instance under `in` (itself included) that the name selects
 * into out (paths): the last component of its path, or for the layers of a
 * stack of Linears the stack's name (`member`). `name` NULL selects all,
 * and names (if given) gets the member name of each. */
static void find_linears(FeProgram *p, Inst *in, const char *member, const char *name, PtrVec *out,
                         PtrVec *names) {
  if (in->is_stack) {
    for (int l = 0; l < in->nlayers; l++) find_linears(p, in->layers[l], member, name, out, names);
    return;
  }
  if (in->decl && strcmp(in->decl->name, "Linear") == 0 && (!name || strcmp(member, name) == 0)) {
    ptrvec_push(&p->ast, out, (void *)in->path);
    if (names) ptrvec_push(&p->ast, names, (void *)member);
    return;
  }
  /* sub-instances are the bindings of the instance's own scope whose path
   * continues it (a let naming another instance is not one), in
   * declaration order (the scope is a list, newest first) */
  size_t len = strlen(in->path);
  int nb = 0, k = 0;
  for (Binding *b = in->env.head; b; b = b->next) nb++;
  Binding **bs = ARENA_ARRAY(&p->ast, Binding *, nb + 1);
  for (Binding *b = in->env.head; b; b = b->next) bs[nb - 1 - k++] = b;
  for (int i = 0; i < nb; i++) {
    Binding *b = bs[i];
    Val *v = b->val;
    if (v->k != V_INST || !v->inst) continue;
    const char *sp = v->inst->path;
    if (strncmp(sp, in->path, len) != 0 || (len && sp[len] != '.') ||
        strcmp(sp + len + (len ? 1 : 0), b->name) != 0)
      continue;
    find_linears(p, v->inst, b->name, name, out, names);
  }
}

static bool has_str(const char **v, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(v[i], s) == 0) return true;
  return false;
}

static bool read_lora(FeProgram *p, Env *e, AstStmt *s, MmLora *lo) {
  AstExpr *x = s->value;
  const char *shape = "lora(rank = N, alpha = X, targets = [sub-models], layers = [\"name\", ...])";
  if (!is_call(x, "lora")) {
    diag_error(p->d, x->loc, "expected %s", shape);
    return false;
  }
  lo->loc = s->name_loc;
  bool ok = true, has_alpha = false;
  AstArg *targets = NULL, *layers = NULL, *rank = NULL;
  for (int i = 0; i < x->args.len; i++) {
    AstArg *a = x->args.items[i];
    if (!a->name) {
      diag_error(p->d, a->value->loc, "lora takes keyword arguments: %s", shape);
      ok = false;
    } else if (strcmp(a->name, "rank") == 0) {
      rank = a;
      int64_t r;
      if (!fe_eval_int(p, e, a->value, &r))
        ok = false;
      else if (r < 1 || r > (1 << 20)) {
        diag_error(p->d, a->value->loc, "lora rank must be at least 1, not %lld", (long long)r);
        ok = false;
      } else
        lo->rank = (int)r;
    } else if (strcmp(a->name, "alpha") == 0) {
      double v;
      if (!get_num(p, e, a->value, &v))
        ok = false;
      else if (!(v > 0)) {
        diag_error(p->d, a->value->loc, "lora alpha must be positive, not %g", v);
        ok = false;
      } else
        lo->alpha = v, has_alpha = true;
    } else if (strcmp(a->name, "targets") == 0) {
      targets = a;
    } else if (strcmp(a->name, "layers") == 0) {
      layers = a;
    } else {
      diag_error(p->d, a->loc, "lora has no setting '%s' (expected rank, alpha, targets, layers)",
                 a->name);
      ok = false;
    }
  }
  if (!rank || !targets || !layers) {
    diag_error(p->d, x->loc, "lora needs %s",
               !rank      ? "rank = N"
               : !targets ? "targets = [sub-models]"
                          : "layers = [\"name\", ...]");
    return false;
  }
  if (!has_alpha) lo->alpha = lo->rank; /* scale 1 */

  int nt = 0, nl = 0;
  SrcLoc *tlocs = NULL, *llocs = NULL;
  Val **tv = list_items(p, e, targets->value, "targets", &nt, &tlocs);
  Val **lv = list_items(p, e, layers->value, "layers", &nl, &llocs);
  if (!tv || !lv) return false;
  if (nt == 0 || nl == 0) {
    diag_error(p->d, nt == 0 ? targets->value->loc : layers->value->loc, "lora: %s is empty",
               nt == 0 ? "targets" : "layers");
    return false;
  }
  Inst **tinst = ARENA_ARRAY(&p->ast, Inst *, nt + 1);
  lo->targets = ARENA_ARRAY(&p->ast, const char *, nt + 1);
  for (int k = 0; k < nt; k++) {
    Val *v = tv[k];
    if (v->k == V_ERR) {
      ok = false;
    } else if (v->k != V_INST || !v->inst || !v->inst->path[0]) {
      const char *kind = v->k == V_TENSOR  ? "parameter"
                         : v->k == V_SLICE ? "stack slice"
                                           : val_kind_name(v->k);
      diag_error(p->d, tlocs[k], "lora: target %d is %s %s, not a sub-model (e.g. targets = [llm])",
                 k, article(kind), kind);
      ok = false;
    } else {
      tinst[lo->ntargets] = v->inst;
      lo->targets[lo->ntargets++] = v->inst->path;
    }
  }
  lo->layers = ARENA_ARRAY(&p->ast, const char *, nl + 1);
  for (int k = 0; k < nl; k++) {
    Val *v = lv[k];
    if (v->k == V_ERR)
      ok = false;
    else if (v->k != V_STR) {
      const char *kind = val_kind_name(v->k);
      diag_error(p->d, llocs[k], "lora: layer %d is %s %s, not a name in quotes (e.g. \"q_proj\")",
                 k, article(kind), kind);
      ok = false;
    } else
      lo->layers[lo->nlayers++] = v->s;
  }
  if (!ok) return false;

  PtrVec found = {0};
  for (int k = 0; k < lo->nlayers; k++) {
    int before = found.len;
    for (int t = 0; t < lo->ntargets; t++) {
      const char *path = tinst[t]->path, *dot = strrchr(path, '.');
      find_linears(p, tinst[t], dot ? dot + 1 : path, lo->layers[k], &found, NULL);
    }
    if (found.len > before) continue;
    const char *tl = lo->targets[0];
    for (int t = 1; t < lo->ntargets; t++) tl = arena_printf(&p->ast, "%s, %s", tl, lo->targets[t]);
    diag_error(p->d, llocs[k], "lora: no Linear named '%s' in %s", lo->layers[k], tl);
    PtrVec all = {0}, names = {0};
    for (int t = 0; t < lo->ntargets; t++) {
      const char *path = tinst[t]->path, *dot = strrchr(path, '.');
      find_linears(p, tinst[t], dot ? dot + 1 : path, NULL, &all, &names);
    }
    const char *list = NULL;
    for (int i = 0; i < names.len; i++) {
      bool seen = false;
      for (int j = 0; j < i && !seen; j++) seen = strcmp(names.items[i], names.items[j]) == 0;
      if (!seen)
        list = list ? arena_printf(&p->ast, "%s, %s", list, (const char *)names.items[i])
                    : names.items[i];
    }
    if (list)
      diag_note(p->d, tlocs[0], "the Linear layers there are named: %s", list);
    else
      diag_note(p->d, tlocs[0], "%s holds no Linear layer", tl);
    ok = false;
  }
  lo->modules = ARENA_ARRAY(&p->ast, const char *, found.len + 1);
  for (int i = 0; i < found.len; i++)
    if (!has_str(lo->modules, lo->nmodules, found.items[i]))
      lo->modules[lo->nmodules++] = found.items[i];
  return ok;
}

/* Whether setting i of a section repeats an earlier one (reported). */
static bool set_twice(FeProgram *p, AstStmt *sec, int i) {
  AstStmt *s = sec->body.items[i];
  for (int j = 0; j < i; j++) {
    AstStmt *o = sec->body.items[j];
    if (o->kind == ST_SETTING && strcmp(o->name, s->name) == 0) {
      diag_error(p->d, s->name_loc, "'%s' is set twice", s->name);
      diag_note(p->d, o->name_loc, "first set here");
      return true;
    }
  }
  return false;
}

/* The first dimension of the forward's first input that has one (the
 * samples of a step), or 0. */
static int64_t input_batch(FeProgram *p) {
  IrFunc *f = p->ir->funcs.len ? p->ir->funcs.items[0] : NULL;
  for (int i = 0; f && i < f->inputs.len; i++) {
    IrValue *x = f->inputs.items[i];
    if (x->shape.rank >= 1) return x->shape.d[0] * (p->mb_factor > 1 ? p->mb_factor : 1);
  }
  return 0;
}

static bool read_train(FeProgram *p, Inst *root, AstStmt *sec, MmTrain *t) {
  bool ok = true;
  for (int i = 0; sec && i < sec->body.len; i++) {
    AstStmt *s = sec->body.items[i];
    if (s->kind == ST_SECTION) {
      diag_error(p->d, s->name_loc,
                 "a %s section holds settings; sub-model blocks belong in the parallel section",
                 sec->name);
      ok = false;
    }
    if (s->kind != ST_SETTING) continue;
    if (set_twice(p, sec, i)) ok = false;
    const MmSetDesc *d = row_of_key(MM_OWN_TRAIN, s->name);
    if (!d) {
      diag_error(p->d, s->name_loc, "unknown train setting '%s' (expected %s)", s->name,
                 keys_of(p, MM_OWN_TRAIN));
      ok = false;
      continue;
    }
    t->loc[d->id] = s->name_loc;
    if (d->id == MM_SET_FREEZE) {
      Val *l = fe_eval(p, &root->env, s->value);
      if (l->k == V_ERR) {
        ok = false;
        continue;
      }
      if (l->k != V_LIST) {
        diag_error(p->d, s->value->loc, "freeze takes a list of sub-models, e.g. [vision]");
        ok = false;
        continue;
      }
      t->freeze = ARENA_ARRAY(&p->ast, const char *, l->n + 1);
      for (int k = 0; k < l->n; k++) {
        Val *v = l->items[k];
        if (v->k == V_INST)
          t->freeze[t->nfreeze++] = v->inst->path;
        else if (v->k == V_TENSOR && v->t->role == IR_ROLE_PARAM)
          t->freeze[t->nfreeze++] = v->t->name;
        else {
          diag_error(p->d, s->value->loc, "freeze: item %d is a %s, not a sub-model or parameter",
                     k, val_kind_name(v->k));
          ok = false;
        }
      }
    } else if (d->id == MM_SET_OPTIMIZER) {
      ok &= read_optimizer(p, &root->env, s->value, t);
    } else if (d->id == MM_SET_LR_SCHEDULE) {
      ok &= read_schedule(p, &root->env, s->value, t);
    } else if (d->id == MM_SET_LORA) {
      ok &= read_lora(p, &root->env, s, &t->lora);
    } else if (d->id == MM_SET_GAN) {
      ok &= read_gan(p, &root->env, s, &t->gan);
    } else if (d->id == MM_SET_BATCH) {
      int v;
      if (!pos_int(p, &root->env, s, (int)d->lo, (int)d->hi, &v))
        ok = false;
      else if (input_batch(p) != v) {
        /* the inputs' shapes fix the batch: another number would only
         * mislead the trainer */
        diag_error(p->d, s->value->loc,
                   "batch = %d, but the inputs hold %lld samples (their first dimension); change "
                   "the inputs' shapes (e.g. a let B) instead",
                   v, (long long)input_batch(p));
        ok = false;
      } else
        t->batch = v;
    } else {
      ok &= read_row(p, &root->env, s, d, t);
    }
  }
  return ok;
}

/* recompute = none | selective | full | block(N), or per sub-model
 * recompute = by_module(vision = full, llm = block(2)) (passes/recompute.c). */
static bool recompute_policy(FeProgram *p, Env *e, AstExpr *x, MmRecompute *pol, int *block) {
  const char *expect = "expected none, selective, full or block(N)";
  if (is_call(x, "block")) {
    int64_t v;
    if (x->args.len != 1 || ((AstArg *)x->args.items[0])->name) {
      diag_error(p->d, x->loc, "block takes one number of layers: block(N)");
      return false;
    }
    if (!fe_eval_int(p, e, ((AstArg *)x->args.items[0])->value, &v)) return false;
    if (v < 1 || v > 1 << 20) {
      diag_error(p->d, x->loc, "block(N) recomputes N >= 1 layers per stack, not %lld",
                 (long long)v);
      return false;
    }
    *pol = MM_RECOMPUTE_BLOCK;
    *block = (int)v;
    return true;
  }
  const char *k = sym_of(p, e, x);
  if (!k) return false;
  int i = mm_enum_index(mm_recompute_names, k);
  if (i < 0 || i == MM_RECOMPUTE_BLOCK) { /* block takes its N: block(N) */
    diag_error(p->d, x->loc, "unknown recompute policy '%s' (%s)", k, expect);
    return false;
  }
  *pol = (MmRecompute)i;
  return true;
}

static const char *policy_text(FeProgram *p, MmRecompute pol, int block) {
  return pol == MM_RECOMPUTE_BLOCK ? arena_printf(&p->ast, "block:%d", block)
                                   : mm_recompute_names[pol];
}

static bool read_recompute(FeProgram *p, Env *e, AstStmt *s, MmPlan *pl) {
  AstExpr *x = s->value;
  if (!is_call(x, "by_module"))
    return recompute_policy(p, e, x, &pl->recompute, &pl->recompute_block);
  bool ok = true;
  /* after the policies of the sub-model blocks (read first), if any */
  const char **by = ARENA_ARRAY(&p->ast, const char *, pl->nrecompute_by + x->args.len + 1);
  SrcLoc *by_loc = ARENA_ARRAY(&p->ast, SrcLoc, pl->nrecompute_by + x->args.len + 1);
  for (int i = 0; i < pl->nrecompute_by; i++)
    by[i] = pl->recompute_by[i], by_loc[i] = pl->recompute_by_loc[i];
  pl->recompute_by = by;
  pl->recompute_by_loc = by_loc;
  for (int i = 0; i < x->args.len; i++) {
    AstArg *a = x->args.items[i];
    if (!a->name) {
      diag_error(p->d, a->value->loc,
                 "by_module takes sub-model = policy pairs, e.g. by_module(vision = full, llm = "
                 "block(2))");
      ok = false;
      continue;
    }
    MmRecompute pol;
    int block = 0;
    if (!recompute_policy(p, e, a->value, &pol, &block)) {
      ok = false;
      continue;
    }
    pl->recompute_by_loc[pl->nrecompute_by] = a->loc;
    pl->recompute_by[pl->nrecompute_by++] =
        arena_printf(&p->ast, "%s=%s", a->name, policy_text(p, pol, block));
  }
  return ok;
}

static bool covers(const char *unit, const char *param) {
  if (!unit[0]) return true;
  size_t n = strlen(unit);
  return strncmp(unit, param, n) == 0 && (param[n] == '.' || param[n] == 0);
}

/* ---- layer-count stage lists (MindSpeed-MM's pipeline_num_layers) ----
 * `stages = [1, 7, 10, 10]` (the model's one stack) or per sub-model
 * `stages = by_module(vision = [4, 0, 0, 0], llm = [0, 8, 10, 10])`: entry s
 * of a list is how many of that stack's layers (in order) stage s holds,
 * 0 for none. The other parameters go where the forward uses them: a
 * counted sub-model's before its first layer with that layer, the rest
 * with its last layer; another sub-model's with the counted layer run last
 * before its first use (or the first counted layer). */
typedef struct CountList {
  const char *sub; /* the sub-model, or NULL: the model's only stack */
  Inst *stack;
  AstExpr *x; /* the list */
  int *n;
  int len;
} CountList;

static void stacks_under(Inst *in, Inst **out, int *n, int max) {
  for (Binding *b = in->env.head; b; b = b->next) {
    Inst *c = b->val && b->val->k == V_INST ? b->val->inst : NULL;
    size_t pl = strlen(in->path);
    if (!c || c == in || strncmp(c->path, in->path, pl) != 0 || strlen(c->path) <= pl) continue;
    if (pl && c->path[pl] != '.') continue;
    bool seen = false;
    for (int i = 0; i < *n; i++) seen |= out[i] == c;
    if (seen) continue;
    if (c->is_stack) {
      if (*n < max) out[*n] = c;
      (*n)++;
    } else if (!c->is_stack && c->layer < 0) {
      stacks_under(c, out, n, max);
    }
  }
}

static bool is_count_list(AstExpr *x) {
  if (is_call(x, "by_module")) return true;
  if (x->kind != AST_LIST || x->items.len == 0) return false;
  AstExpr *i0 = x->items.items[0];
  return i0->kind == AST_INT || i0->kind == AST_FLOAT ||
         (i0->kind == AST_UNARY && i0->op == OP_NEG);
}

static bool read_counts(FeProgram *p, Env *e, CountList *c) {
  AstExpr *x = c->x;
  if (x->kind != AST_LIST || x->items.len == 0) {
    diag_error(p->d, x->loc,
               "stages: '%s' takes a list of layer counts, one per stage, e.g. [0, 8, 10, 10]",
               c->sub);
    return false;
  }
  bool ok = true;
  c->len = x->items.len;
  c->n = ARENA_ARRAY(&p->ast, int, c->len);
  for (int i = 0; i < c->len; i++) {
    AstExpr *it = x->items.items[i];
    Val *v = fe_eval(p, e, it);
    if (v->k == V_ERR) {
      ok = false;
    } else if (v->k != V_INT || v->i < 0 || v->i > 1 << 20) {
      diag_error(p->d, it->loc,
                 "stages: entry %d is %s; a layer count is a whole number >= 0 (0: the stage holds "
                 "none of these layers)",
                 i, fe_expr_text(p, it));
      ok = false;
    } else {
      c->n[i] = (int)v->i;
    }
  }
  if (!ok) return false;
  int sum = 0;
  for (int i = 0; i < c->len; i++) sum += c->n[i];
  if (sum != c->stack->nlayers) {
    diag_error(p->d, x->loc, "stages: the layer counts%s%s%s add up to %d, but %s has %d layers",
               c->sub ? " of '" : "", c->sub ? c->sub : "", c->sub ? "'" : "", sum, c->stack->path,
               c->stack->nlayers);
    return false;
  }
  return true;
}

/* The first node (over the functions, in order) reading each parameter. */
static int64_t first_use(FeProgram *p, const IrValue *v) {
  int64_t base = 0;
  for (int fi = 0; fi < p->ir->funcs.len; fi++) {
    IrFunc *f = p->ir->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      for (int k = 0; k < n->nin; k++)
        if (n->in[k] == v) return base + i;
    }
    base += f->nodes.len;
  }
  return INT64_MAX;
}

static bool stage_counts(FeProgram *p, Inst *root, AstExpr *x, MmPlan *pl) {
  int nc = x->kind == AST_CALL ? x->args.len : 1;
  CountList *cl = ARENA_ARRAY(&p->ast, CountList, nc + 1);
  bool ok = true;
  for (int i = 0; i < nc; i++) {
    CountList *c = &cl[i];
    Inst *under = root;
    if (x->kind == AST_CALL) {
      AstArg *a = x->args.items[i];
      Binding *b = a->name ? env_lookup_local(&root->env, a->name) : NULL;
      if (!a->name || !b || b->val->k != V_INST || b->val->inst->is_stack) {
        diag_error(p->d, a->loc,
                   a->name ? "stages: '%s' is not a sub-model of this model"
                           : "stages: by_module takes sub-model = [layer counts] pairs, e.g. "
                             "by_module(vision = [4, 0], llm = [0, 8])",
                   a->name);
        ok = false;
        continue;
      }
      for (int j = 0; j < i; j++)
        if (cl[j].sub && strcmp(cl[j].sub, a->name) == 0) {
          diag_error(p->d, a->loc, "stages: '%s' is given twice", a->name);
          ok = false;
        }
      c->sub = a->name;
      c->x = a->value;
      under = b->val->inst;
    } else {
      c->x = x;
    }
    Inst *st[8];
    int ns = 0;
    stacks_under(under, st, &ns, 8);
    if (ns != 1) {
      diag_error(p->d, c->x->loc,
                 ns == 0
                     ? "stages: layer counts cut a stack of layers (Block(...) x N), but %s has "
                       "none"
                     : "stages: layer counts cut one stack, but %s has %d; give the counts per "
                       "sub-model, stages = by_module(name = [...], ...), or list the stages",
                 c->sub ? c->sub : "the model", ns);
      ok = false;
      continue;
    }
    c->stack = st[0];
    ok &= read_counts(p, &root->env, c);
  }
  for (int i = 1; ok && i < nc; i++)
    if (cl[i].len != cl[0].len) {
      diag_error(p->d, cl[i].x->loc, "stages: '%s' lists %d stages, but '%s' lists %d", cl[i].sub,
                 cl[i].len, cl[0].sub, cl[0].len);
      ok = false;
    }
  if (!ok) return false;
  int S = cl[0].len, np = p->ir->params.len;
  int *stage = ARENA_ARRAY(&p->ast, int, np + 1);
  int64_t *use = ARENA_ARRAY(&p->ast, int64_t, np + 1);
  int *owner = ARENA_ARRAY(&p->ast, int, np + 1); /* the count list, -1 */
  for (int i = 0; i < np; i++) {
    IrValue *v = p->ir->params.items[i];
    use[i] = first_use(p, v);
    stage[i] = -1;
    owner[i] = -1;
    for (int c = 0; c < nc; c++) {
      if (covers(cl[c].stack->path, v->name) && v->group == cl[c].stack->group && v->layer >= 0) {
        int q = v->layer, s = 0, cum = cl[c].n[0];
        while (q >= cum && s + 1 < S) cum += cl[c].n[++s];
        stage[i] = s;
      }
      if (covers(cl[c].sub ? cl[c].sub : "", v->name)) owner[i] = c;
    }
  }
  for (int i = 0; i < np; i++) {
    if (stage[i] >= 0) continue;
    /* the counted layers of its own list (or of every list) around its first use */
    int before = -1, first = -1, last = -1;
    int64_t bu = -1, fu = INT64_MAX, lu = -1;
    for (int j = 0; j < np; j++) {
      IrValue *w = p->ir->params.items[j];
      if (stage[j] < 0 || w->layer < 0 || (owner[i] >= 0 && owner[j] != owner[i])) continue;
      if (use[j] < fu) fu = use[j], first = stage[j];
      if (use[j] >= lu) lu = use[j], last = stage[j];
      if (use[j] < use[i] && use[j] >= bu) bu = use[j], before = stage[j];
    }
    stage[i] = owner[i] >= 0 ? (use[i] < fu ? first : last) : before >= 0 ? before : first;
    if (stage[i] < 0) stage[i] = 0;
  }
  pl->nstages = S;
  pl->stages = ARENA_ARRAY(&p->ast, MmStage, S);
  for (int s = 0; s < S; s++) pl->stages[s].units = ARENA_ARRAY(&p->ast, const char *, np + 1);
  for (int i = 0; i < np; i++) { /* a counted layer as one unit, the rest by name */
    MmStage *ms = &pl->stages[stage[i]];
    IrValue *v = p->ir->params.items[i];
    const char *u = v->name;
    for (int c = 0; c < nc; c++)
      if (v->group == cl[c].stack->group && v->layer >= 0 && v->layer < cl[c].stack->nlayers &&
          covers(cl[c].stack->path, v->name))
        u = cl[c].stack->layers[v->layer]->path;
    if (!ms->nunits || strcmp(ms->units[ms->nunits - 1], u) != 0) ms->units[ms->nunits++] = u;
  }
  return true;
}

/* The sub-model blocks of a parallel section (docs/subplans.md): each a
 * top-level instance of the model with its own tp, dp and sp, kept as
 * "NAME:tp=T,dp=D,sp=S" with their locations; a block's recompute policy
 * joins the per-sub-model policies (recompute = by_module(...)) as
 * "NAME=POLICY". */
enum { SUB_NAME, SUB_TP, SUB_DP, SUB_SP, SUB_NLOC };

static bool read_subplans(FeProgram *p, Inst *root, AstStmt *sec, MmPlan *pl) {
  int n = 0;
  for (int i = 0; i < sec->body.len; i++) n += ((AstStmt *)sec->body.items[i])->kind == ST_SECTION;
  if (!n) return true;
  bool ok = true;
  pl->subplans = ARENA_ARRAY(&p->ast, const char *, n + 1);
  pl->subplan_loc = ARENA_ARRAY(&p->ast, SrcLoc, (size_t)n * SUB_NLOC);
  pl->recompute_by = ARENA_ARRAY(&p->ast, const char *, n + 1);
  pl->recompute_by_loc = ARENA_ARRAY(&p->ast, SrcLoc, n + 1);
  for (int i = 0; i < sec->body.len; i++) {
    AstStmt *b = sec->body.items[i];
    if (b->kind != ST_SECTION) continue;
    for (int j = 0; j < i; j++) {
      AstStmt *o = sec->body.items[j];
      if (o->kind == ST_SECTION && !strcmp(o->name, b->name)) {
        diag_error(p->d, b->name_loc, "sub-model '%s' has two blocks in this parallel section",
                   b->name);
        diag_note(p->d, o->name_loc, "first here");
        ok = false;
      }
    }
    Binding *bd = env_lookup_local(&root->env, b->name);
    if (!bd || bd->val->k != V_INST || bd->val->inst->is_stack) {
      char names[400] = "";
      size_t len = 0;
      for (Binding *q = root->env.head; q; q = q->next)
        if (q->val && q->val->k == V_INST && !q->val->inst->is_stack && len + 64 < sizeof names)
          len +=
              (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", len ? ", " : "", q->name);
      diag_error(p->d, b->name_loc, "'%s' is not a sub-model of %s (its sub-models: %s)", b->name,
                 root->decl->name, len ? names : "none");
      ok = false;
      continue;
    }
    MmPlan one;
    MmTrain unused;
    mm_settings_default(&one, &unused);
    SrcLoc *loc = &pl->subplan_loc[(size_t)pl->nsubplans * SUB_NLOC];
    loc[SUB_NAME] = b->name_loc;
    for (int k = 0; k < b->body.len; k++) {
      AstStmt *s = b->body.items[k];
      if (s->kind == ST_SECTION) {
        diag_error(p->d, s->name_loc, "a sub-model's block holds settings, not blocks");
        ok = false;
        continue;
      }
      if (set_twice(p, b, k)) ok = false;
      const MmSetDesc *d = row_of_key(MM_OWN_PLAN, s->name);
      if (d && d->id == MM_SET_RECOMPUTE) { /* this sub-model's recompute policy */
        MmRecompute pol;
        int block = 0;
        if (!recompute_policy(p, &root->env, s->value, &pol, &block)) {
          ok = false;
          continue;
        }
        pl->recompute_by_loc[pl->nrecompute_by] = s->name_loc;
        pl->recompute_by[pl->nrecompute_by++] =
            arena_printf(&p->ast, "%s=%s", b->name, policy_text(p, pol, block));
        continue;
      }
      int at = !d                   ? -1
               : d->id == MM_SET_TP ? SUB_TP
               : d->id == MM_SET_DP ? SUB_DP
               : d->id == MM_SET_SP ? SUB_SP
                                    : -1;
      if (at < 0) {
        diag_error(p->d, s->name_loc,
                   d ? "'%s' is set for the whole model: a sub-model's block takes tp, dp, sp "
                       "and recompute"
                     : "unknown sub-model setting '%s' (expected tp, dp, sp or recompute)",
                   s->name);
        ok = false;
        continue;
      }
      loc[at] = s->name_loc;
      ok &= read_row(p, &root->env, s, d, &one);
    }
    pl->subplans[pl->nsubplans++] =
        arena_printf(&p->ast, "%s:tp=%d,dp=%d,sp=%d", b->name, one.tp, one.dp, one.sp ? 1 : 0);
  }
  return ok;
}

static bool read_parallel(FeProgram *p, Inst *root, AstStmt *sec, MmPlan *pl) {
  bool ok = true;
  if (sec) ok = read_subplans(p, root, sec, pl);
  for (int i = 0; sec && i < sec->body.len; i++) {
    AstStmt *s = sec->body.items[i];
    if (s->kind != ST_SETTING) continue;
    if (set_twice(p, sec, i)) ok = false;
    const MmSetDesc *d = row_of_key(MM_OWN_PLAN, s->name);
    if (!d) {
      diag_error(p->d, s->name_loc, "unknown parallel setting '%s' (expected %s)", s->name,
                 keys_of(p, MM_OWN_PLAN));
      ok = false;
      continue;
    }
    pl->loc[d->id] = s->name_loc;
    if (d->kind != IR_SK_STAGES && d->id != MM_SET_RECOMPUTE) {
      ok &= read_row(p, &root->env, s, d, pl);
    } else if (d->id == MM_SET_RECOMPUTE) {
      ok &= read_recompute(p, &root->env, s, pl);
    } else if (is_count_list(s->value)) {
      ok &= stage_counts(p, root, s->value, pl);
    } else {
      p->in_stages = true;
      Val *l = fe_eval(p, &root->env, s->value);
      p->in_stages = false;
      if (l->k == V_ERR) {
        ok = false;
        continue;
      }
      if (l->k != V_LIST || l->n < 1) {
        diag_error(p->d, s->value->loc,
                   "stages takes a list of stages, e.g. [vision + llm.blocks[0:8], "
                   "llm.blocks[8:24] + llm.head]");
        ok = false;
        continue;
      }
      pl->nstages = l->n;
      pl->stages = ARENA_ARRAY(&p->ast, MmStage, l->n);
      for (int k = 0; k < l->n; k++) {
        Val *st = l->items[k];
        int cnt = st->k == V_UNITS ? st->n : 1;
        Val **items = st->k == V_UNITS ? st->items : &l->items[k];
        int total = 0;
        for (int j = 0; j < cnt; j++)
          total += items[j]->k == V_SLICE ? items[j]->hi - items[j]->lo : 1;
        MmStage *ms = &pl->stages[k];
        ms->units = ARENA_ARRAY(&p->ast, const char *, total + 1);
        for (int j = 0; j < cnt; j++) {
          Val *u = items[j];
          if (u->k == V_INST)
            ms->units[ms->nunits++] = u->inst->path;
          else if (u->k == V_SLICE)
            for (int q = u->lo; q < u->hi; q++) ms->units[ms->nunits++] = u->inst->layers[q]->path;
          else if (u->k == V_TENSOR && u->t->role == IR_ROLE_PARAM)
            ms->units[ms->nunits++] = u->t->name;
          else {
            diag_error(p->d, s->value->loc,
                       "stage %d: a %s is not a sub-model, layer slice or parameter", k,
                       val_kind_name(u->k));
            ok = false;
          }
        }
      }
    }
  }
  return ok;
}

/* The unit a parameter belongs to for messages: its stack layer, or its
 * top-level instance. */
static const char *unit_of(FeProgram *p, const IrValue *v) {
  if (v->group >= 0) {
    IrGroup *g = p->ir->groups.items[v->group];
    return arena_printf(&p->ast, "%s.%d", g->name, v->layer);
  }
  const char *dot = strchr(v->name, '.');
  return dot ? arena_strndup(&p->ast, v->name, (size_t)(dot - v->name)) : v->name;
}

/* The stages must follow the forward's data flow: where a parameter is
 * first used, the other inputs of that node come from its own stage or
 * earlier ones (a stage never feeds one listed before it; tied weights used
 * again later are fine). Out of order, every micro-batch's activations would
 * travel back and forth between the ranks. */
static bool check_stage_order(FeProgram *p, const MmPlan *pl) {
  IrFunc *f = p->ir && p->ir->funcs.len ? ir_module_func(p->ir, "forward") : NULL;
  if (!f) return true;
  Arena a;
  arena_init(&a);
  IrMap stage, seen; /* param -> its stage; value -> the latest stage it depends on */
  ir_map_init(&stage, &a, false);
  ir_map_init(&seen, &a, false);
  for (int i = 0; i < p->ir->params.len; i++) {
    IrValue *v = p->ir->params.items[i];
    for (int s = 0; s < pl->nstages; s++)
      for (int u = 0; u < pl->stages[s].nunits; u++)
        if (covers(pl->stages[s].units[u], v->name)) {
          ir_map_put(&stage, v)->i = s + 1;
          s = pl->nstages;
          break;
        }
  }
  bool ok = true;
  for (int i = 0; i < f->nodes.len && ok; i++) {
    IrNode *n = f->nodes.items[i];
    int64_t from = 0; /* the latest stage the node's non-parameter inputs depend on, + 1 */
    for (int k = 0; k < n->nin; k++) {
      IrMapSlot *sl =
          n->in[k] && n->in[k]->role != IR_ROLE_PARAM ? ir_map_get(&seen, n->in[k]) : NULL;
      if (sl && sl->i > from) from = sl->i;
    }
    int64_t at = from;
    for (int k = 0; k < n->nin && ok; k++) {
      IrValue *v = n->in[k];
      IrMapSlot *st = v && v->role == IR_ROLE_PARAM ? ir_map_get(&stage, v) : NULL;
      if (!st) continue;
      if (st->i > at) at = st->i;
      if (st->p) continue; /* used before: its first use was checked */
      st->p = v;
      if (from > st->i) {
        diag_error(p->d, pl->loc[MM_SET_STAGES],
                   "pipeline stages out of order: '%s' is in stage %lld, but its first use "
                   "takes values computed in stage %lld; %s",
                   unit_of(p, v), (long long)st->i - 1, (long long)from - 1,
                   pl->placement == MM_PLACE_SEPARATE
                       ? "placement = separate runs the first block's sub-model first: write "
                         "the blocks in the order of the forward"
                       : "list the stages in the order of the forward");
        diag_note(p->d, n->loc, "'%s' is first used here", unit_of(p, v));
        ok = false;
      }
    }
    for (int k = 0; k < n->nout; k++)
      if (at) ir_map_put(&seen, n->out[k])->i = at;
  }
  arena_free(&a);
  return ok;
}

static bool check_stages(FeProgram *p, MmPlan *pl, SrcLoc at) {
  bool ok = true;
  if (pl->nstages != pl->pp * pl->vpp && pl->vpp > 1) {
    diag_error(p->d, pl->loc[MM_SET_STAGES], "%d stages are listed, but pp = %d x vpp = %d is %d",
               pl->nstages, pl->pp, pl->vpp, pl->pp * pl->vpp);
    ok = false;
  } else if (pl->nstages != pl->pp * pl->vpp) {
    diag_error(p->d, pl->loc[MM_SET_STAGES], "%d stages are listed, but pp = %d", pl->nstages,
               pl->pp);
    if (pl->loc[MM_SET_PP].file) diag_note(p->d, pl->loc[MM_SET_PP], "pp set here");
    ok = false;
  }
  for (int s = 0; s < pl->nstages; s++) {
    int held = 0;
    for (int i = 0; i < p->ir->params.len; i++) {
      IrValue *v = p->ir->params.items[i];
      for (int u = 0; u < pl->stages[s].nunits; u++)
        if (covers(pl->stages[s].units[u], v->name)) {
          held++;
          break;
        }
    }
    if (held == 0) {
      diag_error(p->d, pl->loc[MM_SET_STAGES], "stage %d holds no parameters", s);
      ok = false;
    }
  }
  const char *last_missing = NULL, *last_dup = NULL;
  int nerr = 0;
  for (int i = 0; i < p->ir->params.len && nerr < 8; i++) {
    IrValue *v = p->ir->params.items[i];
    int first = -1, second = -1;
    for (int s = 0; s < pl->nstages; s++)
      for (int u = 0; u < pl->stages[s].nunits; u++)
        if (covers(pl->stages[s].units[u], v->name)) {
          if (first < 0)
            first = s;
          else if (second < 0 && s != first)
            second = s;
          break;
        }
    const char *unit = unit_of(p, v);
    if (first < 0 && (!last_missing || strcmp(last_missing, unit) != 0)) {
      diag_error(p->d, pl->loc[MM_SET_STAGES], "'%s' is in no pipeline stage", unit);
      last_missing = unit;
      ok = false;
      nerr++;
    } else if (second >= 0 && (!last_dup || strcmp(last_dup, unit) != 0)) {
      diag_error(p->d, pl->loc[MM_SET_STAGES],
                 "'%s' is in stages %d and %d; every layer belongs to exactly one", unit, first,
                 second);
      last_dup = unit;
      ok = false;
      nerr++;
    }
  }
  (void)at;
  return ok && check_stage_order(p, pl);
}

static SrcLoc or_loc(SrcLoc a, SrcLoc b) {
  return a.file ? a : b;
}

/* dp splits every input along its first dimension (the batch). The shard
 * pass applies the same rule to IR text; here `mmc check` sees it too. */
static bool check_dp_batch(FeProgram *p, const MmPlan *pl) {
  bool ok = true;
  for (int fi = 0; pl->dp > 1 && fi < p->ir->funcs.len; fi++) {
    IrFunc *f = p->ir->funcs.items[fi];
    for (int i = 0; i < f->inputs.len; i++) {
      IrValue *x = f->inputs.items[i];
      if (x->shape.rank == 0 || x->shape.d[0] % pl->dp == 0) continue;
      diag_error(p->d, x->loc,
                 "data parallel: dp = %d does not divide the batch of %lld of input '%s'", pl->dp,
                 (long long)x->shape.d[0], x->name);
      if (pl->loc[MM_SET_DP].file) diag_note(p->d, pl->loc[MM_SET_DP], "dp set here");
      ok = false;
    }
  }
  return ok;
}

/* Hierarchical ZeRO (docs/hzero.md): zero_across = 1 and ranks_per_node
 * R make node groups of n = R / (tp x cp) consecutive dp ranks; `zero`
 * applies within each group and ZeRO-1 across them.  n must divide dp,
 * and both levels must have more than one group member. */
static bool refuse_hzero(FeProgram *p, const MmPlan *pl, SrcLoc model_loc) {
  int before = p->d->errors;
  SrcLoc za = or_loc(pl->loc[MM_SET_ZERO_ACROSS], model_loc),
         rn = or_loc(pl->loc[MM_SET_RANKS_PER_NODE], model_loc);
  if (!pl->zero_across) {
    if (pl->ranks_per_node)
      diag_error(p->d, rn,
                 "ranks_per_node = %d sets hierarchical ZeRO's node size, but zero_across is not "
                 "set: alone it changes nothing",
                 pl->ranks_per_node);
    return p->d->errors == before;
  }
  int64_t group = (int64_t)pl->tp * pl->cp, n = group ? pl->ranks_per_node / group : 0;
  if (pl->zero < 1)
    diag_error(p->d, za,
               "zero_across = %d is the ZeRO stage across nodes under a stage within them, but "
               "zero = %d: set zero = 1, 2 or 3",
               pl->zero_across, pl->zero);
  else if (pl->pp > 1)
    diag_error(p->d, za, "hierarchical ZeRO (zero_across) under a pipeline (pp = %d) is not built",
               pl->pp);
  else if (!pl->ranks_per_node)
    diag_error(p->d, za,
               "zero_across needs the node size: ranks_per_node = N in the parallel section or "
               "--ranks-per-node N");
  else if (pl->ranks_per_node % group)
    diag_error(p->d, rn, "ranks_per_node = %d: a node must hold whole tp x cp groups of %lld ranks",
               pl->ranks_per_node, (long long)group);
  else if (pl->dp % n)
    diag_error(p->d, rn,
               "ranks_per_node = %d makes node groups of %lld dp ranks, which do not divide dp = "
               "%d",
               pl->ranks_per_node, (long long)n, pl->dp);
  else if (n < 2 || n == pl->dp)
    diag_error(p->d, rn,
               "ranks_per_node = %d makes %s (dp = %d): hierarchical ZeRO needs at least two "
               "nodes of at least two dp ranks each",
               pl->ranks_per_node, n < 2 ? "node groups of one dp rank" : "one node group", pl->dp);
  return p->d->errors == before;
}

/* Settings that would do nothing are refused, never ignored: a schedule,
 * a one-stage list or vpp without a pipeline (pp > 1), vpp without the
 * interleaved schedule, bucket_mb under a pipeline (its gradients are not
 * bucketed), cp_kind without context parallel, and zero and bucket_mb
 * without data parallel. */
static bool refuse_inert(FeProgram *p, const MmPlan *pl, SrcLoc model_loc) {
  const MmPlanFlags *f = &p->opts.flags;
  int before = p->d->errors;
  if ((pl->loc[MM_SET_SCHEDULE].file || f->given[MM_SET_SCHEDULE]) && pl->pp <= 1)
    diag_error(p->d, or_loc(pl->loc[MM_SET_SCHEDULE], model_loc),
               "a pipeline schedule orders the stages of pp > 1, but pp = %d", pl->pp);
  if (pl->stages && pl->pp <= 1 && pl->nstages == 1)
    diag_error(p->d, or_loc(pl->loc[MM_SET_STAGES], model_loc),
               "one stage holds the whole model: a stage list cuts pp > 1 stages");
  if (pl->loc[MM_SET_VPP].file && pl->vpp > 1 && pl->pp <= 1)
    diag_error(p->d, pl->loc[MM_SET_VPP], "vpp = %d virtual stages per rank need pp > 1", pl->vpp);
  else if (pl->loc[MM_SET_VPP].file && pl->vpp > 1 && pl->schedule != MM_SCHED_INTERLEAVED)
    diag_error(p->d, pl->loc[MM_SET_VPP],
               "vpp = %d virtual stages per rank need schedule = interleaved", pl->vpp);
  if (pl->schedule == MM_SCHED_INTERLEAVED && pl->pp > 1 && pl->vpp <= 1) {
    if (f->given[MM_SET_SCHEDULE])
      diag_error(p->d, model_loc,
                 "--schedule interleaved needs vpp > 1 virtual stages per rank, but vpp = %d: "
                 "set vpp = 2 (or more) in the model's parallel section",
                 pl->vpp);
    else
      diag_error(p->d, pl->loc[MM_SET_SCHEDULE],
                 "schedule = interleaved needs vpp > 1 virtual stages per rank, but vpp = %d: "
                 "set vpp = 2 (or more) in this parallel section",
                 pl->vpp);
    if (pl->loc[MM_SET_VPP].file) diag_note(p->d, pl->loc[MM_SET_VPP], "vpp set here");
  }
  if (pl->cp_ulysses > 0) {
    SrcLoc at = or_loc(pl->loc[MM_SET_CP_ULYSSES], model_loc);
    if (pl->cp <= 1)
      diag_error(p->d, at, "cp_ulysses sets the Ulysses degree inside the cp ring, but cp = %d",
                 pl->cp);
    else if (pl->cp % pl->cp_ulysses)
      diag_error(p->d, at, "cp_ulysses = %d does not divide cp = %d (USP: cp = ulysses x ring)",
                 pl->cp_ulysses, pl->cp);
    else if (pl->cp_kind == MM_CP_ULYSSES &&
             (pl->loc[MM_SET_CP_KIND].file || f->given[MM_SET_CP_KIND]))
      diag_error(p->d, at,
                 "cp_ulysses makes a ring of Ulysses groups (USP), but cp_kind = ulysses; use "
                 "cp_kind = ring or leave it out");
  }
  if ((pl->loc[MM_SET_CP_KIND].file || f->given[MM_SET_CP_KIND]) && pl->cp <= 1)
    diag_error(p->d, or_loc(pl->loc[MM_SET_CP_KIND], model_loc),
               "cp_kind chooses how context parallel splits, but cp = %d", pl->cp);
  if (pl->zero >= 1 && pl->dp <= 1)
    diag_error(p->d, or_loc(pl->loc[MM_SET_ZERO], model_loc),
               "zero = %d shards over data parallel, but dp = %d", pl->zero, pl->dp);
  if (!refuse_hzero(p, pl, model_loc)) return false;
  if ((pl->loc[MM_SET_BUCKET_MB].file || f->given[MM_SET_BUCKET_MB]) && pl->dp <= 1)
    diag_error(p->d, or_loc(pl->loc[MM_SET_BUCKET_MB], model_loc),
               "bucket_mb groups the data-parallel gradient all-reduces, but dp = %d", pl->dp);
  if ((pl->loc[MM_SET_BUCKET_MB].file || f->given[MM_SET_BUCKET_MB]) && pl->pp > 1 && pl->dp > 1)
    diag_error(p->d, or_loc(pl->loc[MM_SET_BUCKET_MB], model_loc),
               "bucket_mb: under pp > 1 each gradient is all-reduced in its own stage's backward "
               "(buckets are not built for pipelines)");
  if (f->given[MM_SET_NO_OVERLAP] && (pl->dp <= 1 || (pl->bucket_mb <= 0 && pl->zero != 3)))
    diag_error(p->d, model_loc, "--no-overlap makes the gradient buckets blocking, but %s",
               pl->dp <= 1 ? "dp = 1: there are none" : "bucket_mb = 0: there are none");
  return p->d->errors == before;
}

/* The sub-plan of the sub-model path lies in: its tp and where that was set. */
static int site_tp(const MmPlan *pl, const char *path, SrcLoc *at) {
  for (int i = 0; path && i < pl->nsubplans; i++) {
    MmSubPlan s;
    if (!mm_subplan_parse(pl->subplans[i], &s)) continue;
    size_t n = (size_t)s.namelen;
    if (!strncmp(path, s.name, n) && (path[n] == '.' || !path[n])) {
      if (pl->subplan_loc)
        *at = pl->subplan_loc[i * SUB_NLOC +
                              (pl->subplan_loc[i * SUB_NLOC + SUB_TP].file ? SUB_TP : SUB_NAME)];
      return s.tp;
    }
  }
  return pl->tp;
}

/* placement = separate (docs/subplans.md "Separate placement"): a pipeline
 * of two stages, the first block's instance on the first and every other
 * top-level instance (the projector, the LLM, the glue's) on the second,
 * in micro_batches = 2 unless the section or a flag gives a number. */
static void separate_stages(FeProgram *p, Inst *root, MmPlan *pl) {
  MmSubPlan s0;
  MM_ASSERT(mm_subplan_parse(pl->subplans[0], &s0));
  int n = 0;
  for (Binding *q = root->env.head; q; q = q->next)
    n += q->val && q->val->k == V_INST && !q->val->inst->is_stack;
  pl->pp = 2;
  pl->nstages = 2;
  pl->stages = ARENA_ARRAY(&p->ast, MmStage, 2);
  pl->stages[0].units = ARENA_ARRAY(&p->ast, const char *, 1);
  pl->stages[0].units[0] = arena_printf(&p->ast, "%.*s", s0.namelen, s0.name);
  pl->stages[0].nunits = 1;
  pl->stages[1].units = ARENA_ARRAY(&p->ast, const char *, n + 1);
  const char **u = pl->stages[1].units;
  int k = 0;
  for (Binding *q = root->env.head; q; q = q->next)
    if (q->val && q->val->k == V_INST && !q->val->inst->is_stack &&
        strcmp(q->name, pl->stages[0].units[0]))
      u[k++] = q->name;
  /* the environment lists the newest binding first: declaration order */
  for (int i = 0; i < k / 2; i++) {
    const char *t = u[i];
    u[i] = u[k - 1 - i], u[k - 1 - i] = t;
  }
  pl->stages[1].nunits = k;
  pl->loc[MM_SET_PP] = pl->loc[MM_SET_STAGES] = pl->loc[MM_SET_PLACEMENT];
  if (!pl->loc[MM_SET_MICRO_BATCHES].file && !p->opts.flags.given[MM_SET_MICRO_BATCHES])
    pl->micro_batches = 2;
}

/* Colocated sub-plans (docs/subplans.md): every sub-model's tp x dp is the
 * world; the mesh is the largest tp by world / tp, and a sub-model's tp is
 * 1 (its dp then spans the tp axis too) or that largest one. Sets the
 * plan's tp, dp and sp from them. */
static bool resolve_subplans(FeProgram *p, Inst *root, MmPlan *pl, SrcLoc model_loc) {
  bool sep = pl->placement == MM_PLACE_SEPARATE;
  if (sep && pl->nsubplans != 2) {
    diag_error(p->d, pl->loc[MM_SET_PLACEMENT],
               "placement = separate needs two sub-model blocks, the first stage's group and "
               "the second's (e.g. vision { dp = 2 } llm { tp = 2 }), but the parallel section "
               "has %d",
               pl->nsubplans);
    return false;
  }
  if (!pl->nsubplans) {
    if (pl->loc[MM_SET_PLACEMENT].file)
      diag_error(p->d, pl->loc[MM_SET_PLACEMENT],
                 "placement places per-sub-model plans, but the parallel section has no "
                 "sub-model block");
    return !pl->loc[MM_SET_PLACEMENT].file;
  }
  const MmPlanFlags *f = &p->opts.flags;
  int before = p->d->errors;
  static const int whole[] = {MM_SET_TP, MM_SET_DP,   MM_SET_SP,     MM_SET_CP,
                              MM_SET_PP, MM_SET_ZERO, MM_SET_STAGES, MM_SET_VPP};
  for (size_t k = 0; k < sizeof whole / sizeof whole[0]; k++) {
    const MmSetDesc *d = &mm_settings[whole[k]];
    bool per_sub = k < 3;
    if (!sep && k >= 6) continue; /* stages and vpp: pp's, refused with it */
    const char *why = per_sub ? "set it in each sub-model's block"
                      : sep && (whole[k] == MM_SET_PP || k >= 6)
                          ? "placement = separate makes the pipeline (two stages, a block each)"
                          : "it is not built yet beside per-sub-model plans";
    if (pl->loc[d->id].file)
      diag_error(p->d, pl->loc[d->id], "'%s' for the whole model beside sub-model blocks: %s",
                 d->key, why);
    else if (f->given[d->id])
      diag_error(p->d, model_loc, "%s: the parallel section gives each sub-model its plan; %s",
                 d->flag, why);
  }
  MmSubPlan s0 = {0}, s;
  int T = 1;
  bool sp = false;
  SrcLoc tp_at = {0};
  for (int i = 0; i < pl->nsubplans; i++) {
    MM_ASSERT(mm_subplan_parse(pl->subplans[i], &s));
    const SrcLoc *loc = &pl->subplan_loc[i * SUB_NLOC];
    if (i == 0) s0 = s;
    bool one = sep && i == 1 && s0.tp * s0.dp == 1 && s.dp == 1; /* mm_subplan_one_rank */
    if (s.tp * s.dp != s0.tp * s0.dp && sep && !one) {
      SrcLoc at = loc[SUB_DP].file ? loc[SUB_DP] : loc[SUB_TP].file ? loc[SUB_TP] : loc[SUB_NAME];
      diag_error(p->d, at,
                 "placement = separate: sub-model '%.*s' runs on tp x dp = %d x %d = %d ranks, "
                 "but '%.*s' on %d x %d = %d; groups of different sizes are not built yet (both "
                 "blocks the same tp x dp, or the first on one rank and the second dp = 1)",
                 s.namelen, s.name, s.tp, s.dp, s.tp * s.dp, s0.namelen, s0.name, s0.tp, s0.dp,
                 s0.tp * s0.dp);
      diag_note(p->d, pl->subplan_loc[SUB_NAME], "'%.*s' planned here", s0.namelen, s0.name);
    } else if (s.tp * s.dp != s0.tp * s0.dp && !sep) {
      SrcLoc at = loc[SUB_DP].file ? loc[SUB_DP] : loc[SUB_TP].file ? loc[SUB_TP] : loc[SUB_NAME];
      diag_error(p->d, at,
                 "sub-model '%.*s' runs on tp x dp = %d x %d = %d ranks, but '%.*s' on %d x %d = "
                 "%d: colocated sub-models each cover all the ranks",
                 s.namelen, s.name, s.tp, s.dp, s.tp * s.dp, s0.namelen, s0.name, s0.tp, s0.dp,
                 s0.tp * s0.dp);
      diag_note(p->d, pl->subplan_loc[SUB_NAME], "'%.*s' planned here", s0.namelen, s0.name);
    }
    if (s.tp > T) T = s.tp, tp_at = loc[SUB_TP];
    if (s.sp && s.tp <= 1)
      diag_error(p->d, loc[SUB_SP],
                 "sub-model '%.*s': sequence parallel (sp) needs tensor parallel, but tp = %d",
                 s.namelen, s.name, s.tp);
    sp |= s.sp;
  }
  for (int i = 0; i < pl->nsubplans; i++) {
    MM_ASSERT(mm_subplan_parse(pl->subplans[i], &s));
    if (s.tp != 1 && s.tp != T)
      diag_error(p->d, pl->subplan_loc[i * SUB_NLOC + SUB_TP],
                 "sub-model '%.*s': tp = %d; %s sub-models take the largest tp (%d) or "
                 "tp = 1",
                 s.namelen, s.name, s.tp, sep ? "separate" : "colocated", T);
  }
  if (p->d->errors != before) return false;
  pl->tp = T;
  MM_ASSERT(mm_subplan_parse(pl->subplans[pl->nsubplans - 1], &s));
  pl->dp = s.tp * s.dp / T; /* separate: the second group (the first may be one rank) */
  pl->sp = sp;
  pl->loc[MM_SET_TP] = tp_at;
  if (sep) separate_stages(p, root, pl);
  return true;
}

/* Each sub-model's dp (over the tp axis too when its tp is 1) against the
 * batch of the inputs. */
static bool check_subplan_batch(FeProgram *p, const MmPlan *pl) {
  bool ok = true;
  IrFunc *f = p->ir && p->ir->funcs.len ? p->ir->funcs.items[0] : NULL;
  for (int i = 0; f && i < pl->nsubplans; i++) {
    MmSubPlan s;
    MM_ASSERT(mm_subplan_parse(pl->subplans[i], &s));
    for (int k = 0; k < f->inputs.len && s.dp > 1; k++) {
      IrValue *x = f->inputs.items[k];
      if (x->shape.rank == 0 || x->shape.d[0] % s.dp == 0) continue;
      const SrcLoc *loc = &pl->subplan_loc[i * SUB_NLOC];
      diag_error(p->d, loc[SUB_DP].file ? loc[SUB_DP] : loc[SUB_NAME],
                 "sub-model '%.*s': dp = %d does not divide the batch of %lld of input '%s'",
                 s.namelen, s.name, s.dp, (long long)x->shape.d[0], x->name);
      diag_note(p->d, x->loc, "input here");
      ok = false;
      break;
    }
  }
  return ok;
}

static bool check_plan(FeProgram *p, MmPlan *pl, SrcLoc model_loc) {
  bool ok = pl->nsubplans ? check_subplan_batch(p, pl) : check_dp_batch(p, pl);
  for (int i = 0; p->ir && i < pl->nrecompute_by; i++) {
    const char *r = pl->recompute_by[i], *eq = strchr(r, '=');
    const char *unit = arena_strndup(&p->ast, r, (size_t)(eq - r));
    bool found = false;
    for (int k = 0; k < p->ir->params.len && !found; k++)
      found = covers(unit, ((IrValue *)p->ir->params.items[k])->name);
    for (int j = 0; j < i && found; j++)
      if (strncmp(pl->recompute_by[j], r, (size_t)(eq - r) + 1) == 0) {
        diag_error(p->d, pl->recompute_by_loc[i], "recompute: '%s' is given twice", unit);
        ok = false;
      }
    if (!found) {
      diag_error(p->d, pl->recompute_by_loc[i], "recompute: '%s' is not a sub-model of this model",
                 unit);
      ok = false;
    }
  }
  if (pl->sp && pl->tp <= 1) {
    diag_error(p->d, or_loc(pl->loc[MM_SET_SP], model_loc),
               "sequence parallel (sp) needs tensor parallel, but tp = %d", pl->tp);
    ok = false;
  }
  /* pp_scatter changes the pipeline's transfers between tp groups: set
   * where there are none (or separate placement's, which it leaves whole),
   * it would do nothing; a search's candidate (flags.section) keeps the
   * file's where it applies */
  if (pl->loc[MM_SET_PP_SCATTER].file && !p->opts.flags.section &&
      (pl->pp <= 1 || pl->tp <= 1 || pl->placement == MM_PLACE_SEPARATE || pl->nsubplans > 0)) {
    diag_error(p->d, pl->loc[MM_SET_PP_SCATTER],
               "pp_scatter splits the pipeline's transfers over tp: it needs pp > 1 and tp > 1 "
               "without sub-model plans, but pp = %d, tp = %d%s",
               pl->pp, pl->tp, pl->nsubplans > 0 ? " with sub-model plans" : "");
    ok = false;
  }
  /* a tp that splits no parameter runs the model replicated; under sp the
   * shard pass tells whether some activation splits */
  if (pl->tp > 1 && !pl->sp && p->ir && p->opts.tp_splits &&
      p->opts.tp_splits(p->ir, pl->tp) == 0) {
    diag_error(p->d, or_loc(pl->loc[MM_SET_TP], model_loc), "%s %d splits nothing in %s: %s",
               pl->loc[MM_SET_TP].file ? "tp =" : "--tp", pl->tp, p->ir->name, TP_NOTHING);
    ok = false;
  }
  /* heads against tp and cp, sequences against the ring, once per distinct site */
  for (int i = 0; i < p->attn.len; i++) {
    AttnSite *s = p->attn.items[i];
    bool seen = false;
    for (int j = 0; j < i; j++) {
      AttnSite *o = p->attn.items[j];
      if (o->heads == s->heads && o->kv_heads == s->kv_heads && o->seq == s->seq &&
          o->kv_seq == s->kv_seq && o->causal == s->causal) {
        SrcLoc x = {0}, y = {0};
        seen = site_tp(pl, o->path, &x) == site_tp(pl, s->path, &y);
      }
    }
    if (seen) continue;
    SrcLoc tp_at = or_loc(pl->loc[MM_SET_TP], model_loc);
    int tp = site_tp(pl, s->path, &tp_at);
    if (s->heads % tp != 0) {
      diag_error(p->d, tp_at, "tp = %d does not divide the %lld attention heads of '%s'", tp,
                 (long long)s->heads, s->path);
      diag_note(p->d, s->loc, "attention with %lld heads here", (long long)s->heads);
      ok = false;
    } else if (pl->cp > 1 && (pl->cp_kind == MM_CP_ULYSSES ||
                              (pl->cp_ulysses > 1 && pl->cp % pl->cp_ulysses == 0))) {
      int64_t ways = (int64_t)pl->tp * (pl->cp_kind == MM_CP_ULYSSES ? pl->cp : pl->cp_ulysses);
      bool kv = s->heads % ways == 0; /* then the key/value heads do not divide */
      if (s->heads % ways || s->kv_heads % ways) {
        diag_error(p->d, or_loc(pl->loc[MM_SET_CP], model_loc),
                   "Ulysses context parallel: tp * %s = %lld does not divide the %lld %s heads "
                   "of '%s'",
                   pl->cp_kind == MM_CP_ULYSSES ? "cp" : "cp_ulysses", (long long)ways,
                   (long long)(kv ? s->kv_heads : s->heads), kv ? "key/value" : "attention",
                   s->path);
        diag_note(p->d, s->loc, "attention with %lld heads (%lld key/value heads) here",
                  (long long)s->heads, (long long)s->kv_heads);
        ok = false;
      }
    }
    if (pl->cp > 1 && pl->cp_kind == MM_CP_RING) {
      /* the balanced layout when a causal attention is split (2 cp chunks:
       * it must divide); a non-causal one that does not divide, or a
       * cross-attention, runs whole on every cp rank */
      bool zig = false;
      for (int j = 0; j < p->attn.len; j++) zig |= ((AttnSite *)p->attn.items[j])->causal;
      int64_t parts = zig ? 2 * (int64_t)pl->cp : pl->cp;
      if (s->causal && s->seq % parts != 0) {
        diag_error(p->d, or_loc(pl->loc[MM_SET_CP], model_loc),
                   "ring context parallel: the sequence of %lld of '%s' is not divisible by 2 * "
                   "cp = %lld (a causal ring splits it in 2 * cp chunks, rank i holding chunks i "
                   "and 2 * cp - 1 - i)",
                   (long long)s->seq, s->path, (long long)parts);
        diag_note(p->d, s->loc, "attention here");
        ok = false;
      } else if (s->seq != s->kv_seq || s->seq % parts != 0) {
        diag_warning(p->d, s->loc,
                     "ring context parallel: '%s' (%lld queries, %lld keys) is not split: it "
                     "runs whole on every cp rank (%s)",
                     s->path, (long long)s->seq, (long long)s->kv_seq,
                     s->seq != s->kv_seq ? "not a self-attention" : "cp does not divide it");
      }
    }
    if (s->kv_heads < s->heads && tp > s->kv_heads) {
      diag_error(p->d, tp_at, "tp = %d is more than the %lld key/value heads of '%s'", tp,
                 (long long)s->kv_heads, s->path);
      diag_note(p->d, s->loc, "grouped-query attention with %lld key/value heads here",
                (long long)s->kv_heads);
      ok = false;
    } else if (s->kv_heads < s->heads && s->kv_heads % tp != 0) {
      diag_error(p->d, tp_at, "tp = %d does not divide the %lld key/value heads of '%s'", tp,
                 (long long)s->kv_heads, s->path);
      diag_note(p->d, s->loc, "attention here");
      ok = false;
    }
  }
  if (pl->cp > 1 && p->attn.len == 0 && p->ir) {
    diag_error(p->d, or_loc(pl->loc[MM_SET_CP], model_loc),
               "context parallel (cp = %d) splits attention, but this model has none", pl->cp);
    ok = false;
  }
  if (pl->pp > 1) {
    if (pl->schedule == MM_SCHED_1F1B && pl->micro_batches < pl->pp) {
      diag_error(p->d, or_loc(pl->loc[MM_SET_MICRO_BATCHES], or_loc(pl->loc[MM_SET_PP], model_loc)),
                 "the 1F1B schedule needs micro_batches >= pp, but micro_batches = %d and pp = %d",
                 pl->micro_batches, pl->pp);
      ok = false;
    }
    if (pl->stages) ok &= check_stages(p, pl, model_loc);
    /* the cost model's cut (passes/pp_stage.c, which says the same for IR
     * text): a stage per run of stack layers */
    int nl = 0, S = pl->pp * pl->vpp;
    bool cut = !pl->stages && p->ir && (pl->vpp == 1 || pl->schedule == MM_SCHED_INTERLEAVED);
    for (int g = 0; cut && g < p->ir->groups.len; g++)
      nl += ((IrGroup *)p->ir->groups.items[g])->nlayers;
    SrcLoc at = pl->vpp > 1 ? or_loc(pl->loc[MM_SET_VPP], or_loc(pl->loc[MM_SET_PP], model_loc))
                            : or_loc(pl->loc[MM_SET_PP], model_loc);
    if (cut && nl < S) {
      diag_error(p->d, at,
                 "%d pipeline stages (pp = %d x vpp = %d), but the model has %d stack layer%s to "
                 "cut; list the stages (stages = [...]) or use fewer",
                 S, pl->pp, pl->vpp, nl, nl == 1 ? "" : "s");
      ok = false;
    } else if (cut && pl->vpp > 1 && nl % S != 0) {
      diag_error(p->d, at,
                 "interleaved: pp = %d x vpp = %d = %d virtual stages do not divide the %d stack "
                 "layers; list the stages (stages = [...]) to cut them unevenly",
                 pl->pp, pl->vpp, S, nl);
      ok = false;
    }
    char err[256];
    if (ok && pl->schedule != MM_SCHED_1F1B &&
        !mm_schedule_check(pl->schedule, pl->pp, pl->vpp, pl->micro_batches, err, sizeof err)) {
      diag_error(p->d, or_loc(pl->loc[MM_SET_SCHEDULE], or_loc(pl->loc[MM_SET_PP], model_loc)),
                 "%s", err);
      ok = false;
    }
  } else if (pl->stages && pl->nstages != 1) {
    ok &= check_stages(p, pl, model_loc);
  }
  return refuse_inert(p, pl, model_loc) && ok;
}

/* The flags given (settings.def's rows with a flag) over the sections. */
static void apply_flags(MmPlan *pl, MmTrain *t, const MmPlanFlags *f) {
  for (int i = 0; i < MM_SET_COUNT; i++) {
    const MmSetDesc *d = &mm_settings[i];
    void *to = mm_setting_base(d, pl, t);
    if (!f->given[i] || !to) continue;
    mm_setting_put(d, to,
                   mm_setting_get(d, mm_setting_base(d, (MmPlan *)&f->plan, (MmTrain *)&f->train)));
    (d->owner == MM_OWN_PLAN ? pl->loc : t->loc)[i] = (SrcLoc){0};
  }
  if (f->given[MM_SET_RECOMPUTE]) {
    pl->nrecompute_by = 0; /* the flag sets one policy for every sub-model */
    pl->recompute_block = f->plan.recompute_block;
  }
  if (pl->cp_ulysses > 0 && !pl->loc[MM_SET_CP_KIND].file && !f->given[MM_SET_CP_KIND])
    pl->cp_kind = MM_CP_RING; /* USP: a ring of Ulysses groups */
}

/* What a gan setting is built for: one rank, one micro-batch, fp32, no
 * LoRA, its discriminator trained (each refusal at the setting). */
static bool check_gan(FeProgram *p, const MmPlan *pl, const MmTrain *t) {
  if (!t->gan.ndisc) return true;
  const char *why = NULL;
  char buf[160];
  if (mm_plan_ranks(pl) > 1) {
    snprintf(buf, sizeof buf, "a parallel plan (tp = %d, pp = %d, cp = %d, dp = %d)", pl->tp,
             pl->pp, pl->cp, pl->dp);
    why = buf;
  } else if (pl->micro_batches > 1) {
    snprintf(buf, sizeof buf, "micro_batches = %d", pl->micro_batches);
    why = buf;
  } else if (t->precision == MM_PREC_BF16) {
    why = "precision = bf16";
  } else if (t->lora.rank > 0) {
    why = "lora";
  }
  if (why) {
    diag_error(p->d, t->gan.loc,
               "gan: the discriminator's training is built for one rank, one micro-batch, fp32 "
               "and no LoRA, not with %s",
               why);
    return false;
  }
  for (int k = 0; k < t->nfreeze; k++)
    if (covers(t->freeze[k], t->gan.disc[0]) || covers(t->gan.disc[0], t->freeze[k])) {
      diag_error(p->d, t->gan.loc, "gan: the discriminator '%s' is frozen (freeze = [..., %s])",
                 t->gan.disc[0], t->freeze[k]);
      return false;
    }
  return true;
}

/* ---- the data section (docs/data.md) ---- */

/* path against the folder of the .mm file at `at` (an absolute path stays) */
static const char *beside(FeProgram *p, SrcLoc at, const char *path, size_t n) {
  if (path[0] == '/') return arena_printf(&p->ast, "%.*s", (int)n, path);
  char *real = realpath(diag_path(p->d, at), NULL);
  const char *mm = real ? arena_strdup(&p->ast, real) : diag_path(p->d, at);
  free(real);
  const char *slash = strrchr(mm, '/');
  const char *out = slash ? arena_printf(&p->ast, "%.*s/%.*s", (int)(slash - mm), mm, (int)n, path)
                          : arena_printf(&p->ast, "%.*s", (int)n, path);
  char *canon = realpath(out, NULL); /* "m/../corpus.jsonl" as "corpus.jsonl" when it exists */
  if (canon) out = arena_strdup(&p->ast, canon);
  free(canon);
  return out;
}

/* a file that reads (a folder does not) */
static bool readable(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  (void)fgetc(f);
  bool ok = !ferror(f);
  fclose(f);
  return ok;
}

/* source: a file, an indexed PREFIX (PREFIX.bin) or a blend W1:A,W2:B: each
 * path resolved beside the .mm file and checked to exist */
static bool resolve_source(FeProgram *p, SrcLoc at, MmData *d) {
  const char *s = d->source, *out = "";
  bool blend = strchr(s, ',') != NULL;
  while (*s) {
    const char *end = strchr(s, ','), *colon;
    size_t n = end ? (size_t)(end - s) : strlen(s);
    const char *item = s, *weight = "";
    if (blend && (colon = memchr(s, ':', n)) != NULL) {
      weight = arena_printf(&p->ast, "%.*s:", (int)(colon - s), s);
      item = colon + 1;
      n -= (size_t)(item - s);
    }
    const char *path = beside(p, at, item, n);
    if (!readable(path) && !readable(arena_printf(&p->ast, "%s.bin", path))) {
      diag_error(p->d, at,
                 "data source '%s' not found (expected a .jsonl file or an indexed PREFIX with "
                 "PREFIX.bin)",
                 path);
      return false;
    }
    out = arena_printf(&p->ast, "%s%s%s%s", out, out[0] ? "," : "", weight, path);
    s += (size_t)(item - s) + n;
    if (*s == ',') s++;
  }
  d->source = out;
  return true;
}

/* The forward's input named name, or NULL. */
static IrValue *forward_input(FeProgram *p, const char *name) {
  IrFunc *f = p->ir && p->ir->funcs.len ? p->ir->funcs.items[0] : NULL;
  for (int i = 0; f && i < f->inputs.len; i++) {
    IrValue *x = f->inputs.items[i];
    if (x->name && strcmp(x->name, name) == 0) return x;
  }
  return NULL;
}

/* The rows of the embedding table the ids index (0: none). */
static int64_t model_vocab(FeProgram *p, const IrValue *ids) {
  IrFunc *f = p->ir->funcs.items[0];
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (n->op == IR_OP_EMBEDDING && n->in[0] == ids && n->in[1]->shape.rank == 2)
      return n->in[1]->shape.d[0];
  }
  return 0;
}

/* The data section's tokenizer (resolved by data_keys_fit) reads, and its
 * vocabulary fits the embedding the ids index. */
static bool check_tokenizer(FeProgram *p, MmTrain *t, const IrValue *ids) {
  SrcLoc at = t->loc[MM_SET_DATA_TOKENIZER];
  const char *tok = t->data.tokenizer;
  char err[512];
  int64_t tv = p->opts.tok_vocab ? p->opts.tok_vocab(tok, err, sizeof err) : 0;
  int64_t mv = ids ? model_vocab(p, ids) : 0;
  if (tv < 0) {
    diag_error(p->d, at, "tokenizer: %s", err);
    return false;
  }
  if (tv > 0 && mv > 0 && tv > mv) {
    diag_error(p->d, at,
               "the tokenizer '%s' has %lld tokens, but the model's embedding has %lld rows "
               "(its vocabulary)",
               tok, (long long)tv, (long long)mv);
    return false;
  }
  return true;
}

/* ---- data formats (ir/data_formats.def) ---- */

typedef struct DataInput {
  MmDataFormat format;
  const char *name;
  char dtype; /* 'f' f32, 'i' i32 */
  int rank;
  int64_t dims[4]; /* dimensions 1..rank-1: a size or -1 any */
  bool need;
} DataInput;

static const DataInput data_inputs[] = {
#define DATA_INPUT(ID, FMT, NAME, DT, RANK, D1, D2, D3, D4, NEED)                                  \
  {MM_FMT_##FMT, NAME, DT, RANK, {D1, D2, D3, D4}, NEED},
#include "ir/data_formats.def"
};
#define NDATA_INPUTS ((int)(sizeof data_inputs / sizeof data_inputs[0]))

/* "a, b or c": the formats a data section may name */
static const char *format_names(FeProgram *p) {
  const char *out = "";
  for (int i = 1; i < MM_FMT_COUNT; i++)
    out = arena_printf(&p->ast, "%s%s%s", out,
                       i == 1                 ? ""
                       : i + 1 < MM_FMT_COUNT ? ", "
                                              : " or ",
                       mm_data_format_names[i]);
  return out;
}

/* "pixels f32[B, 1, 28, 28]" (T, F, ...: any size) */
static const char *input_sig(FeProgram *p, const DataInput *r) {
  const char *out = arena_printf(&p->ast, "%s %s[B", r->name, r->dtype == 'f' ? "f32" : "i32");
  for (int k = 1; k < r->rank; k++)
    out = r->dims[k - 1] < 0 ? arena_printf(&p->ast, "%s, _", out)
                             : arena_printf(&p->ast, "%s, %lld", out, (long long)r->dims[k - 1]);
  return arena_printf(&p->ast, "%s]", out);
}

/* the format's inputs, "a, b (and, when the forward takes them, c)" */
static const char *format_sig(FeProgram *p, MmDataFormat fmt) {
  const char *need = "", *may = "";
  for (int i = 0; i < NDATA_INPUTS; i++) {
    const DataInput *r = &data_inputs[i];
    if (r->format != fmt) continue;
    const char **to = r->need ? &need : &may;
    *to = arena_printf(&p->ast, "%s%s%s", *to, (*to)[0] ? ", " : "", input_sig(p, r));
  }
  return may[0] ? arena_printf(&p->ast, "%s (and, when the forward takes them, %s)", need, may)
                : need;
}

static const char *value_sig(FeProgram *p, const IrValue *x) {
  const char *out = arena_printf(&p->ast, "%s[", ir_dtype_name(x->dtype));
  for (int k = 0; k < x->shape.rank; k++)
    out = arena_printf(&p->ast, "%s%s%lld", out, k ? ", " : "", (long long)x->shape.d[k]);
  return arena_printf(&p->ast, "%s]", out);
}

/* The data keys each format takes (ir/data_formats.def's DATA_KEYS) and what
 * its source is. */
static const struct {
  MmDataFormat format;
  const char *source, *keys;
} data_keys[] = {
#define DATA_KEYS(FMT, SOURCE, KEYS) {MM_FMT_##FMT, SOURCE, KEYS},
#include "ir/data_formats.def"
};

static const char *format_source(MmDataFormat fmt) {
  for (size_t k = 0; k < sizeof data_keys / sizeof data_keys[0]; k++)
    if (data_keys[k].format == fmt) return data_keys[k].source;
  return "folder";
}

/* key is a word of the format's keys */
static bool format_takes(MmDataFormat fmt, const char *key) {
  const char *ks = "";
  for (size_t k = 0; k < sizeof data_keys / sizeof data_keys[0]; k++)
    if (data_keys[k].format == fmt) ks = data_keys[k].keys;
  size_t n = strlen(key);
  for (const char *w = ks; (w = strstr(w, key)) != NULL; w += n)
    if ((w == ks || w[-1] == ' ') && (w[n] == 0 || w[n] == ' ')) return true;
  return false;
}

/* Every key set besides format and source is one the format takes, and each
 * path key (a STR row whose WHAT is "file" or "folder") is resolved beside
 * the .mm file and must be one. */
static bool data_keys_fit(FeProgram *p, MmTrain *t, MmDataFormat fmt) {
  bool ok = true;
  const char *fname = mm_data_format_names[fmt];
  for (int id = 0; id < MM_SET_COUNT; id++) {
    const MmSetDesc *r = &mm_settings[id];
    if (r->owner != MM_OWN_DATA || id == MM_SET_DATA_FORMAT || id == MM_SET_DATA_SOURCE ||
        !t->loc[id].file)
      continue;
    if (!format_takes(fmt, r->key)) {
      const char *ks = "", *list = "source";
      for (size_t k = 0; k < sizeof data_keys / sizeof data_keys[0]; k++)
        if (data_keys[k].format == fmt) ks = data_keys[k].keys;
      while (*ks) { /* "a b c" as "source, a, b and c" */
        size_t n = strcspn(ks, " ");
        list = arena_printf(&p->ast, "%s%s%.*s", list, ks[n] ? ", " : " and ", (int)n, ks);
        ks += n + (ks[n] == ' ');
      }
      diag_error(p->d, t->loc[id], "'%s' is not a setting of format = %s%s (it takes %s%s)", r->key,
                 fname, fmt == MM_FMT_TEXT ? ", a data section's default" : "", list,
                 strcmp(list, "source") ? "" : " only");
      ok = false;
      continue;
    }
    bool folder = !strcmp(r->what, "folder");
    if (r->kind != IR_SK_STR || (!folder && strcmp(r->what, "file"))) continue;
    const char **v = (const char **)((char *)t + r->off);
    if (!*v) continue;
    *v = beside(p, t->loc[id], *v, strlen(*v));
    struct stat st;
    bool there = stat(*v, &st) == 0 && (folder ? S_ISDIR(st.st_mode) : readable(*v));
    if (!there || strchr(*v, '\n')) {
      diag_error(p->d, t->loc[id], "%s: %s '%s' %s", r->key, r->what, *v,
                 !there ? "not found" : "has a newline in its name");
      ok = false;
    }
  }
  return ok;
}

/* A data section whose format is not text: the forward's inputs are those
 * the format fills (names, dtypes, ranks, fixed sizes), the keys are those
 * the format takes (DATA_KEYS), and the source (optional) is a folder
 * beside the .mm file, or the file the format reads. */
static bool read_format(FeProgram *p, MmTrain *t) {
  MmData *d = &t->data;
  const char *fname = mm_data_format_names[d->format];
  SrcLoc at = t->loc[MM_SET_DATA_FORMAT];
  bool ok = data_keys_fit(p, t, d->format);
  IrFunc *f = p->ir && p->ir->funcs.len ? p->ir->funcs.items[0] : NULL;
  const IrValue *first = NULL; /* the first input the format fills */
  for (int i = 0; f && i < f->inputs.len; i++) {
    IrValue *x = f->inputs.items[i];
    const char *nm = x->name ? x->name : "?";
    if (!strcmp(nm, "lr") || !strcmp(nm, "step")) continue; /* the trainer's own */
    const DataInput *r = NULL;
    for (int k = 0; k < NDATA_INPUTS && !r; k++)
      if (data_inputs[k].format == d->format && !strcmp(data_inputs[k].name, nm))
        r = &data_inputs[k];
    if (!r) {
      diag_error(p->d, at, "the forward's input '%s' is filled by no data: format = %s fills %s",
                 nm, fname, format_sig(p, d->format));
      ok = false;
      continue;
    }
    bool fits = x->dtype == (r->dtype == 'f' ? IR_F32 : IR_I32) && x->shape.rank == r->rank;
    for (int k = 1; fits && k < r->rank; k++)
      if (r->dims[k - 1] >= 0 && x->shape.d[k] != r->dims[k - 1]) fits = false;
    if (!fits) {
      diag_error(p->d, at, "format = %s fills %s, but the forward's %s is %s", fname,
                 input_sig(p, r), nm, value_sig(p, x));
      ok = false;
    } else if (!first) {
      first = x;
    } else if (x->shape.d[0] != first->shape.d[0]) { /* one batch B across the format's inputs */
      diag_error(p->d, at,
                 "format = %s fills a batch of B rows of each input, but the forward's %s has "
                 "%lld rows and its %s %lld",
                 fname, first->name, (long long)first->shape.d[0], nm, (long long)x->shape.d[0]);
      ok = false;
    }
  }
  for (int k = 0; f && k < NDATA_INPUTS; k++)
    if (data_inputs[k].format == d->format && data_inputs[k].need &&
        !forward_input(p, data_inputs[k].name)) {
      diag_error(p->d, at, "format = %s fills %s, but the forward takes no '%s' input", fname,
                 format_sig(p, d->format), data_inputs[k].name);
      ok = false;
    }
  const char *src = format_source(d->format);
  if (d->source) {
    SrcLoc sat = t->loc[MM_SET_DATA_SOURCE];
    d->source = beside(p, sat, d->source, strlen(d->source));
    size_t n = strlen(d->source);
    bool json = (n > 5 && !strcmp(d->source + n - 5, ".json")) ||
                (n > 6 && !strcmp(d->source + n - 6, ".jsonl"));
    struct stat st;
    bool dir = stat(d->source, &st) == 0 && S_ISDIR(st.st_mode);
    bool file = !dir && json && readable(d->source);
    if (!strcmp(src, "file") ? !file : !strcmp(src, "list") ? !dir && !file : !dir) {
      diag_error(p->d, sat, "data source '%s' is not %s (format = %s reads %s)", d->source,
                 !strcmp(src, "file")   ? "a .json or .jsonl file"
                 : !strcmp(src, "list") ? "a folder or a .json or .jsonl file"
                                        : "a folder",
                 fname,
                 !strcmp(src, "file")   ? "a conversation file"
                 : !strcmp(src, "list") ? "generated clips or an OpenSoraPlan video list"
                                        : "Fashion-MNIST's folder");
      ok = false;
    }
  }
  if (ok && d->tokenizer && d->format == MM_FMT_CONVERSATION)
    ok = check_tokenizer(p, t, forward_input(p, "text"));
  return ok;
}

static bool read_data(FeProgram *p, Inst *root, AstStmt *sec, MmTrain *t) {
  bool ok = true;
  MmData *d = &t->data;
  for (int i = 0; i < sec->body.len; i++) {
    AstStmt *s = sec->body.items[i];
    if (s->kind == ST_SECTION) {
      diag_error(p->d, s->name_loc,
                 "a %s section holds settings; sub-model blocks belong in the parallel section",
                 sec->name);
      ok = false;
    }
    if (s->kind != ST_SETTING) continue;
    if (set_twice(p, sec, i)) ok = false;
    const MmSetDesc *r = row_of_key(MM_OWN_DATA, s->name);
    if (!r) {
      diag_error(p->d, s->name_loc, "unknown data setting '%s' (expected %s)", s->name,
                 keys_of(p, MM_OWN_DATA));
      ok = false;
      continue;
    }
    t->loc[r->id] = s->name_loc;
    ok &= read_row(p, &root->env, s, r, t);
  }
  if (!ok) return false;
  if (d->format == MM_FMT_AUTO && t->loc[MM_SET_DATA_FORMAT].file) {
    /* format = auto: as without a data section (a derived model dropping its base's format) */
    for (int id = 0; id < MM_SET_COUNT; id++)
      if (mm_settings[id].owner == MM_OWN_DATA && id != MM_SET_DATA_FORMAT && t->loc[id].file) {
        diag_error(p->d, t->loc[id],
                   "'%s' under format = auto: auto is a model's data found by trying the "
                   "trainer's feeders, as without a data section, and takes no other setting "
                   "(name a format: %s)",
                   mm_settings[id].key, format_names(p));
        return false;
      }
    return true;
  }
  /* a data section without format is text (format stays auto, as written; codegen
   * declares text for it) */
  if (d->format != MM_FMT_AUTO && d->format != MM_FMT_TEXT) return read_format(p, t);
  if (!d->source && !t->loc[MM_SET_DATA_FORMAT].file) { /* format = text alone: --data */
    diag_error(p->d, sec->loc, "the data section names no source (source = \"corpus.jsonl\")");
    return false;
  }
  /* the text data fills ids and labels (and seg, pos when the model has them) */
  IrFunc *f = p->ir && p->ir->funcs.len ? p->ir->funcs.items[0] : NULL;
  for (int i = 0; f && i < f->inputs.len; i++) {
    IrValue *x = f->inputs.items[i];
    bool known = x->name && (!strcmp(x->name, "lr") || !strcmp(x->name, "step"));
    for (int k = 0; k < NDATA_INPUTS; k++) /* the text format's rows */
      known |= data_inputs[k].format == MM_FMT_TEXT && x->name &&
               strcmp(x->name, data_inputs[k].name) == 0;
    if (!known) {
      diag_error(p->d, sec->loc,
                 "the forward's input '%s' is filled by no source: the data section's text fills "
                 "ids and labels (and seg, pos)",
                 x->name ? x->name : "?");
      ok = false;
    }
  }
  if (!ok) return false;
  IrValue *ids = forward_input(p, "ids");
  const char *miss = !ids ? "ids" : !forward_input(p, "labels") ? "labels" : NULL;
  if (miss) {
    diag_error(p->d, sec->loc,
               "the data section's text fills ids and labels i32[B, T], but the forward takes no "
               "'%s' input",
               miss);
    return false;
  }
  if (d->seq_len && ids->shape.rank == 2 && ids->shape.d[1] != d->seq_len) {
    diag_error(p->d, t->loc[MM_SET_DATA_SEQ_LEN],
               "seq_len = %d, but the forward's ids hold %lld tokens a row (their second "
               "dimension T)",
               d->seq_len, (long long)ids->shape.d[1]);
    ok = false;
  }
  if (d->pack && !forward_input(p, "seg")) {
    diag_error(p->d, t->loc[MM_SET_DATA_PACK],
               "pack = true needs a seg input (each token's document in its row), which the "
               "forward does not take");
    ok = false;
  }
  if (d->source && !resolve_source(p, t->loc[MM_SET_DATA_SOURCE], d)) ok = false;
  if (!data_keys_fit(p, t, MM_FMT_TEXT)) return false;
  if (d->tokenizer && !check_tokenizer(p, t, ids)) ok = false;
  return ok;
}

/* The parallel section the flags give as text (MmPlanFlags.section; mmc
 * plan --search builds every candidate so): its settings and sub-model
 * blocks over the file's section. The file's settings of other keys stay,
 * but not its blocks, nor, when the text has blocks, its whole-model
 * layout (tp, dp, sp, cp, pp, zero, stages, vpp, placement), nor its
 * stage list when the text sets pp. NULL after a syntax error (reported
 * at the text, named "<search plan>"). */
static AstStmt *flag_section(FeProgram *p, AstStmt *file_sec, const char *text) {
  char *src = arena_printf(&p->ast, "model SearchPlan {\n  parallel { %s }\n}\n", text);
  int before = p->d->errors;
  uint32_t id = diag_add_buffer(p->d, "<search plan>", src, strlen(src));
  AstFile *f = fe_parse(&p->ast, p->d, id);
  AstStmt *dup, *sec = NULL;
  if (p->d->errors == before && f->decls.len == 1)
    sec = section(f->decls.items[0], "parallel", &dup);
  if (!sec) {
    if (p->d->errors == before) diag_error_plain(p->d, "<search plan>: no parallel section");
    return NULL;
  }
  bool blocks = false, pp = false;
  for (int i = 0; i < sec->body.len; i++) {
    AstStmt *s = sec->body.items[i];
    blocks |= s->kind == ST_SECTION;
    pp |= s->kind == ST_SETTING && !strcmp(s->name, "pp");
  }
  static const char *const layout[] = {"tp",   "dp",  "sp",        "cp",    "pp",
                                       "zero", "vpp", "placement", "stages"};
  for (int i = 0; file_sec && i < file_sec->body.len; i++) {
    AstStmt *s = file_sec->body.items[i];
    if (s->kind != ST_SETTING) continue;
    bool keep = !(pp && !strcmp(s->name, "stages"));
    for (int k = 0; keep && blocks && k < (int)(sizeof layout / sizeof *layout); k++)
      keep = strcmp(s->name, layout[k]) != 0;
    for (int j = 0; keep && j < sec->body.len; j++) {
      AstStmt *t = sec->body.items[j];
      keep = t->kind != ST_SETTING || strcmp(t->name, s->name) != 0;
    }
    if (keep) ptrvec_push(&p->ast, &sec->body, s);
  }
  return sec;
}

bool fe_read_sections(FeProgram *p, Inst *root, FeResult *out) {
  MmPlan *pl = &out->plan;
  MmTrain *t = &out->train;
  mm_settings_default(pl, t);
  AstDecl *dcl = root->decl;
  if (dcl->kind != DECL_MODEL) {
    apply_flags(pl, t, &p->opts.flags);
    return check_plan(p, pl, dcl->name_loc);
  }
  AstStmt *dup;
  AstStmt *tr = section(dcl, "train", &dup);
  if (dup) diag_error(p->d, dup->loc, "a model has one train section");
  AstStmt *par = section(dcl, "parallel", &dup);
  if (dup) diag_error(p->d, dup->loc, "a model has one parallel section");
  if (p->opts.flags.section && !(par = flag_section(p, par, p->opts.flags.section))) return false;
  AstStmt *dat = section(dcl, "data", &dup);
  if (dup) diag_error(p->d, dup->loc, "a model has one data section");
  bool ok = read_train(p, root, tr, t);
  if (!read_parallel(p, root, par, pl)) ok = false; /* both sections report their errors */
  if (dat && !read_data(p, root, dat, t)) ok = false;
  if (!ok) return false;
  apply_flags(pl, t, &p->opts.flags);
  /* freeze: mark parameters */
  for (int k = 0; k < t->nfreeze; k++)
    for (int i = 0; i < p->ir->params.len; i++) {
      IrValue *v = p->ir->params.items[i];
      if (covers(t->freeze[k], v->name)) v->frozen = true;
    }
  if (!check_gan(p, pl, t) || !resolve_subplans(p, root, pl, dcl->name_loc)) return false;
  return check_plan(p, pl, dcl->name_loc);
}
