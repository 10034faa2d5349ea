/* The `bucket` pass: data-parallel gradient buckets, as PyTorch DDP's
 * Reducer and Megatron's gradient buffers do them, decided at compile time.
 *
 * After `collectives`, plain data parallel leaves one all_reduce over dp
 * per gradient, right where the gradient is complete (shard puts the
 * reshard there); ZeRO a reduce_scatter per gradient. Each is a separate collective call: a latency
 * each, and small tensors (biases, norms) waste the link. This pass groups them:
 *
 *   - the candidates are the all_reduce (and reduce_scatter) nodes over dp
 *     of @train whose result
 *     is a gradient (grad(@p)), or becomes one through a chain of other
 *     collectives used once each (the dp all-reduce of a norm's gradient
 *     followed by its tp all-reduce under tensor parallelism), and whose
 *     gradient is read only from the optimizer on (grad_norm, adamw, sgd):
 *     then the reduction can wait until its bucket is full;
 *   - in program order, i.e. the order the backward completes the gradients
 *     (the reverse of the parameters' order, as DDP assumes), a candidate
 *     joins the open bucket; the bucket closes once it holds at least
 *     `bucket_mb` MiB (per rank: the local pieces under tp), as DDP's
 *     bucket_cap_mb does; the last bucket may be smaller;
 *   - each member gets the attribute `bucket = K` (K = 0, 1, ... in order),
 *     and the members move to just before the bucket's last member, so that
 *     a bucket is a run of consecutive all_reduce nodes that the backend
 *     lowers to one call (mmrt_all_reduce_buckets) when the last gradient
 *     of the bucket is ready; the collectives after a member (the chain
 *     above) follow the bucket, in the members' order.
 *
 * Nothing else changes: the same values are reduced over the same axis, so
 * the elements sent per rank and step are those of the per-gradient
 * all-reduces (2 Psi (d - 1) / d), in fewer calls.
 *
 * Under ZeRO (zero >= 1) the zero pass reduce-scatters the gradients over
 * dp instead; those reduce_scatter nodes are bucketed the same way, in a
 * stream of their own (a bucket holds one kind of collective), and the
 * backend packs each rank's parts of a bucket's gradients together for one
 * MPI reduce-scatter (mmrt_reduce_scatter_bucket). Gradients ZeRO leaves
 * replicated (no dim dp divides) stay all-reduced, in all-reduce buckets.
 * bucket_mb = 0 turns the pass off.
 *
 * Overlap (unless the plan says no_overlap): a bucket's call only starts
 * its reduction (non-blocking MPI) when the bucket's last gradient is
 * ready, and the pass puts a `bucket_wait {bucket = K}` node just before
 * the first reader of any of the bucket's results (the gradient norm or
 * the bucket's first optimizer step), so the reduction runs while the rest
 * of the backward computes, as DDP's Reducer does. The collectives that
 * finish a member's gradient (its chain) move after the wait. The results
 * are defined at the bucket's call, so memplan keeps their storage from
 * there through the wait; the runtime copies the operands out when it
 * starts, so they may die there as before.
 *
 * ZeRO-3 prefetch (zero = 3 and overlap): the zero pass gathers each
 * parameter just before its first use in the forward and again in the
 * backward, blocking. Here, the parameter gathers over dp of @train form
 * units: consecutive gathers of one layer (the nodes' layer("...", i)) in
 * one region (forward, backward); layer-less gathers (embeddings, final
 * norm) form units of their own. The gathers of unit u + 1 move to just
 * before unit u's first gather as it stood (where unit u's compute
 * starts), each with `prefetch = K` (a runtime slot after the gradient
 * buckets'), and a `bucket_wait {bucket = K}` goes just before its first
 * reader: the gather of layer l + 1 is posted before layer l computes and
 * waited for just before use, as DeepSpeed's prefetch of the next module
 * does. Unit 0 stays blocking. The results are defined at the post, so
 * memplan keeps each gathered layer from its post through its last use:
 * the extra gathered layer in flight is planned memory (`mmc plan` prints
 * its bytes). */
#include <string.h>

#include "bucket.h"
#include "pass.h"

#define MAX_TAIL 8

typedef struct Cand {
  IrNode *ar;             /* the all_reduce or reduce_scatter over dp */
  IrNode *tail[MAX_TAIL]; /* the collectives that finish the gradient */
  int ntail;
  int64_t bytes; /* the message, per rank */
  int bucket;
} Cand;

static bool bucket_op(IrOp op) { /* the collectives that take {bucket} */
  return (ir_ops[op].opt_attrs & (1ull << IR_ATTR_BUCKET)) != 0;
}

int64_t bucket_id(const IrNode *n) {
  if (!bucket_op(n->op) || !ir_attrs_has(&n->attrs, IR_ATTR_BUCKET)) return -1;
  return n->attrs.v[IR_ATTR_BUCKET].i;
}

static bool same_run(const IrNode *a, const IrNode *b) {
  return bucket_id(a) >= 0 && bucket_id(a) == bucket_id(b) && a->op == b->op &&
         a->attrs.v[IR_ATTR_MESH].i == b->attrs.v[IR_ATTR_MESH].i;
}

int bucket_run(const IrFunc *f, int i) {
  const IrNode *n = f->nodes.items[i];
  if (bucket_id(n) < 0) return 1;
  if (i > 0 && same_run(f->nodes.items[i - 1], n)) return 0;
  int k = 1;
  while (i + k < f->nodes.len && same_run(n, f->nodes.items[i + k])) k++;
  return k;
}

static bool chain_op(IrOp op) {
  return ir_op_is_collective(op) || op == IR_OP_ALL_SLICE;
}

const IrValue *bucket_grad_param(const IrFunc *f, int i) {
  const IrValue *v = ((const IrNode *)f->nodes.items[i])->out[0];
  for (int step = 0; step <= MAX_TAIL && v; step++) {
    if (v->grad_of) return v->grad_of;
    const IrValue *next = NULL;
    for (int j = i + 1; j < f->nodes.len && !next; j++) {
      const IrNode *u = f->nodes.items[j];
      if (chain_op(u->op) && u->nin == 1 && u->in[0] == v) next = u->out[0], i = j;
    }
    v = next;
  }
  return NULL;
}

typedef struct Use {
  int count;
  int first;    /* index of the first use; f->nodes.len for a returned value */
  IrNode *user; /* the last user */
} Use;

static bool is_opt(IrOp op) {
  return op == IR_OP_GRAD_NORM || (ir_ops[op].flags & OPF_OPTIMIZER);
}

static void place_waits(IrModule *m, IrFunc *f, const Cand *cands, int nc, int base, int nb,
                        Arena *a);

/* A gradient of a parameter of a tp = 1 sub-model under a tp > 1 mesh
 * (docs/subplans.md): its data parallel spans the tp axis. */
static bool spans_tp(const IrModule *m, const IrValue *p) {
  MmSubPlan sub;
  return p && m->mesh[IR_AX_TP] > 1 && mm_subplan_for(&m->plan, p->name, &sub) && sub.tp == 1;
}

/* One stream of buckets: the candidates are the collectives over axis ax;
 * over any other axis than dp only those finishing a gradient of a
 * sub-model whose dp spans that axis. The buckets are numbered from the
 * first slot no bucket or wait of f holds yet. */
static void bucket_func(IrModule *m, IrFunc *f, IrAxis ax, int64_t cap, Arena *a) {
  int nn = f->nodes.len, opt = -1;
  int base = 0;
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    int64_t k = n->op == IR_OP_BUCKET_WAIT ? n->attrs.v[IR_ATTR_BUCKET].i : bucket_id(n);
    if (k >= base) base = (int)k + 1;
  }
  for (int i = 0; i < nn && opt < 0; i++)
    if (is_opt(((IrNode *)f->nodes.items[i])->op)) opt = i;
  if (opt < 0) return; /* no optimizer: no gradients to reduce */
  IrMap uses, index;
  ir_map_init(&uses, a, false);
  ir_map_init(&index, a, false);
  for (int i = 0; i < nn; i++) {
    IrNode *n = f->nodes.items[i];
    ir_map_put(&index, n)->i = i;
    for (int k = 0; k < n->nin; k++) {
      IrMapSlot *s = ir_map_put(&uses, n->in[k]);
      Use *u = s->p;
      if (!u) {
        u = s->p = ARENA_NEW(a, Use);
        u->first = i;
      }
      u->count++;
      u->user = n;
    }
  }
  for (int r = 0; r < f->results.len; r++) {
    IrMapSlot *s = ir_map_put(&uses, f->results.items[r]);
    Use *u = s->p;
    if (!u) {
      u = s->p = ARENA_NEW(a, Use);
      u->first = nn;
    }
    u->count++;
  }
  /* the candidates, in program order */
  Cand *cands = ARENA_ARRAY(a, Cand, nn ? nn : 1);
  int nc = 0;
  for (int i = 0; i < opt; i++) {
    IrNode *n = f->nodes.items[i];
    if (!bucket_op(n->op) || n->nin != 1 || n->nout != 1 || n->attrs.v[IR_ATTR_MESH].i != ax ||
        bucket_id(n) >= 0 || n->in[0]->dtype != IR_F32)
      continue;
    Cand c = {.ar = n, .bytes = ir_local_numel(m, n->in[0]) * ir_dtype_size(n->in[0]->dtype)};
    IrValue *v = n->out[0];
    bool ok = true;
    while (ok && !v->grad_of) { /* follow the collectives that finish the gradient */
      IrMapSlot *s = ir_map_get(&uses, v);
      Use *u = s ? s->p : NULL;
      ok = u && u->count == 1 && u->user && chain_op(u->user->op) && u->user->nin == 1 &&
           u->user->nout == 1 && u->first < opt && c.ntail < MAX_TAIL;
      if (ok) {
        c.tail[c.ntail++] = u->user;
        v = u->user->out[0];
      }
    }
    if (!ok) continue;
    IrMapSlot *s = ir_map_get(&uses, v);
    if (s && ((Use *)s->p)->first < opt) continue; /* read before the optimizer */
    if (ax != IR_AX_DP && !spans_tp(m, v->grad_of)) continue;
    cands[nc++] = c;
  }
  if (!nc) return;
  /* greedy, in order, one stream per op (all-reduces, and under ZeRO the
   * reduce-scatters): a bucket closes once it holds cap bytes */
  int nb = 0;
  int *last = ARENA_ARRAY(a, int, nc); /* bucket -> its last candidate */
  for (int op = 0; op < 2; op++) {
    IrOp want = op ? IR_OP_REDUCE_SCATTER : IR_OP_ALL_REDUCE;
    int64_t fill = 0, open = -1;
    for (int k = 0; k < nc; k++) {
      if (cands[k].ar->op != want) continue;
      if (open < 0) open = nb++;
      cands[k].bucket = (int)open;
      last[open] = k;
      fill += cands[k].bytes;
      if (fill >= cap) open = -1, fill = 0;
    }
  }
  /* number the buckets in the order they are reduced: by their last member */
  int *id = ARENA_ARRAY(a, int, nb), next = 0;
  for (int k = 0; k < nc; k++)
    if (last[cands[k].bucket] == k) id[cands[k].bucket] = base + next++;
  for (int k = 0; k < nc; k++)
    ir_attrs_set_int(&cands[k].ar->attrs, IR_ATTR_BUCKET, id[cands[k].bucket]);
  IrMap moving, lastnode;
  ir_map_init(&moving, a, false);
  ir_map_init(&lastnode, a, false);
  for (int k = 0; k < nc; k++) {
    ir_map_put(&moving, cands[k].ar);
    for (int t = 0; t < cands[k].ntail; t++) ir_map_put(&moving, cands[k].tail[t]);
    if (last[cands[k].bucket] == k) ir_map_put(&lastnode, cands[k].ar)->i = cands[k].bucket + 1;
  }
  void **old = ARENA_ARRAY(a, void *, nn);
  memcpy(old, f->nodes.items, sizeof(void *) * (size_t)nn);
  int w = 0, done = 0;
  for (int i = 0; i < nn; i++) {
    IrNode *n = old[i];
    if (!ir_map_get(&moving, n)) {
      f->nodes.items[w++] = n;
      continue;
    }
    IrMapSlot *ls = ir_map_get(&lastnode, n);
    if (!ls) continue;
    /* the bucket's last gradient is ready: its collectives, then their chains */
    int b = (int)ls->i - 1;
    for (int k = 0; k < nc; k++)
      if (cands[k].bucket == b) f->nodes.items[w++] = cands[k].ar, done++;
    for (int k = 0; k < nc; k++)
      if (cands[k].bucket == b)
        for (int t = 0; t < cands[k].ntail; t++) f->nodes.items[w++] = cands[k].tail[t];
  }
  MM_ASSERT(w == nn && done == nc);
  ir_func_renumber(f);
  /* from here on a bucket is its number in the order it is reduced (the
   * collectives' attribute), and so is its wait's: with the internal number
   * a wait (and the chains after it) went with another bucket whenever there
   * are two streams (ZeRO's reduce-scatters and the all-reduces of the
   * gradients it leaves replicated, as tp + sp + ZeRO has): ViTFashion tp=2 x
   * dp=2 + sp + ZeRO-1 gathered vit.pos's gradient over tp while its bucket
   * was still in flight (0.36 of an update off serial) */
  for (int k = 0; k < nc; k++) cands[k].bucket = id[cands[k].bucket];
  if (!m->plan.no_overlap) place_waits(m, f, cands, nc, base, nb, a);
}

int64_t prefetch_id(const IrNode *n) {
  if (n->op != IR_OP_ALL_GATHER || !ir_attrs_has(&n->attrs, IR_ATTR_PREFETCH)) return -1;
  return n->attrs.v[IR_ATTR_PREFETCH].i;
}

int64_t async_slot(const IrNode *n) {
  int64_t b = bucket_id(n);
  return b >= 0 ? b : prefetch_id(n);
}

int bucket_wait_index(const IrFunc *f, int64_t id) {
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->op == IR_OP_BUCKET_WAIT && n->attrs.v[IR_ATTR_BUCKET].i == id) return i;
  }
  return -1;
}

/* The waits: bucket b's wait goes before the first node, after the
 * bucket's call, that reads one of its results or its chains' results;
 * the chains follow the wait. */
static void place_waits(IrModule *m, IrFunc *f, const Cand *cands, int nc, int base, int nb,
                        Arena *a) {
  IrMap owner, tails; /* value -> bucket + 1; tail node -> bucket + 1 */
  ir_map_init(&owner, a, false);
  ir_map_init(&tails, a, false);
  for (int k = 0; k < nc; k++) {
    ir_map_put(&owner, cands[k].ar->out[0])->i = cands[k].bucket - base + 1;
    for (int t = 0; t < cands[k].ntail; t++) {
      ir_map_put(&owner, cands[k].tail[t]->out[0])->i = cands[k].bucket - base + 1;
      ir_map_put(&tails, cands[k].tail[t])->i = cands[k].bucket - base + 1;
    }
  }
  int nn = f->nodes.len;
  IrNode **wait = ARENA_ARRAY(a, IrNode *, nb);
  IrBuilder b = {.m = m, .f = f, .group = -1, .layer = -1};
  for (int k = 0; k < nb; k++) {
    IrAttrs at = {0};
    ir_attrs_set_int(&at, IR_ATTR_BUCKET, base + k);
    wait[k] = ir_build(&b, IR_OP_BUCKET_WAIT, NULL, 0, &at, (SrcLoc){0}, NULL, 0, NULL);
    MM_ASSERT(wait[k]);
  }
  void **old = ARENA_ARRAY(a, void *, nn);
  memcpy(old, f->nodes.items, sizeof(void *) * (size_t)nn);
  char *waited = ARENA_ARRAY(a, char, nb);
  memset(waited, 0, (size_t)nb);
  int w = 0;
#define EMIT_WAIT(bk)                                                                              \
  do {                                                                                             \
    waited[bk] = 1;                                                                                \
    f->nodes.items[w++] = wait[bk];                                                                \
    for (int k_ = 0; k_ < nc; k_++)                                                                \
      if (cands[k_].bucket - base == (bk))                                                         \
        for (int t_ = 0; t_ < cands[k_].ntail; t_++) f->nodes.items[w++] = cands[k_].tail[t_];     \
  } while (0)
  for (int i = 0; i < nn; i++) {
    IrNode *n = old[i];
    if (ir_map_get(&tails, n)) continue; /* after its bucket's wait */
    for (int j = 0; j < n->nin; j++) {
      IrMapSlot *s = ir_map_get(&owner, n->in[j]);
      if (s && !waited[s->i - 1]) EMIT_WAIT(s->i - 1);
    }
    f->nodes.items[w++] = n;
  }
  for (int k = 0; k < nb; k++) /* results returned unread: wait at the end */
    if (!waited[k]) EMIT_WAIT(k);
#undef EMIT_WAIT
  MM_ASSERT(w == nn + nb);
  f->nodes.len = w;
  ir_func_renumber(f);
}

/* A parameter gather over dp: ZeRO's all_gather of a stored shard. */
static bool param_gather(const IrNode *n) {
  return n->op == IR_OP_ALL_GATHER && n->attrs.v[IR_ATTR_MESH].i == IR_AX_DP && n->nin == 1 &&
         !n->in[0]->def && n->in[0]->role == IR_ROLE_PARAM && n->in[0]->dtype == IR_F32 &&
         prefetch_id(n) < 0;
}

static void prefetch_func(IrModule *m, IrFunc *f, Arena *a) {
  int nn = f->nodes.len, bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  if (bwd < 0) return;
  int64_t slot = 0; /* after the gradient buckets' */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    int64_t k = n->op == IR_OP_BUCKET_WAIT ? n->attrs.v[IR_ATTR_BUCKET].i : async_slot(n);
    if (k >= slot) slot = k + 1;
  }
  /* a gather nothing reads (ZeRO-3 fetches a module's bias its backward
   * does not read) stays blocking where it is: memplan frees its result at
   * once, so it must not be written after its node */
  IrMap read;
  ir_map_init(&read, a, false);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) ir_map_put(&read, n->in[k]);
  }
  for (int r = 0; r < f->results.len; r++) ir_map_put(&read, f->results.items[r]);
  /* the units: unit[i] for a gather at i, -1 elsewhere; first[u] its first gather */
  int *unit = ARENA_ARRAY(a, int, nn), *first = ARENA_ARRAY(a, int, nn), nu = 0;
  int pgroup = -2, player = -2, pregion = -1;
  for (int i = 0; i < nn; i++) {
    IrNode *n = f->nodes.items[i];
    unit[i] = -1;
    if (upd >= 0 && i >= upd) break;
    if (!param_gather(n) || !ir_map_get(&read, n->out[0])) continue;
    int region = i >= bwd;
    if (!nu || n->group != pgroup || n->layer != player || region != pregion) first[nu++] = i;
    unit[i] = nu - 1;
    pgroup = n->group, player = n->layer, pregion = region;
  }
  if (nu < 2) return;
  /* post[i]: the unit whose gathers are posted before node i (unit u + 1 at
   * unit u's first gather); the gathers get their slots in posting order */
  int *post = ARENA_ARRAY(a, int, nn);
  for (int i = 0; i < nn; i++) post[i] = -1;
  for (int u = 0; u + 1 < nu; u++) post[first[u]] = u + 1;
  IrMap owner; /* a posted gather's result -> its wait + 1 */
  ir_map_init(&owner, a, false);
  IrNode **waits = ARENA_ARRAY(a, IrNode *, nn);
  int nw = 0;
  IrBuilder b = {.m = m, .f = f, .group = -1, .layer = -1};
  void **old = ARENA_ARRAY(a, void *, nn);
  memcpy(old, f->nodes.items, sizeof(void *) * (size_t)nn);
  void **out = ARENA_ARRAY(a, void *, 2 * nn);
  char *waited = ARENA_ARRAY(a, char, nn);
  memset(waited, 0, (size_t)nn);
  int w = 0;
  for (int i = 0; i < nn; i++) {
    IrNode *n = old[i];
    if (post[i] >= 0) /* post the next unit's gathers here */
      for (int j = first[post[i]]; j < nn && (unit[j] == post[i] || unit[j] < 0); j++) {
        if (unit[j] != post[i]) continue;
        IrNode *g = old[j];
        ir_attrs_set_int(&g->attrs, IR_ATTR_PREFETCH, slot);
        IrAttrs at = {0};
        ir_attrs_set_int(&at, IR_ATTR_BUCKET, slot++);
        waits[nw] = ir_build(&b, IR_OP_BUCKET_WAIT, NULL, 0, &at, (SrcLoc){0}, NULL, 0, NULL);
        MM_ASSERT(waits[nw]);
        waits[nw]->scope = g->scope, waits[nw]->group = g->group, waits[nw]->layer = g->layer;
        ir_map_put(&owner, g->out[0])->i = ++nw;
        out[w++] = g;
      }
    if (unit[i] > 0) continue; /* posted before */
    for (int k = 0; k < n->nin; k++) {
      IrMapSlot *s = ir_map_get(&owner, n->in[k]);
      if (s && !waited[s->i - 1]) waited[s->i - 1] = 1, out[w++] = waits[s->i - 1];
    }
    out[w++] = n;
  }
  /* ir_build appended the waits to f: the new order replaces all; every
   * posted gather is read, so every wait is placed */
  MM_ASSERT(w == nn + nw && f->nodes.len == nn + nw);
  memcpy(f->nodes.items, out, sizeof(void *) * (size_t)w);
  ir_func_renumber(f);
}

bool pass_bucket(IrModule *m, PassCtx *cx) {
  const MmPlan *plan = &m->plan;
  /* pp > 1: one all-reduce per gradient, in its pipeline stage's backward
   * (a bucket would join the gradients of several stages) */
  if (plan->pp > 1) return true;
  /* a sub-model of tp = 1 under tp > 1 reduces its gradients over the tp
   * axis too (docs/subplans.md): those in buckets of their own */
  bool sub_tp = plan->nsubplans && m->mesh[IR_AX_TP] > 1;
  if (m->mesh[IR_AX_DP] <= 1 && !sub_tp) return true;
  double bytes = plan->bucket_mb * 1048576.0;
  int64_t cap = bytes < 1 ? 1 : (int64_t)bytes;
  Arena a;
  arena_init(&a);
  for (int i = 0; i < m->funcs.len && plan->bucket_mb > 0; i++) {
    if (m->mesh[IR_AX_DP] > 1) bucket_func(m, m->funcs.items[i], IR_AX_DP, cap, &a);
    if (sub_tp) bucket_func(m, m->funcs.items[i], IR_AX_TP, cap, &a);
  }
  IrFunc *train = ir_module_func(m, "train");
  if (plan->zero == 3 && !plan->no_overlap && train) prefetch_func(m, train, &a);
  arena_free(&a);
  return true;
}
