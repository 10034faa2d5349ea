/* `mmc plan` and `mmc dump-ir --rank R` on per-sub-model plans
 * (docs/subplans.md). */
#include "tools/mmc_subplans.h"

#include <string.h>

#include "ir/settings.h"
#include "passes/pp_stage.h"

/* The name of the sub-model a scope or parameter path lies in: its
 * sub-plan's, or "" for the rest of the model (no block). */
static const char *unit_of(const MmPlan *pl, const char *path, MmSubPlan *sub) {
  if (mm_subplan_for(pl, path, sub)) return sub->name;
  return "";
}

/* Whether two scopes' sub-models run the same plan (the rest: the mesh's). */
static bool same_plan(const IrModule *m, const char *a, const char *b) {
  MmSubPlan x = {"", 0, m->mesh[IR_AX_TP], m->mesh[IR_AX_DP], false}, y = x;
  mm_subplan_for(&m->plan, a, &x);
  mm_subplan_for(&m->plan, b, &y);
  return x.tp == y.tp && x.dp == y.dp && x.sp == y.sp;
}

/* The parameter an optimizer state belongs to: "adamw.m.vision.x" -> "vision.x". */
static const char *state_owner(const IrValue *v) {
  const char *s = v->name;
  if (v->role != IR_ROLE_OPT) return s;
  for (int dots = 0; *s && dots < 2; s++) dots += *s == '.';
  return s;
}

typedef struct Unit {
  int nparams;
  int64_t param, grad, opt; /* bytes per rank */
  int64_t flops;            /* of a step, the whole batch (ir_flops over the step's nodes) */
} Unit;

/* The FLOPs of the step's nodes (@train, else @forward) scoped in unit i (-1:
 * the rest), at the global shapes: the whole batch, every rank's share. */
static int64_t unit_flops(const IrModule *m, const MmPlan *pl, int i) {
  const IrFunc *f = ir_module_func((IrModule *)m, "train");
  if (!f) f = ir_module_func((IrModule *)m, "forward");
  int64_t sum = 0;
  for (int k = 0; f && k < f->nodes.len; k++) {
    const IrNode *n = f->nodes.items[k];
    MmSubPlan sub;
    bool in = mm_subplan_for(pl, n->scope, &sub);
    if (i >= 0 ? !in || strncmp(sub.name, pl->subplans[i], (size_t)sub.namelen + 1) : in) continue;
    sum += ir_flops(n);
  }
  return sum;
}

static void unit_bytes(const IrModule *m, const MmPlan *pl, int i, Unit *u) {
  *u = (Unit){0};
  for (int k = 0; k < m->params.len; k++) {
    const IrValue *v = m->params.items[k];
    MmSubPlan sub;
    bool in = mm_subplan_for(pl, state_owner(v), &sub);
    if (i >= 0 ? !in || strncmp(sub.name, pl->subplans[i], (size_t)sub.namelen + 1) : in) continue;
    int64_t b = ir_local_numel(m, v) * ir_dtype_size(v->dtype);
    if (v->role == IR_ROLE_OPT) {
      u->opt += b;
      continue;
    }
    u->nparams++;
    u->param += b;
    if (!v->frozen) u->grad += b;
  }
  u->flops = unit_flops(m, pl, i);
}

static bool moves(IrOp op) {
  return ir_op_is_collective(op) || op == IR_OP_ALL_SLICE;
}

/* The value a chain of collectives starts from. */
static const IrValue *origin(const IrNode *n) {
  const IrValue *v = n->in[0];
  while (v->def && moves(v->def->op) && v->def->nin == 1) v = v->def->in[0];
  return v;
}

static const char *side(const char *u, int n, char *buf, size_t cap) {
  if (!*u) return "the rest";
  snprintf(buf, cap, "%.*s", n, u);
  return buf;
}

/* placement = separate: the ranks of group (pipeline stage) g, "A" or
 * "A-B", into buf; their count. */
static int stage_ranks(const IrModule *m, int g, char *buf, size_t cap) {
  int W = ir_world_size(m), lo = g * W, hi = lo + W - 1;
  if (ir_one_rank_first_stage(m)) lo = g, hi = g ? W : 0;
  if (lo == hi)
    snprintf(buf, cap, "%d", lo);
  else
    snprintf(buf, cap, "%d-%d", lo, hi);
  return hi - lo + 1;
}

/* The group a sub-model runs on: 0 for the first block's, 1 for the rest;
 * its ranks into buf. */
static int group_of(const IrModule *m, const char *name, int namelen, char *buf, size_t cap) {
  const MmPlan *pl = &m->plan;
  int g = pl->nstages > 0 && pl->stages[0].nunits == 1 &&
                  (int)strlen(pl->stages[0].units[0]) == namelen &&
                  !strncmp(pl->stages[0].units[0], name, (size_t)namelen)
              ? 0
              : 1;
  stage_ranks(m, g, buf, cap);
  return g;
}

/* "stage 0 (vision)", "stage 1 (projector + llm)": the stage's units */
static const char *stage_name(const IrModule *m, int g, char *buf, size_t cap) {
  const MmPlan *pl = &m->plan;
  size_t k = (size_t)snprintf(buf, cap, "stage %d (", g);
  for (int u = 0; g < pl->nstages && u < pl->stages[g].nunits && k < cap; u++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%s", u ? " + " : "", pl->stages[g].units[u]);
  if (k < cap) snprintf(buf + k, cap - k, ")");
  return buf;
}

/* placement = separate: the values one group's stage hands the other's,
 * sent point to point each micro-batch (the pipeline's transfers, from the
 * stage facts of @train), with their bytes per step; the total into *total. */
static void separate_transfers(const IrModule *m, json_object *list, int64_t *total) {
  const IrFunc *f = ir_module_func((IrModule *)m, "train");
  PpAssign a;
  char err[256];
  if (!f || !pp_facts(m, f, &a, err, sizeof err)) return;
  const MmPlan *pl = &m->plan;
  bool one = ir_one_rank_first_stage(m);
  int T = m->mesh[IR_AX_TP], M = pl->micro_batches;
  Arena ar;
  arena_init(&ar);
  IrMap seen, stage_of;
  ir_map_init(&seen, &ar, false);
  ir_map_init(&stage_of, &ar, false);
  for (int i = 0; i < f->nodes.len; i++)
    if (a.stage[i] >= 0) ir_map_put(&stage_of, f->nodes.items[i])->i = a.stage[i] + 1;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin && a.stage[i] >= 0; k++) {
      const IrValue *v = n->in[k];
      IrMapSlot *d = v->def ? ir_map_get(&stage_of, v->def) : NULL;
      if (!d || d->i - 1 == a.stage[i] || ir_map_get(&seen, v)) continue;
      ir_map_put(&seen, v);
      bool fwd = d->i - 1 < a.stage[i];
      int64_t one_mb = ir_local_numel(m, v) * ir_dtype_size(v->dtype);
      /* per step: each micro-batch, to each receiver of the sending rank */
      int64_t sent = one_mb * M * (fwd && one ? T : 1);
      *total += sent;
      char from[128], to[128], fr[32], tr[32], shape[128];
      int sa = (int)d->i - 1, sb = a.stage[i];
      const char *na = stage_name(m, sa, from, sizeof from);
      const char *nb = stage_name(m, sb, to, sizeof to);
      stage_ranks(m, sa, fr, sizeof fr);
      stage_ranks(m, sb, tr, sizeof tr);
      ir_shape_str(shape, sizeof shape, &v->shape);
      if (list) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "from", json_object_new_string(na));
        json_object_object_add(e, "to", json_object_new_string(nb));
        json_object_object_add(e, "from_stage", json_object_new_int(sa));
        json_object_object_add(e, "to_stage", json_object_new_int(sb));
        json_object_object_add(e, "kind", json_object_new_string("send"));
        json_object_object_add(e, "axis", json_object_new_string("pp"));
        json_object_object_add(e, "phase", json_object_new_string(fwd ? "forward" : "backward"));
        json_object_object_add(e, "shape", json_object_new_string(shape));
        json_object_object_add(e, "from_ranks", json_object_new_string(fr));
        json_object_object_add(e, "to_ranks", json_object_new_string(tr));
        json_object_object_add(e, "micro_batches", json_object_new_int(M));
        json_object_object_add(e, "sent_bytes", json_object_new_int64(sent));
        json_object_array_add(list, e);
        continue;
      }
      char how[160];
      if (fwd && one)
        snprintf(how, sizeof how, "%d micro-batches x %d receivers (ranks %s)", M, T, tr);
      else if (!fwd && one)
        snprintf(how, sizeof how, "%d micro-batches, from each (rank %s keeps tp rank 0's)", M, tr);
      else
        snprintf(how, sizeof how, "%d micro-batches, rank to rank (ranks %s to %s)", M, fr, tr);
      printf("    %s -> %s: send pp %s %s, %lld bytes sent by %s %s: %s\n", na, nb, shape,
             fwd ? "forward" : "backward", (long long)sent,
             strchr(fr, '-') ? "each of ranks" : "rank", fr, how);
    }
  }
  pp_assign_free(&a);
  arena_free(&ar);
}

void mmc_plan_subplans(const IrModule *m, json_object *root) {
  const MmPlan *pl = &m->plan;
  if (!pl->nsubplans) return;
  int world = ir_world_size(m), T = m->mesh[IR_AX_TP], D = m->mesh[IR_AX_DP];
  bool sep = pl->placement == MM_PLACE_SEPARATE, one = ir_one_rank_first_stage(m);
  json_object *subs = root ? json_object_new_array() : NULL;
  if (!root && !sep)
    printf("  sub-models, colocated: each one's mesh covers all %d ranks\n", world);
  if (!root && sep)
    printf("  sub-models, separate: each group on its own ranks, %d in all, a pipeline of 2 stages "
           "(%s, %d micro-batches)%s\n",
           one ? 1 + T : 2 * world, mm_schedule_names[pl->schedule], pl->micro_batches,
           one ? "; the first group's one rank plays its stage's tp logical ranks" : "");
  for (int i = -1; i < pl->nsubplans; i++) {
    MmSubPlan s = {"", 0, T, D, false};
    if (i >= 0 && !mm_subplan_parse(pl->subplans[i], &s)) continue;
    Unit u;
    unit_bytes(m, pl, i, &u);
    if (i < 0 && !u.nparams) continue;
    bool whole1 = one && i == 0; /* the one-rank group: no reduction */
    char ranks[32] = "";
    int g = sep ? group_of(m, s.name, s.namelen, ranks, sizeof ranks) : -1;
    const char *grad_axes = !u.grad              ? "nothing (frozen)"
                            : whole1             ? "nothing (one rank)"
                            : s.tp == 1 && T > 1 ? (D > 1 ? "dp and tp" : "tp")
                            : D > 1              ? "dp"
                                                 : "nothing (dp = 1)";
    if (root) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "name", json_object_new_string_len(s.name, s.namelen));
      json_object_object_add(e, "tp", json_object_new_int(s.tp));
      json_object_object_add(e, "dp", json_object_new_int(s.dp));
      json_object_object_add(e, "sp", json_object_new_boolean(s.sp));
      json_object_object_add(e, "parameters", json_object_new_int(u.nparams));
      json_object_object_add(e, "param_bytes", json_object_new_int64(u.param));
      json_object_object_add(e, "grad_bytes", json_object_new_int64(u.grad));
      json_object_object_add(e, "opt_bytes", json_object_new_int64(u.opt));
      json_object_object_add(e, "grad_reduced_over", json_object_new_string(grad_axes));
      json_object_object_add(e, "step_flops", json_object_new_int64(u.flops));
      if (sep) {
        json_object_object_add(e, "stage", json_object_new_int(g));
        json_object_object_add(e, "ranks", json_object_new_string(ranks));
      }
      json_object_array_add(subs, e);
      continue;
    }
    char name[64];
    if (sep) {
      printf("    %-12s rank%s %s (stage %d), tp = %d, dp = %d%s: %d parameters; per rank %lld "
             "param + %lld grad + %lld optimizer bytes; gradients reduced over %s; %.4g GFLOP a "
             "step\n",
             i < 0 ? "(the rest)" : side(s.name, s.namelen, name, sizeof name),
             strchr(ranks, '-') ? "s" : "", ranks, g, s.tp, s.dp,
             s.tp == 1 && T > 1 && !whole1 ? " (its dp spans the tp axis)" : "", u.nparams,
             (long long)u.param, (long long)u.grad, (long long)u.opt, grad_axes,
             (double)u.flops / 1e9);
      continue;
    }
    printf("    %-12s tp = %d, dp = %d%s%s: %d parameters; per rank %lld param + %lld grad + "
           "%lld optimizer bytes; gradients reduced over %s; %.4g GFLOP a step\n",
           i < 0 ? "(the rest)" : side(s.name, s.namelen, name, sizeof name), s.tp, s.dp,
           s.sp ? ", sp" : "", s.tp == 1 && T > 1 ? " (its dp spans the tp axis)" : "", u.nparams,
           (long long)u.param, (long long)u.grad, (long long)u.opt, grad_axes,
           (double)u.flops / 1e9);
  }
  const IrFunc *f = ir_module_func((IrModule *)m, "train");
  if (!f) f = ir_module_func((IrModule *)m, "forward");
  int bwd = -1, upd = -1;
  if (f && !strcmp(f->name, "train")) ir_train_phases(f, &bwd, &upd);
  json_object *list = root ? json_object_new_array() : NULL;
  if (!root) printf("  boundary transfers per step, per rank (@%s):\n", f ? f->name : "?");
  int64_t total = 0;
  for (int i = 0; f && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!moves(n->op) || n->nin != 1) continue;
    const IrValue *o = origin(n);
    if (!o->def && o->role != IR_ROLE_INPUT) continue;
    const char *from = o->def ? (o->def->scope ? o->def->scope : "") : NULL;
    const char *to = n->scope ? n->scope : "";
    MmSubPlan a = {0}, b = {0};
    const char *ua = from ? unit_of(pl, from, &a) : "", *ub = unit_of(pl, to, &b);
    if (!*ub) b.namelen = 0;
    if (!*ua) a.namelen = 0;
    /* a transfer between parts of different plans (an input: into a sub-model of its own) */
    if (from ? same_plan(m, from, to) : same_plan(m, "", to)) continue;
    int64_t sent = ir_collective_elems(m, n, NULL) * ir_dtype_size(n->in[0]->dtype);
    total += sent;
    const char *phase = upd >= 0 && i >= upd   ? "update"
                        : bwd >= 0 && i >= bwd ? "backward"
                                               : "forward";
    char fa[64], fb[64], shape[128];
    const char *sa = from ? side(ua, a.namelen, fa, sizeof fa) : "inputs";
    const char *sb = side(ub, b.namelen, fb, sizeof fb);
    ir_shape_str(shape, sizeof shape, &n->out[0]->shape);
    int ax = (int)n->attrs.v[IR_ATTR_MESH].i;
    if (root) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "from", json_object_new_string(sa));
      json_object_object_add(e, "to", json_object_new_string(sb));
      json_object_object_add(e, "kind", json_object_new_string(ir_ops[n->op].name));
      json_object_object_add(e, "axis", json_object_new_string(ir_axis_name((IrAxis)ax)));
      json_object_object_add(e, "phase", json_object_new_string(phase));
      json_object_object_add(e, "shape", json_object_new_string(shape));
      json_object_object_add(e, "sent_bytes", json_object_new_int64(sent));
      json_object_array_add(list, e);
    } else {
      printf("    %-10s -> %-10s %-11s %-3s %-18s %-8s %10lld bytes sent%s\n", sa, sb,
             ir_ops[n->op].name, ir_axis_name((IrAxis)ax), shape, phase, (long long)sent,
             n->op == IR_OP_ALL_SLICE ? " (a local slice)" : "");
    }
  }
  if (sep) {
    separate_transfers(m, list, &total);
    PpRankMem mem[2];
    char err[256];
    json_object *groups = root ? json_object_new_array() : NULL;
    bool ok = pp_rank_memory((IrModule *)m, mem, 2, err, sizeof err);
    for (int g = 0; g < 2 && ok; g++) {
      char ranks[32];
      int nr = stage_ranks(m, g, ranks, sizeof ranks);
      if (root) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "stage", json_object_new_int(g));
        json_object_object_add(e, "ranks", json_object_new_string(ranks));
        json_object_object_add(e, "nranks", json_object_new_int(nr));
        json_object_object_add(e, "peak_bytes", json_object_new_int64(mem[g].peak));
        json_object_array_add(groups, e);
      } else {
        printf("    group of stage %d, rank%s %s (%d rank%s): planned peak %lld bytes per rank\n",
               g, nr > 1 ? "s" : "", ranks, nr, nr > 1 ? "s" : "", (long long)mem[g].peak);
      }
    }
    if (root) json_object_object_add(root, "separate_groups", groups);
  }
  if (root) {
    json_object_object_add(root, "subplans", subs);
    json_object_object_add(root, "boundary_transfers", list);
    json_object_object_add(root, "boundary_bytes", json_object_new_int64(total));
  } else {
    printf("    total %lld bytes sent per rank and step\n", (long long)total);
  }
}

void mmc_rank_subplans(FILE *out, const IrModule *m, int rank) {
  const MmPlan *pl = &m->plan;
  int c[IR_NAXES], T = m->mesh[IR_AX_TP], D = m->mesh[IR_AX_DP];
  if (!pl->nsubplans || rank < 0 || rank >= ir_world_size(m)) return;
  ir_rank_coords(m, rank, c);
  if (pl->placement == MM_PLACE_SEPARATE) {
    int W = ir_world_size(m);
    bool one = ir_one_rank_first_stage(m);
    fprintf(out,
            "// placement = separate: mesh rank %d runs stage 0 on world rank %d%s and stage 1 on "
            "world rank %d\n",
            rank, one ? 0 : rank, one ? " (which plays every tp rank of stage 0)" : "",
            one ? 1 + rank : W + rank);
  }
  for (int i = 0; i < pl->nsubplans; i++) {
    MmSubPlan s;
    if (!mm_subplan_parse(pl->subplans[i], &s)) continue;
    if (mm_subplan_one_rank(pl, &s))
      fprintf(out, "// sub-model %.*s: tp = 1, dp = 1: whole, the same on every tp rank\n",
              s.namelen, s.name);
    else if (s.tp == 1 && T > 1) /* its batch nests tp outside dp (passes/collectives.c) */
      fprintf(out,
              "// sub-model %.*s: tp = 1, dp = %d over the tp and dp axes: this rank is its dp "
              "rank %d\n",
              s.namelen, s.name, s.dp, c[IR_AX_TP] * D + c[IR_AX_DP]);
    else
      fprintf(out, "// sub-model %.*s: tp = %d, dp = %d: this rank is its tp rank %d, dp rank %d\n",
              s.namelen, s.name, s.tp, s.dp, c[IR_AX_TP], c[IR_AX_DP]);
  }
}
