/* The `zero` pass: where data-parallel state lives (ZeRO, Rajbhandari et
 * al. 2020). It runs after `shard`, which leaves every gradient reduced to
 * its parameter's placement (plain data parallel: an all-reduce over dp
 * right after the gradient is complete), and before `collectives`.
 *
 * With zero = K >= 1 every trainable parameter gets a storage dim d on dp
 * (the first dim that dp, times what tp already splits it by, divides) and
 *   ZeRO-1  optimizer state S(d) on dp; the parameter is stored S(d) too
 *           (its master copy) and gathered once per step before its first
 *           use, the gathered copy living through the step; gradients are
 *           reduce-scattered to S(d) after the backward, before the update;
 *   ZeRO-2  the same, but each gradient is reduce-scattered as soon as it
 *           is complete (no full gradient survives the backward);
 *   ZeRO-3  as ZeRO-2, and the gathered copies are per region: one before
 *           the parameter's first use in the forward, one when the backward
 *           of its module starts (DeepSpeed fetches whole modules, so a
 *           bias the backward does not read is fetched too).
 * Per step and rank that is the ZeRO paper's accounting: gradients
 * reduce-scattered plus parameters gathered, 2 Psi (d - 1) / d elements for
 * ZeRO-1 and ZeRO-2, 3 Psi (d - 1) / d for ZeRO-3, where plain data
 * parallel all-reduces the same 2 Psi (d - 1) / d. A parameter without a
 * dim dp divides (a bias of 50,257, any tensor at dp = 3) is padded along
 * dim 0 to a multiple of dp, as Megatron's and DeepSpeed's flat buffers
 * pad, when no other axis splits that dim: its stored piece, optimizer
 * state and reduced gradient are [ceil(n0 / dp), ...] pieces of the padded
 * tensor (so memplan and the cost model charge the padded shard), the
 * gradient is zero-padded (pad_slice) before its reduce-scatter and every
 * gather is read through a slice of the real rows. The parameter keeps
 * `rows = n0` as a padded vocabulary does (passes/vocabpad.c): the trainer
 * initialises the padding with zeros and saves and loads only the real
 * rows, so checkpoints are the unpadded tensors; the padding's gradient is
 * zero, so its AdamW moments, its weight decay and the gradient norm never
 * see anything but zeros. Any other parameter without such a dim stays
 * replicated and all-reduced (mmc plan counts them). Frozen parameters
 * stay replicated. Only `reshard`, `pad_slice` and `slice` ops are
 * inserted; `collectives` lowers the reshards. */
#include <string.h>

#include "pass.h"

typedef struct Zero {
  IrModule *m;
  int stage, dp;
  Arena a;
  IrMap store; /* param -> i: storage dim + 1 */
  IrMap pad;   /* param padded along dim 0 -> i: its real rows */
} Zero;

static bool step_op(IrOp op) {
  return (ir_ops[op].flags & OPF_OPTIMIZER) != 0;
}

static int storage_dim(Zero *z, IrValue *p) {
  IrMapSlot *s = ir_map_get(&z->store, p);
  return s ? (int)s->i - 1 : -1;
}

/* A builder of nodes in the scope, group and layer of `at` (none: NULL) */
static IrBuilder builder_at(Zero *z, IrFunc *f, const IrNode *at) {
  return (IrBuilder){.m = z->m,
                     .f = f,
                     .scope = at ? at->scope : NULL,
                     .group = at ? at->group : -1,
                     .layer = at ? at->layer : -1};
}

static IrNode *reshard_node(Zero *z, IrFunc *f, IrValue *x, const IrPlacement *pl, const IrNode *at,
                            SrcLoc loc) {
  char err[400];
  IrBuilder b = builder_at(z, f, at);
  IrAttrs none = {0};
  IrNode *n = ir_build(&b, IR_OP_RESHARD, &x, 1, &none, loc, err, sizeof err, NULL);
  MM_ASSERT(n != NULL);
  memcpy(n->out[0]->pl, pl, sizeof n->out[0]->pl);
  return n;
}

/* The real rows of a parameter padded along dim 0, or 0. */
static int64_t padded_rows(Zero *z, const IrValue *p) {
  IrMapSlot *s = p ? ir_map_get(&z->pad, p) : NULL;
  return s ? s->i : 0;
}

/* slice(x)[0:rows] along dim 0 (a gathered padded parameter's real rows),
 * or pad_slice(x) to `size` rows (a gradient's zero padding); appended to f */
static IrNode *rows_node(Zero *z, IrFunc *f, IrValue *x, IrOp op, int64_t rows, int64_t size,
                         const IrNode *at, SrcLoc loc) {
  char err[400];
  IrBuilder b = builder_at(z, f, at);
  IrAttrs a = {0};
  ir_attrs_set_int(&a, IR_ATTR_AXIS, 0);
  ir_attrs_set_int(&a, IR_ATTR_START, 0);
  ir_attrs_set_int(&a, IR_ATTR_STOP, rows);
  if (op == IR_OP_PAD_SLICE) ir_attrs_set_int(&a, IR_ATTR_SIZE, size);
  IrNode *n = ir_build(&b, op, &x, 1, &a, loc, err, sizeof err, NULL);
  MM_ASSERT(n != NULL);
  memcpy(n->out[0]->pl, x->pl, sizeof n->out[0]->pl);
  return n;
}

/* Moves the last node of f to index `at`. */
static void move_last_to(IrFunc *f, int at) {
  void *n = f->nodes.items[f->nodes.len - 1];
  memmove(&f->nodes.items[at + 1], &f->nodes.items[at],
          sizeof(void *) * (size_t)(f->nodes.len - 1 - at));
  f->nodes.items[at] = n;
}

static int index_of(IrFunc *f, const IrNode *n) {
  for (int i = 0; i < f->nodes.len; i++)
    if (f->nodes.items[i] == n) return i;
  return -1;
}

/* The storage dims: the first dim that dp (times the other axes' splits
 * of that dim) divides. */
static void choose_storage(Zero *z) {
  IrMap has_grad;
  ir_map_init(&has_grad, &z->a, false);
  for (int fi = 0; fi < z->m->funcs.len; fi++) {
    IrFunc *f = z->m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++)
        if (n->out[j]->grad_of) ir_map_put(&has_grad, n->out[j]->grad_of);
    }
  }
  for (int i = 0; i < z->m->params.len; i++) {
    IrValue *p = z->m->params.items[i];
    if (p->role != IR_ROLE_PARAM || p->frozen || !ir_map_get(&has_grad, p)) continue;
    for (int d = 0; d < p->shape.rank; d++) {
      int64_t ways = z->dp;
      for (int a = 0; a < IR_NAXES; a++)
        if (a != IR_AX_DP && p->pl[a].kind == IR_PL_S && p->pl[a].dim == d) ways *= z->m->mesh[a];
      if (p->shape.d[d] % ways == 0) {
        ir_map_put(&z->store, p)->i = d + 1;
        break;
      }
    }
    /* none: padded along dim 0, if dp alone splits it (a padded
     * vocabulary pads further, its real rows kept) */
    bool dim0_free = p->shape.rank >= 1;
    for (int a = 0; a < IR_NAXES && dim0_free; a++)
      dim0_free = a == IR_AX_DP || p->pl[a].kind != IR_PL_S || p->pl[a].dim != 0;
    if (!ir_map_get(&z->store, p) && dim0_free) {
      ir_map_put(&z->store, p)->i = 1;
      ir_map_put(&z->pad, p)->i = p->shape.d[0];
    }
  }
}

/* A padded parameter, its optimizer state and the gradient the update
 * reads take the padded rows (the state and the parameter keep their real
 * rows: `rows`, or a padded vocabulary's own). */
static void pad_shape(Zero *z, IrValue *v, int64_t rows) {
  v->shape.d[0] = (rows + z->dp - 1) / z->dp * z->dp;
  if (v->role != IR_ROLE_GRAD && !v->rows) v->rows = rows;
}

/* Gradients: the dp all-reduce shard left becomes a reduce-scatter to the
 * storage dim; ZeRO-1 moves them to the end of the backward. */
static void grads(Zero *z, IrFunc *f) {
  PtrVec late = {0};
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) {
      IrValue *g = n->out[j], *p = g->grad_of;
      int d = p ? storage_dim(z, p) : -1;
      if (d < 0) continue;
      IrPlacement pl[IR_NAXES];
      memcpy(pl, g->pl, sizeof pl);
      pl[IR_AX_DP] = (IrPlacement){IR_PL_S, d};
      int64_t rows = padded_rows(z, p);
      if (n->op == IR_OP_RESHARD) {
        if (rows) { /* the reduce-scatter takes the zero-padded gradient */
          IrNode *pad = rows_node(z, f, n->in[0], IR_OP_PAD_SLICE, rows,
                                  (rows + z->dp - 1) / z->dp * z->dp, n, n->loc);
          move_last_to(f, i);
          i++;
          n->in[0] = pad->out[0];
          pad_shape(z, g, rows);
        }
        memcpy(g->pl, pl, sizeof pl);
        if (z->stage == 1) ptrvec_push(&z->a, &late, n);
        continue;
      }
      /* the gradient is complete on every rank already: keep its piece */
      IrValue *whole = g;
      if (rows) {
        whole =
            rows_node(z, f, g, IR_OP_PAD_SLICE, rows, (rows + z->dp - 1) / z->dp * z->dp, n, n->loc)
                ->out[0];
        move_last_to(f, i + 1);
        i++;
      }
      IrNode *r = reshard_node(z, f, whole, pl, n, n->loc);
      move_last_to(f, i + 1);
      for (int k = i + 2; k < f->nodes.len; k++) {
        IrNode *u = f->nodes.items[k];
        for (int q = 0; q < u->nin; q++)
          if (u->in[q] == g) u->in[q] = r->out[0];
      }
      r->out[0]->grad_of = p;
      r->out[0]->role = IR_ROLE_GRAD;
      g->grad_of = NULL;
      g->role = IR_ROLE_ACT;
      if (z->stage == 1) ptrvec_push(&z->a, &late, r);
    }
  }
  if (!late.len) return;
  int first_opt = -1;
  for (int i = 0; i < f->nodes.len && first_opt < 0; i++) {
    IrOp op = ((IrNode *)f->nodes.items[i])->op;
    if (op == IR_OP_GRAD_NORM || step_op(op)) first_opt = i;
  }
  if (first_opt < 0) return;
  /* take them out, then put them back in order before the first optimizer op */
  int w = 0;
  IrMap moving;
  ir_map_init(&moving, &z->a, false);
  for (int k = 0; k < late.len; k++) ir_map_put(&moving, late.items[k]);
  IrNode *anchor = f->nodes.items[first_opt];
  for (int i = 0; i < f->nodes.len; i++)
    if (!ir_map_get(&moving, f->nodes.items[i])) f->nodes.items[w++] = f->nodes.items[i];
  f->nodes.len = w;
  int at = index_of(f, anchor);
  for (int k = 0; k < late.len; k++) {
    ptrvec_push(&z->m->arena, &f->nodes, late.items[k]);
    move_last_to(f, at + k);
  }
}

/* The owner module of a parameter: its name without the last component. */
static bool in_module(const IrNode *n, const IrValue *p) {
  const char *dot = strrchr(p->name, '.');
  size_t len = dot ? (size_t)(dot - p->name) : strlen(p->name);
  return n->scope && strncmp(n->scope, p->name, len) == 0 &&
         (n->scope[len] == 0 || n->scope[len] == '.');
}

/* Parameters stored S(d) are gathered before use: once per function
 * (ZeRO-1/2), or per region (ZeRO-3: forward, backward). */
static void gathers(Zero *z, IrFunc *f) {
  const IrNode *loss = NULL; /* the backward starts after it */
  if (f->results.len && ((IrValue *)f->results.items[0])->def && !strcmp(f->name, "train")) {
    loss = ((IrValue *)f->results.items[0])->def;
    /* the loss may have been made whole by a reshard: its operand is the loss */
    if (loss->op == IR_OP_RESHARD && loss->in[0]->def) loss = loss->in[0]->def;
  }
  IrMap got[2];
  ir_map_init(&got[0], &z->a, false);
  ir_map_init(&got[1], &z->a, false);
  int bwd = f->nodes.len;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (i > 0 && f->nodes.items[i - 1] == loss) bwd = i;
    if (step_op(n->op)) continue; /* the update works on the stored piece */
    int region = z->stage == 3 && i >= bwd ? 1 : 0;
    for (int k = 0; k < n->nin; k++) {
      IrValue *p = n->in[k];
      if (p->def || storage_dim(z, p) < 0) continue;
      IrMapSlot *s = ir_map_put(&got[region], p);
      if (!s->p) {
        IrPlacement pl[IR_NAXES];
        memcpy(pl, p->pl, sizeof pl);
        pl[IR_AX_DP] = (IrPlacement){IR_PL_B, 0};
        s->p = reshard_node(z, f, p, pl, n, n->loc)->out[0];
        move_last_to(f, i);
        i++;
        int64_t rows = padded_rows(z, p);
        if (rows) { /* the real rows of the gathered padded tensor: a view */
          s->p = rows_node(z, f, s->p, IR_OP_SLICE, rows, 0, n, n->loc)->out[0];
          move_last_to(f, i);
          i++;
        }
      }
      n->in[k] = s->p;
    }
  }
  if (z->stage != 3 || bwd >= f->nodes.len) return;
  /* ZeRO-3: a parameter the backward does not read is fetched with its
   * module all the same */
  for (int pi = 0; pi < z->m->params.len; pi++) {
    IrValue *p = z->m->params.items[pi];
    if (storage_dim(z, p) < 0 || ir_map_get(&got[1], p)) continue;
    int at = -1;
    for (int i = bwd; i < f->nodes.len && at < 0; i++)
      if (in_module(f->nodes.items[i], p)) at = i;
    if (at < 0) at = bwd;
    IrNode *anchor = f->nodes.items[at];
    IrPlacement pl[IR_NAXES];
    memcpy(pl, p->pl, sizeof pl);
    pl[IR_AX_DP] = (IrPlacement){IR_PL_B, 0};
    reshard_node(z, f, p, pl, anchor, p->loc);
    move_last_to(f, at);
  }
}

bool pass_zero(IrModule *m, PassCtx *cx) {
  const MmPlan *plan = &m->plan;
  if (plan->zero < 1 || m->mesh[IR_AX_DP] <= 1) return true;
  Zero z = {.m = m, .stage = plan->zero, .dp = m->mesh[IR_AX_DP]};
  arena_init(&z.a);
  ir_map_init(&z.store, &z.a, false);
  ir_map_init(&z.pad, &z.a, false);
  choose_storage(&z);
  for (int fi = 0; fi < m->funcs.len; fi++) grads(&z, m->funcs.items[fi]);
  /* storage: the parameter and its optimizer state */
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      if (!step_op(n->op)) continue;
      int d = storage_dim(&z, n->in[0]);
      if (d < 0) continue;
      int last = n->op == IR_OP_ADAMW ? 3 : 2;
      int64_t rows = padded_rows(&z, n->in[0]);
      for (int k = 2; k <= last; k++) {
        n->in[k]->pl[IR_AX_DP] = (IrPlacement){IR_PL_S, d};
        if (rows) pad_shape(&z, n->in[k], rows);
      }
    }
  }
  for (int i = 0; i < m->params.len; i++) {
    IrValue *p = m->params.items[i];
    int d = storage_dim(&z, p);
    if (d >= 0) p->pl[IR_AX_DP] = (IrPlacement){IR_PL_S, d};
    if (padded_rows(&z, p)) pad_shape(&z, p, padded_rows(&z, p));
  }
  for (int fi = 0; fi < m->funcs.len; fi++) {
    gathers(&z, m->funcs.items[fi]);
    ir_func_renumber(m->funcs.items[fi]);
  }
  arena_free(&z.a);
  return true;
}
