/* mmc plan --device and mmc calibrate: tools/mmc_predict.h. */
#include "mmc_predict.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ir/ir_merge.h"
#include "passes/cost.h"
#include "passes/memplan.h"
#include "passes/pp_stage.h"
#include <stdlib.h>

static void add_d(json_object *o, const char *k, double v) {
  json_object_object_add(o, k, json_object_new_double(v));
}

static int by_total(const void *a, const void *b, void *u) {
  const double(*k)[3] = u;
  int x = *(const int *)a, y = *(const int *)b;
  double tx = k[x][0] + k[x][1] + k[x][2], ty = k[y][0] + k[y][1] + k[y][2];
  return tx > ty ? -1 : tx < ty ? 1 : x - y;
}

/* The op kinds with a predicted time, largest total first (*n of them). */
static int *kinds_by_time(double (*k)[3], int *n) {
  int *order = malloc(sizeof(int) * IR_OP_COUNT);
  *n = 0;
  if (!order) return NULL;
  for (int op = 0; op < IR_OP_COUNT; op++)
    if (k[op][0] + k[op][1] + k[op][2] > 0) order[(*n)++] = op;
  qsort_r(order, (size_t)*n, sizeof *order, by_total, k);
  return order;
}

bool mmc_predict(IrModule *m, const MmDevice *d, int64_t peak, json_object *root, bool detail) {
  CostPrediction c = {0};
  char err[512];
  double(*kind)[3] = calloc(IR_OP_COUNT, sizeof *kind);
  c.by_kind = kind;
  if (!kind || !cost_predict(m, d, &c, err, sizeof err)) {
    fprintf(stderr, "mmc: error: predicting the step on %s: %s\n", d->name,
            kind ? err : "out of memory");
    free(kind);
    return false;
  }
  int nk = 0, *order = kinds_by_time(kind, &nk);
  double cap = d->mem_gb * 1e9;
  bool fits = (double)peak <= cap;
  if (root) {
    json_object *p = json_object_new_object(), *b = json_object_new_object();
    json_object_object_add(p, "device", json_object_new_string(d->name));
    json_object_object_add(p, "device_file", json_object_new_string(d->path));
    json_object_object_add(p, "devices", json_object_new_int(c.devices));
    add_d(p, "step_s", c.step_s);
    add_d(p, "tflops_per_device", c.tflops_per_device);
    add_d(p, "mfu", c.mfu);
    add_d(b, "compute_s", c.compute_s);
    add_d(b, "exposed_comm_s", c.exposed_comm_s);
    add_d(b, "bubble_s", c.bubble_s);
    add_d(b, "optimizer_s", c.optimizer_s);
    json_object_object_add(p, "breakdown", b);
    if (m->plan.pp > 1) { /* a transfer between stages (docs/pp-transfers.md) */
      json_object *x = json_object_new_object();
      add_d(x, "bytes", c.pp_xfer_bytes);
      add_d(x, "bytes_per_rank", c.pp_xfer_rank_bytes);
      add_d(x, "send_s", c.pp_xfer_send_s);
      add_d(x, "tp_gather_s", c.pp_xfer_gather_s);
      json_object_object_add(p, "pp_transfer", x);
    }
    add_d(p, "comm_s", c.comm_s);
    add_d(p, "flops_per_step", c.flops_step);
    add_d(p, "model_flops_per_step", c.model_flops);
    json_object_object_add(p, "samples_per_step", json_object_new_int64(c.samples));
    add_d(p, "samples_per_s", c.step_s > 0 ? (double)c.samples / c.step_s : 0);
    if (c.tokens) {
      json_object_object_add(p, "tokens_per_step", json_object_new_int64(c.tokens));
      add_d(p, "tokens_per_s", c.step_s > 0 ? (double)c.tokens / c.step_s : 0);
    }
    json_object_object_add(p, "memory_bytes", json_object_new_int64(peak));
    add_d(p, "memory_capacity_bytes", cap);
    json_object_object_add(p, "fits", json_object_new_boolean(fits));
    if (order && m->plan.pp <= 1) { /* seconds a step per op kind, as --profile counts */
      json_object *bk = json_object_new_object();
      for (int i = 0; i < nk; i++) {
        json_object *e = json_object_new_object();
        add_d(e, "forward_s", kind[order[i]][0]);
        add_d(e, "backward_s", kind[order[i]][1]);
        add_d(e, "update_s", kind[order[i]][2]);
        json_object_object_add(bk, ir_ops[order[i]].name, e);
      }
      json_object_object_add(p, "by_op_kind", bk);
    }
    json_object_object_add(root, "predicted", p);
    free(order), free(kind);
    return true;
  }
  printf("predicted on %d x %s (%s):\n", c.devices, d->name, d->path);
  printf("  step %.6g s: compute %.4g s, exposed communication %.4g s, bubble %.4g s, "
         "optimizer %.4g s (all communication %.4g s)\n",
         c.step_s, c.compute_s, c.exposed_comm_s, c.bubble_s, c.optimizer_s, c.comm_s);
  if (c.tokens)
    printf("  throughput %.6g tokens/s (%lld tokens a step), %.6g samples/s\n",
           (double)c.tokens / c.step_s, (long long)c.tokens, (double)c.samples / c.step_s);
  else
    printf("  throughput %.6g samples/s (%lld samples a step)\n", (double)c.samples / c.step_s,
           (long long)c.samples);
  printf("  %.4g TFLOP/s per device executed (recompute included), MFU %.1f%% of %g TFLOP/s\n",
         c.tflops_per_device, 100 * c.mfu, c.peak_tflops);
  printf("  memory per rank %.3f GB of %.3g GB: %s\n", (double)peak / 1e9, d->mem_gb,
         fits ? "fits" : "DOES NOT FIT");
  if (detail && m->plan.pp > 1)
    printf("  a transfer between stages: %.4g MB, %.4g MB sent by each rank (tp-replicated values "
           "in tp chunks: pp_scatter %s), send %.4g ms + all-gather over tp %.4g ms\n",
           c.pp_xfer_bytes / 1e6, c.pp_xfer_rank_bytes / 1e6, m->plan.pp_scatter ? "on" : "off",
           1e3 * c.pp_xfer_send_s, 1e3 * c.pp_xfer_gather_s);
  if (detail && order && m->plan.pp <= 1 && nk > 0) {
    /* the trainer's --profile table's layout, to set the two side by side */
    printf("  predicted per op kind (ms a step; the trainer's --profile measures the same):\n");
    printf("    %-28s %9s %9s %9s %9s\n", "op kind", "forward", "backward", "update", "total");
    for (int i = 0; i < nk; i++) {
      const double *k = kind[order[i]];
      printf("    %-28s %9.3f %9.3f %9.3f %9.3f\n", ir_ops[order[i]].name, 1e3 * k[0], 1e3 * k[1],
             1e3 * k[2], 1e3 * (k[0] + k[1] + k[2]));
    }
  } else if (detail && m->plan.pp > 1)
    printf("  (per op kind: not given for a pipeline; each stage's times are in its schedule)\n");
  free(order), free(kind);
  return true;
}

bool mmc_predict_step(IrModule *m, const MmDevice *d, double *step_s) {
  CostPrediction c = {0};
  char err[512];
  *step_s = 0;
  if (!ir_module_func(m, "train")) return true;
  if (!cost_predict(m, d, &c, err, sizeof err)) {
    fprintf(stderr, "mmc: error: predicting the step on %s: %s\n", d->name, err);
    return false;
  }
  *step_s = c.step_s;
  return true;
}

int mmc_calibrate(int argc, char **argv) {
  char self[PATH_MAX], tool[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "mmc: calibrate: cannot find mmc's own folder\n");
    return 2;
  }
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(tool, sizeof tool, "%s/mmc-calibrate", self);
  argv[1] = tool;
  (void)argc;
  execv(tool, argv + 1);
  fprintf(stderr, "mmc: calibrate: cannot run '%s': %s\n", tool, strerror(errno));
  return 2;
}

/* ---- mmc plan --search ---- */

/* One plan: the structure (tp, cp, pp, dp) and the knobs (micro-batches,
 * recompute, ZeRO, vpp, sp), with what it predicts. */
#define NBLK 2
typedef struct {
  int tp, pp, cp, dp, zero, rc, mb, vpp, sp;
  /* sub-model blocks (nb > 0: tp, dp, sp, zero and pp come from them):
   * name, tp, dp and recompute each, on the same ranks or separate */
  int nb, btp[NBLK], bdp[NBLK], brc[NBLK];
  char bname[NBLK][32];
  bool sep;
  char st[1024]; /* the stage list (layer counts), "" for the pipeline pass's own cut */
  bool keep;     /* the file's own stage list (and so its pp and vpp): the file's plan */
  bool ok;       /* built, fits, predicted */
  double step_s, mfu, tflops, compute_s, comm_s, bubble_s, opt_s;
  int64_t mem;
} Cand;

typedef struct {
  char why[160];
  int n;
} Drop;

typedef struct {
  const MmDevice *d;
  const MmPlanFlags *given;
  MmcBuildFn build;
  MmcReleaseFn release;
  void *user;
  Drop drops[64];
  int ndrop, tried;
  Cand *c;
  int nc, cap;
  int heads_bad; /* the least tp x cp refused for not dividing the heads (0: none) */
  int split_structs, split_tried; /* pipeline plans whose stage split was searched, splits built */
  int sub_tried;                  /* per-sub-model plans tried */
  /* the probe's: the sub-models with a stack (forward order) and their
   * parameters' elements (the rest: the projector, glue) */
  int nsub;
  char sub[NBLK][32];
  double sub_params[NBLK];
} Search;

/* by predicted step, what was not predicted last */
static int cmp_cand(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  if (x->ok != y->ok) return x->ok ? -1 : 1;
  if (x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
  return x->mem < y->mem ? -1 : x->mem > y->mem; /* the same step: the one holding less */
}

static void drop(Search *S, const char *why) {
  for (int i = 0; i < S->ndrop; i++)
    if (!strcmp(S->drops[i].why, why)) {
      S->drops[i].n++;
      return;
    }
  if (S->ndrop < 64) {
    snprintf(S->drops[S->ndrop].why, sizeof S->drops[S->ndrop].why, "%s", why);
    S->drops[S->ndrop++].n = 1;
  }
}

/* "file:1:2: error: data parallel: dp = 3 ..." -> "data parallel: dp = N ..."
 * (digits folded, so that one reason counts every size it happens at) */
static void reason_of(const char *err, char *out, size_t n) {
  const char *e = strstr(err, "error: ");
  e = e ? e + 7 : err;
  size_t k = 0;
  for (; *e && *e != '\n' && k + 2 < n; e++) {
    if (*e >= '0' && *e <= '9') {
      const char *r = e;
      while (r[1] >= '0' && r[1] <= '9') r++;
      bool word = (r[1] >= 'A' && r[1] <= 'Z') || (r[1] >= 'a' && r[1] <= 'z'); /* 1F1B */
      if (!word) {
        out[k++] = 'N';
        e = r;
        continue;
      }
    }
    out[k++] = *e;
  }
  out[k] = 0;
}

/* The body of x's parallel section ("tp = 2; pp = 4; ...") into buf:
 * what the search builds and prints. */
static void section_text(const Cand *x, char *buf, size_t n) {
  size_t k = 0;
#define PUT(...)                                                                                   \
  if (k < n) k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__)
  if (x->nb) {
    if (x->sep) PUT("placement = separate; ");
    for (int b = 0; b < x->nb; b++)
      PUT("%s { tp = %d; dp = %d; recompute = %s } ", x->bname[b], x->btp[b], x->bdp[b],
          mm_recompute_names[x->brc[b]]);
    PUT("micro_batches = %d", x->mb);
  } else {
    if (x->keep) { /* pp and vpp from the file's section, with its stage list */
      PUT("tp = %d; cp = %d; dp = %d; zero = %d; recompute = %s; micro_batches = %d", x->tp, x->cp,
          x->dp, x->zero, mm_recompute_names[x->rc], x->mb);
    } else {
      PUT("tp = %d; pp = %d; cp = %d; dp = %d; zero = %d; recompute = %s; micro_batches = %d",
          x->tp, x->pp, x->cp, x->dp, x->zero, mm_recompute_names[x->rc], x->mb);
    }
    if (x->vpp > 1 && !x->keep) PUT("; vpp = %d; schedule = interleaved", x->vpp);
    if (x->sp) PUT("; sp = true");
    if (x->st[0]) PUT("; stages = %s", x->st);
  }
#undef PUT
}

/* The flags of candidate x over the given ones: its section as text
 * (into buf) over the file's; false when a given flag fixes a setting to
 * another value, or a whole-model layout beside sub-model blocks. */
static bool flags_of(const Search *S, const Cand *x, MmPlanFlags *f, char *buf, size_t n) {
  *f = *S->given;
#define FIX(ID, field, v)                                                                          \
  if (f->given[MM_SET_##ID] && f->plan.field != (v)) return false;
  if (x->nb) {
    static const int whole[] = {MM_SET_TP, MM_SET_DP,   MM_SET_SP, MM_SET_CP,
                                MM_SET_PP, MM_SET_ZERO, MM_SET_VPP};
    for (size_t k = 0; k < sizeof whole / sizeof *whole; k++)
      if (f->given[whole[k]]) return false;
    if (f->given[MM_SET_RECOMPUTE]) return false;
  } else {
    FIX(TP, tp, x->tp)
    FIX(PP, pp, x->pp)
    FIX(CP, cp, x->cp)
    FIX(DP, dp, x->dp)
    FIX(ZERO, zero, x->zero)
    FIX(RECOMPUTE, recompute, (MmRecompute)x->rc)
    FIX(VPP, vpp, x->vpp)
    FIX(SP, sp, x->sp != 0)
  }
  FIX(MICRO_BATCHES, micro_batches, x->mb)
#undef FIX
  section_text(x, buf, n);
  f->section = buf;
  return true;
}

static bool same(const Cand *x, const Cand *y) {
  return y->tp == x->tp && y->pp == x->pp && y->cp == x->cp && y->dp == x->dp &&
         y->zero == x->zero && y->rc == x->rc && y->mb == x->mb && y->vpp == x->vpp &&
         y->sp == x->sp && y->keep == x->keep && y->nb == x->nb && y->sep == x->sep &&
         !strcmp(y->st, x->st) && !memcmp(y->btp, x->btp, sizeof x->btp) &&
         !memcmp(y->bdp, x->bdp, sizeof x->bdp) && !memcmp(y->brc, x->brc, sizeof x->brc);
}

/* x is the better of two: it fits and predicts faster, or it fits and b
 * does not, or neither fits and x holds less. */
static bool better(const Cand *x, const Cand *b) {
  if (x->ok != b->ok) return x->ok;
  if (x->ok) return x->step_s < b->step_s;
  return x->mem > 0 && x->mem < b->mem;
}

/* Builds and predicts x (x->ok when it fits); a refusal is counted by its
 * reason. The first time a plan is seen it joins the ranked list. */
static void evaluate(Search *S, Cand *x, bool rank) {
  x->ok = false;
  x->step_s = 0;
  for (int i = 0; i < S->nc; i++)
    if (same(&S->c[i], x)) {
      *x = S->c[i];
      return;
    }
  MmPlanFlags f;
  char text[1536];
  if (!flags_of(S, x, &f, text, sizeof text)) return;
  S->tried++;
  if (!x->nb && S->heads_bad && (x->tp * x->cp) % S->heads_bad == 0) {
    drop(S, "tp x cp is a multiple of one that does not divide the attention heads (not built)");
    return;
  }
  char err[512] = "", why[160];
  void *h = NULL;
  IrModule *m = S->build(S->user, &f, &h, err, sizeof err);
  if (!m) {
    reason_of(err[0] ? err : "refused", why, sizeof why);
    /* heads a tp (or tp x cp) does not divide, twice that does not either */
    if (!x->nb && strstr(why, "does not divide the N attention heads")) {
      int split = x->tp * x->cp;
      if (!S->heads_bad || split < S->heads_bad) S->heads_bad = split;
    }
    drop(S, why);
    S->release(S->user, h);
    return;
  }
  CostPrediction p = {0};
  int64_t mem = 0;
  MpSummary sm;
  if (mp_summarize(m, &sm, err, sizeof err)) mem = sm.total;
  if (m->plan.pp > 1) {
    /* under a pipeline the largest rank's peak (the summary's total is
     * every stage's at once), as mmc plan prints it */
    PpRankMem *pm = calloc((size_t)m->plan.pp, sizeof *pm);
    if (pm && pp_rank_memory(m, pm, m->plan.pp, err, sizeof err)) {
      mem = 0;
      for (int r = 0; r < m->plan.pp; r++)
        if (pm[r].peak > mem) mem = pm[r].peak;
    }
    free(pm);
  }
  x->mem = mem;
  if ((double)mem > S->d->mem_gb * 1e9) {
    drop(S, "does not fit the device's memory");
  } else if (!cost_predict(m, S->d, &p, err, sizeof err)) {
    reason_of(err, why, sizeof why);
    drop(S, why);
  } else {
    x->ok = true;
    x->step_s = p.step_s, x->mfu = p.mfu, x->tflops = p.tflops_per_device;
    x->compute_s = p.compute_s, x->comm_s = p.exposed_comm_s, x->bubble_s = p.bubble_s;
    x->opt_s = p.optimizer_s;
  }
  S->release(S->user, h);
  if (rank) {
    if (S->nc == S->cap) {
      int cap = S->cap ? 2 * S->cap : 64;
      Cand *nn = realloc(S->c, (size_t)cap * sizeof *nn);
      if (!nn) return;
      S->c = nn, S->cap = cap;
    }
    S->c[S->nc++] = *x;
  }
}

static void print_plan(const Cand *x) {
  char text[1536];
  section_text(x, text, sizeof text);
  printf("  parallel { %s }%s\n", text,
         x->keep ? " (pp, vpp and stages as the file's section gives them)" : "");
}

static void print_breakdown(const char *label, const Cand *x) {
  printf("  %s: step %.4g s = compute %.4g + exposed communication %.4g + bubble %.4g + "
         "optimizer %.4g; %.4g TFLOP/s per device, memory %.3g GB\n",
         label, x->step_s, x->compute_s, x->comm_s, x->bubble_s, x->opt_s, x->tflops,
         (double)x->mem / 1e9);
}

/* The samples of a step (a micro-batch's times the micro-batches; shapes
 * stay global in the IR) and the parameters' elements. */
static bool sizes(IrModule *m, int64_t *batch, double *params, int *layers) {
  IrFunc *t = ir_module_func(m, "train");
  *batch = 0, *params = 0, *layers = 0;
  /* stack layers: distinct (group, layer) pairs, in the forward's order */
  int lastg = -1, lastl = -1;
  for (int i = 0; t && i < t->nodes.len; i++) {
    const IrNode *n = t->nodes.items[i];
    if (n->group < 0 || n->layer < 0 || (n->group == lastg && n->layer == lastl)) continue;
    if (n->group < lastg || (n->group == lastg && n->layer < lastl)) break; /* the backward */
    lastg = n->group, lastl = n->layer, (*layers)++;
  }
  for (int i = 0; t && i < t->inputs.len && !*batch; i++) {
    const IrValue *v = t->inputs.items[i];
    if (v->shape.rank >= 1)
      *batch = v->shape.d[0] * (m->plan.micro_batches > 1 ? m->plan.micro_batches : 1);
  }
  for (int i = 0; i < m->params.len; i++)
    *params += (double)ir_numel(&((IrValue *)m->params.items[i])->shape);
  return *batch > 0;
}

/* The settings #1 changes from the file's plan, "name a -> b". */
static void print_changes(const Cand *b, const Cand *r) {
  char buf[512];
  int n = 0;
#define CH(name, x, y)                                                                             \
  if ((x) != (y) && n < (int)sizeof buf - 64)                                                      \
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%s %d -> %d", n ? ", " : "", name, (y), (x));
  CH("tp", b->tp, r->tp)
  CH("pp", b->pp, r->pp)
  CH("cp", b->cp, r->cp)
  CH("dp", b->dp, r->dp)
  CH("zero", b->zero, r->zero)
  CH("micro_batches", b->mb, r->mb)
  CH("vpp", b->vpp, r->vpp)
  CH("sp", b->sp, r->sp)
#undef CH
  if ((strcmp(b->st, r->st) || b->keep != r->keep) && b->pp > 1 && n < (int)sizeof buf - 64)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%sstages %s -> %s", n ? ", " : "",
                  r->keep    ? "the file's"
                  : r->st[0] ? r->st
                             : "the pipeline pass's cut",
                  b->keep    ? "the file's"
                  : b->st[0] ? b->st
                             : "the pipeline pass's cut");
  if (b->nb != r->nb && n < (int)sizeof buf - 64)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%sa plan per sub-model%s", n ? ", " : "",
                  b->sep ? " on separate ranks" : "");
  if (b->rc != r->rc && n < (int)sizeof buf - 64)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%srecompute %s -> %s", n ? ", " : "",
                  mm_recompute_names[r->rc], mm_recompute_names[b->rc]);
  printf("  #1 changes: %s\n", n ? buf : "nothing (it is the file's plan)");
}

static void probe_subs(Search *S, IrModule *m);

/* Sizes a probe of the model (the flags given, one device) tells: the
 * samples of a step and the parameters' elements. */
static bool probe(Search *S, int64_t *batch, double *params, int *layers, Cand *ref) {
  char err[512] = "";
  void *h = NULL;
  /* the file's own plan (the flags given over it): the reference */
  IrModule *m = S->build(S->user, S->given, &h, err, sizeof err);
  if (m) {
    const MmPlan *pl = &m->plan;
    *ref = (Cand){.tp = pl->tp,
                  .pp = pl->pp,
                  .cp = pl->cp,
                  .zero = pl->zero,
                  .rc = (int)pl->recompute,
                  .mb = pl->micro_batches > 0 ? pl->micro_batches : 1,
                  .vpp = pl->vpp > 0 ? pl->vpp : 1,
                  .sp = pl->sp,
                  .keep = pl->stages && pl->nstages > 1 && pl->pp > 1 && !pl->nsubplans};
    if (sizes(m, batch, params, layers)) {
      probe_subs(S, m);
      S->release(S->user, h);
      return true;
    }
  }
  S->release(S->user, h);
  MmPlanFlags f = *S->given;
  static const int ids[] = {MM_SET_TP, MM_SET_PP, MM_SET_CP, MM_SET_DP, MM_SET_MICRO_BATCHES,
                            MM_SET_VPP};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) f.given[ids[i]] = true;
  f.plan.tp = f.plan.pp = f.plan.cp = f.plan.dp = f.plan.micro_batches = f.plan.vpp = 1;
  f.given[MM_SET_SP] = true, f.plan.sp = false;
  f.given[MM_SET_ZERO] = true, f.plan.zero = 0;
  h = NULL;
  err[0] = 0;
  m = S->build(S->user, &f, &h, err, sizeof err);
  bool ok = m && sizes(m, batch, params, layers);
  if (ok) probe_subs(S, m);
  if (!m) fprintf(stderr, "mmc: error: --search: the model on one device: %s", err);
  S->release(S->user, h);
  return ok;
}

/* The least a rank can hold of the parameters (4 bytes), their gradients
 * (4) and AdamW's two moments (8) with ZeRO stage z over dp: a bound that
 * drops a structure before it is built. */
static double state_bound(double params, const Cand *x, int z) {
  double per = params / ((double)x->tp * x->pp);
  return z == 3 ? 16 * per / x->dp : z == 1 ? (8 + 8.0 / x->dp) * per : 16 * per;
}

/* The probe's sub-models: the top-level instances holding a stack, in
 * the forward's order, and their parameters' elements (nsub 0 when not
 * exactly NBLK). */
static void probe_subs(Search *S, IrModule *m) {
  IrFunc *t = ir_module_func(m, "train");
  S->nsub = 0;
  int n = 0;
  char names[8][32];
  for (int i = 0; t && i < t->nodes.len; i++) {
    const IrNode *nd = t->nodes.items[i];
    if (nd->group < 0 || nd->group >= m->groups.len) continue;
    const char *g = ((IrGroup *)m->groups.items[nd->group])->name, *dot = strchr(g, '.');
    if (!dot || dot - g >= 31) continue;
    bool seen = false;
    for (int k = 0; k < n; k++) seen |= !strncmp(names[k], g, (size_t)(dot - g) + 1);
    if (seen) continue;
    if (n == 8) return;
    snprintf(names[n++], sizeof names[0], "%.*s.", (int)(dot - g), g);
  }
  if (n != NBLK) return;
  for (int k = 0; k < n; k++) {
    snprintf(S->sub[k], sizeof S->sub[k], "%.*s", (int)strlen(names[k]) - 1, names[k]);
    S->sub_params[k] = 0;
    for (int i = 0; i < m->params.len; i++) {
      const IrValue *v = m->params.items[i];
      if (!strncmp(v->name, names[k], strlen(names[k])))
        S->sub_params[k] += (double)ir_numel(&v->shape);
    }
  }
  S->nsub = n;
}

/* The least a rank holds of the parameters, gradients and AdamW state
 * (16 bytes an element: no ZeRO beside sub-model blocks) under x's blocks. */
static double sub_bound(const Search *S, const Cand *x, double params) {
  double rest = params - S->sub_params[0] - S->sub_params[1];
  if (x->sep) {
    double a = S->sub_params[0] / x->btp[0], b = (S->sub_params[1] + rest) / x->btp[1];
    return 16 * (a > b ? a : b);
  }
  return 16 * (S->sub_params[0] / x->btp[0] + S->sub_params[1] / x->btp[1] + rest / x->tp);
}

/* Builds the per-sub-model candidate x after the checks that need no
 * building; false when dropped. */
static bool sub_try(Search *S, Cand *x, int64_t B, double params) {
  int D = x->bdp[0] > x->bdp[1] ? x->bdp[0] : x->bdp[1];
  if (x->mb < 1 || B % x->mb || (B / x->mb) % D) {
    S->tried++, S->sub_tried++;
    drop(S, "sub-model blocks: a block's dp does not divide the micro-batch (before building)");
    return false;
  }
  if (sub_bound(S, x, params) > S->d->mem_gb * 1e9) {
    S->tried++, S->sub_tried++;
    drop(S, "sub-model blocks: does not fit the device's memory (parameters and optimizer state "
            "alone, no ZeRO beside blocks, before building)");
    return false;
  }
  int before = S->tried;
  evaluate(S, x, true);
  S->sub_tried += S->tried - before;
  return x->ok;
}

/* Per-sub-model plans (docs/subplans.md): colocated, one block at tp = 1
 * and the other at the mesh's tp = T (every block's tp x dp the devices);
 * separate, each block on half the devices (or the first on one rank
 * before the second's tp on the rest); recompute full in each block and
 * one sample a rank of the largest dp a micro-batch; then the best one's
 * recompute per block and micro-batch size refined. */
static void search_subplans(Search *S, int devices, int64_t B, double params) {
  if (S->nsub != NBLK) return;
  static const int rcs[] = {MM_RECOMPUTE_FULL, MM_RECOMPUTE_SELECTIVE, MM_RECOMPUTE_NONE};
  Cand base = {.nb = NBLK, .cp = 1, .vpp = 1, .rc = MM_RECOMPUTE_FULL};
  for (int b = 0; b < NBLK; b++) {
    snprintf(base.bname[b], sizeof base.bname[b], "%s", S->sub[b]);
    base.brc[b] = MM_RECOMPUTE_FULL;
  }
  Cand best = {0};
  bool have = false;
  int dpn = S->d->devices_per_node;
  for (int T = 2; T <= dpn && T <= devices; T *= 2) /* colocated */
    for (int one = 0; one < NBLK && devices % T == 0; one++) {
      Cand x = base;
      x.tp = T, x.dp = devices / T, x.pp = 1;
      for (int b = 0; b < NBLK; b++) x.btp[b] = b == one ? 1 : T, x.bdp[b] = devices / x.btp[b];
      x.mb = (int)(B / devices > 0 && B % devices == 0 ? B / devices : 1);
      if (sub_try(S, &x, B, params) && (!have || better(&x, &best))) best = x, have = true;
    }
  for (int t0 = 1; devices % 2 == 0 && t0 <= dpn && t0 <= devices / 2; t0 *= 2) /* separate */
    for (int t1 = 1; t1 <= dpn && t1 <= devices / 2; t1 *= 2) {
      int half = devices / 2;
      if (half % t0 || half % t1) continue;
      Cand x = base;
      x.sep = true, x.pp = 2, x.tp = t0 > t1 ? t0 : t1, x.dp = half / x.tp;
      x.btp[0] = t0, x.bdp[0] = half / t0, x.btp[1] = t1, x.bdp[1] = half / t1;
      int D = x.bdp[0] > x.bdp[1] ? x.bdp[0] : x.bdp[1];
      x.mb = B % D == 0 && B / D >= 2 ? (int)(B / D) : 2;
      if (sub_try(S, &x, B, params) && (!have || better(&x, &best))) best = x, have = true;
    }
  if (devices > 2 && ((devices - 1) & (devices - 2)) == 0 && devices - 1 <= dpn) {
    Cand x = base; /* the first block on one rank, the second's tp on the rest */
    x.sep = true, x.pp = 2, x.tp = devices - 1, x.dp = 1;
    x.btp[0] = 1, x.bdp[0] = 1, x.btp[1] = devices - 1, x.bdp[1] = 1;
    x.mb = B >= 2 ? (int)B : 2;
    if (sub_try(S, &x, B, params) && (!have || better(&x, &best))) best = x, have = true;
  }
  if (!have) return;
  for (int sweep = 0; sweep < 2; sweep++) {
    Cand start = best;
    for (int b = 0; b < NBLK; b++)
      for (int r = 0; r < 3; r++) {
        Cand x = best;
        x.brc[b] = rcs[r];
        if (sub_try(S, &x, B, params) && better(&x, &best)) best = x;
      }
    int D = best.bdp[0] > best.bdp[1] ? best.bdp[0] : best.bdp[1];
    for (int k = 1; k <= 8; k *= 2) {
      Cand x = best;
      if (B % ((int64_t)D * k)) continue;
      x.mb = (int)(B / ((int64_t)D * k));
      if (x.mb < (x.sep ? 2 : 1)) continue;
      if (sub_try(S, &x, B, params) && better(&x, &best)) best = x;
    }
    if (!memcmp(&start, &best, sizeof best)) break;
  }
}

/* ---- stage splits (docs/planner.md "Stage splits") ---- */

/* A pipeline plan's stack layers in the forward's order, each with the
 * time the prediction charges a micro-batch of it (forward, backward and
 * recompute) and the ops around it (an embedding's with the first layer
 * after it, a head's and loss's with the last before it), and the stage
 * the plan puts it on. */
#define MAXU 1024
#define MAXG 8
typedef struct {
  int n, S, ng;
  int grp[MAXU], stage[MAXU];
  double w[MAXU];
  char gname[MAXG][64]; /* the stacks, e.g. "vision.blocks" */
  int gid[MAXG];        /* their IrModule group index */
  int allg;             /* the module's groups */
} Units;

static int unit_of(Units *u, int *key, int g, int l, int maxl) {
  for (int k = 0; k < u->n; k++)
    if (key[k] == g * maxl + l) return k;
  return -1;
}

/* Builds x and reads its units; false when x has no pipeline, more
 * layers or stacks than counted here, or does not build. */
static bool split_units(Search *S, const Cand *x, Units *u) {
  MmPlanFlags f;
  char text[1536], err[512] = "";
  memset(u, 0, sizeof *u);
  if (x->pp < 2 || x->nb || !flags_of(S, x, &f, text, sizeof text)) return false;
  void *h = NULL;
  IrModule *m = S->build(S->user, &f, &h, err, sizeof err);
  IrFunc *t = m ? ir_module_func(m, "train") : NULL;
  bool ok = t != NULL && m->groups.len <= MAXG;
  static int key[MAXU];
  int maxl = 1;
  for (int g = 0; ok && g < m->groups.len; g++) {
    IrGroup *gr = m->groups.items[g];
    if (gr->nlayers > maxl) maxl = gr->nlayers;
  }
  double pre = 0; /* forward ops before the first layer */
  int cur = -1;
  bool back = false;
  Arena ar;
  arena_init(&ar);
  IrMap uses;
  if (ok) ir_use_counts(t, &ar, &uses);
  for (int i = 0; ok && i < t->nodes.len; i++) {
    const IrNode *n = t->nodes.items[i];
    if (n->pp_part == IR_PP_U || n->pp_part == IR_PP_NONE) continue;
    if (!back && n->pp_part != IR_PP_F) back = true, cur = -1;
    double c = cost_op_s(m, S->d, t, i, &uses);
    int k = -1;
    if (n->group >= 0 && n->layer >= 0) {
      k = unit_of(u, key, n->group, n->layer, maxl);
      if (k < 0 && !back) {
        if (u->n == MAXU) {
          ok = false;
          break;
        }
        k = u->n++;
        key[k] = n->group * maxl + n->layer;
        u->grp[k] = n->group, u->stage[k] = n->pp_stage;
        if (k == 0) u->w[0] += pre;
      }
    }
    if (k >= 0)
      cur = k;
    else if (cur < 0 && !back) {
      pre += c;
      continue;
    } else if (cur < 0)
      cur = u->n - 1; /* the head's backward: the last layer's stage */
    if (cur >= 0) u->w[cur] += c;
  }
  arena_free(&ar);
  ok = ok && u->n > 0;
  if (ok) {
    u->S = m->plan.pp * (m->plan.vpp > 0 ? m->plan.vpp : 1);
    u->allg = m->groups.len;
    for (int k = 0; k < u->n; k++) {
      int g = -1;
      for (int j = 0; j < u->ng; j++)
        if (u->gid[j] == u->grp[k]) g = j;
      if (g < 0) {
        g = u->ng++;
        u->gid[g] = u->grp[k];
        snprintf(u->gname[g], sizeof u->gname[g], "%s",
                 ((IrGroup *)m->groups.items[u->grp[k]])->name);
      }
      u->grp[k] = g;
    }
    ok = u->n >= u->S;
  }
  S->release(S->user, h);
  return ok;
}

/* The layer counts of cut (units a stage) as a stage list: [n0, n1, ...]
 * for one stack, by_module(sub = [...], ...) per sub-model's stack. */
static bool split_text(const Units *u, const int *cut, char *buf, size_t n) {
  size_t k = 0;
  bool one = u->ng == 1 && u->allg == 1;
  if (!one) {
    for (int g = 0; g < u->ng; g++) {
      const char *dot = strchr(u->gname[g], '.');
      if (!dot) return false;
      for (int h = 0; h < g; h++)
        if (!strncmp(u->gname[h], u->gname[g], (size_t)(dot - u->gname[g]) + 1)) return false;
    }
    k += (size_t)snprintf(buf + k, n - k, "by_module(");
  }
  for (int g = 0; g < u->ng && k < n; g++) {
    if (!one) {
      const char *dot = strchr(u->gname[g], '.');
      k += (size_t)snprintf(buf + k, n - k, "%s%.*s = ", g ? ", " : "", (int)(dot - u->gname[g]),
                            u->gname[g]);
    }
    int at = 0;
    for (int s = 0; s < u->S && k < n; s++) {
      int c = 0;
      for (int j = 0; j < cut[s]; j++) c += u->grp[at + j] == g;
      at += cut[s];
      k += (size_t)snprintf(buf + k, n - k, "%s%d%s", s ? ", " : "[", c, s + 1 == u->S ? "]" : "");
    }
  }
  if (!one && k < n) k += (size_t)snprintf(buf + k, n - k, ")");
  return k + 1 < n;
}

/* The units cut into S runs of the least largest time (a run at least one
 * unit): cut[s] units each. */
static void balance(const Units *u, int *cut) {
  int n = u->n, S = u->S;
  double *pre = calloc((size_t)n + 1, sizeof *pre), *best = malloc(sizeof(double) * (n + 1) * S);
  int *from = malloc(sizeof(int) * (size_t)(n + 1) * S);
  if (!pre || !best || !from) {
    free(pre), free(best), free(from);
    for (int s = 0; s < S; s++) cut[s] = n / S + (s < n % S);
    return;
  }
  for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + u->w[i];
  /* best[s * (n + 1) + i]: the first i units in s + 1 runs */
  for (int s = 0; s < S; s++)
    for (int i = 0; i <= n; i++) {
      double b = 1e300;
      int fb = -1;
      if (s == 0) {
        if (i >= 1) b = pre[i], fb = 0;
      } else
        for (int j = s; j < i; j++) {
          double v = best[(s - 1) * (n + 1) + j], r = pre[i] - pre[j];
          if (v < r) v = r;
          if (v < b) b = v, fb = j;
        }
      best[s * (n + 1) + i] = b, from[s * (n + 1) + i] = fb;
    }
  int i = n;
  for (int s = S - 1; s >= 0; s--) {
    int j = s ? from[s * (n + 1) + i] : 0;
    cut[s] = i - j;
    i = j;
  }
  free(pre), free(best), free(from);
}

/* x with the stage list cut; false when it cannot be written. */
static bool with_cut(const Units *u, const Cand *b, const int *cut, Cand *x) {
  *x = *b;
  return split_text(u, cut, x->st, sizeof x->st);
}

/* b's stage split searched: the stages balanced by predicted time, then
 * one layer at a time off or onto the first and the last stage while that
 * predicts faster. Returns the best plan found (b itself when none). */
static Cand refine_split(Search *S, Cand b) {
  Units *u = malloc(sizeof *u);
  if (!u || !split_units(S, &b, u)) {
    free(u);
    return b;
  }
  S->split_structs++;
  int *cur = calloc((size_t)u->S, sizeof *cur), *t = calloc((size_t)u->S, sizeof *t);
  for (int k = 0; k < u->n; k++)
    if (u->stage[k] >= 0 && u->stage[k] < u->S) cur[u->stage[k]]++;
  int sum = 0;
  for (int s = 0; s < u->S; s++) sum += cur[s] > 0 ? cur[s] : 0;
  bool have = sum == u->n;
  for (int s = 0; s < u->S; s++) have &= cur[s] > 0;
  Cand x;
  balance(u, t);
  if ((!have || memcmp(t, cur, sizeof *t * (size_t)u->S)) && with_cut(u, &b, t, &x)) {
    evaluate(S, &x, true);
    S->split_tried++;
    if (better(&x, &b)) b = x, memcpy(cur, t, sizeof *t * (size_t)u->S), have = true;
  }
  /* one layer off (d = -1) or onto (+1) the first (e = 0) or the last stage */
  int last = -1; /* the move that last helped: e * 2 + (d > 0) */
  for (int round = 0; have && round < 4 && u->S > 1; round++) {
    int kept = -1;
    Cand rb = b;
    for (int mv = 0; mv < 4; mv++) {
      if (round > 0 && mv != last) continue;
      int e = mv / 2, d = mv % 2 ? 1 : -1, s0 = e ? u->S - 1 : 0, s1 = e ? u->S - 2 : 1;
      memcpy(t, cur, sizeof *t * (size_t)u->S);
      t[s0] += d, t[s1] -= d;
      if (t[s0] < 1 || t[s1] < 1 || !with_cut(u, &b, t, &x)) continue;
      evaluate(S, &x, true);
      S->split_tried++;
      if (better(&x, &rb)) rb = x, kept = mv;
    }
    if (kept < 0) break;
    int e = kept / 2, d = kept % 2 ? 1 : -1;
    cur[e ? u->S - 1 : 0] += d, cur[e ? u->S - 2 : 1] -= d;
    b = rb, last = kept;
  }
  free(cur), free(t), free(u);
  return b;
}

int mmc_search(const MmDevice *d, int devices, const MmPlanFlags *given, MmcBuildFn build,
               MmcReleaseFn release, void *user, int top) {
  static const int rcs[] = {MM_RECOMPUTE_FULL, MM_RECOMPUTE_SELECTIVE, MM_RECOMPUTE_NONE};
  Search S = {.d = d, .given = given, .build = build, .release = release, .user = user};
  int64_t B;
  double params;
  Cand ref = {0};
  int layers;
  if (!probe(&S, &B, &params, &layers, &ref)) return 1;
  double cap = d->mem_gb * 1e9;
  /* 1. the structures: tp (powers of 2 within a node), pp (every divisor
   * of what is left, up to the stack layers), dp the rest (cp as given, or
   * 1: the refinement takes it from dp); each built once with the knobs a
   * large model starts from (ZeRO-1 over dp > 1, full recompute, one
   * sample a rank a micro-batch, no vpp, no sp) */
  int nst = 0, pre = 0;
  int cp = given->given[MM_SET_CP] ? given->plan.cp : 1;
  for (int tp = 1; tp <= devices && tp <= d->devices_per_node; tp *= 2)
    for (int pp = 1; tp * cp * pp <= devices; pp++) {
      if (devices % (tp * cp * pp)) continue;
      if (pp > 1 && layers > 0 && pp > layers && !given->given[MM_SET_PP]) continue;
      Cand x = {.tp = tp, .cp = cp, .pp = pp, .dp = devices / (tp * cp * pp), .vpp = 1};
      MmPlanFlags f;
      char text[1536];
      x.zero = given->given[MM_SET_ZERO] ? given->plan.zero : x.dp > 1;
      x.rc = given->given[MM_SET_RECOMPUTE] ? (int)given->plan.recompute : MM_RECOMPUTE_FULL;
      x.mb = given->given[MM_SET_MICRO_BATCHES] ? given->plan.micro_batches
             : B % x.dp == 0                    ? (int)(B / x.dp)
                                                : 1;
      if (pp > 1 && x.mb < pp && !given->given[MM_SET_MICRO_BATCHES]) x.mb = pp;
      if (given->given[MM_SET_SP]) x.sp = given->plan.sp;
      if (given->given[MM_SET_VPP]) x.vpp = given->plan.vpp;
      if (!flags_of(&S, &x, &f, text, sizeof text)) continue;
      nst++;
      if (B % x.dp) {
        S.tried++, pre++;
        drop(&S, "data parallel: dp = N does not divide the batch (before building)");
        continue;
      }
      if (state_bound(params, &x, x.dp > 1 ? 3 : 0) > cap) {
        S.tried++, pre++;
        drop(&S, "does not fit the device's memory (its parameters and optimizer state "
                 "alone, before building)");
        continue;
      }
      if (x.dp > 1 && x.zero < 3 && state_bound(params, &x, x.zero) > cap &&
          !given->given[MM_SET_ZERO])
        x.zero = 3;
      evaluate(&S, &x, true);
    }
  /* 2. the plan the file itself gives (its parallel section, dp filling
   * the devices), the reference the ranking is explained against */
  bool have_ref = false;
  if (ref.tp > 0 && devices % (ref.tp * ref.pp * ref.cp) == 0) {
    ref.dp = devices / (ref.tp * ref.pp * ref.cp);
    evaluate(&S, &ref, true);
    have_ref = true;
  }
  /* 3. the best few structures and the file's refined one knob at a time (micro-batch
   * size, recompute, sp, ZeRO, vpp, cp), keeping what predicts faster */
  qsort(S.c, (size_t)S.nc, sizeof *S.c, cmp_cand);
  int nref = 0;
  Cand best[4];
  for (int i = 0; i < S.nc && nref < 3 && S.c[i].ok; i++) best[nref++] = S.c[i];
  if (nref == 0) {
    /* nothing fits at the default knobs: refine the structure that came
     * closest, towards the knobs that hold less (ZeRO-3, sp, cp, ...) */
    for (int i = 0; i < S.nc; i++)
      if (S.c[i].mem > 0 && (nref == 0 || S.c[i].mem < best[0].mem)) best[0] = S.c[i], nref = 1;
  }
  if (have_ref && (ref.ok || ref.mem > 0)) {
    bool in = false;
    for (int i = 0; i < nref; i++) in |= best[i].tp == ref.tp && best[i].pp == ref.pp;
    if (!in) best[nref++] = ref;
  }
  for (int i = 0; i < nref; i++) {
    Cand b = best[i];
    for (int sweep = 0; sweep < 2; sweep++) {
      Cand start = b;
      /* micro-batch size and recompute together: each trades memory for
       * time, so one alone stops where the other would let it go on */
      int mbs[] = {1, 2, 4, 8, 0}; /* 0: the whole batch at once (pp = 1) */
      Cand base = b;
      for (int k = 0; k < 5; k++)
        for (int r = 0; r < 3; r++) {
          Cand x = base;
          if (mbs[k] == 0) {
            if (base.pp > 1) continue;
            x.mb = 1;
          } else {
            if (B % ((int64_t)base.dp * mbs[k])) continue;
            x.mb = (int)(B / ((int64_t)base.dp * mbs[k]));
            if (x.mb < 1 || (base.pp > 1 && x.mb < base.pp)) continue;
          }
          x.rc = rcs[r];
          evaluate(&S, &x, true);
          if (better(&x, &b)) b = x;
        }
      /* sp before ZeRO: it takes memory for no time, ZeRO-3 takes time (with
       * nothing fitting yet, the plan that holds least would go to ZeRO-3
       * and stay there) */
      if (b.tp > 1) {
        Cand x = b;
        x.sp = !b.sp;
        evaluate(&S, &x, true);
        if (better(&x, &b)) b = x;
      }
      for (int z = 0; z <= 3 && b.dp > 1; z += z == 1 ? 2 : 1) {
        Cand x = b;
        x.zero = z;
        evaluate(&S, &x, true);
        if (better(&x, &b)) b = x;
      }
      for (int v = 2; v <= 4 && b.pp > 1 && !b.keep; v *= 2) {
        Cand x = b;
        x.vpp = v;
        evaluate(&S, &x, true);
        if (better(&x, &b)) b = x;
      }
      /* context parallel: cp ranks taken from dp (the batch split fewer ways) */
      for (int c = 2; c <= 8 && b.cp == 1; c *= 2) {
        if (b.dp % c) continue;
        Cand x = b;
        x.cp = c, x.dp = b.dp / c;
        evaluate(&S, &x, true);
        if (better(&x, &b)) b = x;
      }
      if (!memcmp(&start, &b, sizeof b)) break;
    }
  }
  /* 4. the stage splits of the best two pipeline plans (the second within
   * 10% of the first) */
  qsort(S.c, (size_t)S.nc, sizeof *S.c, cmp_cand);
  Cand pipe[2];
  int npipe = 0;
  for (int i = 0; i < S.nc && npipe < 2 && S.c[i].ok; i++)
    if (S.c[i].pp > 1 && !S.c[i].st[0] && !S.c[i].nb && !S.c[i].keep &&
        (!npipe ||
         (S.c[i].step_s < 1.1 * pipe[0].step_s &&
          (S.c[i].pp != pipe[0].pp || S.c[i].vpp != pipe[0].vpp || S.c[i].tp != pipe[0].tp))))
      pipe[npipe++] = S.c[i];
  /* none fits: the pipeline plan that came closest (a split moves memory too) */
  for (int i = 0; i < S.nc && !npipe && !(S.nc && S.c[0].ok); i++)
    if (S.c[i].pp > 1 && !S.c[i].nb && !S.c[i].keep && S.c[i].mem > 0) {
      int k = i;
      for (int j = i + 1; j < S.nc; j++)
        if (S.c[j].pp > 1 && !S.c[j].nb && !S.c[j].keep && S.c[j].mem > 0 &&
            S.c[j].mem < S.c[k].mem)
          k = j;
      pipe[npipe++] = S.c[k];
    }
  for (int i = 0; i < npipe; i++) refine_split(&S, pipe[i]);
  /* 5. a plan per sub-model, ranked beside the uniform ones */
  search_subplans(&S, devices, B, params);
  qsort(S.c, (size_t)S.nc, sizeof *S.c, cmp_cand);
  int nc = 0;
  while (nc < S.nc && S.c[nc].ok) nc++;
  printf("search on %d x %s: %d plans tried (%d structures, %d of them dropped before "
         "building), %d ranked, %d dropped\n",
         devices, d->name, S.tried, nst, pre, nc, S.tried - nc);
  if (S.sub_tried)
    printf("  per-sub-model plans: %d tried (%s and %s blocks, colocated and separate)\n",
           S.sub_tried, S.sub[0], S.sub[1]);
  if (S.split_structs)
    printf("  stage splits: %d tried for %d pipeline plan%s\n", S.split_tried, S.split_structs,
           S.split_structs == 1 ? "" : "s");
  for (int i = 0; i < S.ndrop; i++) printf("  dropped %4d: %s\n", S.drops[i].n, S.drops[i].why);
  for (int i = 0; i < nc && i < top; i++) {
    const Cand *x = &S.c[i];
    printf("#%d  step %.6g s (%.3gx the best), MFU %.1f%%, %.4g TFLOP/s per device, memory %.3f "
           "GB per rank\n",
           i + 1, x->step_s, x->step_s / S.c[0].step_s, 100 * x->mfu, x->tflops,
           (double)x->mem / 1e9);
    print_plan(x);
  }
  bool shown = false;
  for (int i = 0; i < nc && i < top; i++) shown |= S.c[i].nb > 0;
  for (int i = top; i < nc && !shown; i++)
    if (S.c[i].nb) { /* the best per-sub-model plan, when not printed above */
      printf("#%d (the best plan per sub-model)  step %.6g s (%.3gx the best), MFU %.1f%%, memory "
             "%.3f GB per rank\n",
             i + 1, S.c[i].step_s, S.c[i].step_s / S.c[0].step_s, 100 * S.c[i].mfu,
             (double)S.c[i].mem / 1e9);
      print_plan(&S.c[i]);
      break;
    }
  if (nc && have_ref) {
    const Cand *b = &S.c[0];
    int at = -1;
    for (int i = 0; i < nc && at < 0; i++)
      if (same(&S.c[i], &ref)) at = i;
    printf("why #1, against the file's own plan (dp filling the devices):\n");
    print_breakdown("#1", b);
    if (ref.ok) {
      print_breakdown("the file's", &ref);
      printf("  the file's plan ranks #%d of %d; #1 predicts %.3gx its speed: compute %+.4g s, "
             "exposed communication %+.4g s, bubble %+.4g s, optimizer %+.4g s\n",
             at + 1, nc, ref.step_s / b->step_s, b->compute_s - ref.compute_s,
             b->comm_s - ref.comm_s, b->bubble_s - ref.bubble_s, b->opt_s - ref.opt_s);
    } else
      printf("  the file's plan is not ranked: %s (%.3g GB a rank)\n",
             ref.mem > cap ? "it does not fit the device's memory" : "the compiler refuses it",
             (double)ref.mem / 1e9);
    print_plan(&ref);
    print_changes(b, &ref);
  }
  if (!nc) {
    const Cand *close = NULL;
    for (int i = 0; i < S.nc; i++)
      if (S.c[i].mem > 0 && (!close || S.c[i].mem < close->mem)) close = &S.c[i];
    if (close) {
      printf("nothing fits %.3g GB; the closest holds %.3f GB a rank:\n", cap / 1e9,
             (double)close->mem / 1e9);
      print_plan(close);
    }
  }
  free(S.c);
  if (!nc) fprintf(stderr, "mmc: error: --search: no plan fits and divides\n");
  return nc ? 0 : 1;
}
