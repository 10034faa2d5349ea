/* The `recompute` pass (activation checkpointing), after autodiff.
 *
 * A policy says which forward nodes of @train need not keep their results
 * until the backward (the recomputable set R, cut into units):
 *   full       every node of a stack layer; a unit is one layer;
 *   block N    the same for the first N layers of each stack;
 *   selective  the attention core: each `attention` node (QKᵀ, softmax and
 *              ·V in one op: its out and lse) and the views of its results;
 *              a unit is the layer holding it;
 * and under each of them a stack layer's bf16 weight casts (in the layer's
 * unit, never kept: see param_cast).
 * A value made in R that a node of another unit of R reads is kept (under
 * full and block: that any forward node outside its unit reads, so a
 * layer's output, the next layer's or the final norm's input, stays), as is
 * a returned value; every other value of R that the backward reads is
 * recomputed: just before the
 * first backward node that needs it, the pass clones its producers within
 * the unit (reading kept values and values outside R as they are), and
 * every later backward read of the unit's values reads the clone. The
 * forward's own values then die in the forward (memplan's liveness), and
 * the clones are ordinary nodes: the shard pass splits them, and their
 * collectives run again in the backward. Only what the backward reads is
 * rerun: under TP full recompute reruns a layer's attention all-reduce,
 * not its MLP's (the MLP's result y only feeds the layer's output h + y,
 * kept as the next layer's input, and no backward op reads y: the
 * cotangents of an all-reduce and of an add pass through), so it adds
 * exactly one all-reduce per layer where Megatron, rerunning the whole
 * layer, adds two (with sp: one reduce-scatter and no all-gather, where
 * Megatron has two and two: the backward gathers the norms' outputs again
 * with or without recompute, passes/shard.c; tests/recompute.sh counts them
 * at run time).
 * The clones compute what the originals computed,
 * from the same operands and attributes (dropout's mask is a function of
 * its seed attribute and the element), so losses and gradients are those
 * without recompute, bit for bit.
 *
 * The policy is the plan's `recompute` (per sub-model rules first). */
#include <stdlib.h>
#include <string.h>

#include "actmem.h"
#include "pass.h"

typedef struct Rc {
  IrModule *m;
  IrFunc *f;
  const MmPlan *pl;
  Arena scratch;
  IrMap unit;  /* value made in R -> i: its unit + 1 */
  IrMap kept;  /* value of R that stays alive */
  IrMap clone; /* value of R -> p: its clone */
  PtrVec out;  /* the new node list */
  Diag *d;
} Rc;

/* "full", "selective", "block:N", "none" (ir/settings.c); anything else none */
static MmRecompute parse_policy(const char *s, int *block) {
  MmRecompute pol;
  if (mm_recompute_parse(s, &pol, block)) return pol;
  *block = 0;
  return MM_RECOMPUTE_NONE;
}

MmRecompute recompute_policy(const MmPlan *pl, const char *scope, int *block) {
  for (int i = 0; i < pl->nrecompute_by; i++) {
    const char *r = pl->recompute_by[i], *eq = strchr(r, '=');
    size_t len = eq ? (size_t)(eq - r) : 0;
    if (eq && scope && strncmp(r, scope, len) == 0 && (scope[len] == '.' || scope[len] == 0))
      return parse_policy(eq + 1, block);
  }
  *block = pl->recompute_block;
  return pl->recompute;
}

/* The policy of a node: the first per-sub-model rule whose unit holds its
 * scope ("vision=full"), else the plan's. */
static MmRecompute policy_of(const MmPlan *pl, const IrNode *n, int *block) {
  return recompute_policy(pl, n->scope, block);
}

static int64_t unit_of_value(Rc *r, const IrValue *v) {
  IrMapSlot *s = ir_map_get(&r->unit, v);
  return s ? s->i - 1 : -1;
}

/* A parameter's bf16 cast (passes/precision.c) in a stack layer: under
 * any policy the backward makes it again from the parameter, which the
 * rank holds anyway, rather than keep it from the forward (a copy of the
 * layer's weights per micro-batch in flight under pp). Outside the layers
 * (a tied embedding's cast for the head) it is kept: made again in the
 * backward it would be a backward value of the embedding's pipeline stage
 * and pull the head's backward there (passes/pp_stage.h). */
static bool param_cast(const IrNode *n) {
  const IrValue *x = n->nin == 1 ? n->in[0] : NULL;
  return n->op == IR_OP_CAST && x && !x->def &&
         (x->role == IR_ROLE_PARAM || x->role == IR_ROLE_OPT);
}

/* The unit of a forward node in R, or -1. */
static int64_t unit_of_node(Rc *r, const IrNode *n, int index) {
  if (ir_ops[n->op].flags & OPF_INPLACE) return -1;
  int block;
  MmRecompute pol = policy_of(r->pl, n, &block);
  int64_t layer_unit = n->group >= 0 ? (int64_t)n->group * 1000000 + n->layer : -1;
  if (pol != MM_RECOMPUTE_NONE && layer_unit >= 0 && param_cast(n)) return layer_unit;
  switch (pol) {
    case MM_RECOMPUTE_FULL: return layer_unit;
    case MM_RECOMPUTE_BLOCK: return n->group >= 0 && n->layer < block ? layer_unit : -1;
    case MM_RECOMPUTE_SELECTIVE: {
      int64_t u = layer_unit >= 0 ? layer_unit : 1000000000 + index;
      if (n->op == IR_OP_ATTENTION) return u;
      if ((ir_ops[n->op].flags & OPF_VIEW) && n->nin > 0) {
        int64_t ou = unit_of_value(r, n->in[0]);
        return ou >= 0 && ou == u ? u : -1;
      }
      return -1;
    }
    default: return -1;
  }
}

static IrValue *recomputed(Rc *r, IrValue *v);

static bool clone_node(Rc *r, IrNode *n) {
  IrValue *in[64];
  for (int k = 0; k < n->nin; k++) {
    in[k] = recomputed(r, n->in[k]);
    if (!in[k]) return false;
  }
  char err[512];
  IrBuilder b = {.m = r->m, .f = r->f, .scope = n->scope, .group = n->group, .layer = n->layer};
  IrNode *c = ir_build(&b, n->op, in, n->nin, &n->attrs, n->loc, err, sizeof err, NULL);
  if (!c) {
    diag_error(r->d, n->loc, "recompute: cannot clone %s: %s", ir_ops[n->op].name, err);
    return false;
  }
  r->f->nodes.len--; /* ir_build appended it to the old list */
  ptrvec_push(&r->m->arena, &r->out, c);
  for (int j = 0; j < n->nout; j++) {
    memcpy(c->out[j]->pl, n->out[j]->pl, sizeof c->out[j]->pl);
    c->out[j]->role = n->out[j]->role;
    ir_map_put(&r->clone, n->out[j])->p = c->out[j];
  }
  return true;
}

/* The value a backward node reads in place of v: v itself when it is not in
 * R or is kept, else its clone (made on first need). */
static IrValue *recomputed(Rc *r, IrValue *v) {
  if (unit_of_value(r, v) < 0 || ir_map_get(&r->kept, v)) return v;
  IrMapSlot *s = ir_map_get(&r->clone, v);
  if (s && s->p) return s->p;
  if (!clone_node(r, v->def)) return NULL;
  return ir_map_get(&r->clone, v)->p;
}

bool pass_recompute(IrModule *m, PassCtx *cx) {
  const MmPlan *pl = &m->plan;
  IrFunc *f = ir_module_func(m, "train");
  if (!f || (pl->recompute == MM_RECOMPUTE_NONE && pl->nrecompute_by == 0)) return true;
  int bwd, upd;
  ir_train_phases(f, &bwd, &upd);
  if (bwd < 0) return true;
  Diag *d = cx && cx->d ? cx->d : m->diag;
  Rc r = {.m = m, .f = f, .pl = pl, .d = d};
  arena_init(&r.scratch);
  ir_map_init(&r.unit, &r.scratch, false);
  ir_map_init(&r.kept, &r.scratch, false);
  ir_map_init(&r.clone, &r.scratch, false);
  /* R and its units */
  int64_t *nunit = ARENA_ARRAY(&r.scratch, int64_t, bwd + 1);
  for (int i = 0; i < bwd; i++) {
    IrNode *n = f->nodes.items[i];
    nunit[i] = unit_of_node(&r, n, i);
    if (nunit[i] >= 0)
      for (int j = 0; j < n->nout; j++) ir_map_put(&r.unit, n->out[j])->i = nunit[i] + 1;
  }
  /* kept: what another unit's nodes read (under full and block: any node
   * outside the unit, so a layer's output, the next layer's or the final
   * norm's input, stays), and the results */
  for (int i = 0; i < bwd; i++) {
    IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) {
      int64_t u = unit_of_value(&r, n->in[k]);
      if (u < 0 || u == nunit[i] || param_cast(n->in[k]->def)) continue;
      int block;
      bool layers = policy_of(pl, n->in[k]->def, &block) != MM_RECOMPUTE_SELECTIVE;
      if (nunit[i] >= 0 || layers) ir_map_put(&r.kept, n->in[k]);
    }
  }
  for (int i = 0; i < f->results.len; i++) ir_map_put(&r.kept, f->results.items[i]);
  /* the new order: the forward, then each backward node after the clones it needs */
  int total = f->nodes.len;
  IrNode **old = ARENA_ARRAY(&r.scratch, IrNode *, total);
  memcpy(old, f->nodes.items, sizeof *old * (size_t)total);
  for (int i = 0; i < bwd; i++) ptrvec_push(&m->arena, &r.out, old[i]);
  bool ok = true;
  for (int i = bwd; i < total && ok; i++) {
    IrNode *n = old[i];
    for (int k = 0; k < n->nin && ok; k++) {
      IrValue *v = recomputed(&r, n->in[k]);
      if (!v)
        ok = false;
      else
        n->in[k] = v;
    }
    ptrvec_push(&m->arena, &r.out, n);
  }
  if (ok) {
    f->nodes = r.out;
    ir_func_renumber(f);
  }
  arena_free(&r.scratch);
  return ok;
}
