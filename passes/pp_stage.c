/* Pipeline stages of @train (pp_stage.h) and the `pipeline` pass: @train's
 * nodes ordered stage by stage (forward: stage 0 first; backward: the last
 * stage first, each stage's input-gradient part before its weight-gradient
 * part), so that one micro-batch's work in stage order is node order and
 * memplan's offsets hold for every micro-batch slot. */
#include "pp_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accum.h"
#include "bucket.h"
#include "memplan.h"
#include "pass.h"

static bool covers(const char *unit, const char *param) {
  size_t n = strlen(unit);
  return strncmp(unit, param, n) == 0 && (param[n] == '.' || param[n] == 0);
}

typedef struct {
  const IrModule *m;
  int S;
  int *layer_stage; /* group * maxl + layer */
  int maxl;
  IrMap pstage; /* param -> i: stage + 1 (staged params only) */
  IrMap vstage; /* value -> i: stage of its producer + 1 */
  IrMap bwdval; /* values produced by backward nodes */
} St;

static int lstage(const St *st, int group, int layer) {
  if (group < 0 || layer < 0 || layer >= st->maxl) return -1;
  return st->layer_stage[group * st->maxl + layer];
}

static int param_stage(St *st, const IrValue *v) {
  IrMapSlot *s = ir_map_get(&st->pstage, v);
  return s ? (int)s->i - 1 : -1;
}

static int val_stage(St *st, const IrValue *v) {
  IrMapSlot *s = ir_map_get(&st->vstage, v);
  return s ? (int)s->i - 1 : -1;
}

/* layer_stage from the stage list, or cut by forward FLOPs. */
static bool stage_layers(St *st, const IrFunc *f, int bwd, char *err, size_t errlen) {
  const IrModule *m = st->m;
  int ng = m->groups.len;
  st->maxl = 1;
  for (int g = 0; g < ng; g++) {
    IrGroup *gr = m->groups.items[g];
    if (gr->nlayers > st->maxl) st->maxl = gr->nlayers;
  }
  st->layer_stage = malloc(sizeof(int) * (size_t)(ng * st->maxl + 1));
  for (int i = 0; i < ng * st->maxl; i++) st->layer_stage[i] = -1;
  if (m->plan.stages && m->plan.nstages > 0) {
    for (int i = 0; i < m->params.len; i++) {
      IrValue *p = m->params.items[i];
      for (int s = 0; s < m->plan.nstages; s++)
        for (int u = 0; u < m->plan.stages[s].nunits; u++)
          if (covers(m->plan.stages[s].units[u], p->name)) {
            ir_map_put(&st->pstage, p)->i = s + 1;
            if (p->group >= 0 && p->layer >= 0) st->layer_stage[p->group * st->maxl + p->layer] = s;
          }
    }
    return true;
  }
  /* layers in forward order with their FLOPs */
  int nl = 0, *order = malloc(sizeof(int) * (size_t)(ng * st->maxl + 1));
  double *fl = calloc((size_t)(ng * st->maxl + 1), sizeof(double)), total = 0;
  for (int i = 0; i < bwd; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->group < 0 || n->layer < 0 || n->layer >= st->maxl) continue;
    int k = n->group * st->maxl + n->layer;
    if (fl[k] == 0 && st->layer_stage[k] == -1) {
      order[nl++] = k;
      st->layer_stage[k] = -2; /* seen */
    }
    double c = (double)ir_flops(n);
    fl[k] += c > 0 ? c : 1;
    total += c > 0 ? c : 1;
  }
  bool ok = true;
  if (nl < st->S) {
    snprintf(err, errlen,
             "%d pipeline stages (pp = %d x vpp = %d), but the model has %d stack layer%s to "
             "cut; list the stages (stages = [...]) or use fewer",
             st->S, m->plan.pp, m->plan.vpp, nl, nl == 1 ? "" : "s");
    ok = false;
  } else if (m->plan.vpp > 1 && nl % st->S != 0) {
    snprintf(err, errlen,
             "interleaved: pp = %d x vpp = %d = %d virtual stages do not divide the %d stack "
             "layers",
             m->plan.pp, m->plan.vpp, st->S, nl);
    ok = false;
  } else {
    /* consecutive runs, each layer where the middle of its FLOPs falls,
     * at least one layer per stage */
    double cum = 0;
    int prev = 0;
    for (int j = 0; j < nl; j++) {
      int k = order[j];
      int s = (int)((cum + fl[k] / 2) / total * st->S);
      if (s < prev) s = prev;
      if (s > prev + 1) s = prev + 1;
      if (j == 0) s = 0;
      if (s < st->S - nl + j) s = st->S - nl + j; /* enough layers left for every stage */
      if (s >= st->S) s = st->S - 1;
      st->layer_stage[k] = prev = s;
      cum += fl[k];
    }
  }
  free(order);
  free(fl);
  return ok;
}

/* f's stages by the rules of pp_stage.h, the layers' stages from ref's
 * forward (f itself, or @train for @forward). */
static bool assign(const IrModule *m, const IrFunc *ref, const IrFunc *f, PpAssign *a, char *err,
                   size_t errlen) {
  memset(a, 0, sizeof *a);
  int N = f->nodes.len;
  St st = {.m = m, .S = m->plan.pp * (m->plan.vpp > 0 ? m->plan.vpp : 1)};
  Arena ar;
  arena_init(&ar);
  ir_map_init(&st.pstage, &ar, false);
  ir_map_init(&st.vstage, &ar, false);
  ir_map_init(&st.bwdval, &ar, false);
  a->nstages = st.S;
  a->stage = malloc(sizeof(int) * (size_t)(N + 1));
  a->part = malloc(sizeof(PpPart) * (size_t)(N + 1));
  int bwd = -1, upd = -1, rbwd = -1, rupd = -1;
  ir_train_phases(f, &bwd, &upd);
  if (bwd < 0) bwd = N;
  ir_train_phases(ref, &rbwd, &rupd);
  bool ok = stage_layers(&st, ref, rbwd < 0 ? ref->nodes.len : rbwd, err, errlen);
  /* the update part */
  unsigned char *up = ARENA_ARRAY(&ar, unsigned char, N + 1);
  ir_update_part(f, upd, &ar, up);
  for (int i = 0; i < N; i++) {
    a->part[i] = up[i] ? PPN_U : i < bwd ? PPN_F : PPN_I;
    a->stage[i] = -1;
  }
  /* forward, then backward, in order; nodes without operands later, and
   * so are a ZeRO gather over dp of a parameter no stage holds (ln_f's:
   * the stage of its first reader, not stage 0, which would send it on;
   * ZeRO-3's in the backward: on stage 0 it pulled the whole backward
   * there) and the views of what one makes; not ZeRO-3's in the forward
   * (per region: the tied head's own gather of the embedding stays with
   * the embedding's stage, the evaluation gathering nothing) */
  IrMap floating;
  ir_map_init(&floating, &ar, false);
  for (int i = 0; ok && i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (a->part[i] == PPN_U || n->nin == 0) continue;
    if ((a->part[i] != PPN_F || m->plan.zero <= 2) && lstage(&st, n->group, n->layer) < 0 &&
        n->nout == 1 &&
        ((n->op == IR_OP_ALL_GATHER && n->attrs.v[IR_ATTR_MESH].i == IR_AX_DP && !n->in[0]->def &&
          n->in[0]->role == IR_ROLE_PARAM && param_stage(&st, n->in[0]) < 0) ||
         ((n->op == IR_OP_SLICE || n->op == IR_OP_RESHAPE) && ir_map_get(&floating, n->in[0])))) {
      ir_map_put(&floating, n->out[0]);
      continue;
    }
    int s = lstage(&st, n->group, n->layer), fw = -1, bw = -1, pst = -1;
    bool anyb = false;
    for (int k = 0; k < n->nin; k++) {
      const IrValue *v = n->in[k];
      int ps = v->def ? val_stage(&st, v) : param_stage(&st, v);
      if (!v->def && ps > pst) pst = ps;
      if (!v->def && ps >= 0 && a->part[i] == PPN_F) s = s > ps ? s : ps;
      if (!v->def || ps < 0) continue;
      if (ir_map_get(&st.bwdval, v)) {
        bw = anyb ? (bw < ps ? bw : ps) : ps;
        anyb = true;
      } else if (ps > fw) {
        fw = ps;
      }
    }
    /* a backward node that reads backward values stays at or before them
     * whatever parameter it reads (the head's input gradient reads a tied
     * embedding of stage 0 and runs on the head's stage); the one that makes
     * a staged parameter's gradient goes to that parameter's stage */
    int gp = -1;
    for (int j = 0; j < n->nout; j++)
      if (n->out[j]->role == IR_ROLE_GRAD && n->out[j]->grad_of)
        gp = param_stage(&st, n->out[j]->grad_of);
    int r;
    if (a->part[i] == PPN_F)
      r = s > fw ? s : fw;
    else if (anyb)
      r = gp >= 0 && gp <= bw ? gp : s >= 0 && s < bw ? s : bw;
    else
      r = s >= 0 ? s : pst >= 0 ? pst : fw;
    if (r < 0) r = 0;
    a->stage[i] = r;
    for (int j = 0; j < n->nout; j++) {
      ir_map_put(&st.vstage, n->out[j])->i = r + 1;
      if (a->part[i] != PPN_F) ir_map_put(&st.bwdval, n->out[j]);
    }
  }
  /* a forward node that reads parameters only (the bf16 cast of a tied
   * embedding for the head) runs on the first stage that reads it: made
   * on its parameter's stage it would cross to the reader every
   * micro-batch; the reader's rank holds the parameter then (pp_holders) */
  for (int i = N - 1; ok && i >= 0; i--) {
    const IrNode *n = f->nodes.items[i];
    if (a->part[i] != PPN_F || n->nin == 0 || ir_op_is_collective(n->op)) continue;
    bool params = true;
    for (int k = 0; k < n->nin && params; k++)
      params = !n->in[k]->def && n->in[k]->role == IR_ROLE_PARAM;
    int first = -1;
    for (int j = i + 1; params && j < N; j++) {
      const IrNode *c = f->nodes.items[j];
      for (int k = 0; k < c->nin; k++)
        for (int o = 0; o < n->nout; o++)
          if (c->in[k] == n->out[o] && a->stage[j] >= 0 && (first < 0 || a->stage[j] < first))
            first = a->stage[j];
    }
    if (params && first > a->stage[i]) a->stage[i] = first;
  }
  /* nodes without operands, and the floating gathers and views (last
   * first: a gather's views before it): the first (forward) or last
   * (backward) stage that reads them */
  for (int i0 = 0; ok && i0 < N; i0++) {
    int i = a->stage[N - 1 - i0] < 0 && a->part[N - 1 - i0] != PPN_U ? N - 1 - i0 : -1;
    const IrNode *n = i >= 0 ? f->nodes.items[i] : NULL;
    if (!n || n->nin == 0 || !ir_map_get(&floating, n->out[0])) continue;
    int best = -1;
    bool fwd = a->part[i] == PPN_F;
    for (int j = i + 1; j < N; j++) {
      const IrNode *c = f->nodes.items[j];
      for (int k = 0; a->stage[j] >= 0 && k < c->nin; k++)
        if (c->in[k] == n->out[0] && (best < 0 || (fwd ? a->stage[j] < best : a->stage[j] > best)))
          best = a->stage[j];
    }
    a->stage[i] = best < 0 ? 0 : best; /* none reads it (ZeRO-3's whole-module fetch) */
  }
  for (int i = 0; ok && i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (a->part[i] == PPN_U || n->nin != 0) continue;
    int best = -1;
    for (int j = i + 1; j < N; j++) {
      const IrNode *c = f->nodes.items[j];
      if (a->stage[j] < 0) continue;
      for (int k = 0; k < c->nin; k++)
        for (int o = 0; o < n->nout; o++)
          if (c->in[k] == n->out[o]) {
            if (best < 0 || (a->part[i] == PPN_F ? a->stage[j] < best : a->stage[j] > best))
              best = a->stage[j];
          }
    }
    a->stage[i] = best < 0 ? (a->part[i] == PPN_F ? 0 : st.S - 1) : best;
  }
  /* input-gradient part: backward nodes another stage's node depends on */
  if (ok) {
    unsigned char *need = calloc((size_t)N + 1, 1);
    IrMap idx;
    ir_map_init(&idx, &ar, false);
    for (int i = 0; i < N; i++) {
      const IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++) ir_map_put(&idx, n->out[j])->i = i + 1;
    }
    for (int i = N - 1; i >= 0; i--) {
      const IrNode *n = f->nodes.items[i];
      if (a->part[i] == PPN_U || a->part[i] == PPN_F) continue;
      for (int k = 0; k < n->nin; k++) {
        IrMapSlot *s = ir_map_get(&idx, n->in[k]);
        if (!s) continue;
        int j = (int)s->i - 1;
        if (a->part[j] != PPN_I) continue;
        if (a->stage[j] != a->stage[i] || need[i]) need[j] = 1;
      }
    }
    for (int i = 0; i < N; i++)
      if (a->part[i] == PPN_I && !need[i]) a->part[i] = PPN_W;
    free(need);
  }
  free(st.layer_stage);
  arena_free(&ar);
  if (!ok) pp_assign_free(a);
  return ok;
}

bool pp_facts(const IrModule *m, const IrFunc *f, PpAssign *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  int N = f->nodes.len, S = m->plan.pp * (m->plan.vpp > 0 ? m->plan.vpp : 1);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->pp_part == IR_PP_NONE ||
        (n->pp_part != IR_PP_U && (n->pp_stage < 0 || n->pp_stage >= S))) {
      snprintf(err, errlen,
               n->pp_part == IR_PP_NONE
                   ? "node %d of @%s (%s) has no pipeline stage (pp(...)): run the pipeline pass"
                   : "node %d of @%s (%s) is on stage %d of %d",
               i, f->name, ir_ops[n->op].name, n->pp_stage, S);
      return false;
    }
  }
  a->nstages = S;
  a->stage = malloc(sizeof(int) * (size_t)(N + 1));
  a->part = malloc(sizeof(PpPart) * (size_t)(N + 1));
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    a->part[i] = (PpPart)(n->pp_part - IR_PP_F);
    a->stage[i] = n->pp_part == IR_PP_U ? -1 : n->pp_stage;
  }
  return true;
}

/* the facts of f's nodes from a (in f's present order) */
static void write_facts(IrFunc *f, const PpAssign *a) {
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    n->pp_part = (IrPpPart)(a->part[i] + IR_PP_F);
    n->pp_stage = a->part[i] == PPN_U ? 0 : a->stage[i];
  }
}

void pp_assign_free(PpAssign *a) {
  free(a->stage);
  free(a->part);
  memset(a, 0, sizeof *a);
}

void pp_holders(const IrModule *m, const IrFunc *f, const PpAssign *a, uint64_t *mask) {
  int P = m->plan.pp > 1 ? m->plan.pp : 1;
  Arena ar;
  arena_init(&ar);
  IrMap idx;
  ir_map_init(&idx, &ar, false);
  for (int i = 0; i < m->params.len; i++) {
    mask[i] = 0;
    ir_map_put(&idx, m->params.items[i])->i = i + 1;
  }
  for (int i = 0; f && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (a->part[i] == PPN_U) {
      /* the optimizer's state goes with its parameter */
      IrMapSlot *p =
          n->nin && (ir_ops[n->op].flags & OPF_OPTIMIZER) ? ir_map_get(&idx, n->in[0]) : NULL;
      for (int k = 1; p && k < n->nin; k++) {
        IrMapSlot *s = ir_map_get(&idx, n->in[k]);
        if (s && n->in[k]->role == IR_ROLE_OPT) mask[s->i - 1] |= mask[p->i - 1];
      }
      continue;
    }
    uint64_t bit = (uint64_t)1 << (a->stage[i] % P);
    for (int k = 0; k < n->nin; k++) {
      IrMapSlot *s = ir_map_get(&idx, n->in[k]);
      if (s) mask[s->i - 1] |= bit;
    }
    /* a view of a parameter (memplan: a reshape or contiguous slice) reads
     * its storage wherever it is read */
    if (n->nin && mp_view_offset(m, n) >= 0 && ir_map_get(&idx, n->in[0]))
      ir_map_put(&idx, n->out[0])->i = ir_map_get(&idx, n->in[0])->i;
    for (int j = 0; j < n->nout; j++) {
      IrMapSlot *s = n->out[j]->grad_of ? ir_map_get(&idx, n->out[j]->grad_of) : NULL;
      if (s) mask[s->i - 1] |= bit;
    }
  }
  for (int i = 0; i < m->params.len; i++)
    if (!mask[i]) mask[i] = 1;
  arena_free(&ar);
}

void pp_rank_ranges(const IrModule *m, const uint64_t *mask, int P, int64_t (*lo)[2],
                    int64_t (*hi)[2]) {
  for (int r = 0; r < P; r++) lo[r][0] = lo[r][1] = hi[r][0] = hi[r][1] = -1;
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *v = m->params.items[i];
    int k = v->mem_arena == IR_ROLE_PARAM ? 0 : v->mem_arena == IR_ROLE_OPT ? 1 : -1;
    if (k < 0 || !v->mem_planned) continue;
    int64_t b = v->mem_offset, e = b + mp_align(mp_value_bytes(m, v));
    for (int r = 0; r < P; r++) {
      if (!(mask[i] >> r & 1)) continue;
      if (lo[r][k] < 0 || b < lo[r][k]) lo[r][k] = b;
      if (e > hi[r][k]) hi[r][k] = e;
    }
  }
  for (int r = 0; r < P; r++)
    for (int k = 0; k < 2; k++)
      if (lo[r][k] < 0) lo[r][k] = hi[r][k] = 0;
}

/* sort key: forward by stage, then backward by stage descending with the
 * input-gradient part first, then the update */
static long key(const PpAssign *a, int i, int S) {
  switch (a->part[i]) {
    case PPN_F: return a->stage[i];
    case PPN_I: return S + 2L * (S - 1 - a->stage[i]);
    case PPN_W: return S + 2L * (S - 1 - a->stage[i]) + 1;
    default: return 3L * S;
  }
}

bool pass_pipeline(IrModule *m, PassCtx *cx) {
  IrFunc *f = ir_module_func(m, "train");
  if (!f || m->plan.pp <= 1) return true;
  PpAssign a;
  char err[512];
  if (!assign(m, f, f, &a, err, sizeof err)) {
    diag_error_plain(cx && cx->d ? cx->d : m->diag, "pipeline: %s", err);
    return false;
  }
  write_facts(f, &a);
  int N = f->nodes.len, S = a.nstages;
  void **items = malloc(sizeof(void *) * (size_t)(N + 1));
  int k = 0;
  for (long want = 0; want <= 3L * S; want++)
    for (int i = 0; i < N; i++)
      if (key(&a, i, S) == want) items[k++] = f->nodes.items[i];
  memcpy(f->nodes.items, items, sizeof(void *) * (size_t)N);
  free(items);
  pp_assign_free(&a);
  if (k != N) return false;
  /* @forward (the evaluation) stage by stage too, its stages those of @train's layers; a
   * stable sort, each node's operands being of its stage or an earlier one */
  IrFunc *g = ir_module_func(m, "forward");
  if (!g) return true;
  if (!assign(m, f, g, &a, err, sizeof err)) {
    diag_error_plain(cx && cx->d ? cx->d : m->diag, "pipeline: @forward: %s", err);
    return false;
  }
  write_facts(g, &a);
  N = g->nodes.len, k = 0;
  items = malloc(sizeof(void *) * (size_t)(N + 1));
  for (int want = 0; want < S; want++)
    for (int i = 0; i < N; i++)
      if (a.stage[i] == want) items[k++] = g->nodes.items[i];
  if (k == N) memcpy(g->nodes.items, items, sizeof(void *) * (size_t)N);
  free(items);
  pp_assign_free(&a);
  return k == N;
}

/* ---- what `mmc plan` shows of the pipeline ---- */

#include "pp_sched.h"

bool pp_rank_memory(IrModule *m, PpRankMem *out, int nout, char *err, size_t errlen) {
  const IrFunc *f = ir_module_func(m, "train");
  int P = m->plan.pp;
  if (!f || P <= 1 || P > nout || P > 64) {
    snprintf(err, errlen, "no pipeline of at most %d ranks", nout);
    return false;
  }
  MpSummary ms;
  if (!mp_summarize(m, &ms, err, errlen)) return false;
  PpAssign a;
  if (!pp_facts(m, f, &a, err, errlen)) return false;
  /* the update's operands made by the stages (codegen/cg_pp.c: accum) */
  IrMap made, seen; /* made: value -> 1 + the stage that makes it */
  Arena ar;
  arena_init(&ar);
  ir_map_init(&made, &ar, false);
  ir_map_init(&seen, &ar, false);
  int64_t sums[64] = {0}, homes[64] = {0}; /* per rank: the sums of its stages' gradients */
  /* the deferred dp reductions (passes/accum.h): the sums of the local
   * gradients, of the rank whose stage holds each root, beside the arenas
   * or (home) in the grad arena; a deferred reduction's result holds the
   * step's sum itself (no sum of its own) */
  unsigned char *upm = ARENA_ARRAY(&ar, unsigned char, f->nodes.len + 1);
  for (int i = 0; i < f->nodes.len; i++) upm[i] = a.part[i] == PPN_U;
  MbDefer md;
  mb_defer_plan(m, f, upm, &ar, &md);
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (a.part[i] == PPN_U) {
      for (int k = 0; k < n->nin; k++) {
        IrMapSlot *x = ir_map_get(&made, n->in[k]);
        if (!x || ir_map_get(&seen, n->in[k])) continue;
        ir_map_put(&seen, n->in[k]);
        if (x->i > 0)
          sums[(x->i - 1) % P] += (int64_t)sizeof(float) * (ir_local_numel(m, n->in[k]) + 1);
      }
      continue;
    }
    /* 1 + the stage, or -(1 + the stage) for a deferred node's result */
    for (int j = 0; j < n->nout; j++)
      ir_map_put(&made, n->out[j])->i = md.node[i] ? -(a.stage[i] + 1) : a.stage[i] + 1;
  }
  for (int j = 0; j < md.nroots; j++) {
    int r = a.stage[md.rnode[j]] % P;
    IrMapSlot *x = md.home[j] ? ir_map_get(&made, md.home[j]) : NULL;
    if (x && x->i > 0 && ir_map_get(&seen, md.home[j])) /* a root without a collective (dp = 1) */
      sums[r] -= (int64_t)sizeof(float) * (ir_local_numel(m, md.home[j]) + 1);
    if (md.home[j])
      homes[r] += mp_align(mp_value_bytes(m, md.home[j]));
    else
      sums[r] += (int64_t)sizeof(float) * (ir_local_numel(m, md.roots[j]) + 1);
  }
  /* and the transfers summed over the micro-batches, on their senders */
  {
    IrMap sx;
    pp_summed_xfers(f, &a, P, &ar, &sx);
    for (int i = 0; i < f->nodes.len; i++) {
      const IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++)
        if (ir_map_get(&sx, n->out[j]))
          sums[a.stage[i] % P] += (int64_t)sizeof(float) * (ir_local_numel(m, n->out[j]) + 1);
    }
  }
  arena_free(&ar);
  int S = a.nstages;
  /* the param and opt ranges each rank allocates */
  uint64_t *mask = calloc((size_t)m->params.len + 1, sizeof *mask);
  int64_t(*lo)[2] = calloc((size_t)P, sizeof *lo), (*hi)[2] = calloc((size_t)P, sizeof *hi);
  if (!mask || !lo || !hi) {
    free(mask), free(lo), free(hi);
    pp_assign_free(&a);
    snprintf(err, errlen, "out of memory");
    return false;
  }
  pp_holders(m, f, &a, mask);
  pp_rank_ranges(m, mask, P, lo, hi);
  free(mask);
  pp_assign_free(&a);
  int64_t elo[64], ehi[64]; /* per rank: the act bytes its evaluation stages touch */
  const IrFunc *g = ir_module_func(m, "forward");
  for (int r = 0; r < P; r++) elo[r] = ehi[r] = 0;
  if (g && !pp_facts(m, g, &a, err, errlen)) return free(lo), free(hi), false;
  for (int i = 0; g && i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    for (int k = 0; k < n->nin + n->nout; k++) {
      const IrValue *v = ir_node_value(n, k);
      if (!v->def || !v->mem_planned || v->mem_arena != IR_ROLE_ACT) continue;
      int r = a.stage[i] % P;
      int64_t b = v->mem_offset, e = b + mp_align(mp_value_bytes(m, v));
      if (ehi[r] == 0 || b < elo[r]) elo[r] = b;
      if (e > ehi[r]) ehi[r] = e;
    }
  }
  if (g) pp_assign_free(&a);
  PpSchedule s;
  MpPpArenas ra[64];
  if (!mp_pp_arenas(m, NULL, ra, 64)) {
    free(lo), free(hi);
    snprintf(err, errlen, "no per-rank act and grad arenas");
    return false;
  }
  if (!pp_sched_build(&s, (PpSchedKind)m->plan.schedule, P, S / P, m->plan.micro_batches, err,
                      errlen))
    return false;
  for (int r = 0; r < P; r++) {
    PpRankMem *x = &out[r];
    memset(x, 0, sizeof *x);
    x->slots = pp_sched_slots(&s, r);
    x->param = hi[r][0] - lo[r][0], x->grad = ra[r].grad0;
    x->opt = hi[r][1] - lo[r][1], x->act = ra[r].act, x->act0 = ra[r].act0;
    x->input = ms.arena[IR_ROLE_INPUT];
    x->all_param = ms.arena[IR_ROLE_PARAM], x->all_opt = ms.arena[IR_ROLE_OPT];
    x->set = mp_align(x->act) + mp_align(x->input);
    x->sums = sums[r], x->homes = homes[r];
    x->eval_act = ehi[r] - elo[r];
    x->eval = x->param + x->eval_act + x->input;
    x->peak = x->param + x->opt + x->grad + x->act0 + x->input + (int64_t)(x->slots - 1) * x->set +
              x->sums;
  }
  free(lo), free(hi);
  pp_sched_free(&s);
  return true;
}

bool pp_plan_print(FILE *out, IrModule *m, const char *svg, bool detail, char *err, size_t errlen) {
  const IrFunc *f = ir_module_func(m, "train");
  if (!f || m->plan.pp <= 1) return true;
  PpAssign a;
  if (!pp_facts(m, f, &a, err, errlen)) return false;
  int S = a.nstages, P = m->plan.pp, M = m->plan.micro_batches;
  double *cost = calloc((size_t)(3 * S), sizeof *cost);
  for (int i = 0; i < f->nodes.len; i++) {
    if (a.part[i] == PPN_U) continue;
    double c = (double)ir_flops(f->nodes.items[i]);
    cost[(a.part[i] == PPN_F ? 0 : a.part[i] == PPN_I ? 1 : 2) * S + a.stage[i]] += c;
  }
  for (int k = 0; k < 3 * S; k++)
    if (cost[k] <= 0) cost[k] = 1;
  PpSchedKind kind = (PpSchedKind)m->plan.schedule;
  PpSchedule s;
  bool ok = pp_sched_build(&s, kind, P, S / P, M, err, errlen);
  if (ok) {
    pp_sched_add_comms(&s);
    PpCosts c = {cost, cost + S, cost + 2 * S, 0};
    PpSim sim;
    ok = pp_sched_simulate(&s, &c, &sim);
    if (!ok) snprintf(err, errlen, "the schedule's simulation failed: %s", sim.msg);
    if (ok) {
      fprintf(out, "pipeline: %s, pp = %d, %d stage%s (vpp = %d), %d micro-batches\n",
              pp_sched_name(kind), P, S, S == 1 ? "" : "s", S / P, M);
      for (int st = 0; st < S; st++) {
        int first = -1, last = -1, nodes = 0;
        for (int i = 0; i < f->nodes.len; i++)
          if (a.stage[i] == st) {
            const IrNode *n = f->nodes.items[i];
            nodes++;
            if (n->layer >= 0 && n->group >= 0 && a.part[i] == PPN_F) {
              int key = n->group * 100000 + n->layer;
              if (first < 0 || key < first) first = key;
              if (key > last) last = key;
            }
          }
        fprintf(out,
                "  stage %d on rank %d: forward %.0f, input gradient %.0f, weight gradient %.0f "
                "FLOPs; ",
                st, st % P, cost[st], cost[S + st], cost[2 * S + st]);
        if (first < 0)
          fprintf(out, "no stack layer");
        else {
          const IrGroup *g0 = m->groups.items[first / 100000], *g1 = m->groups.items[last / 100000];
          fprintf(out, "layers %s.%d .. %s.%d", g0->name, first % 100000, g1->name, last % 100000);
        }
        fprintf(out, " (%d ops)\n", nodes);
      }
      for (int r = 0; r < P; r++) {
        fprintf(out, "  rank %d (busy %.4g, at most %d micro-batch x stage activation%s held)%s", r,
                sim.busy[r], sim.max_inflight[r], sim.max_inflight[r] == 1 ? "" : "s",
                detail ? ":" : "");
        for (int j = 0; detail && j < s.n[r]; j++) {
          char one[32];
          pp_action_format(&s.act[r][j], one, sizeof one);
          fprintf(out, " %s", one);
        }
        fprintf(out, "\n");
      }
      fprintf(
          out,
          "  simulated (costs: the stages' FLOPs): makespan %.4g, bubble %.4f of the busy time\n",
          sim.makespan, sim.bubble);
      if (svg) { /* into a file beside it, renamed over it once complete */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp%d", svg, (int)getpid());
        FILE *g = fopen(tmp, "w");
        if (!g) {
          snprintf(err, errlen, "--timeline %s: cannot write it", svg);
          ok = false;
        } else {
          /* placement = separate: each row is a group of ranks */
          char lab[2][160];
          const char *labels[2] = {lab[0], lab[1]};
          bool sep = m->plan.placement == MM_PLACE_SEPARATE && P == 2 && m->plan.nstages == 2;
          for (int r = 0; sep && r < 2; r++) {
            int W = ir_world_size(m), lo = r * W, hi = lo + W - 1;
            if (ir_one_rank_first_stage(m)) lo = r, hi = r ? W : 0;
            size_t k = 0;
            for (int u = 0; u < m->plan.stages[r].nunits && k < sizeof lab[r]; u++)
              k += (size_t)snprintf(lab[r] + k, sizeof lab[r] - k, "%s%s", u ? " + " : "",
                                    m->plan.stages[r].units[u]);
            if (k < sizeof lab[r])
              snprintf(lab[r] + k, sizeof lab[r] - k, lo == hi ? ": rank %d" : ": ranks %d-%d", lo,
                       hi);
          }
          pp_sched_svg_labelled(g, &s, &sim, sep ? labels : NULL);
          ok = !ferror(g);
          ok = fclose(g) == 0 && ok && rename(tmp, svg) == 0;
          if (!ok) {
            unlink(tmp);
            snprintf(err, errlen, "--timeline %s: cannot write it", svg);
          }
          if (ok) fprintf(out, "  timeline: %s\n", svg);
        }
      }
      pp_sim_free(&sim, P);
    }
    pp_sched_free(&s);
  }
  free(cost);
  pp_assign_free(&a);
  return ok;
}

/* ---- transfers summed over the micro-batches ---- */

static bool read_by_update_only(const IrFunc *f, const PpAssign *a, const IrValue *v, int from) {
  for (int i = from; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] == v && a->part[i] != PPN_U) return false;
  }
  for (int i = 0; i < f->results.len; i++)
    if (f->results.items[i] == v) return false;
  return true;
}

/* Whether n adds v (f32) to its other operand: an add, or (mixed precision)
 * the fused cast of v (bf16) to f32 and that add. */
static bool summing_add(const IrNode *n, const IrValue *v) {
  if (n->nin != 2 || (n->in[0] != v && n->in[1] != v)) return false;
  if (n->op == IR_OP_ADD) return v->dtype == IR_F32;
  if (n->op != IR_OP_FUSED || v->dtype != IR_BF16 || !ir_attrs_has(&n->attrs, IR_ATTR_PROG))
    return false;
  int k = n->in[0] == v ? 0 : 1;
  const char *prog = n->attrs.v[IR_ATTR_PROG].s;
  char a[96], b[96];
  snprintf(a, sizeof a, "t0 = cast(i%d) {dtype = f32}; t1 = add(t0, i%d)", k, 1 - k);
  snprintf(b, sizeof b, "t0 = cast(i%d) {dtype = f32}; t1 = add(i%d, t0)", k, 1 - k);
  return prog && (strcmp(prog, a) == 0 || strcmp(prog, b) == 0);
}

int pp_summed_xfers(const IrFunc *f, const PpAssign *a, int P, Arena *ar, IrMap *out) {
  int N = f->nodes.len, count = 0;
  ir_map_init(out, ar, false);
  IrMap uses, at; /* value -> its readers (i), the index of its one reader (at) */
  ir_map_init(&uses, ar, false);
  ir_map_init(&at, ar, false);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) {
      ir_map_put(&uses, n->in[k])->i++;
      ir_map_put(&at, n->in[k])->i = i;
    }
  }
  for (int i = 0; i < f->results.len; i++) ir_map_put(&uses, f->results.items[i])->i += 2;
  for (int i = 0; i < N; i++) {
    const IrNode *mk = f->nodes.items[i];
    if (a->part[i] == PPN_U) continue;
    for (int j = 0; j < mk->nout; j++) {
      const IrValue *v = mk->out[j];
      IrMapSlot *u = ir_map_get(&uses, v);
      if (!u || u->i != 1 || (v->dtype != IR_F32 && v->dtype != IR_BF16)) continue;
      int r = (int)ir_map_get(&at, v)->i;
      const IrNode *n = f->nodes.items[r];
      if (!summing_add(n, v) || n->nin != 2 || n->nout != 1 || n->in[0] == n->in[1] ||
          a->part[r] != PPN_W || a->stage[r] % P == a->stage[i] % P)
        continue;
      const IrValue *g = n->out[0];
      if (g->dtype != IR_F32 || !ir_shape_eq(&g->shape, &v->shape)) continue;
      bool dp = false;
      IrMapSlot *gu = ir_map_get(&uses, g);
      if (!gu) continue;
      if (!read_by_update_only(f, a, g, r + 1)) {
        /* one all_reduce over dp, outside a bucket, in the same part */
        if (gu->i != 1) continue;
        int q = (int)ir_map_get(&at, g)->i;
        const IrNode *c = f->nodes.items[q];
        if (c->op != IR_OP_ALL_REDUCE || c->nin != 1 || c->nout != 1 ||
            c->attrs.v[IR_ATTR_MESH].i != IR_AX_DP || async_slot(c) >= 0 || a->part[q] != PPN_W ||
            a->stage[q] != a->stage[r] || !read_by_update_only(f, a, c->out[0], q + 1))
          continue;
        g = c->out[0], dp = true;
      }
      if (g->role != IR_ROLE_GRAD || !g->grad_of) continue;
      IrMapSlot *s = ir_map_put(out, v);
      s->p = (void *)g, s->i = 1 + dp;
      count++;
    }
  }
  return count;
}

bool pp_xfer_unwaited(const PpAssign *a, int nnodes, int sched, int from, int fn) {
  if (fn % 3 != 2) return false;
  if (sched == MM_SCHED_ZBH1 || from % 3 != 1) return true;
  for (int i = 0; i < nnodes; i++)
    if (a->stage[i] == fn / 3 && a->part[i] == PPN_I) return true;
  return false;
}
