/* Micro-batches: gradient accumulation over the micro-batches of a step
 * (mmrt_pp.h). */
#include "mmrt_pp.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mmrt_ckpt.h"
#include "mmrt_comm.h"
#include "mmrt_trace.h"

static float g_count;    /* the last micro-batch's label count */
static int g_counted;    /* whether it reported one */
static MmrtMbAcc *g_acc; /* the step's sums while its micro-batches run */
static MmrtPp *g_pp;     /* the pipeline whose step runs (deferred reductions) */
static int g_pp_defer;   /* the part being run is not its stage's last W */
static int g_pp_gather;  /* mmrt_mb_gathering under a pipeline: 2 in gather_once, else 0 */

int mmrt_mb_count(void *mesh, int axes, int count) {
  float c = (float)count;
  int rc = mmrt_step_all_reduce(mesh, axes, &c, 1);
  if (rc) return -1;
  g_count += c;
  g_counted = 1;
  return 0;
}

void mmrt_mb_begin(void) {
  g_count = 0;
  g_counted = 0;
}

static int deferred(const MmrtModelDesc *m, int64_t i) {
  return m->accum_deferred && m->accum_deferred[i];
}

/* root j's sum in the grad arena (the plan's home for it), or NULL */
static float *home(const MmrtModelDesc *m, char *grad, int64_t j) {
  if (!m->defer_home || m->defer_home[j] < 0 || !grad) return NULL;
  return (float *)(void *)(grad + m->defer_home[j]);
}

int mmrt_mb_init(MmrtMbAcc *a, const MmrtModelDesc *m, char *grad,
                 int64_t (*elems)(void *, const MmrtTensorDesc *), void *user) {
  memset(a, 0, sizeof *a);
  a->m = m;
  int64_t n = m->naccum, nd = m->ndefer;
  a->acc = calloc((size_t)n + 1, sizeof *a->acc);
  a->n = calloc((size_t)n + 1, sizeof *a->n);
  a->dsum = calloc((size_t)nd + 1, sizeof *a->dsum);
  a->dn = calloc((size_t)nd + 1, sizeof *a->dn);
  if (!a->acc || !a->n || !a->dsum || !a->dn) return -1;
  for (int64_t i = 0; i < n; i++) {
    a->n[i] = elems(user, &m->accum[i]);
    if (deferred(m, i)) continue;
    a->acc[i] = malloc(sizeof(float) * (size_t)(a->n[i] + 1));
    if (!a->acc[i]) return -1;
    a->bytes += (int64_t)sizeof(float) * (a->n[i] + 1);
  }
  for (int64_t j = 0; j < nd; j++) {
    a->dn[j] = elems(user, &m->defer[j]);
    if ((a->dsum[j] = home(m, grad, j))) continue;
    a->dsum[j] = malloc(sizeof(float) * (size_t)(a->dn[j] + 1));
    if (!a->dsum[j]) return -1;
    a->bytes += (int64_t)sizeof(float) * (a->dn[j] + 1);
  }
  return 0;
}

int64_t mmrt_mb_bytes(const MmrtModelDesc *m, int64_t (*elems)(void *, const MmrtTensorDesc *),
                      void *user) {
  int64_t b = 0;
  if (m->micro_batches <= 1 || m->pp > 1) return 0;
  for (int64_t i = 0; i < m->naccum; i++)
    if (!deferred(m, i)) b += (int64_t)sizeof(float) * (elems(user, &m->accum[i]) + 1);
  for (int64_t j = 0; j < m->ndefer; j++)
    if (!m->defer_home || m->defer_home[j] < 0)
      b += (int64_t)sizeof(float) * (elems(user, &m->defer[j]) + 1);
  return b;
}

void mmrt_mb_free(MmrtMbAcc *a) {
  for (int64_t i = 0; a->acc && a->m && i < a->m->naccum; i++) free(a->acc[i]);
  for (int64_t j = 0; a->dsum && a->m && j < a->m->ndefer; j++)
    if (!a->m->defer_home || a->m->defer_home[j] < 0) free(a->dsum[j]);
  if (g_acc == a) g_acc = NULL;
  free(a->acc);
  free(a->n);
  free(a->dsum);
  free(a->dn);
  memset(a, 0, sizeof *a);
}

void mmrt_mb_begin_step(MmrtMbAcc *a) {
  a->loss = a->count = 0;
  a->k = 0;
  g_acc = a;
  mmrt_mb_begin();
}

/* micro-batch k's weight: its label count, 1 when none was reported */
static double weight(void) {
  return g_counted ? (double)g_count : 1.0;
}

int mmrt_mb_deferring(void *mesh) {
  (void)mesh;
  if (g_pp) return g_pp_defer;
  return g_acc && g_acc->m && g_acc->k < g_acc->m->micro_batches - 1;
}

int mmrt_mb_gathering(void *mesh) {
  (void)mesh;
  if (g_pp) return g_pp_gather;
  return !(g_acc && g_acc->m && g_acc->k > 0 && g_acc->k < g_acc->m->micro_batches);
}

static int pp_defer(int j, float *x, int64_t n);

int mmrt_mb_defer(void *mesh, int j, float *x, int64_t n) {
  (void)mesh;
  if (g_pp) return pp_defer(j, x, n);
  MmrtMbAcc *a = g_acc;
  if (!a || !a->m) return 0; /* not in a step of micro-batches: x is the gradient */
  if (j < 0 || j >= a->m->ndefer || n != a->dn[j]) {
    fprintf(stderr, "mmrt: deferred reduction %d of %lld elements does not match the descriptor\n",
            j, (long long)n);
    return -1;
  }
  float w = (float)weight(), *s = a->dsum[j];
  if (a->k == 0 && a->m->micro_batches > 1)
    for (int64_t e = 0; e < n; e++) s[e] = w * x[e];
  else if (a->k < a->m->micro_batches - 1)
    for (int64_t e = 0; e < n; e++) s[e] += w * x[e];
  else
    for (int64_t e = 0; e < n; e++) x[e] = w * x[e] + s[e];
  return 0;
}

static int pp_linear_w(int j, MmrtDtype dt, float *dw, const void *dy, const void *x, int rows,
                       int K, int N, int overlap);

/* The last micro-batch's dw = alpha dy^T x + s: by the kernel's binary
 * post-op, or (dw overlapping dy or x) into s and then copied. */
static void last_w(MmrtDtype dt, float *dw, float *s, const void *dy, const void *x, int rows,
                   int K, int N, float alpha, int overlap) {
  if (!overlap) {
    mmrt_linear_bwd_weights_into(dt, dw, s, dy, x, rows, K, N, alpha, 0);
    return;
  }
  mmrt_linear_bwd_weights_into(dt, s, NULL, dy, x, rows, K, N, alpha, 1);
  memcpy(dw, s, sizeof(float) * (size_t)N * (size_t)K);
}

int mmrt_mb_linear_bwd_weights(void *mesh, int j, MmrtDtype dt, float *dw, const void *dy,
                               const void *x, int rows, int K, int N, int overlap) {
  (void)mesh;
  if (g_pp) return pp_linear_w(j, dt, dw, dy, x, rows, K, N, overlap);
  MmrtMbAcc *a = g_acc;
  if (!a || !a->m) { /* not in a step of micro-batches: dw is the gradient */
    mmrt_linear_bwd_weights_into(dt, dw, NULL, dy, x, rows, K, N, 1.0f, 0);
    return 0;
  }
  if (j < 0 || j >= a->m->ndefer || (int64_t)N * K != a->dn[j]) {
    fprintf(stderr, "mmrt: deferred reduction %d of %lld elements does not match the descriptor\n",
            j, (long long)N * K);
    return -1;
  }
  float w = (float)weight(), *s = a->dsum[j];
  if (a->k < a->m->micro_batches - 1 || dw == s) /* dw == s: the sum is the gradient's home */
    mmrt_linear_bwd_weights_into(dt, s, NULL, dy, x, rows, K, N, w, a->k > 0);
  else
    last_w(dt, dw, s, dy, x, rows, K, N, w, overlap);
  return 0;
}

void mmrt_mb_add(MmrtMbAcc *a, char **arenas, float loss) {
  double c = weight();
  float w = (float)c;
  for (int64_t i = 0; i < a->m->naccum; i++) {
    if (deferred(a->m, i)) continue;
    const MmrtTensorDesc *d = &a->m->accum[i];
    const float *g = (const float *)(void *)(arenas[d->arena] + d->offset);
    float *s = a->acc[i];
    if (a->k == 0)
      for (int64_t e = 0; e < a->n[i]; e++) s[e] = w * g[e];
    else
      for (int64_t e = 0; e < a->n[i]; e++) s[e] += w * g[e];
  }
  a->loss += c * (double)loss;
  a->count += c;
  a->k++;
  mmrt_mb_begin();
}

float mmrt_mb_finish(MmrtMbAcc *a, char **arenas) {
  float inv = a->count > 0 ? (float)(1.0 / a->count) : 0.0f;
  for (int64_t i = 0; i < a->m->naccum; i++) {
    const MmrtTensorDesc *d = &a->m->accum[i];
    float *g = (float *)(void *)(arenas[d->arena] + d->offset);
    if (deferred(a->m, i)) {
      for (int64_t e = 0; e < a->n[i]; e++) g[e] *= inv;
      continue;
    }
    const float *s = a->acc[i];
    for (int64_t e = 0; e < a->n[i]; e++) g[e] = s[e] * inv;
  }
  g_acc = NULL;
  return a->count > 0 ? (float)(a->loss / a->count) : 0.0f;
}

/* ---- the pipeline ---- */

static float *g_slot_count; /* per slot: c_k of the micro-batch in it */
static int g_slot;          /* the slot being run */

float mmrt_mb_seed(void *mesh) {
  (void)mesh;
  return g_slot_count ? g_slot_count[g_slot] : 1.0f;
}

typedef struct {
  int kind; /* 0 F, 1 B, 2 I, 3 W */
  int stage, mb;
} Act;

typedef struct {
  int from, to; /* 3 s + q */
  int64_t bytes;
  int how;    /* MMRT_XFER_* of the descriptor's pp_xfer_how */
  int acc;    /* summed: the accum tensor its sum joins, else -1 */
  int dp;     /* summed: all-reduced over dp first */
  float *sum; /* summed, on its sender: the step's sum */
  int64_t n;  /* its elements */
  int bf16;   /* its elements are bf16 (the sum is f32) */
  /* split over tp (the route's tp_chunk, docs/pp-transfers.md): this tp
   * rank sends and receives bytes [lo, lo + len) of the value, the
   * receivers all-gather the rest; else lo = 0, len = bytes */
  int chunk;
  int64_t lo, len, elems, es;
  int64_t src; /* MMRT_XFER_FWD: its senders' grad arena offset (pp_xfer_src), else -1 */
} Xfer;

struct MmrtPp {
  const MmrtModelDesc *m;
  MmrtMesh *mesh;
  MmrtPpHooks h;
  int P, S, M, me;
  Act *act;
  int nact;
  Xfer *x;
  int *astage; /* per accum tensor */
  int *last;   /* per micro-batch: the index of its last action on this rank */
  int nslot;   /* slots: the most micro-batches this rank's list holds at once */
  char *(*slot)[MMRT_NARENAS];
  int *mb_slot;   /* per micro-batch: its slot in this step, or -1 */
  int *slot_busy; /* per slot */
  MPI_Request *req;
  int *req_slot; /* per request: the slot whose storage it sends from */
  int *req_how;  /* per request: its transfer's MMRT_XFER_* */
  int *req_tag;  /* per request: its tag (transfer i, micro-batch k: i M + k) */
  int nreq, capreq;
  MmrtMbAcc acc;
  float *slot_loss;
  int *last_w; /* per stage: the micro-batch of its last W part on this rank, or -1 */
};

static int pp_fail(MmrtPp *pp, const char *fmt, const char *a) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a);
  return pp->h.fail(pp->h.user, msg);
}

/* rank r's list of the descriptor's schedule (pp_rank[r], pp_actions), into
 * *out (malloc'd); its length, or -1 with *bad the index of a bad action
 * (-1: the rank has no list) */
static int rank_list(const MmrtModelDesc *m, int rank, Act **out, int64_t *bad) {
  *out = NULL;
  *bad = -1;
  if (!m->pp_rank || !m->pp_actions || rank < 0 || rank >= m->pp) return -1;
  const MmrtPpRank *pr = &m->pp_rank[rank];
  if (pr->first < 0 || pr->nactions < 0) return -1;
  Act *act = calloc((size_t)pr->nactions + 1, sizeof *act);
  if (!act) return -1;
  for (int64_t i = 0; i < pr->nactions; i++) {
    const MmrtPpAction *a = &m->pp_actions[pr->first + i];
    if (a->kind < MMRT_PP_F || a->kind > MMRT_PP_W || a->stage < 0 || a->stage >= m->pp_stages ||
        a->mb < 0 || a->mb >= m->micro_batches) {
      free(act);
      *bad = i;
      return -1;
    }
    act[i] = (Act){(int)a->kind, (int)a->stage, (int)a->mb};
  }
  *out = act;
  return (int)pr->nactions;
}

/* Walks a rank's list in order: micro-batch k is held from the rank's first
 * action on it to its last (last[k], -1 when none); the most held at once. */
static int slots_of(const Act *act, int nact, int M, int *last) {
  int *first = malloc(sizeof *first * (size_t)(M + 1));
  if (!first) return -1;
  for (int k = 0; k < M; k++) first[k] = last[k] = -1;
  for (int i = 0; i < nact; i++) {
    if (first[act[i].mb] < 0) first[act[i].mb] = i;
    last[act[i].mb] = i;
  }
  int held = 0, most = 0;
  for (int i = 0; i < nact; i++) {
    if (first[act[i].mb] == i && ++held > most) most = held;
    if (last[act[i].mb] == i) held--;
  }
  free(first);
  return most;
}

static int rank_actions(MmrtPp *pp) {
  int64_t bad;
  pp->nact = rank_list(pp->m, pp->me, &pp->act, &bad);
  if (pp->nact < 0 && bad < 0)
    return pp_fail(pp, "the pipeline schedule has no list for this rank%s", "");
  if (pp->nact < 0) {
    char at[32];
    snprintf(at, sizeof at, "%lld", (long long)bad);
    return pp_fail(pp, "bad pipeline action %s of this rank's list (kind, stage or micro-batch)",
                   at);
  }
  pp->last = malloc(sizeof *pp->last * (size_t)(pp->M + 1));
  if (!pp->last) return pp_fail(pp, "out of memory%s", "");
  pp->nslot = slots_of(pp->act, pp->nact, pp->M, pp->last);
  if (pp->nslot < 1) return pp_fail(pp, "the pipeline schedule holds no micro-batch%s", "");
  pp->last_w = malloc(sizeof *pp->last_w * (size_t)(pp->S + 1));
  if (!pp->last_w) return pp_fail(pp, "out of memory%s", "");
  for (int s = 0; s < pp->S; s++) pp->last_w[s] = -1;
  for (int i = 0; i < pp->nact; i++)
    if (pp->act[i].kind == 1 || pp->act[i].kind == 3) pp->last_w[pp->act[i].stage] = pp->act[i].mb;
  return 0;
}

int mmrt_pp_slots(const MmrtModelDesc *m, int rank) {
  Act *act;
  int64_t bad;
  int n = rank_list(m, rank, &act, &bad), M = (int)m->micro_batches;
  int *last = n >= 0 ? malloc(sizeof *last * (size_t)(M + 1)) : NULL;
  int k = last ? slots_of(act, n, M, last) : -1;
  free(last);
  free(act);
  return k;
}

int64_t mmrt_pp_sum_bytes(const MmrtPp *pp) {
  if (!pp) return 0;
  int64_t b = pp->acc.bytes; /* and the summed transfers' sums, on their senders */
  for (int64_t i = 0; pp->x && i < pp->m->pp_nxfer; i++)
    if (pp->x[i].sum) b += (int64_t)sizeof(float) * (pp->x[i].n + 1);
  return b;
}

int64_t mmrt_pp_arena_bytes(const MmrtModelDesc *m, int rank, int arena, int first) {
  if (!m->pp_rank || rank < 0 || rank >= m->pp) return -1;
  int64_t act = m->pp_rank[rank].act, act0 = m->pp_rank[rank].act0, grad0 = m->pp_rank[rank].grad0;
  if (act < 0 || act0 < act || grad0 < 0) return -1;
  if (arena == MMRT_ARENA_ACT) return first ? act0 : act;
  if (arena == MMRT_ARENA_GRAD) return first ? grad0 : 0;
  return first || arena == MMRT_ARENA_INPUT ? m->arena_bytes[arena] : 0;
}

/* act and input: a further slot's own arenas, as mmrt_pp_new allocates
 * them (its grad arena is slot 0's: the rank's working set) */
static int64_t slot_bytes(const MmrtModelDesc *m, int rank, int a) {
  int64_t n = a == MMRT_ARENA_ACT || a == MMRT_ARENA_INPUT ? mmrt_pp_arena_bytes(m, rank, a, 0) : 0;
  return n > 0 ? (n + 63) / 64 * 64 : 0;
}

/* the stage that makes each accum tensor (the descriptor's pp_accum_stage),
 * into st[naccum] */
static void accum_stages(const MmrtModelDesc *m, int *st) {
  for (int64_t i = 0; i < m->naccum; i++) st[i] = m->pp_accum_stage ? (int)m->pp_accum_stage[i] : 0;
}

int64_t mmrt_pp_extra_bytes(const MmrtModelDesc *m, int rank,
                            int64_t (*elems)(void *, const MmrtTensorDesc *), void *user) {
  int k = mmrt_pp_slots(m, rank);
  int *st = calloc((size_t)m->naccum + 1, sizeof *st);
  if (k < 1 || !st) {
    free(st);
    return -1;
  }
  accum_stages(m, st);
  int64_t b = 0;
  for (int a = 0; a < MMRT_NARENAS; a++) b += (int64_t)(k - 1) * slot_bytes(m, rank, a);
  for (int64_t i = 0; i < m->naccum; i++)
    if (st[i] % m->pp == rank && !deferred(m, i))
      b += (int64_t)sizeof(float) * (elems(user, &m->accum[i]) + 1);
  for (int64_t j = 0; m->defer_stage && j < m->ndefer; j++)
    if (m->defer_stage[j] % m->pp == rank && (!m->defer_home || m->defer_home[j] < 0))
      b += (int64_t)sizeof(float) * (elems(user, &m->defer[j]) + 1);
  /* the summed transfers' sums, on their senders */
  for (int64_t i = 0; m->pp_xfer_how && i < m->pp_nxfer; i++)
    if (m->pp_xfer_how[i] >= MMRT_XFER_SUM && (m->pp_xfer_route[i].from / 3) % m->pp == rank)
      b += (int64_t)sizeof(float) * (elems(user, &m->pp_xfer[i]) + 1);
  free(st);
  return b;
}

static int rank_of(const MmrtPp *pp, int fn) {
  return (fn / 3) % pp->P;
}

MmrtPp *mmrt_pp_new(const MmrtModelDesc *m, void *mesh, char **arenas, const MmrtPpHooks *h) {
  MmrtPp *pp = calloc(1, sizeof *pp);
  if (!pp) return NULL;
  pp->m = m;
  pp->mesh = mesh;
  pp->h = *h;
  pp->P = (int)m->pp, pp->S = (int)m->pp_stages, pp->M = (int)m->micro_batches;
  pp->me = pp->mesh->coord[MMRT_AXIS_PP];
  if (rank_actions(pp)) goto bad;
  pp->x = calloc((size_t)m->pp_nxfer + 1, sizeof *pp->x);
  if (!pp->x) goto oom;
  for (int64_t i = 0; i < m->pp_nxfer; i++) {
    pp->x[i].from = (int)m->pp_xfer_route[i].from;
    pp->x[i].to = (int)m->pp_xfer_route[i].to;
    Xfer *x = &pp->x[i];
    x->es = (int64_t)mmrt_st_dtype_size((MmrtStDtype)m->pp_xfer[i].dtype);
    x->elems = h->elems(h->user, &m->pp_xfer[i]);
    x->bytes = x->elems * x->es;
    /* a one-rank first stage (the pp fan, every rank's mesh one0) sends whole */
    x->chunk = m->pp_xfer_route[i].tp_chunk && pp->mesh->size[MMRT_AXIS_TP] > 1 && !pp->mesh->one0;
    x->lo = 0, x->len = x->bytes;
    if (x->chunk) {
      mmrt_split_range(x->elems, pp->mesh->size[MMRT_AXIS_TP], pp->mesh->coord[MMRT_AXIS_TP],
                       &x->lo, &x->len);
      x->lo *= x->es, x->len *= x->es;
    }
    x->n = x->elems;
    x->bf16 = m->pp_xfer[i].dtype == MMRT_ST_BF16;
    int64_t how = m->pp_xfer_how ? m->pp_xfer_how[i] : MMRT_XFER_LATE;
    pp->x[i].how = how >= MMRT_XFER_SUM ? MMRT_XFER_SUM : (int)how;
    pp->x[i].acc = how >= MMRT_XFER_SUM ? (int)((how - MMRT_XFER_SUM) / 2) : -1;
    pp->x[i].src = how == MMRT_XFER_FWD && m->pp_xfer_src ? m->pp_xfer_src[i] : -1;
    if (how == MMRT_XFER_FWD &&
        (pp->x[i].src < 0 ||
         (rank_of(pp, pp->x[i].from) == pp->me &&
          pp->x[i].src + x->bytes > mmrt_pp_arena_bytes(m, pp->me, MMRT_ARENA_GRAD, 1)))) {
      pp_fail(pp, "a pipeline transfer's send room (pp_xfer_src) is outside the working set%s", "");
      goto bad;
    }
    pp->x[i].dp = how >= MMRT_XFER_SUM && (how - MMRT_XFER_SUM) % 2;
    if (how < 0 || pp->x[i].acc >= m->naccum) {
      pp_fail(pp, "a pipeline transfer's pp_xfer_how is out of range%s", "");
      goto bad;
    }
    if (pp->x[i].how == MMRT_XFER_SUM && rank_of(pp, pp->x[i].from) == pp->me) {
      pp->x[i].sum = calloc((size_t)pp->x[i].n + 1, sizeof(float));
      if (!pp->x[i].sum) goto oom;
    }
  }
  int ub = 0, flag = 0, *pub = NULL;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &pub, &flag);
  ub = flag && pub ? *pub : 32767;
  if ((int64_t)(m->pp_nxfer + 1) * pp->M + m->naccum >= ub) {
    pp_fail(pp, "too many pipeline transfers for MPI's tags%s", "");
    goto bad;
  }
  pp->astage = calloc((size_t)m->naccum + 1, sizeof *pp->astage);
  if (!pp->astage) goto oom;
  accum_stages(m, pp->astage);
  pp->slot = calloc((size_t)pp->nslot, sizeof *pp->slot);
  g_slot_count = calloc((size_t)pp->M, sizeof *g_slot_count);
  pp->slot_loss = calloc((size_t)pp->M, sizeof *pp->slot_loss);
  pp->mb_slot = calloc((size_t)pp->M, sizeof *pp->mb_slot);
  pp->slot_busy = calloc((size_t)pp->nslot, sizeof *pp->slot_busy);
  if (!pp->slot || !g_slot_count || !pp->slot_loss || !pp->mb_slot || !pp->slot_busy) goto oom;
  if (mmrt_pp_arena_bytes(m, pp->me, MMRT_ARENA_ACT, 1) < 0) {
    pp_fail(pp, "the pipeline's arenas of this rank are not in the descriptor (pp_rank)%s", "");
    goto bad;
  }
  for (int k = 0; k < pp->nslot; k++)
    for (int a = 0; a < MMRT_NARENAS; a++) {
      int64_t n = slot_bytes(m, pp->me, a);
      if (k == 0 || n == 0) {
        pp->slot[k][a] = arenas[a];
        continue;
      }
      pp->slot[k][a] = aligned_alloc(64, (size_t)n);
      if (!pp->slot[k][a]) goto oom;
      memset(pp->slot[k][a], 0, (size_t)n);
    }
  /* the gradient sums: of this rank's stages only */
  pp->acc.m = m;
  pp->acc.acc = calloc((size_t)m->naccum + 1, sizeof *pp->acc.acc);
  pp->acc.n = calloc((size_t)m->naccum + 1, sizeof *pp->acc.n);
  if (!pp->acc.acc || !pp->acc.n) goto oom;
  for (int64_t i = 0; i < m->naccum; i++) {
    pp->acc.n[i] = h->elems(h->user, &m->accum[i]);
    /* a deferred reduction's result holds the step's sum itself, kept in
     * the grad arena to the update (the plan's gradient sums) */
    if (pp->astage[i] % pp->P != pp->me || deferred(m, i)) continue;
    pp->acc.acc[i] = malloc(sizeof(float) * (size_t)(pp->acc.n[i] + 1));
    if (!pp->acc.acc[i]) goto oom;
    pp->acc.bytes += (int64_t)sizeof(float) * (pp->acc.n[i] + 1);
  }
  /* the deferred reductions' sums: of this rank's stages only */
  pp->acc.dsum = calloc((size_t)m->ndefer + 1, sizeof *pp->acc.dsum);
  pp->acc.dn = calloc((size_t)m->ndefer + 1, sizeof *pp->acc.dn);
  if (!pp->acc.dsum || !pp->acc.dn) goto oom;
  for (int64_t j = 0; j < m->ndefer; j++) {
    pp->acc.dn[j] = h->elems(h->user, &m->defer[j]);
    if (!m->defer_stage || m->defer_stage[j] % pp->P != pp->me) continue;
    if ((pp->acc.dsum[j] = home(m, arenas[MMRT_ARENA_GRAD], j))) continue;
    pp->acc.dsum[j] = malloc(sizeof(float) * (size_t)(pp->acc.dn[j] + 1));
    if (!pp->acc.dsum[j]) goto oom;
    pp->acc.bytes += (int64_t)sizeof(float) * (pp->acc.dn[j] + 1);
  }
  return pp;
oom:
  pp_fail(pp, "out of memory for the pipeline's micro-batch slots%s", "");
bad:
  mmrt_pp_free(pp);
  return NULL;
}

void mmrt_pp_free(MmrtPp *pp) {
  if (!pp) return;
  for (int k = 1; pp->slot && k < pp->nslot; k++)
    for (int a = 0; a < MMRT_NARENAS; a++)
      if (pp->slot[k][a] != pp->slot[0][a]) free(pp->slot[k][a]);
  free(pp->slot);
  free(pp->mb_slot);
  free(pp->slot_busy);
  free(pp->last);
  free(pp->req_slot);
  free(pp->req_how);
  free(pp->req_tag);
  for (int64_t i = 0; pp->x && i < pp->m->pp_nxfer; i++) free(pp->x[i].sum);
  free(pp->act);
  free(pp->x);
  free(pp->astage);
  free(pp->req);
  free(pp->slot_loss);
  free(pp->last_w);
  if (g_pp == pp) g_pp = NULL;
  free(g_slot_count);
  g_slot_count = NULL;
  mmrt_mb_free(&pp->acc);
  free(pp);
}

static int recv_for(MmrtPp *pp, int fn, int mb) {
  double t0 = mmrt_trace_now();
  int any = 0;
  for (int64_t i = 0; i < pp->m->pp_nxfer; i++) {
    const Xfer *x = &pp->x[i];
    if (x->to != fn || rank_of(pp, x->from) == pp->me) continue;
    const MmrtTensorDesc *d = &pp->m->pp_xfer[i];
    if (x->how == MMRT_XFER_SUM) { /* its sum comes once a step (summed_xfers) */
      memset(pp->slot[pp->mb_slot[mb]][d->arena] + d->offset, 0, (size_t)x->bytes);
      continue;
    }
    char what[96]; /* the watchdog's name of the call: the peer first */
    snprintf(what, sizeof what, "recv from pp rank %d (stage %d's %s, micro-batch %d)",
             rank_of(pp, x->from), fn / 3, fn % 3 ? "output gradient" : "forward input", mb);
    any = 1;
    if (x->len == 0) continue; /* an empty chunk (fewer elements than tp ranks) */
    if (mmrt_recv_raw(pp->mesh, MMRT_AXIS_PP,
                      pp->slot[pp->mb_slot[mb]][d->arena] + d->offset + x->lo,
                      (size_t)(x->len / x->es), (size_t)x->len, rank_of(pp, x->from),
                      (int)(i * pp->M + mb), what))
      return pp_fail(pp, "%s", pp->mesh->err);
  }
  if (any) mmrt_trace_add(fn % 3 ? "RECV_B" : "RECV_F", "recv", t0, mmrt_trace_now(), mb, fn / 3);
  return 0;
}

/* After recv_for: each transfer to fn split over tp, its chunks (one per
 * tp rank, each from its own peer) all-gathered over tp into the whole
 * value before fn reads it (docs/pp-transfers.md). */
static int gather_for(MmrtPp *pp, int fn, int mb) {
  double t0 = mmrt_trace_now();
  int any = 0;
  for (int64_t i = 0; i < pp->m->pp_nxfer; i++) {
    const Xfer *x = &pp->x[i];
    if (x->to != fn || !x->chunk || rank_of(pp, x->from) == pp->me || x->how == MMRT_XFER_SUM)
      continue;
    const MmrtTensorDesc *d = &pp->m->pp_xfer[i];
    char what[96];
    snprintf(what, sizeof what, "all_gather over tp of stage %d's %s (micro-batch %d)", fn / 3,
             fn % 3 ? "output gradient" : "forward input", mb);
    if (mmrt_tp_gather_chunks(pp->mesh, pp->slot[pp->mb_slot[mb]][d->arena] + d->offset,
                              (size_t)x->elems, (size_t)x->es, what))
      return pp_fail(pp, "%s", pp->mesh->err);
    any = 1;
  }
  if (any)
    mmrt_trace_add(fn % 3 ? "GATHER_B" : "GATHER_F", "comm", t0, mmrt_trace_now(), mb, fn / 3);
  return 0;
}

/* Fault injection for tests/mpi_pp.sh: MMRT_TEST_PP_STALL=R makes pp rank
 * R stop at the start of step 2 without communicating (a hung stage), so
 * that the other ranks' --comm-timeout watchdog names it. =wR: world rank
 * R stops before its first backward send of step 2 (placement = separate:
 * LLM tp rank 1 after the micro-batch's tp collectives, so that rank 0
 * waits on it alone; tests/mpi_separate.sh). */
static int stall_at_send; /* 1: armed, 2: done */
static void stall_now(const MmrtPp *pp) {
  /* the others' watchdog reports after the timeout and its grace (timeout
   * / 10, 0.5 to 5 s); 1.5 s later this rank exits, which ends the job */
  double to = pp->mesh->timeout_s, grace = to / 10 < 0.5 ? 0.5 : to / 10 > 5 ? 5 : to / 10;
  double t = to > 0 ? to + grace + 1.5 : 60;
  for (int i = 0; i < (int)(t * 10); i++) nanosleep(&(struct timespec){0, 100000000}, NULL);
  _exit(1);
}

static void test_stall(const MmrtPp *pp, int64_t step) {
  const char *e = getenv("MMRT_TEST_PP_STALL");
  if (!e || !*e || step != 2) return;
  if (e[0] == 'w') {
    if (!stall_at_send && atoi(e + 1) == pp->mesh->coord[MMRT_AXIS_WORLD]) stall_at_send = 1;
    return;
  }
  if (atoi(e) == pp->me) stall_now(pp);
}

/* Fault injection for tests/pp_stash.sh: MMRT_TEST_PP_FAULT=nowait skips
 * the waits for a part's sends (wait_before), =sumone sends a summed
 * transfer's last micro-batch's share for the step's sum. */
static int test_fault(int which) {
  static int got = -1;
  if (got < 0) {
    const char *e = getenv("MMRT_TEST_PP_FAULT");
    got = !e ? 0 : strcmp(e, "nowait") == 0 ? 1 : strcmp(e, "sumone") == 0 ? 2 : 0;
  }
  return got == which + 1;
}

static int send_from(MmrtPp *pp, int fn, int mb) {
  double t0 = mmrt_trace_now();
  int any = 0;
  for (int64_t i = 0; i < pp->m->pp_nxfer; i++) {
    const Xfer *x = &pp->x[i];
    if (x->from != fn || rank_of(pp, x->to) == pp->me) continue;
    const MmrtTensorDesc *d = &pp->m->pp_xfer[i];
    if (x->how == MMRT_XFER_SUM) { /* into the step's sum, sent once (summed_xfers) */
      const char *g = pp->slot[pp->mb_slot[mb]][d->arena] + d->offset;
      int keep = !test_fault(1); /* fault injection: the last micro-batch's share only */
      for (int64_t e = 0; e < x->n; e++) {
        float y;
        if (x->bf16) {
          uint16_t hb;
          memcpy(&hb, g + 2 * e, 2);
          uint32_t u = (uint32_t)hb << 16;
          memcpy(&y, &u, 4);
        } else {
          memcpy(&y, g + 4 * e, 4);
        }
        x->sum[e] = keep ? x->sum[e] + y : y;
      }
      continue;
    }
    if (pp->nreq == pp->capreq) {
      int cap = pp->capreq ? 2 * pp->capreq : 64;
      MPI_Request *nr = realloc(pp->req, sizeof *nr * (size_t)cap);
      if (nr) pp->req = nr;
      int *ns = nr ? realloc(pp->req_slot, sizeof *ns * (size_t)cap) : NULL;
      if (ns) pp->req_slot = ns;
      int *nh = ns ? realloc(pp->req_how, sizeof *nh * (size_t)cap) : NULL;
      if (nh) pp->req_how = nh;
      int *nt = nh ? realloc(pp->req_tag, sizeof *nt * (size_t)cap) : NULL;
      if (!nt) return pp_fail(pp, "out of memory%s", "");
      pp->req_tag = nt;
      pp->capreq = cap;
    }
    /* one sent from its send room is in no slot: waited before the
     * rank's next forward part (wait_before) */
    pp->req_slot[pp->nreq] = x->how == MMRT_XFER_FWD ? -1 : pp->mb_slot[mb];
    pp->req_how[pp->nreq] = x->how;
    pp->req_tag[pp->nreq] = (int)(i * pp->M + mb);
    if (stall_at_send == 1 && fn % 3) stall_now(pp);
    any = 1;
    if (x->len == 0) continue; /* an empty chunk (fewer elements than tp ranks) */
    const char *at = x->how == MMRT_XFER_FWD ? pp->slot[pp->mb_slot[mb]][MMRT_ARENA_GRAD] + x->src
                                             : pp->slot[pp->mb_slot[mb]][d->arena] + d->offset;
    if (mmrt_isend_raw(pp->mesh, MMRT_AXIS_PP, at + x->lo, (size_t)(x->len / x->es), (size_t)x->len,
                       rank_of(pp, x->to), (int)(i * pp->M + mb), &pp->req[pp->nreq++]))
      return pp_fail(pp, "%s", pp->mesh->err);
  }
  if (any) mmrt_trace_add(fn % 3 ? "SEND_B" : "SEND_F", "send", t0, mmrt_trace_now(), mb, fn / 3);
  return 0;
}

/* After stage's W part on micro-batch mb: the gradients the stage makes
 * into the sums, at once (those its W made are in the rank's working set,
 * which the next part overwrites). */
static void add_grads(MmrtPp *pp, int stage, int mb) {
  const MmrtModelDesc *m = pp->m;
  char **a = pp->slot[pp->mb_slot[mb]];
  for (int64_t i = 0; i < m->naccum; i++) {
    /* a deferred reduction's result is the step's sum itself (in the grad
     * arena to the update) */
    if (pp->astage[i] != stage || deferred(m, i)) continue;
    const MmrtTensorDesc *d = &m->accum[i];
    const float *g = (const float *)(void *)(a[d->arena] + d->offset);
    float *s = pp->acc.acc[i];
    for (int64_t e = 0; e < pp->acc.n[i]; e++) s[e] += g[e];
  }
}

/* A deferred root's operand under a pipeline (the backward's seed already
 * weighs the micro-batch by its label count): into its sum on a part that
 * is not its stage's last W, the sum into it on the last. */
static int pp_defer(int j, float *x, int64_t n) {
  MmrtMbAcc *a = &g_pp->acc;
  if (j < 0 || j >= g_pp->m->ndefer || n != a->dn[j] || !a->dsum[j]) {
    fprintf(stderr, "mmrt: deferred reduction %d of %lld elements does not match the descriptor\n",
            j, (long long)n);
    return -1;
  }
  float *s = a->dsum[j];
  if (g_pp_defer)
    for (int64_t e = 0; e < n; e++) s[e] += x[e];
  else
    for (int64_t e = 0; e < n; e++) x[e] += s[e];
  return 0;
}

/* A deferred root's weight gradient under a pipeline (the seed already
 * weighs the micro-batch): into its sum on a part that is not its stage's
 * last W, the sum added in by the kernel on the last. */
static int pp_linear_w(int j, MmrtDtype dt, float *dw, const void *dy, const void *x, int rows,
                       int K, int N, int overlap) {
  MmrtMbAcc *a = &g_pp->acc;
  if (j < 0 || j >= g_pp->m->ndefer || (int64_t)N * K != a->dn[j] || !a->dsum[j]) {
    fprintf(stderr, "mmrt: deferred reduction %d of %lld elements does not match the descriptor\n",
            j, (long long)N * K);
    return -1;
  }
  if (g_pp_defer || dw == a->dsum[j]) /* dw == the sum: its home, added in place */
    mmrt_linear_bwd_weights_into(dt, a->dsum[j], NULL, dy, x, rows, K, N, 1.0f, 1);
  else
    last_w(dt, dw, a->dsum[j], dy, x, rows, K, N, 1.0f, overlap);
  return 0;
}

/* Before a part runs on slot k: the sends its storage may still hold (the
 * plan lets the part reuse their room, docs/pp-memory.md): the slot's
 * (MMRT_XFER_SLOT; not between the I and W of one B action, in_b: the
 * plan keeps what I sends from the slot to W's end) and the working set's
 * (MMRT_XFER_WS, any slot). */
static int wait_before(MmrtPp *pp, int k, int in_b, int fwd) {
  for (int j = 0; j < pp->nreq; j++) {
    int h = pp->req_how[j];
    if (pp->req[j] == MPI_REQUEST_NULL || !(h == MMRT_XFER_WS || (h == MMRT_XFER_FWD && fwd) ||
                                            (h == MMRT_XFER_SLOT && pp->req_slot[j] == k && !in_b)))
      continue;
    if (test_fault(0)) continue; /* fault injection: the sends not waited for */
    const Xfer *x = &pp->x[pp->req_tag[j] / pp->M];
    char what[96]; /* the watchdog's name of the call: the peer first */
    snprintf(what, sizeof what, "send to pp rank %d (stage %d's %s, micro-batch %d)",
             rank_of(pp, x->to), x->from / 3, x->from % 3 ? "input gradient" : "output",
             pp->req_tag[j] % pp->M);
    if (mmrt_wait_sends(pp->mesh, MMRT_AXIS_PP, 1, &pp->req[j], what))
      return pp_fail(pp, "%s", pp->mesh->err);
  }
  return 0;
}

static int run_part(MmrtPp *pp, int stage, int q, int mb, int in_b, const char *what) {
  int fn = 3 * stage + q;
  /* the counters' phase: a forward part's transfers are forward traffic */
  mmrt_comm_set_phase(q == 0 ? MMRT_PHASE_FORWARD : MMRT_PHASE_BACKWARD);
  if (wait_before(pp, pp->mb_slot[mb], in_b, q == 0) || recv_for(pp, fn, mb) ||
      gather_for(pp, fn, mb))
    return 1;
  g_slot = mb;
  g_pp_defer = mb != pp->last_w[stage];
  mmrt_mb_begin();
  double t0 = mmrt_trace_now();
  if (pp->h.run(pp->h.user, pp->m->pp_fn[fn], pp->slot[pp->mb_slot[mb]], what)) return 1;
  mmrt_trace_add(q == 0   ? "F"
                 : q == 1 ? "I"
                          : "W",
                 q == 0 ? "forward" : "backward", t0, mmrt_trace_now(), mb, stage);
  if (q == 0 && g_counted) g_slot_count[mb] = g_count;
  if (q == 2) add_grads(pp, stage, mb);
  return send_from(pp, fn, mb);
}

/* A slot for micro-batch mb at its first action on this rank: a free one,
 * once the sends from its storage are done, filled with mb's inputs. */
static int take_slot(MmrtPp *pp, int mb) {
  int k = 0;
  while (k < pp->nslot && pp->slot_busy[k]) k++;
  if (k == pp->nslot) return pp_fail(pp, "pipeline: more micro-batches in flight than slots%s", "");
  for (int j = 0; j < pp->nreq; j++)
    if (pp->req_slot[j] == k && pp->req[j] != MPI_REQUEST_NULL &&
        mmrt_wait_sends(pp->mesh, MMRT_AXIS_PP, 1, &pp->req[j], "the pipeline's sends from a slot"))
      return pp_fail(pp, "%s", pp->mesh->err);
  pp->slot_busy[k] = 1;
  pp->mb_slot[mb] = k;
  g_slot_count[mb] = 1.0f;
  double t0 = mmrt_trace_now();
  if (pp->h.fill(pp->h.user, mb, pp->slot[k])) return 1;
  mmrt_trace_add("fill", "data", t0, mmrt_trace_now(), mb, -1);
  return 0;
}

/* After micro-batch mb's last action on this rank: its loss kept, the
 * slot free (its gradients are in the sums: add_grads). */
static void free_slot(MmrtPp *pp, int mb) {
  const MmrtModelDesc *m = pp->m;
  char **a = pp->slot[pp->mb_slot[mb]];
  if ((pp->S - 1) % pp->P == pp->me)
    memcpy(&pp->slot_loss[mb], a[MMRT_ARENA_ACT] + m->train_loss_offset, sizeof(float));
  pp->slot_busy[pp->mb_slot[mb]] = 0;
  pp->mb_slot[mb] = -1;
}

/* A parameter more than one rank holds (GPT-2's tied embedding and head):
 * the rank whose stage makes its gradient's sum sends it to the others,
 * which update their copy with it, so that the copies stay equal. Tags
 * above the transfers' (mmrt_pp_new checks the bound). */
static int tied_grads(MmrtPp *pp) {
  const MmrtModelDesc *m = pp->m;
  MPI_Request rq[MMRT_PP_MAXRANKS];
  for (int64_t i = 0; i < m->naccum; i++) {
    const MmrtTensorDesc *d = &m->accum[i];
    int maker = pp->astage[i] % pp->P, n = 0;
    uint64_t holders = (uint64_t)d->pp_ranks & ~((uint64_t)1 << maker);
    if (!holders || !(holders >> pp->me & 1 || maker == pp->me)) continue;
    float *g = (float *)(void *)(pp->slot[0][d->arena] + d->offset);
    size_t elems = (size_t)pp->acc.n[i], bytes = sizeof(float) * elems;
    int tag = (int)((m->pp_nxfer + 1) * pp->M + i);
    if (maker != pp->me) {
      if (mmrt_recv_raw(pp->mesh, MMRT_AXIS_PP, g, elems, bytes, maker, tag,
                        "the gradient of a parameter two stages hold"))
        return pp_fail(pp, "%s", pp->mesh->err);
      continue;
    }
    for (int r = 0; r < pp->P; r++)
      if (holders >> r & 1 &&
          mmrt_isend_raw(pp->mesh, MMRT_AXIS_PP, g, elems, bytes, r, tag, &rq[n++]))
        return pp_fail(pp, "%s", pp->mesh->err);
    if (mmrt_wait_sends(pp->mesh, MMRT_AXIS_PP, n, rq,
                        "the gradient of a parameter two stages hold"))
      return pp_fail(pp, "%s", pp->mesh->err);
  }
  return 0;
}

/* The transfers summed over the step's micro-batches (MMRT_XFER_SUM: the
 * head's share of a tied embedding's gradient): once a step, their
 * senders' sums (all-reduced over dp first when the gradient they join is)
 * go to their readers' ranks, into the sums of the gradients they join.
 * The received sum lands in the transfer's own place in the working set,
 * free once the micro-batches are done. */
static int summed_xfers(MmrtPp *pp) {
  const MmrtModelDesc *m = pp->m;
  MPI_Request rq[64];
  int n = 0;
  for (int64_t i = 0; i < m->pp_nxfer; i++) {
    Xfer *x = &pp->x[i];
    if (!x->sum) continue;
    if (x->dp && mmrt_all_reduce_mpi(pp->mesh, MMRT_AXIS_DP, x->sum, (int)x->n, MPI_FLOAT, MPI_SUM,
                                     "all_reduce of a summed pipeline transfer"))
      return pp_fail(pp, "%s", pp->mesh->err);
    /* in pieces the receiver's place holds (a bf16 transfer: two) */
    for (int64_t e = 0; e < x->n; e += x->bytes / 4) {
      int64_t k = x->n - e < x->bytes / 4 ? x->n - e : x->bytes / 4;
      if (n == 64) return pp_fail(pp, "more than 64 summed pipeline transfer pieces%s", "");
      if (mmrt_isend_raw(pp->mesh, MMRT_AXIS_PP, x->sum + e, (size_t)k, 4 * (size_t)k,
                         rank_of(pp, x->to), (int)(i * pp->M), &rq[n++]))
        return pp_fail(pp, "%s", pp->mesh->err);
    }
  }
  for (int64_t i = 0; i < m->pp_nxfer; i++) {
    const Xfer *x = &pp->x[i];
    if (x->how != MMRT_XFER_SUM || rank_of(pp, x->to) != pp->me || rank_of(pp, x->from) == pp->me)
      continue;
    const MmrtTensorDesc *d = &m->pp_xfer[i];
    float *g = (float *)(void *)(pp->slot[0][d->arena] + d->offset), *s = pp->acc.acc[x->acc];
    if (!s && deferred(m, x->acc)) { /* the gradient's sum is its deferred reduction's, in place */
      const MmrtTensorDesc *a = &m->accum[x->acc];
      s = (float *)(void *)(pp->slot[0][a->arena] + a->offset);
    }
    if (!s || x->n != pp->acc.n[x->acc])
      return pp_fail(pp, "a summed pipeline transfer does not match its gradient's sum%s", "");
    for (int64_t e = 0; e < x->n; e += x->bytes / 4) {
      int64_t k = x->n - e < x->bytes / 4 ? x->n - e : x->bytes / 4;
      if (mmrt_recv_raw(pp->mesh, MMRT_AXIS_PP, g, (size_t)k, 4 * (size_t)k, rank_of(pp, x->from),
                        (int)(i * pp->M), "the summed share of a gradient two stages make"))
        return pp_fail(pp, "%s", pp->mesh->err);
      for (int64_t j = 0; j < k; j++) s[e + j] += g[j];
    }
  }
  if (mmrt_wait_sends(pp->mesh, MMRT_AXIS_PP, n, rq, "the summed pipeline transfers"))
    return pp_fail(pp, "%s", pp->mesh->err);
  return 0;
}

int mmrt_pp_sum_f64(void *mesh, double *x) {
  return mmrt_all_reduce_mpi(mesh, MMRT_AXIS_PP, x, 1, MPI_DOUBLE, MPI_SUM,
                             "all_reduce of the pipeline's gradient norm")
             ? -1
             : 0;
}

/* ZeRO-1/2's parameter gathers, once a step (passes/accum.h MbDefer.once):
 * every part function of this rank's stages in its gather-only mode
 * (mmrt_mb_gathering 2; one without gathers returns at once), before the
 * schedule, so the stages' parts read the copies in the grad arena and a
 * rank past the first gathers while it waits for its first input anyway.
 * Only a program with such gathers (gather_once > 0) has the mode. */
static int gather_once(MmrtPp *pp, const char *what) {
  if (pp->m->gather_once <= 0) return 0;
  mmrt_comm_set_phase(MMRT_PHASE_FORWARD);
  double t0 = mmrt_trace_now();
  g_pp_gather = 2;
  for (int s = pp->me; s < pp->S; s += pp->P)
    for (int q = 0; q < 3; q++)
      if (pp->m->pp_fn[3 * s + q] &&
          pp->h.run(pp->h.user, pp->m->pp_fn[3 * s + q], pp->slot[0], what)) {
        g_pp_gather = 0;
        return 1;
      }
  g_pp_gather = 0;
  mmrt_trace_add("gather", "comm", t0, mmrt_trace_now(), -1, -1);
  return 0;
}

int mmrt_pp_step(MmrtPp *pp, int64_t step, const char *what, float *loss) {
  const MmrtModelDesc *m = pp->m;
  test_stall(pp, step);
  for (int64_t i = 0; i < m->naccum; i++)
    if (pp->acc.acc[i]) memset(pp->acc.acc[i], 0, sizeof(float) * (size_t)pp->acc.n[i]);
  for (int64_t j = 0; j < m->ndefer; j++)
    if (pp->acc.dsum[j]) memset(pp->acc.dsum[j], 0, sizeof(float) * (size_t)pp->acc.dn[j]);
  for (int64_t i = 0; i < m->pp_nxfer; i++)
    if (pp->x[i].sum) memset(pp->x[i].sum, 0, sizeof(float) * (size_t)pp->x[i].n);
  g_pp = pp;
  for (int k = 0; k < pp->M; k++) pp->mb_slot[k] = -1, g_slot_count[k] = 1.0f;
  if (gather_once(pp, what)) return 1;
  for (int i = 0; i < pp->nact; i++) {
    const Act *a = &pp->act[i];
    int rc = pp->mb_slot[a->mb] < 0 ? take_slot(pp, a->mb) : 0;
    if (a->kind == 0) rc = rc || run_part(pp, a->stage, 0, a->mb, 0, what);
    if (a->kind == 1 || a->kind == 2) rc = rc || run_part(pp, a->stage, 1, a->mb, 0, what);
    if (a->kind == 1 || a->kind == 3)
      rc = rc || run_part(pp, a->stage, 2, a->mb, a->kind == 1, what);
    if (rc) return 1;
    if (pp->last[a->mb] == i) free_slot(pp, a->mb);
  }
  g_pp = NULL;
  double t0 = mmrt_trace_now();
  mmrt_comm_set_phase(MMRT_PHASE_UPDATE);
  if (mmrt_wait_sends(pp->mesh, MMRT_AXIS_PP, pp->nreq, pp->req, "the step's pipeline sends"))
    return pp_fail(pp, "%s", pp->mesh->err);
  pp->nreq = 0;
  double lc[2] = {0, 0}; /* sum c_k L_k, sum c_k: on the last stage's rank */
  if ((pp->S - 1) % pp->P == pp->me)
    for (int k = 0; k < pp->M; k++) {
      lc[0] += (double)g_slot_count[k] * (double)pp->slot_loss[k];
      lc[1] += (double)g_slot_count[k];
    }
  if (mmrt_all_reduce_mpi(pp->mesh, MMRT_AXIS_PP, lc, 2, MPI_DOUBLE, MPI_SUM,
                          "all_reduce of the pipeline's loss"))
    return pp_fail(pp, "%s", pp->mesh->err);
  if (summed_xfers(pp)) return 1;
  float inv = lc[1] > 0 ? (float)(1.0 / lc[1]) : 0.0f;
  /* every slot is free: the sums of this rank's stages' gradients, divided
   * by sum(c), into slot 0, where its update reads them */
  for (int64_t i = 0; i < m->naccum; i++) {
    const MmrtTensorDesc *d = &m->accum[i];
    float *g = (float *)(void *)(pp->slot[0][d->arena] + d->offset);
    if (deferred(m, i) && pp->astage[i] % pp->P == pp->me)
      for (int64_t e = 0; e < pp->acc.n[i]; e++) g[e] *= inv; /* the sum, in place */
    if (!pp->acc.acc[i]) continue;
    for (int64_t e = 0; e < pp->acc.n[i]; e++) g[e] = pp->acc.acc[i][e] * inv;
  }
  if (tied_grads(pp)) return 1;
  *loss = lc[1] > 0 ? (float)(lc[0] / lc[1]) : 0.0f;
  double t1 = mmrt_trace_now();
  mmrt_trace_add("gradients", "comm", t0, t1, -1, -1);
  int rc = pp->h.run(pp->h.user, m->pp_update[pp->me], pp->slot[0], what);
  mmrt_trace_add("update", "update", t1, mmrt_trace_now(), -1, -1);
  return rc;
}

/* ---- --trace ---- */
