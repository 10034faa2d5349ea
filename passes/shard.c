/* The `shard` pass: placements for tensor, sequence and data parallelism.
 *
 * It runs after autodiff and the optimizer, over every function (@forward
 * for evaluation, @train for the step), so that the backward is sharded by
 * the same rules as the forward and its collectives come out of the same
 * derivation (docs/design/parallelism.md).
 *
 *  1. The mesh: IrModule.mesh from the plan (dp, cp, tp). All axes 1: the
 *     pass changes nothing.
 *  2. Strategies set placements on parameters and inputs only:
 *     - tp: a linear whose result reaches other linears only through
 *       head-preserving ops (bias, activation, gating product, reshape to
 *       heads, RoPE, per-head norm, attention) is column-parallel (weight
 *       S(0), bias S(0)), the linears it reaches row-parallel (weight S(1));
 *       a linear that feeds a cross_entropy is column-parallel over the
 *       vocabulary (vocab-parallel loss), an embedding table is split over
 *       its vocabulary (S(0)); convolutions pair the same way over channels
 *       (a row-parallel conv's own bias stays whole: rank 0 adds it), also
 *       through a layer norm over the split channels (split statistics:
 *       its weight and bias S(0), the kernel all-reduces the rows' sums)
 *       or a GroupNorm whose G tp divides (whole groups per rank), the
 *       causal pad's slice/expand/concat, and adds of two split results.
 *     - sp: on tp, the sequence (dim 1 of [B, T, C] activations, T a
 *       length some norm reads: not a [B, 6, C] modulation) may be
 *       split where the op is in the sequence-parallel region (norms,
 *       residual adds, dropout: the SEQ flag of ops.def).
 *     - dp: every input split along dim 0 (the batch).
 *  3. Propagation: in program order, each node picks per mesh axis the
 *     strategy of its sharding rule (ir_shard.c) that is cheapest in
 *     elements sent to bring its operands where the strategy needs them
 *     (reshaping a parameter is all but forbidden), plus the cost of moving
 *     a result to where it is wanted (a gradient is wanted in its
 *     parameter's placement; the wish flows back through adds). A split is
 *     considered only when some operand (or wish) has it, or the sequence
 *     may split (sp), so plain TP never splits the sequence by itself.
 *     Gradients whose placement differs from their parameter's get a
 *     reshard right after them, and take the link grad(@p) along; the
 *     sweep repeats to a fixed point.
 *  4. Every operand whose placement differs from what its node's strategy
 *     needs gets a `reshard` (one per value and placement, placed before
 *     its first such use); a returned scalar (the loss) is made B.
 * The `collectives` pass lowers the reshards into all_reduce, all_gather,
 * reduce_scatter, all_to_all and all_slice; `zero` runs in between.
 *
 * cp (context parallel): the SEQ ops may split the sequence (dim 1 of
 * [B, T, C]) on cp as sp lets them on tp, with a bonus that outweighs
 * slicing a position table, and the rest follows the split. Ulysses
 * (cp_kind = ulysses): attention and its gradient may split their heads on
 * cp unasked, and their head-split results source a sequence split in
 * their readers (source_pl), so the S(seq) -> S(heads) all-to-alls before
 * attention and S(heads) -> S(seq) after it are derived like any reshard.
 *
 * Per-sub-model plans (plan `subplans`, docs/subplans.md): the parameters
 * of a sub-model of tp = 1 stay whole on tp, and subplan_boundaries fixes,
 * before propagation, the slice into such a sub-model along the batch on
 * tp and the gather out of it; its nodes, propagated from there, run its
 * data parallel over the tp axis. sp applies per sub-model.
 *
 * Errors (with the location of the layer or input): a dim that the plan
 * must split but that its axis size does not divide; a tp > 1 (or sp)
 * under which no value of the module is split (at the tp setting). */
#include <math.h>
#include <string.h>

#include "pass.h"

typedef struct Use {
  IrNode *node;
  int k;
  struct Use *next;
} Use;

typedef struct Sh {
  IrModule *m;
  Diag *d;
  const MmPlan *plan;
  Arena a;      /* everything below; dropped at the end */
  IrMap uses;   /* value -> Use* (per function) */
  IrMap region; /* value -> i: the dim a column split of some linear reaches it at (+1) */
  IrMap want; /* param -> i: the tp placement the strategy wants (S(i - 1), or -1 for a conflict) */
  IrMap hint; /* value -> p: IrPlacement[IR_NAXES] wished for (kind -1: none) */
  IrMap req;  /* node -> p: IrPlacement[nin * IR_NAXES], what its strategy needs */
  IrMap planned; /* value -> p: Planned*, the reshards earlier nodes of this sweep need */
  bool sp_warned;
  int tp;             /* the tp of tp_strategy */
  bool dry;           /* tp_strategy only counts the parameters it would split (shard_tp_splits) */
  int nseq;           /* the sequence lengths: dim 1 of the [B, T, C] inputs of norms */
  int64_t seqlen[16]; /* (a [B, 6, C] modulation sliced on dim 1 is no sequence) */
  bool balanced;      /* cp: the balanced layout of a causal ring (ir_cp_balanced) */
  bool ok;
} Sh;

static bool is_param(const IrValue *v) {
  return !v->def && (v->role == IR_ROLE_PARAM || v->role == IR_ROLE_OPT);
}

/* The parameter a linear or convolution takes as its weight: the operand,
 * or the parameter under its bf16 cast (passes/precision.c); else NULL. */
static IrValue *weight_param(IrValue *v) {
  if (is_param(v)) return v;
  if (v->def && v->def->op == IR_OP_CAST && is_param(v->def->in[0])) return v->def->in[0];
  return NULL;
}

static void build_uses(Sh *s, IrFunc *f) {
  ir_map_init(&s->uses, &s->a, false);
  for (int i = f->nodes.len - 1; i >= 0; i--) {
    IrNode *n = f->nodes.items[i];
    for (int k = n->nin - 1; k >= 0; k--) {
      IrMapSlot *sl = ir_map_put(&s->uses, n->in[k]);
      Use *u = ARENA_NEW(&s->a, Use);
      *u = (Use){n, k, sl->p};
      sl->p = u;
    }
  }
}

static Use *uses_of(Sh *s, IrValue *v) {
  IrMapSlot *sl = ir_map_get(&s->uses, v);
  return sl ? sl->p : NULL;
}

/* The scope of a node without the last component: "gpt.h.0.mlp" of
 * "gpt.h.0.mlp.fc1", for messages. */
static const char *where(const IrNode *n) {
  return n->scope ? n->scope : "the model";
}

/* ---- the tensor-parallel strategy ---- */

/* The dim of result 0 that a split at dim d of operand k reaches through a
 * head-preserving op, or -1. (Binary ops: the caller checks the other
 * operand.) */
static int transfer(const IrNode *n, int k, int d) {
  const IrShape *x = &n->in[k]->shape;
  int r = n->nout ? n->out[0]->shape.rank : 0;
  if ((ir_ops[n->op].flags & OPF_ELEMWISE) && ir_ops[n->op].max_in == 1) return d; /* unary */
  if (ir_ops[n->op].shard == IR_SHR_HAAR) return d == 1 ? 1 : -1; /* channels: sub-band blocks */
  switch (n->op) {
    case IR_OP_ADD:
    case IR_OP_SUB:
    case IR_OP_MUL:
    case IR_OP_DIV: return d + (r - x->rank);
    case IR_OP_ROPE: return d == 2 ? 2 : -1;
    case IR_OP_LAYER_NORM: return k == 0 ? d : -1; /* over split channels: split statistics */
    case IR_OP_RMS_NORM: return k == 0 && d != x->rank - 1 ? d : -1;
    case IR_OP_GROUP_NORM: return k == 0 && d == 1 ? 1 : -1; /* whole groups (walk checks G) */
    case IR_OP_CONCAT: return d != n->attrs.v[IR_ATTR_AXIS].i ? d : -1;
    case IR_OP_ATTENTION: return k <= 2 && d == 2 ? 2 : -1;
    case IR_OP_SLICE: return d != n->attrs.v[IR_ATTR_AXIS].i ? d : -1;
    case IR_OP_TRANSPOSE: {
      const IrAttrVal *p = &n->attrs.v[IR_ATTR_PERM];
      for (int j = 0; j < p->nints; j++)
        if (p->ints[j] == d) return j;
      return -1;
    }
    case IR_OP_RESHAPE:
    case IR_OP_EXPAND: {
      IrShardRule rule;
      ir_shard_rule(n, &rule);
      for (int j = 0; j < r; j++)
        if (rule.in[0][d] & rule.out[0][j]) return j;
      return -1;
    }
    default: return -1;
  }
}

static bool binary(IrOp op) {
  return op == IR_OP_ADD || op == IR_OP_SUB || op == IR_OP_MUL || op == IR_OP_DIV ||
         op == IR_OP_CONCAT;
}

/* region: the values a column split (of any linear or conv) reaches, and at
 * which dim, so that a binary op joining two of them (a gate times an up
 * projection) or attention over q, k, v can be checked. */
static void build_region(Sh *s, IrFunc *f) {
  ir_map_init(&s->region, &s->a, false);
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (n->nout < 1) continue;
    if ((n->op == IR_OP_LINEAR && weight_param(n->in[1])) ||
        ((n->op == IR_OP_CONV2D || n->op == IR_OP_CONV3D) && weight_param(n->in[1]))) {
      ir_map_put(&s->region, n->out[0])->i =
          (n->op == IR_OP_LINEAR ? n->out[0]->shape.rank - 1 : 1) + 1;
      continue;
    }
    int dim = -1;
    bool ok = true;
    for (int k = 0; k < n->nin && ok; k++) {
      IrValue *x = n->in[k];
      IrMapSlot *sl = ir_map_get(&s->region, x);
      if (!sl) {
        if (!is_param(x) && binary(n->op) && x->def) ok = false; /* another activation outside */
        continue;
      }
      int d = transfer(n, k, (int)sl->i - 1);
      if (d < 0 || (dim >= 0 && d != dim)) ok = false;
      dim = d;
    }
    if (ok && dim >= 0) ir_map_put(&s->region, n->out[0])->i = dim + 1;
  }
}

static int region_dim(Sh *s, IrValue *v) {
  IrMapSlot *sl = ir_map_get(&s->region, v);
  return sl ? (int)sl->i - 1 : -1;
}

typedef struct Walk {
  PtrVec rows;   /* row-parallel consumers (IrNode*) */
  PtrVec biases; /* params split along with the column (IrValue*), dims in bdims */
  int bdims[64];
  PtrVec checks; /* values whose split dim must divide by tp: (IrValue*), dims in cdims */
  int cdims[256];
  bool loss, ok;
} Walk;

/* Follows a column split at dim d of v to where it ends. */
static void walk(Sh *s, IrValue *v, int d, Walk *w, int depth) {
  if (!w->ok) return;
  if (depth > 64) {
    w->ok = false;
    return;
  }
  if (w->checks.len < 256) {
    w->cdims[w->checks.len] = d;
    ptrvec_push(&s->a, &w->checks, v);
  }
  for (Use *u = uses_of(s, v); u && w->ok; u = u->next) {
    IrNode *n = u->node;
    int k = u->k;
    if (n->op == IR_OP_LINEAR || n->op == IR_OP_CONV2D || n->op == IR_OP_CONV3D) {
      int cd = n->op == IR_OP_LINEAR ? v->shape.rank - 1 : 1;
      /* a row-parallel conv's own bias stays whole (rank 0 adds it) */
      if (k == 0 && d == cd && weight_param(n->in[1])) {
        ptrvec_push(&s->a, &w->rows, n);
        continue;
      }
      w->ok = false;
      break;
    }
    if (n->op == IR_OP_CROSS_ENTROPY && k == 0 && d == v->shape.rank - 1) {
      w->loss = true;
      continue;
    }
    int dd = transfer(n, k, d);
    if (dd < 0 || n->nout < 1) {
      w->ok = false;
      break;
    }
    if (n->op == IR_OP_LAYER_NORM || n->op == IR_OP_GROUP_NORM) {
      /* a norm over the split channels: its weight and bias split with
       * them (layer norm: split statistics; group norm: whole groups per
       * rank, so tp must divide G) */
      if (n->op == IR_OP_GROUP_NORM && n->attrs.v[IR_ATTR_GROUPS].i % s->tp) {
        w->ok = false;
        break;
      }
      bool over = n->op == IR_OP_GROUP_NORM || dd == ir_norm_dim(&n->attrs, &v->shape);
      for (int o = 1; o < n->nin && over && w->ok; o++) {
        if (!is_param(n->in[o]))
          w->ok = false;
        else if (w->biases.len < 64) {
          w->bdims[w->biases.len] = 0;
          ptrvec_push(&s->a, &w->biases, n->in[o]);
        }
      }
    }
    if (binary(n->op) || n->op == IR_OP_ATTENTION) {
      for (int o = 0; o < n->nin && w->ok; o++) {
        if (o == k || (n->op == IR_OP_ATTENTION && o > 2)) continue;
        IrValue *x = n->in[o];
        int od = dd - (n->out[0]->shape.rank - x->shape.rank);
        if (is_param(x)) {
          /* a bias or scale along the split dim is split with it */
          if (od >= 0 && x->shape.d[od] == n->out[0]->shape.d[dd] && x->shape.d[od] > 1 &&
              w->biases.len < 64) {
            w->bdims[w->biases.len] = od;
            ptrvec_push(&s->a, &w->biases, x);
          }
        } else if (region_dim(s, x) != (n->op == IR_OP_ATTENTION ? 2 : od) &&
                   !(od < 0 || x->shape.d[od] == 1)) {
          w->ok = false;
        }
      }
    }
    if (w->ok) walk(s, n->out[0], dd, w, depth + 1);
  }
}

static void want(Sh *s, IrValue *p, int dim) {
  IrMapSlot *sl = ir_map_put(&s->want, p);
  if (sl->i == 0)
    sl->i = dim + 1;
  else if (sl->i != dim + 1)
    sl->i = -1; /* wanted two ways: stays replicated */
}

static bool divides(int64_t n, int t) {
  return n % t == 0;
}

/* Sets the tp placements of the parameters; returns how many it splits.
 * Dry (s->dry), it only counts them, without messages, and takes a
 * vocabulary tp does not divide as split (vocabpad pads it). */
static int tp_strategy(Sh *s, IrFunc *f, int tp) {
  int nsplit = 0;
  s->tp = tp;
  build_uses(s, f);
  build_region(s, f);
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    bool lin = n->op == IR_OP_LINEAR, conv = n->op == IR_OP_CONV2D || n->op == IR_OP_CONV3D;
    if (n->op == IR_OP_EMBEDDING && is_param(n->in[1])) {
      IrValue *t = n->in[1];
      if (divides(t->shape.d[0], tp) || s->dry)
        want(s, t, 0);
      else
        diag_warning(s->d, n->loc,
                     "tp = %d does not divide the vocabulary of %lld of '%s'; the embedding stays "
                     "replicated",
                     tp, (long long)t->shape.d[0], where(n));
      continue;
    }
    if (!(lin || conv) || !weight_param(n->in[1]) || n->nout < 1) continue;
    IrMapSlot *ws = ir_map_get(&s->want, weight_param(n->in[1]));
    if (ws && ws->i == 2) continue; /* the row-parallel half of an earlier pair */
    Walk w = {.ok = true};
    int d = lin ? n->out[0]->shape.rank - 1 : 1;
    walk(s, n->out[0], d, &w, 0);
    if (!w.ok || (!w.rows.len && !w.loss)) continue;
    IrValue *W = weight_param(n->in[1]);
    const IrValue *bad = NULL;
    int bad_dim = 0;
    if (!divides(W->shape.d[0], tp)) bad = W;
    for (int r = 0; r < w.rows.len && !bad; r++) {
      IrValue *R = weight_param(((IrNode *)w.rows.items[r])->in[1]);
      if (!divides(R->shape.d[1], tp)) bad = R, bad_dim = 1;
    }
    for (int c = 0; c < w.checks.len && !bad; c++) {
      IrValue *v = w.checks.items[c];
      if (!divides(v->shape.d[w.cdims[c]], tp)) bad = v, bad_dim = w.cdims[c];
    }
    if (bad && !s->dry) {
      if (w.rows.len) { /* a column/row pair the plan must split */
        char sh[200];
        ir_shape_str(sh, sizeof sh, &bad->shape);
        diag_error(s->d, n->loc,
                   "tensor parallel: tp = %d does not divide dim %d (%lld) of %s%s%s, which the "
                   "column-parallel "
                   "'%s' splits",
                   tp, bad_dim, (long long)bad->shape.d[bad_dim], is_param(bad) ? "@" : "a value ",
                   is_param(bad) ? bad->name : "of shape ", is_param(bad) ? "" : sh, where(n));
        if (s->plan->loc[MM_SET_TP].file) diag_note(s->d, s->plan->loc[MM_SET_TP], "tp set here");
        s->ok = false;
      }
      continue; /* a loss head that does not divide stays replicated */
    }
    want(s, W, 0);
    if (conv && n->nin == 3 && is_param(n->in[2])) want(s, n->in[2], 0); /* the conv's own bias */
    for (int b = 0; b < w.biases.len; b++) want(s, w.biases.items[b], w.bdims[b]);
    for (int r = 0; r < w.rows.len; r++)
      want(s, weight_param(((IrNode *)w.rows.items[r])->in[1]), 1);
  }
  for (int i = 0; i < s->m->params.len; i++) {
    IrValue *p = s->m->params.items[i];
    IrMapSlot *sl = ir_map_get(&s->want, p);
    nsplit += sl && sl->i > 0;
    MmSubPlan sub;
    if (sl && sl->i > 0 && mm_subplan_for(s->plan, p->name, &sub) && sub.tp == 1) {
      nsplit--; /* a sub-model of tp = 1 uses the tp axis for data parallel */
      continue;
    }
    if (s->dry) continue;
    if (sl && sl->i > 0)
      p->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, (int)sl->i - 1};
    else if (sl && sl->i < 0)
      diag_warning(s->d, p->loc, "@%s is used both column- and row-parallel; it stays replicated",
                   p->name);
  }
  return nsplit;
}

int shard_tp_splits(IrModule *m, int tp) {
  IrFunc *ref = ir_module_func(m, "forward");
  if (!ref && m->funcs.len) ref = m->funcs.items[0];
  if (!ref || tp <= 1) return 0;
  Sh s = {.m = m, .d = m->diag, .plan = &m->plan, .dry = true, .ok = true};
  arena_init(&s.a);
  ir_map_init(&s.want, &s.a, false);
  int n = tp_strategy(&s, ref, tp);
  arena_free(&s.a);
  return n;
}

/* Whether any value of the module is split or partial on axis a. */
static bool any_split(const IrModule *m, int a) {
  for (int i = 0; i < m->params.len; i++)
    if (((IrValue *)m->params.items[i])->pl[a].kind != IR_PL_B) return true;
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->inputs.len; i++)
      if (((IrValue *)f->inputs.items[i])->pl[a].kind != IR_PL_B) return true;
    for (int i = 0; i < f->nodes.len; i++) {
      const IrNode *n = f->nodes.items[i];
      for (int o = 0; o < n->nout; o++)
        if (n->out[o]->pl[a].kind != IR_PL_B) return true;
    }
  }
  return false;
}

/* Inputs split along the batch. */
static void dp_strategy(Sh *s) {
  int dp = s->m->mesh[IR_AX_DP];
  for (int fi = 0; fi < s->m->funcs.len; fi++) {
    IrFunc *f = s->m->funcs.items[fi];
    for (int i = 0; i < f->inputs.len; i++) {
      IrValue *x = f->inputs.items[i];
      if (x->shape.rank == 0) continue; /* lr, step and other scalars */
      if (x->shape.d[0] % dp) {
        bool seen = false; /* @train's inputs repeat @forward's */
        for (int gi = 0; gi < fi && !seen; gi++) {
          IrFunc *g = s->m->funcs.items[gi];
          for (int j = 0; j < g->inputs.len && !seen; j++)
            seen = !strcmp(((IrValue *)g->inputs.items[j])->name, x->name);
        }
        if (!seen) {
          diag_error(s->d, x->loc,
                     "data parallel: dp = %d does not divide the batch of %lld of input '%s'", dp,
                     (long long)x->shape.d[0], x->name);
          if (s->plan->loc[MM_SET_DP].file) diag_note(s->d, s->plan->loc[MM_SET_DP], "dp set here");
        }
        s->ok = false;
        continue;
      }
      x->pl[IR_AX_DP] = (IrPlacement){IR_PL_S, 0};
    }
  }
}

/* Optimizer state lives where its parameter lives. */
static void state_like_params(Sh *s) {
  for (int fi = 0; fi < s->m->funcs.len; fi++) {
    IrFunc *f = s->m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      int lo = 2, hi = n->op == IR_OP_ADAMW ? 3 : n->op == IR_OP_SGD ? 2 : 1;
      for (int k = lo; k <= hi; k++) memcpy(n->in[k]->pl, n->in[0]->pl, sizeof n->in[k]->pl);
    }
  }
}

/* ---- propagation ---- */

#define PARAM_PENALTY 1000.0
#define SEQ_BONUS     0.01
#define CP_SEQ_BONUS  10.0 /* beats slicing a parameter (a position table) */
#define SLICE_COST    0.001

/* Elements one rank sends to move v from `from` to `to` on axis a (§7.3's
 * table); INFINITY for what no collective does (-> P). */
static double move_cost(const IrModule *m, const IrValue *v, int a, IrPlacement from,
                        IrPlacement to) {
  if (ir_placement_eq(from, to)) return 0;
  if (to.kind == IR_PL_P) return INFINITY;
  double n = m->mesh[a], t = (double)ir_numel(&v->shape);
  for (int b = 0; b < IR_NAXES; b++)
    if (b != a && v->pl[b].kind == IR_PL_S) t /= m->mesh[b];
  double c;
  if (from.kind == IR_PL_P)
    c = (to.kind == IR_PL_B ? 2 : 1) * t * (n - 1) / n;
  else if (from.kind == IR_PL_S)
    c = to.kind == IR_PL_B ? t * (n - 1) / n : t * (n - 1) / (n * n);
  else
    c = SLICE_COST;
  /* over dp only gradients are partial sums: a bf16 one is reduced after
   * its cast, in f32 (passes/precision.c) */
  if (a == IR_AX_DP && v->dtype == IR_BF16) c *= 2;
  /* a parameter, or its bf16 cast (moving either moves the weight) */
  if ((is_param(v) || (v->def && v->def->op == IR_OP_CAST && is_param(v->def->in[0]))) &&
      a != IR_AX_DP)
    c *= PARAM_PENALTY;
  return c;
}

/* A reshard an earlier node needs already: using it again is free. */
typedef struct Planned {
  IrPlacement pl[IR_NAXES];
  struct Planned *next;
} Planned;

static bool is_planned(Sh *s, IrValue *v, int a, IrPlacement p) {
  IrMapSlot *sl = ir_map_get(&s->planned, v);
  for (Planned *q = sl ? sl->p : NULL; q; q = q->next)
    if (ir_placement_eq(q->pl[a], p)) return true;
  return false;
}

static void plan_reshard(Sh *s, IrValue *v, const IrPlacement *pl) {
  IrMapSlot *sl = ir_map_put(&s->planned, v);
  for (Planned *q = sl->p; q; q = q->next)
    if (!memcmp(q->pl, pl, sizeof q->pl)) return;
  Planned *q = ARENA_NEW(&s->a, Planned);
  memcpy(q->pl, pl, sizeof q->pl);
  q->next = sl->p;
  sl->p = q;
}

/* A wish is never a partial sum, so P marks "no wish" on an axis. */
static const IrPlacement NO_WISH = {IR_PL_P, 0};

static IrPlacement *hint_of(Sh *s, IrValue *v) {
  IrMapSlot *sl = ir_map_get(&s->hint, v);
  return sl ? sl->p : NULL;
}

static void set_hint(Sh *s, IrValue *v, const IrPlacement *h) {
  IrMapSlot *sl = ir_map_put(&s->hint, v);
  if (!sl->p) {
    sl->p = ARENA_ARRAY(&s->a, IrPlacement, IR_NAXES);
    memcpy(sl->p, h, sizeof(IrPlacement) * IR_NAXES);
  }
}

/* Gradients wish for their parameter's placement (not on dp: the
 * reduction there is zero's business); the wish flows back through adds
 * and copies of the same shape. */
static void build_hints(Sh *s, IrFunc *f) {
  ir_map_init(&s->hint, &s->a, false);
  for (int i = f->nodes.len - 1; i >= 0; i--) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) {
      IrValue *g = n->out[j];
      if (g->grad_of) {
        IrPlacement h[IR_NAXES];
        memcpy(h, g->grad_of->pl, sizeof h);
        h[IR_AX_DP] = NO_WISH;
        set_hint(s, g, h);
      }
    }
    IrPlacement *h = n->nout == 1 ? hint_of(s, n->out[0]) : NULL;
    if (!h) continue;
    if (n->op == IR_OP_ADD || n->op == IR_OP_SUB || n->op == IR_OP_MUL_SCALAR ||
        n->op == IR_OP_NEG || n->op == IR_OP_CAST)
      for (int k = 0; k < n->nin; k++)
        if (n->in[k]->def && ir_shape_eq(&n->in[k]->shape, &n->out[0]->shape))
          set_hint(s, n->in[k], h);
  }
}

static IrPlacement *req_of(Sh *s, IrNode *n) {
  IrMapSlot *sl = ir_map_put(&s->req, n);
  if (!sl->p) sl->p = ARENA_ARRAY(&s->a, IrPlacement, (n->nin ? n->nin : 1) * IR_NAXES);
  return sl->p;
}

/* Whether placement p on axis a of value v (with `other` on the other
 * axes) splits its dims evenly. */
static bool even(const Sh *s, const IrValue *v, const IrPlacement *other, int a, IrPlacement p) {
  const IrModule *m = s->m;
  if (p.kind != IR_PL_S) return true;
  int64_t ways = m->mesh[a] * (a == IR_AX_CP && s->balanced ? 2 : 1); /* 2 cp chunks */
  for (int b = 0; b < IR_NAXES; b++)
    if (b != a && other[b].kind == IR_PL_S && other[b].dim == p.dim) ways *= m->mesh[b];
  return p.dim < v->shape.rank && v->shape.d[p.dim] % ways == 0;
}

/* Whether attention node n (or its gradient) runs Ulysses on cp. */
static bool cp_ulysses(const Sh *s, const IrNode *n) {
  return s->plan->cp_kind == MM_CP_ULYSSES &&
         !(ir_attrs_has(&n->attrs, IR_ATTR_RING) && n->attrs.v[IR_ATTR_RING].i);
}

/* The placement on axis a of operand k of n as a source of splits: on cp, a
 * head-split result of attention ([B, T, H, D], its gradients) counts as
 * split over its sequence (dim 1) for every other node, so that Ulysses'
 * head split ends at the attention and the sequence split resumes. */
static IrPlacement source_pl(const Sh *s, const IrNode *n, int k, int a) {
  const IrValue *x = n->in[k];
  IrPlacement p = x->pl[a];
  (void)s;
  if (a == IR_AX_CP && x->def && n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_GRAD &&
      (x->def->op == IR_OP_ATTENTION || x->def->op == IR_OP_ATTENTION_GRAD) && x->shape.rank == 4 &&
      p.kind == IR_PL_S && p.dim == 2)
    return (IrPlacement){IR_PL_S, 1};
  return p;
}

/* The sequence lengths of the module: dim 1 of what its norms read as
 * [B, T, C]; only such a dim 1 is split as a sequence (sp, cp). */
static void find_seqlens(Sh *s) {
  for (int fi = 0; fi < s->m->funcs.len; fi++) {
    IrFunc *f = s->m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      if ((n->op != IR_OP_LAYER_NORM && n->op != IR_OP_RMS_NORM) || n->nin < 1 ||
          n->in[0]->shape.rank != 3 || ir_attrs_has(&n->attrs, IR_ATTR_AXIS))
        continue;
      int64_t t = n->in[0]->shape.d[1];
      bool known = false;
      for (int k = 0; k < s->nseq; k++) known |= s->seqlen[k] == t;
      if (!known && s->nseq < (int)(sizeof s->seqlen / sizeof s->seqlen[0]))
        s->seqlen[s->nseq++] = t;
    }
  }
}

static bool is_seqlen(const Sh *s, int64_t t) {
  for (int k = 0; k < s->nseq; k++)
    if (s->seqlen[k] == t) return true;
  return false;
}

/* Whether sequence parallel applies to node n: the plan's sp, or under
 * per-sub-model plans its sub-model's (none for the nodes of no sub-plan). */
static bool node_sp(const Sh *s, const IrNode *n) {
  MmSubPlan sub;
  if (!s->plan->nsubplans) return s->plan->sp;
  return mm_subplan_for(s->plan, n->scope, &sub) && sub.sp;
}

/* Picks the strategy of node n on axis a; writes the operand needs into
 * req (req[k * IR_NAXES + a]) and the result placements; returns whether a
 * result placement changed. */
static bool decide(Sh *s, IrNode *n, const IrShardRule *r, int a, IrPlacement *req) {
  const IrModule *m = s->m;
  if (r->kind == IR_SK_FREE) {
    bool changed = false;
    for (int k = 0; k < n->nin; k++)
      req[k * IR_NAXES + a] =
          n->in[k]->pl[a].kind == IR_PL_P ? (IrPlacement){IR_PL_B, 0} : n->in[k]->pl[a];
    for (int j = 0; j < n->nout; j++) {
      changed |= n->out[j]->pl[a].kind != IR_PL_B;
      n->out[j]->pl[a] = (IrPlacement){IR_PL_B, 0};
    }
    return changed;
  }
  IrStrategy st[IR_SH_MAXF + 66];
  int ns = ir_shard_strategies(r, n, a, st, (int)(sizeof st / sizeof st[0]));
  bool any_p = false;
  for (int k = 0; k < n->nin; k++) any_p |= n->in[k]->pl[a].kind == IR_PL_P;
  int seqf = -1; /* the factor of the sequence dim, when sp (or cp) lets it split */
  bool cp = a == IR_AX_CP;
  if (((a == IR_AX_TP && node_sp(s, n)) || cp) && (r->pflags & IR_SHP_SEQ) && n->nout >= 1 &&
      n->out[0]->shape.rank == 3 && ir_dtype_is_float(n->out[0]->dtype) &&
      is_seqlen(s, n->out[0]->shape.d[1])) {
    uint32_t mask = r->out[0][1];
    if (mask && !(mask & (mask - 1))) seqf = __builtin_ctz(mask);
  }
  /* Ulysses: attention (and its gradient) split over heads on cp although
   * nothing asks for it; what leaves them head-split is read by the rest as
   * if split over the sequence, so the all-to-all back is derived there */
  bool heads_free =
      cp && (n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTENTION_GRAD) && cp_ulysses(s, n);
  double best = INFINITY;
  IrPlacement best_req[64], best_out[4];
  bool seq_blocked = false;
  for (int c = 0; c < ns; c++) {
    IrPlacement rq[64], out[4];
    if (!ir_shard_apply(r, n, st[c], rq, out)) continue;
    double bonus = 0;
    if (st[c].kind == IR_ST_SPLIT) { /* only splits that something asks for */
      bool sourced = heads_free && (r->in[n->op == IR_OP_ATTENTION ? 0 : 1][2] >> st[c].factor &
                                    1); /* q's heads */
      for (int k = 0; k < n->nin && !sourced; k++)
        sourced = rq[k].kind == IR_PL_S && ir_placement_eq(rq[k], source_pl(s, n, k, a));
      for (int j = 0; j < n->nout && !sourced; j++) {
        IrPlacement *h = hint_of(s, n->out[j]);
        sourced = h && out[j].kind == IR_PL_S && ir_placement_eq(h[a], out[j]);
      }
      if (!sourced && st[c].factor == seqf) sourced = true, bonus = cp ? CP_SEQ_BONUS : SEQ_BONUS;
      if (!sourced) continue;
    } else if (st[c].kind == IR_ST_PASSP && !any_p) {
      continue;
    }
    /* nor a factor the axis does not divide (group norm's G) */
    bool fits = st[c].kind != IR_ST_SPLIT || r->f[st[c].factor].size % m->mesh[a] == 0;
    for (int k = 0; k < n->nin && fits; k++) fits = even(s, n->in[k], n->in[k]->pl, a, rq[k]);
    for (int j = 0; j < n->nout && fits; j++) fits = even(s, n->out[j], n->out[j]->pl, a, out[j]);
    if (!fits) {
      seq_blocked |= bonus > 0;
      continue;
    }
    double cost = -bonus;
    for (int k = 0; k < n->nin; k++)
      if (!is_planned(s, n->in[k], a, rq[k]))
        cost += move_cost(m, n->in[k], a, n->in[k]->pl[a], rq[k]);
    for (int j = 0; j < n->nout; j++) {
      IrPlacement *h = hint_of(s, n->out[j]);
      if (h && h[a].kind != IR_PL_P) cost += move_cost(m, n->out[j], a, out[j], h[a]);
    }
    if (cost < best) {
      best = cost;
      memcpy(best_req, rq, sizeof(IrPlacement) * (size_t)n->nin);
      memcpy(best_out, out, sizeof(IrPlacement) * (size_t)n->nout);
    }
  }
  if (seq_blocked && !s->sp_warned && best > 0) {
    diag_warning(s->d, n->loc,
                 "%s parallel: %s = %d does not divide the sequence of %lld here; these "
                 "activations stay whole",
                 cp ? "context" : "sequence", cp ? "cp" : "tp", m->mesh[a],
                 (long long)n->out[0]->shape.d[1]);
    s->sp_warned = true;
  }
  MM_ASSERT(best < INFINITY); /* NONE is always possible: P -> B, S -> B */
  bool changed = false;
  for (int k = 0; k < n->nin; k++) req[k * IR_NAXES + a] = best_req[k];
  for (int j = 0; j < n->nout; j++) {
    changed |= !ir_placement_eq(n->out[j]->pl[a], best_out[j]);
    n->out[j]->pl[a] = best_out[j];
  }
  return changed;
}

/* Order of the axes within a node: the batch first. */
static const int axis_order[IR_NAXES] = {IR_AX_DP, IR_AX_CP, IR_AX_TP};

static bool sweep(Sh *s, IrFunc *f) {
  bool changed = false;
  ir_map_init(&s->planned, &s->a, false);
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    IrShardRule r;
    ir_shard_rule(n, &r);
    if (r.kind == IR_SK_COLLECTIVE || r.kind == IR_SK_RESHARD) continue;
    IrPlacement *req = req_of(s, n);
    for (int ai = 0; ai < IR_NAXES; ai++) {
      int a = axis_order[ai];
      if (s->m->mesh[a] <= 1) continue;
      changed |= decide(s, n, &r, a, req);
    }
    for (int k = 0; k < n->nin; k++) {
      IrPlacement want[IR_NAXES];
      for (int a = 0; a < IR_NAXES; a++)
        want[a] = s->m->mesh[a] > 1 ? req[k * IR_NAXES + a] : n->in[k]->pl[a];
      if (memcmp(want, n->in[k]->pl, sizeof want)) plan_reshard(s, n->in[k], want);
    }
  }
  return changed;
}

/* A reshard node of x to placements pl, built at the end of f. */
static IrValue *reshard(Sh *s, IrFunc *f, IrValue *x, const IrPlacement *pl, const IrNode *at) {
  char err[400];
  IrBuilder b = {.m = s->m, .f = f, .scope = at->scope, .group = at->group, .layer = at->layer};
  IrAttrs none = {0};
  IrNode *n = ir_build(&b, IR_OP_RESHARD, &x, 1, &none, at->loc, err, sizeof err, NULL);
  MM_ASSERT(n != NULL);
  memcpy(n->out[0]->pl, pl, sizeof n->out[0]->pl);
  return n->out[0];
}

/* Moves the node just built (the last of f) to index `at`. */
static void move_last_to(IrFunc *f, int at) {
  void *n = f->nodes.items[f->nodes.len - 1];
  memmove(&f->nodes.items[at + 1], &f->nodes.items[at],
          sizeof(void *) * (size_t)(f->nodes.len - 1 - at));
  f->nodes.items[at] = n;
}

static bool same_pl(const IrPlacement *a, const IrPlacement *b) {
  for (int x = 0; x < IR_NAXES; x++)
    if (!ir_placement_eq(a[x], b[x])) return false;
  return true;
}

/* Replaces operand uses of `from` by `to` in nodes from index i0 on (and
 * in the results). */
static void replace_uses(IrFunc *f, int i0, IrValue *from, IrValue *to) {
  for (int i = i0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] == from) n->in[k] = to;
  }
  for (int i = 0; i < f->results.len; i++)
    if (f->results.items[i] == from) f->results.items[i] = to;
}

/* A gradient not in its parameter's placement gets a reshard right after
 * it, which becomes the gradient. Returns whether it did anything. */
static bool finalize_grads(Sh *s, IrFunc *f) {
  bool any = false;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (n->op == IR_OP_RESHARD) continue;
    for (int j = 0; j < n->nout; j++) {
      IrValue *g = n->out[j], *p = g->grad_of;
      if (!p || same_pl(g->pl, p->pl)) continue;
      IrValue *r = reshard(s, f, g, p->pl, n);
      move_last_to(f, i + 1);
      replace_uses(f, i + 2, g, r);
      r->grad_of = p;
      r->role = IR_ROLE_GRAD;
      g->grad_of = NULL;
      g->role = IR_ROLE_ACT;
      any = true;
    }
  }
  return any;
}

/* Whether a reshard of x to pl makes x bigger on its rank: some axis goes
 * from split to whole (an all-gather). */
static bool gathers(const IrValue *x, const IrPlacement *pl) {
  for (int a = 0; a < IR_NAXES; a++)
    if (x->pl[a].kind == IR_PL_S && pl[a].kind == IR_PL_B) return true;
  return false;
}

/* Inserts the reshards the strategies need, one per value and placement,
 * and one more in the backward of @train for a forward activation it reads
 * gathered (sp: a norm's output the linears of the layer read whole): the
 * backward gathers it again, as Megatron's sequence-parallel linears do, so
 * that what the layer keeps for its backward is the split value, not the
 * gathered one (an all-gather more per such value, the gathered copy dies
 * in the forward). */
static void materialize(Sh *s, IrFunc *f) {
  int bwd, upd;
  ir_train_phases(f, &bwd, &upd);
  int nold = f->nodes.len;
  void **old = ARENA_ARRAY(&s->a, void *, nold ? nold : 1);
  memcpy(old, f->nodes.items, sizeof(void *) * (size_t)nold);
  f->nodes.len = 0;
  IrMap done; /* value -> Use-like chain of (placement, result) */
  ir_map_init(&done, &s->a, false);
  typedef struct Done {
    IrPlacement pl[IR_NAXES];
    IrValue *v;
    bool backward; /* made for the backward's readers (see above) */
    struct Done *next;
  } Done;
  IrMap fwd; /* the forward's values (made by a node before bwd) */
  ir_map_init(&fwd, &s->a, false);
  for (int i = 0; i < bwd; i++)
    for (int j = 0; j < ((IrNode *)old[i])->nout; j++) ir_map_put(&fwd, ((IrNode *)old[i])->out[j]);
  for (int i = 0; i < nold; i++) {
    IrNode *n = old[i];
    IrMapSlot *rs = ir_map_get(&s->req, n);
    if (rs && n->op != IR_OP_RESHARD) {
      IrPlacement *req = rs->p;
      for (int k = 0; k < n->nin; k++) {
        IrValue *x = n->in[k];
        IrPlacement want[IR_NAXES];
        for (int a = 0; a < IR_NAXES; a++)
          want[a] = s->m->mesh[a] > 1 ? req[k * IR_NAXES + a] : x->pl[a];
        if (same_pl(want, x->pl)) continue;
        bool again = bwd >= 0 && i >= bwd && ir_map_get(&fwd, x) && gathers(x, want);
        IrMapSlot *ds = ir_map_put(&done, x);
        Done *d = ds->p;
        while (d && !(same_pl(d->pl, want) && d->backward == again)) d = d->next;
        if (!d) {
          d = ARENA_NEW(&s->a, Done);
          memcpy(d->pl, want, sizeof want);
          d->backward = again;
          d->v = reshard(s, f, x, want, n);
          d->next = ds->p;
          ds->p = d;
        }
        n->in[k] = d->v;
      }
    }
    ptrvec_push(&s->m->arena, &f->nodes, n);
  }
  /* a returned scalar (the loss) is whole on every rank */
  for (int i = 0; i < f->results.len; i++) {
    IrValue *v = f->results.items[i];
    IrPlacement want[IR_NAXES];
    bool p = false;
    for (int a = 0; a < IR_NAXES; a++) {
      want[a] = v->pl[a];
      if (v->shape.rank == 0 && v->pl[a].kind == IR_PL_P)
        want[a] = (IrPlacement){IR_PL_B, 0}, p = true;
    }
    if (p && v->def) f->results.items[i] = reshard(s, f, v, want, v->def);
  }
}

/* ---- per-sub-model plans (docs/subplans.md) ---- */

/* Whether node n belongs to a sub-model of tp = 1 under a mesh of tp > 1:
 * its data parallel spans the tp axis too. */
static bool dp_over_tp(const Sh *s, const IrNode *n) {
  MmSubPlan sub;
  return n && s->m->mesh[IR_AX_TP] > 1 && mm_subplan_for(s->plan, n->scope, &sub) && sub.tp == 1 &&
         !mm_subplan_one_rank(s->plan, &sub);
}

/* The samples of a step: dim 0 of the first input that has one. */
static int64_t batch_of(const IrFunc *f) {
  for (int i = 0; i < f->inputs.len; i++) {
    const IrValue *x = f->inputs.items[i];
    if (x->shape.rank >= 1) return x->shape.d[0];
  }
  return 0;
}

/* The redistribution at each sub-model boundary, fixed before propagation:
 * what a tp = 1 sub-model reads from outside (a batch input, the gradient
 * of its output coming back) is sliced over tp along the batch (its data
 * parallel there), and an activation it hands to the rest of the model is
 * gathered over tp (the rest holds the whole batch of its dp shard).
 * Propagation then keeps the sub-model batch-split on tp and its
 * parameters' gradients partial over tp, reduced there (its dp group). */
static void subplan_boundaries(Sh *s, IrFunc *f) {
  int64_t batch = batch_of(f);
  int tp = s->m->mesh[IR_AX_TP], dp = s->m->mesh[IR_AX_DP];
  if (!s->plan->nsubplans || tp <= 1 || batch <= 0 || batch % ((int64_t)tp * dp)) return;
  int nold = f->nodes.len;
  void **old = ARENA_ARRAY(&s->a, void *, nold ? nold : 1);
  memcpy(old, f->nodes.items, sizeof(void *) * (size_t)nold);
  f->nodes.len = 0;
  IrMap done; /* value -> its boundary reshard */
  ir_map_init(&done, &s->a, false);
  for (int i = 0; i < nold; i++) {
    IrNode *n = old[i];
    bool inside = dp_over_tp(s, n);
    for (int k = 0; k < n->nin; k++) {
      IrValue *v = n->in[k];
      if (v->shape.rank < 1 || v->shape.d[0] != batch || v->grad_of) continue;
      bool entry = inside && ((!v->def && v->role == IR_ROLE_INPUT) ||
                              (v->def && v->role == IR_ROLE_ACT && !dp_over_tp(s, v->def) &&
                               v->def->op != IR_OP_RESHARD));
      bool exit = !inside && v->def && v->role == IR_ROLE_ACT && dp_over_tp(s, v->def) &&
                  v->def->op != IR_OP_RESHARD;
      if (!entry && !exit) continue;
      IrMapSlot *sl = ir_map_put(&done, v);
      if (!sl->p) {
        IrPlacement pl[IR_NAXES];
        memcpy(pl, v->pl, sizeof pl);
        if (dp > 1) pl[IR_AX_DP] = (IrPlacement){IR_PL_S, 0};
        pl[IR_AX_TP] = entry ? (IrPlacement){IR_PL_S, 0} : (IrPlacement){IR_PL_B, 0};
        if (exit) { /* the producer's side: split along the batch on tp */
          memcpy(v->pl, pl, sizeof pl);
          v->pl[IR_AX_TP] = (IrPlacement){IR_PL_S, 0};
        }
        sl->p = reshard(s, f, v, pl, n);
      }
      n->in[k] = sl->p;
    }
    ptrvec_push(&s->m->arena, &f->nodes, n);
  }
}

static void shard_func(Sh *s, IrFunc *f) {
  ir_map_init(&s->req, &s->a, false);
  subplan_boundaries(s, f);
  build_hints(s, f);
  for (int iter = 0; iter < 8; iter++) {
    bool changed = sweep(s, f);
    changed |= finalize_grads(s, f);
    if (!changed) break;
    build_hints(s, f);
  }
  materialize(s, f);
  ir_func_renumber(f);
}

/* cp > 1 needs an attention to split (the frontend says so first; this is
 * the pass's own check on IR text), Ulysses its heads divisible, the ring
 * self-attention and its sequence divisible by cp (2 cp in the balanced
 * layout). Under the ring every attention and its gradient get
 * {ring = true}, so that their rules split the sequence. */
static bool ir_cp_ring_any(const IrModule *m) {
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      const IrNode *n = f->nodes.items[i];
      if (n->op == IR_OP_ATTENTION && ir_attrs_has(&n->attrs, IR_ATTR_RING)) return true;
    }
  }
  return false;
}

static bool cp_check(Sh *s) {
  const MmPlan *plan = s->plan;
  bool any = false, ok = true, ringk = plan->cp_kind == MM_CP_RING;
  /* the balanced layout when a causal self-attention splits in 2 cp chunks;
   * then every ring attention splits so, and one that does not divide runs
   * whole on every cp rank */
  for (int pass = 0; pass < 2 && ringk; pass++) {
    int64_t parts = (int64_t)plan->cp * (pass == 0 || s->balanced ? 2 : 1);
    for (int fi = 0; fi < s->m->funcs.len; fi++) {
      IrFunc *f = s->m->funcs.items[fi];
      for (int i = 0; i < f->nodes.len; i++) {
        IrNode *n = f->nodes.items[i];
        if (n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_GRAD) continue;
        int qi = n->op == IR_OP_ATTENTION ? 0 : 1;
        int64_t t = n->in[qi]->shape.d[1];
        /* a masked attention (key padding) runs whole: the ring takes no mask */
        bool fits = t == n->in[qi + 1]->shape.d[1] && t % parts == 0 && n->nin == 3 + 3 * qi;
        if (pass == 0 && fits && n->attrs.v[IR_ATTR_CAUSAL].i) s->balanced = true;
        if (pass == 1 && fits) ir_attrs_set_bool(&n->attrs, IR_ATTR_RING, true);
      }
    }
  }
  s->m->mesh[IR_AX_CP] = plan->cp;
  for (int fi = 0; fi < s->m->funcs.len; fi++) {
    IrFunc *f = s->m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      if (n->op != IR_OP_ATTENTION) continue;
      any = true;
      int64_t t = n->in[0]->shape.d[1];
      if (ringk && ok && n->attrs.v[IR_ATTR_CAUSAL].i && t % (2 * (int64_t)plan->cp)) {
        diag_error(s->d, n->loc,
                   "ring context parallel: 2 * cp = %lld (the balanced split of a causal ring) "
                   "does not divide the sequence of %lld of '%s'",
                   2 * (long long)plan->cp, (long long)t, where(n));
        ok = false;
      }
      bool usp = ringk && plan->cp_ulysses > 1 && ir_attrs_has(&n->attrs, IR_ATTR_RING);
      int64_t ways = (int64_t)(usp ? plan->cp_ulysses : plan->cp) * (plan->tp > 1 ? plan->tp : 1);
      int64_t h = n->in[0]->shape.d[2], kvh = n->in[1]->shape.d[2];
      if ((plan->cp_kind == MM_CP_ULYSSES || usp) && (h % ways || kvh % ways) && ok) {
        diag_error(s->d, n->loc,
                   "Ulysses context parallel: tp * %s = %lld does not divide the %lld heads "
                   "(%lld key/value heads) of '%s'",
                   usp ? "cp_ulysses" : "cp", (long long)ways, (long long)h, (long long)kvh,
                   where(n));
        ok = false;
      }
    }
  }
  if (!any)
    diag_error(s->d, plan->loc[MM_SET_CP],
               "context parallel (cp = %d) splits attention, but this module has none", plan->cp);
  if (ringk && any && ok && !ir_cp_ring_any(s->m))
    diag_error(s->d, plan->loc[MM_SET_CP],
               "ring context parallel (cp = %d): no attention of this module has a sequence cp "
               "divides",
               plan->cp);
  return any && ok && (!ringk || ir_cp_ring_any(s->m));
}

bool pass_shard(IrModule *m, PassCtx *cx) {
  const MmPlan *plan = &m->plan;
  int mesh[MESH_NAXES]; /* the IR's axes are the first IR_NAXES */
  mm_plan_mesh(plan, mesh);
  bool trivial = true;
  for (int a = 0; a < IR_NAXES; a++) trivial &= mesh[a] <= 1;
  if (trivial) return true;
  Sh s = {.m = m, .d = cx->d ? cx->d : m->diag, .plan = plan, .ok = true};
  if (plan->cp > 1 && plan->cp_ulysses > 1 &&
      (plan->cp % plan->cp_ulysses || plan->cp_kind != MM_CP_RING)) {
    diag_error(s.d, plan->loc[MM_SET_CP],
               "cp_ulysses = %d: USP needs cp_kind = ring and a cp (%d) it divides",
               plan->cp_ulysses, plan->cp);
    return false;
  }
  if (plan->cp > 1 && !cp_check(&s)) return false;
  for (int i = 0; i < plan->nsubplans; i++) {
    MmSubPlan sub;
    if (!mm_subplan_parse(plan->subplans[i], &sub) || (sub.tp != 1 && sub.tp != plan->tp) ||
        ((int64_t)sub.tp * sub.dp != (int64_t)plan->tp * plan->dp &&
         !mm_subplan_one_rank(plan, &sub)) ||
        plan->cp > 1 || plan->pp != (plan->placement == MM_PLACE_SEPARATE ? 2 : 1)) {
      diag_error(s.d, plan->loc[MM_SET_TP],
                 "sub-plan \"%s\" does not fit the mesh tp = %d x dp = %d (each sub-model: tp "
                 "= 1 or %d, tp x dp = %d; no cp; pp = 2 under placement = separate only)",
                 plan->subplans[i], plan->tp, plan->dp, plan->tp, plan->tp * plan->dp);
      return false;
    }
    int64_t batch = m->funcs.len ? batch_of(m->funcs.items[0]) : 0;
    if (sub.tp == 1 && plan->tp > 1 && batch > 0 && batch % sub.dp) {
      diag_error(s.d, plan->loc[MM_SET_TP],
                 "sub-plan \"%s\": dp = %d does not divide the batch of %lld", plan->subplans[i],
                 sub.dp, (long long)batch);
      return false;
    }
  }
  for (int a = 0; a < IR_NAXES; a++) m->mesh[a] = mesh[a] < 1 ? 1 : mesh[a];
  arena_init(&s.a);
  ir_map_init(&s.want, &s.a, false);
  find_seqlens(&s);
  IrFunc *ref = ir_module_func(m, "forward");
  if (!ref && m->funcs.len) ref = m->funcs.items[0];
  if (m->mesh[IR_AX_TP] > 1 && ref) tp_strategy(&s, ref, m->mesh[IR_AX_TP]);
  if (m->mesh[IR_AX_DP] > 1) dp_strategy(&s);
  state_like_params(&s);
  if (s.ok)
    for (int i = 0; i < m->funcs.len; i++) shard_func(&s, m->funcs.items[i]);
  if (s.ok && m->mesh[IR_AX_TP] > 1 && !any_split(m, IR_AX_TP)) {
    /* a tp (or sp) that would run the model replicated is refused, not ignored */
    diag_error(s.d, plan->loc[MM_SET_TP], "tp = %d%s splits nothing in %s: %s", plan->tp,
               plan->loc[MM_SET_TP].file ? "" : " (--tp, or the module's plan)", m->name,
               TP_NOTHING);
    s.ok = false;
  }
  if (s.ok && m->mesh[IR_AX_TP] > 1 && plan->sp && !s.nseq) {
    /* sp splits dim 1 of the [B, T, C] activations norms read: with none,
     * it would be accepted and do nothing (WF-VAE's norms read videos) */
    diag_error(s.d, plan->loc[MM_SET_SP],
               "sequence parallel (sp = true%s) splits the sequence of [B, T, C] activations, but "
               "no norm of %s reads one",
               plan->loc[MM_SET_SP].file ? "" : ": --sp, or the module's plan", m->name);
    s.ok = false;
  }
  arena_free(&s.a);
  return s.ok;
}
