/* Micro-batches (issue 11): with micro_batches = M > 1 the train step is
 * two functions of @train, cut at the update (ir_train_phases): the forward
 * and backward of one micro-batch (mm_train_step, every node before the
 * first gradient-norm or optimizer op) and the update (mm_update_step, the
 * rest). The trainer runs the first M times per step and sums what the
 * update reads from it (the gradients: `accum` in the descriptor), weighted
 * by each micro-batch's share of the labels, before it runs the update. */
#include <stdio.h>
#include <string.h>

#include "../passes/accum.h"
#include "../passes/bucket.h"
#include "../passes/pp_sched.h"
#include "cg_internal.h"

_Static_assert((int)PP_F == MMRT_PP_F && (int)PP_B == MMRT_PP_B && (int)PP_I == MMRT_PP_I &&
                   (int)PP_W == MMRT_PP_W,
               "a schedule's compute actions are the descriptor's kinds");

/* v, operand k of update node n, joins the values the micro-batches sum
 * (once); it must be a parameter's gradient. */
static bool add_accum(Cg *cg, IrMap *seen, const IrNode *n, int k, CgMb *out, const char *who) {
  const IrValue *v = n->in[k];
  if (ir_map_get(seen, v)) return true;
  ir_map_put(seen, v);
  if (v->role != IR_ROLE_GRAD || !v->grad_of)
    return cg_error(cg, n,
                    "%s: the update reads a value of the backward that is not a parameter's "
                    "gradient (operand %d of %s)",
                    who, k, ir_ops[n->op].name);
  out->accum[out->naccum++] = v;
  return true;
}

/* n lowered in a block of its own that runs only when flag (an i1 of the
 * micro-batch's part function) is `when`; go and after name the blocks */
static bool lower_when(Cg *cg, const IrNode *n, LLVMValueRef flag, bool when, const char *go_name,
                       const char *after_name) {
  LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, go_name);
  LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, after_name);
  LLVMBuildCondBr(cg->b, flag, when ? go : after, when ? after : go);
  LLVMPositionBuilderAtEnd(cg->b, go);
  bool ok = cg_lower_node(cg, n);
  LLVMBuildBr(cg->b, after);
  LLVMPositionBuilderAtEnd(cg->b, after);
  return ok;
}

bool cg_mb_lower_deferred(Cg *cg, const IrNode *n) {
  const IrFunc *f = cg->f;
  int i = cg->cur, run = n->op == IR_OP_BUCKET_WAIT ? 1 : bucket_run(f, i);
  if (run == 0) return true; /* a bucket's later member: its first one's call does it */
  for (int k = 0; k < run; k++) {
    const IrNode *u = f->nodes.items[i + k];
    IrMapSlot *s = ir_map_get(&cg->defer, u);
    if (!s || s->i < 2) continue;
    IrMapSlot *fs = ir_map_put(&cg->defer_fused, u->in[0]);
    if (fs->i == 1) continue; /* its matmul accumulated into the sum (cg_mb_linear_w) */
    fs->i = 2;
    cg_check_status(cg,
                    cg_call(cg, "mmrt_mb_defer",
                            (LLVMValueRef[]){cg->mesh, cg_i32(cg, s->i - 2), cg_ptr(cg, u->in[0]),
                                             cg_i64(cg, ir_numel(&u->in[0]->shape))},
                            4));
  }
  return lower_when(cg, n, cg->defer_now, false, "reduce", "deferred");
}

bool cg_mb_lower_once(Cg *cg, const IrNode *n) {
  return lower_when(cg, n, cg->once_now, true, "gather", "gathered");
}

bool cg_mb_linear_w(Cg *cg, const IrNode *n, const IrValue *dw, LLVMValueRef dt, LLVMValueRef dy,
                    LLVMValueRef x, LLVMValueRef rows, LLVMValueRef K, LLVMValueRef N,
                    LLVMValueRef overlap) {
  IrMapSlot *s = cg->defer_on ? ir_map_get(&cg->defer_mm, n) : NULL;
  if (!s || dw->dtype != IR_F32) return false;
  /* the root's operand must be dw, and its reduction not already given to
   * mmrt_mb_defer */
  if (cg->defer_roots[s->i - 1] != dw) return false;
  IrMapSlot *fs = ir_map_put(&cg->defer_fused, dw);
  if (fs->i == 2) return false;
  fs->i = 1;
  cg_check_status(cg, cg_call(cg, "mmrt_mb_linear_bwd_weights",
                              (LLVMValueRef[]){cg->mesh, cg_i32(cg, s->i - 1), dt, cg_ptr(cg, dw),
                                               dy, x, rows, K, N, overlap},
                              10));
  return true;
}

/* The dp reductions run once a step (passes/accum.h): cg->defer, and the
 * roots, the deferred accum tensors and (under a pipeline, stage: each
 * node's) the roots' stages into out; cg->defer_on when any. */
static bool defer_setup(Cg *cg, const IrFunc *f, const unsigned char *up, const int *stage,
                        CgMb *out) {
  MbDefer md;
  mb_defer_plan(cg->m, f, up, cg->a, &md);
  ir_map_init(&cg->defer, cg->a, false);
  ir_map_init(&cg->defer_mm, cg->a, false);
  ir_map_init(&cg->defer_fused, cg->a, false);
  cg->defer_roots = md.roots;
  for (int j = 0; j < md.nroots; j++)
    if (md.fused[j] >= 0) ir_map_put(&cg->defer_mm, f->nodes.items[md.fused[j]])->i = 1 + j;
  out->defer_stage = stage ? ARENA_ARRAY(cg->a, int64_t, md.nroots + 1) : NULL;
  for (int i = 0; i < f->nodes.len; i++)
    if (md.node[i]) ir_map_put(&cg->defer, f->nodes.items[i])->i = md.node[i];
  for (int j = 0; stage && j < md.nroots; j++) out->defer_stage[j] = stage[md.rnode[j]];
  out->defer = md.roots, out->ndefer = md.nroots;
  out->defer_home = ARENA_ARRAY(cg->a, int64_t, md.nroots + 1);
  for (int j = 0; j < md.nroots; j++) { /* memplan keeps a home in the grad arena */
    const IrValue *h = md.home[j];
    bool in = h && h->mem_planned && h->mem_arena == IR_ROLE_GRAD;
    out->defer_home[j] = in ? h->mem_offset : -1;
  }
  if (md.naccum != out->naccum) return cg_error(cg, NULL, "micro_batches: the sums disagree");
  out->accum_deferred = ARENA_ARRAY(cg->a, int64_t, out->naccum + 1);
  for (int i = 0; i < out->naccum; i++) {
    if (md.accum[i] != out->accum[i]) return cg_error(cg, NULL, "micro_batches: the sums disagree");
    out->accum_deferred[i] = md.accum_deferred[i];
  }
  cg->defer_on = out->ndefer > 0;
  ir_map_init(&cg->once, cg->a, false);
  for (int i = 0; i < f->nodes.len; i++)
    if (md.once[i]) ir_map_put(&cg->once, f->nodes.items[i])->i = 1;
  cg->once_on = md.nonce > 0;
  out->nonce = md.nonce;
  return true;
}

bool cg_mb_build(Cg *cg, const IrFunc *f, CgMb *out) {
  memset(out, 0, sizeof *out);
  out->M = cg->m->plan.micro_batches;
  int bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  if (upd < 0) upd = f->nodes.len;
  unsigned char *mb = ARENA_ARRAY(cg->a, unsigned char, f->nodes.len + 1);
  unsigned char *up = ARENA_ARRAY(cg->a, unsigned char, f->nodes.len + 1);
  /* the update: the norm, clipping and optimizer ops and what reads them;
   * a node after the first of them that does not (the loss's all-reduce
   * over dp) belongs to the micro-batch */
  IrMap made;
  ir_map_init(&made, cg->a, false);
  ir_update_part(f, upd, cg->a, up);
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    bool u = up[i];
    mb[i] = !u;
    for (int j = 0; !u && j < n->nout; j++) ir_map_put(&made, n->out[j]);
    if (u && (ir_op_is_collective(n->op) || n->op == IR_OP_BUCKET_WAIT))
      return cg_error(cg, n, "micro_batches: a collective in the update");
  }
  out->accum = ARENA_ARRAY(cg->a, const IrValue *, f->nodes.len + 1);
  IrMap seen;
  ir_map_init(&seen, cg->a, false);
  for (int i = upd; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!up[i]) continue;
    for (int k = 0; k < n->nin; k++)
      if (ir_map_get(&made, n->in[k]) && !add_accum(cg, &seen, n, k, out, "micro_batches"))
        return false;
  }
  if (!defer_setup(cg, f, up, NULL, out)) return false;
  out->fb = cg_build_step(cg, f, "mm_train_step", true, mb);
  cg->defer_on = cg->once_on = false;
  if (!out->fb) return false;
  out->upd = cg_build_step(cg, f, "mm_update_step", true, up);
  return out->upd != NULL;
}

/* ---- pipeline stages (pp > 1) ---- */

/* The stages of @train and @forward: the pipeline pass's facts. */
bool cg_pp_assign(Cg *cg, const IrFunc *f, const IrFunc *feval) {
  char err[512];
  if (!pp_facts(cg->m, f, &cg->pp, err, sizeof err)) {
    diag_error_plain(cg->d, "codegen: pipeline: %s", err);
    return false;
  }
  if (feval && !pp_facts(cg->m, feval, &cg->pp_eval, err, sizeof err)) {
    diag_error_plain(cg->d, "codegen: pipeline: @forward: %s", err);
    return false;
  }
  /* the pp ranks that hold each parameter and piece of optimizer state */
  const IrModule *m = cg->m;
  uint64_t *mask = ARENA_ARRAY(cg->a, uint64_t, m->params.len + 1);
  pp_holders(m, f, &cg->pp, mask);
  ir_map_init(&cg->pp_mask, cg->a, true);
  ir_map_init(&cg->pp_maker, cg->a, false);
  for (int i = 0; i < m->params.len; i++)
    ir_map_put(&cg->pp_mask, ((const IrValue *)m->params.items[i])->name)->i = (int64_t)mask[i];
  return true;
}

/* The pp ranks holding v (a parameter or optimizer state), 0 for others. */
static uint64_t held_by(Cg *cg, const IrValue *v) {
  if (v->def || !v->name || (v->role != IR_ROLE_PARAM && v->role != IR_ROLE_OPT)) return 0;
  IrMapSlot *s = ir_map_get(&cg->pp_mask, v->name);
  return s ? (uint64_t)s->i : 0;
}

/* Pipeline rank r's update: the update's nodes but those that read or
 * write a parameter or state r does not hold (and what reads their
 * results); its gradient norm counts the gradients r's stages make
 * (lower_grad_norm, cg_pp_keeps_grad) and is summed over pp. */
static LLVMValueRef rank_update(Cg *cg, const IrFunc *f, int r) {
  const PpAssign *a = &cg->pp;
  int N = f->nodes.len;
  unsigned char *keep = ARENA_ARRAY(cg->a, unsigned char, N + 1);
  IrMap dropped;
  ir_map_init(&dropped, cg->a, false);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    bool k = a->part[i] == PPN_U;
    for (int j = 0; k && j < n->nin; j++) {
      uint64_t h = held_by(cg, n->in[j]);
      if ((h && !(h >> r & 1)) || ir_map_get(&dropped, n->in[j])) k = false;
    }
    if (a->part[i] == PPN_U && !k)
      for (int j = 0; j < n->nout; j++) ir_map_put(&dropped, n->out[j]);
    keep[i] = k;
  }
  char name[32];
  snprintf(name, sizeof name, "mm_update_r%d", r);
  cg->pp_rank1 = r + 1;
  LLVMValueRef fn = cg_build_step(cg, f, name, true, keep);
  cg->pp_rank1 = 0;
  return fn;
}

bool cg_pp_keeps_grad(const Cg *cg, const IrValue *v) {
  if (!cg->pp_rank1) return true;
  IrMapSlot *s = ir_map_get(&cg->pp_maker, v);
  return !s || s->i == cg->pp_rank1;
}

bool cg_pp_tp_chunk(const Cg *cg, const IrValue *v) {
  const MmPlan *pl = &cg->m->plan;
  return pl->pp_scatter && cg->m->mesh[IR_AX_TP] > 1 && pl->placement != MM_PLACE_SEPARATE &&
         pl->nsubplans == 0 && cg_orig(cg, v)->pl[IR_AX_TP].kind == IR_PL_B;
}

static int fn_of(const PpAssign *a, int i) {
  return 3 * a->stage[i] + (a->part[i] == PPN_F ? 0 : a->part[i] == PPN_I ? 1 : 2);
}

/* The values of f with a send room (memplan pp_send_room), into vs
 * (arena-allocated); their count. */
static int send_values(Cg *cg, const IrFunc *f, IrValue ***vs) {
  int n = 0;
  for (int i = 0; i < f->nodes.len; i++)
    for (int j = 0; j < ((IrNode *)f->nodes.items[i])->nout; j++)
      n += ((IrNode *)f->nodes.items[i])->out[j]->mem_send_ranks != 0;
  *vs = ARENA_ARRAY(cg->a, IrValue *, n + 1);
  int k = 0;
  for (int i = 0; i < f->nodes.len; i++)
    for (int j = 0; j < ((IrNode *)f->nodes.items[i])->nout; j++) {
      IrValue *v = ((IrNode *)f->nodes.items[i])->out[j];
      if (v->mem_send_ranks) (*vs)[k++] = v;
    }
  return n;
}

/* On pp rank r's functions a value with its send room there is found in
 * it: swaps its place (an act or grad arena offset) with the room's (a
 * grad arena offset), before and again after building them. */
static void send_swap(IrValue **vs, IrRole *was, int n, int r, bool back) {
  for (int k = 0; k < n; k++) {
    IrValue *v = vs[k];
    if (!(v->mem_send_ranks >> r & 1)) continue;
    int64_t o = v->mem_offset;
    if (!back) was[k] = v->mem_arena;
    v->mem_arena = back ? was[k] : IR_ROLE_GRAD;
    v->mem_offset = v->mem_send_offset, v->mem_send_offset = o;
  }
}

bool cg_pp_build(Cg *cg, const IrFunc *f, CgMb *out) {
  const PpAssign *a = &cg->pp;
  int N = f->nodes.len, S = a->nstages, P = cg->m->plan.pp;
  memset(out, 0, sizeof *out);
  out->M = cg->m->plan.micro_batches;
  if (3 * S > MMRT_PP_MAXFN)
    return cg_error(cg, f->nodes.items[0], "pipeline: %d stages, at most %d", S, MMRT_PP_MAXFN / 3);
  int bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  cg->pp_seed = bwd >= 0 ? f->nodes.items[bwd] : NULL;
  /* producer function (3 s + q, or -1 for the update) of each value */
  IrMap fnof;
  ir_map_init(&fnof, cg->a, false);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++)
      ir_map_put(&fnof, n->out[j])->i = a->part[i] == PPN_U ? -1 : fn_of(a, i) + 1;
  }
  /* transfers and the update's operands */
  out->accum = ARENA_ARRAY(cg->a, const IrValue *, N + 1);
  out->xfer = ARENA_ARRAY(cg->a, const IrValue *, 4 * N + 1);
  out->route = ARENA_ARRAY(cg->a, int64_t, 2 * (4 * N + 1));
  out->tp_chunk = ARENA_ARRAY(cg->a, int64_t, 4 * N + 1);
  out->accum_stage = ARENA_ARRAY(cg->a, int64_t, N + 1);
  IrMap seen, sent;
  ir_map_init(&seen, cg->a, false);
  ir_map_init(&sent, cg->a, true);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) {
      const IrValue *v = n->in[k];
      IrMapSlot *s = ir_map_get(&fnof, v);
      if (!s || s->i <= 0) continue;
      int from = (int)s->i - 1;
      if (a->part[i] == PPN_U) {
        int before = out->naccum;
        if (!add_accum(cg, &seen, n, k, out, "pipeline")) return false;
        if (out->naccum > before) {
          out->accum_stage[before] = from / 3;
          ir_map_put(&cg->pp_maker, v)->i = (from / 3) % P + 1;
        }
        continue;
      }
      int to = fn_of(a, i);
      if ((from / 3) % P == (to / 3) % P) continue; /* the same rank's slot */
      char key[64]; /* once per receiving rank: its first reader (in node order, which is
                     * each micro-batch's order of execution) receives it into the slot,
                     * where its later readers (a backward part, another virtual stage)
                     * find it */
      snprintf(key, sizeof key, "%p>%d", (const void *)v, (to / 3) % P);
      if (ir_map_get(&sent, key)) continue;
      ir_map_put(&sent, arena_strdup(cg->a, key));
      if (!v->mem_planned) return cg_error(cg, n, "pipeline: a transfer without a memory plan");
      out->route[2 * out->nxfer] = from, out->route[2 * out->nxfer + 1] = to;
      out->tp_chunk[out->nxfer] = cg_pp_tp_chunk(cg, v);
      out->xfer[out->nxfer++] = v;
    }
  }
  /* when the sender waits for each (mmrt_desc.def pp_xfer_how) */
  IrMap summed;
  pp_summed_xfers(f, a, P, cg->a, &summed);
  out->xfer_how = ARENA_ARRAY(cg->a, int64_t, out->nxfer + 1);
  out->xfer_src = ARENA_ARRAY(cg->a, int64_t, out->nxfer + 1);
  for (int x = 0; x < out->nxfer; x++) {
    const IrValue *v = out->xfer[x];
    IrMapSlot *s = ir_map_get(&summed, v);
    int64_t *how = &out->xfer_how[x];
    *how = v->mem_arena == IR_ROLE_GRAD ? MMRT_XFER_WS : MMRT_XFER_SLOT;
    /* a forward part's value in the working set is one kept there for the
     * whole step (ZeRO's parameter gathered once a step, memplan sums_of:
     * pp_transfer_place puts no transfer a forward touches there), whose
     * room nothing reuses: not waited for before the next part (which
     * may be the receiver's backward the sender needs first) */
    if (*how == MMRT_XFER_WS && out->route[2 * x] % 3 == 0) *how = MMRT_XFER_LATE;
    out->xfer_src[x] = -1;
    if (v->mem_send_ranks) { /* from its send room on the makers (memplan pp_send_room) */
      if (!(v->mem_send_ranks >> ((out->route[2 * x] / 3) % P) & 1))
        return cg_error(cg, NULL, "pipeline: a transfer's send room is not on its sender");
      *how = MMRT_XFER_FWD;
      out->xfer_src[x] = v->mem_send_offset;
    }
    if (S != P || pp_xfer_unwaited(a, N, cg->m->plan.schedule, (int)out->route[2 * x],
                                   (int)out->route[2 * x + 1]))
      *how = MMRT_XFER_LATE; /* several stages a rank: memplan pp_transfer_place */
    for (int i = 0; s && i < out->naccum; i++)
      if (out->accum[i] == s->p) *how = MMRT_XFER_SUM + 2 * i + (s->i - 1);
    if (s && *how < MMRT_XFER_SUM)
      return cg_error(cg, NULL,
                      "pipeline: a summed transfer whose gradient the update does not read");
  }
  /* the dp reductions once a step: on each stage's last W part */
  unsigned char *upm = ARENA_ARRAY(cg->a, unsigned char, N + 1);
  for (int i = 0; i < N; i++) upm[i] = a->part[i] == PPN_U;
  if (!defer_setup(cg, f, upm, a->stage, out)) return false;
  /* the functions; on a rank where a value has its send room, that
   * rank's functions find it there (its place everywhere else) */
  IrValue **sv;
  int nsv = send_values(cg, f, &sv);
  IrRole *was = ARENA_ARRAY(cg->a, IrRole, nsv + 1);
  for (int fn = 0; fn < 3 * S; fn++) {
    unsigned char *keep = ARENA_ARRAY(cg->a, unsigned char, N + 1);
    for (int i = 0; i < N; i++) keep[i] = a->part[i] != PPN_U && fn_of(a, i) == fn;
    char name[64];
    snprintf(name, sizeof name, "mm_pp_s%d_%c", fn / 3, "FIW"[fn % 3]);
    send_swap(sv, was, nsv, (fn / 3) % P, false);
    out->pp_fn[fn] = cg_build_step(cg, f, name, true, keep);
    send_swap(sv, was, nsv, (fn / 3) % P, true);
    if (!out->pp_fn[fn]) return false;
  }
  cg->defer_on = cg->once_on = false;
  if (P > MMRT_PP_MAXRANKS)
    return cg_error(cg, f->nodes.items[0], "pipeline: pp = %d, at most %d", P, MMRT_PP_MAXRANKS);
  for (int r = 0; r < P; r++)
    if (!(out->pp_upd[r] = rank_update(cg, f, r))) return false;
  out->fb = out->pp_fn[0];
  /* the schedule */
  PpSchedule sch;
  char err[256];
  PpSchedKind kind = cg->m->plan.schedule;
  if (!pp_sched_build(&sch, kind, P, S / P, out->M, err, sizeof err))
    return cg_error(cg, f->nodes.items[0], "pipeline: %s", err);
  int total = 0;
  for (int r = 0; r < P; r++) total += sch.n[r];
  out->sched = ARENA_ARRAY(cg->a, int64_t, 3 * total + 1);
  for (int r = 0, k = 0; r < P; r++) {
    out->sched_n[r] = sch.n[r];
    for (int j = 0; j < sch.n[r]; j++, k++) {
      const PpAction *x = &sch.act[r][j];
      out->sched[3 * k] = x->kind, out->sched[3 * k + 1] = x->stage, out->sched[3 * k + 2] = x->mb;
    }
  }
  pp_sched_free(&sch);
  return true;
}

/* ---- the evaluation through the pipeline ---- */

/* @forward stage by stage (cg->pp_eval, its pp facts): one function per
 * stage (mm_pp_eval_s<S>) of the nodes its results depend on, the values a stage makes that another
 * rank's stage reads as transfers (once per receiving rank, their routes from and to stages), and a
 * located error when a stage reads a parameter its rank does not hold (the evaluation never gathers
 * parameters) or when @forward's nodes are not in stage order (memplan's offsets assume that
 * order). */
bool cg_pp_eval_build(Cg *cg, const IrFunc *f, CgMb *out) {
  const PpAssign *a = &cg->pp_eval;
  int N = f->nodes.len, S = a->nstages, P = cg->m->plan.pp;
  if (S > MMRT_PP_MAXSTAGES)
    return cg_error(cg, NULL, "pipeline: %d stages, at most %d", S, MMRT_PP_MAXSTAGES);
  /* the nodes the results depend on: ZeRO-3 leaves @forward the re-gathers
   * of @train's backward, which nothing reads and which would read another
   * stage's parameters */
  unsigned char *live = ARENA_ARRAY(cg->a, unsigned char, N + 1);
  IrMap need;
  ir_map_init(&need, cg->a, false);
  for (int i = 0; i < f->results.len; i++) ir_map_put(&need, f->results.items[i]);
  for (int i = N - 1; i >= 0; i--) {
    const IrNode *n = f->nodes.items[i];
    live[i] = n->nout == 0;
    for (int j = 0; j < n->nout && !live[i]; j++) live[i] = ir_map_get(&need, n->out[j]) != NULL;
    for (int k = 0; k < n->nin && live[i]; k++) ir_map_put(&need, n->in[k]);
  }
  IrMap stof, sent;
  ir_map_init(&stof, cg->a, false);
  ir_map_init(&sent, cg->a, true);
  out->eval_xfer = ARENA_ARRAY(cg->a, const IrValue *, 2 * (size_t)N * (size_t)P + 1);
  out->eval_route = ARENA_ARRAY(cg->a, int64_t, 2 * (2 * (size_t)N * (size_t)P + 1));
  int prev = 0;
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    int to = a->stage[i];
    if (!live[i]) continue;
    if (to < prev)
      return cg_error(cg, n,
                      "pipeline evaluation: @forward's node %d is of stage %d, after a node of "
                      "stage %d (the nodes are not in stage order)",
                      i, to, prev);
    prev = to;
    for (int k = 0; k < n->nin; k++) {
      const IrValue *v = n->in[k];
      uint64_t h = held_by(cg, v);
      if (h && !(h >> (to % P) & 1))
        return cg_error(cg, n,
                        "pipeline evaluation: stage %d (pp rank %d) of @forward reads parameter "
                        "'%s', which pp rank %d does not hold (@train's stages read it on other "
                        "ranks); the evaluation does not gather parameters",
                        to, to % P, v->name, to % P);
      IrMapSlot *s = ir_map_get(&stof, v);
      if (!s) continue;
      int from = (int)s->i - 1;
      if (from % P == to % P) continue;
      char key[64];
      snprintf(key, sizeof key, "%p>%d", (const void *)v, to % P);
      if (ir_map_get(&sent, key)) continue;
      ir_map_put(&sent, arena_strdup(cg->a, key));
      if (!v->mem_planned)
        return cg_error(cg, n, "pipeline evaluation: a transfer without a memory plan");
      out->eval_route[2 * out->neval_xfer] = from, out->eval_route[2 * out->neval_xfer + 1] = to;
      out->eval_xfer[out->neval_xfer++] = v;
    }
    for (int j = 0; j < n->nout; j++) ir_map_put(&stof, n->out[j])->i = to + 1;
  }
  for (int st = 0; st < S; st++) {
    unsigned char *keep = ARENA_ARRAY(cg->a, unsigned char, N + 1);
    for (int i = 0; i < N; i++) keep[i] = live[i] && a->stage[i] == st;
    char name[64];
    snprintf(name, sizeof name, "mm_pp_eval_s%d", st);
    out->pp_eval_fn[st] = cg_build_step(cg, f, name, false, keep);
    if (!out->pp_eval_fn[st]) return false;
  }
  return true;
}
