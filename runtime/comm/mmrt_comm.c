/* mmrt_comm.c: mesh communicators, collectives over MPI, traffic counters.
 *
 * Every collective has the same shape: check the arguments, count the call,
 * handle a size-1 axis by a copy, then one MPI call.  A collective that
 * splits a non-leading dimension packs its blocks into scratch (or unpacks
 * them from it) so that MPI only ever sees contiguous per-rank blocks; when
 * the split dimension is the leading one MPI reads and writes the caller's
 * buffers directly.  With a timeout set, the non-blocking variant of the
 * same call is polled (wait_reqs) instead.
 */
#include "mmrt_comm.h"
#include "mmrt_trace.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const axis_names[MMRT_NAXES] = {
#define MESH_AXIS(ID, name, nest, ir) [MMRT_AXIS_##ID] = #name,
#include "../../support/mesh_axes.def"
    [MMRT_AXIS_WORLD] = "world",
    [MMRT_AXIS_DP_NODE] = "dp_node",
    [MMRT_AXIS_DP_CROSS] = "dp_cross",
};

static const char *const kind_names[MMRT_COMM_NKINDS] = {
    [MMRT_COMM_ALL_REDUCE] = "all_reduce",
    [MMRT_COMM_ALL_GATHER] = "all_gather",
    [MMRT_COMM_REDUCE_SCATTER] = "reduce_scatter",
    [MMRT_COMM_ALL_TO_ALL] = "all_to_all",
    [MMRT_COMM_BROADCAST] = "broadcast",
    [MMRT_COMM_SEND] = "send",
    [MMRT_COMM_RECV] = "recv",
    [MMRT_COMM_BARRIER] = "barrier",
    [MMRT_COMM_RING] = "ring",
};

/* Pipeline transfers: activations go forward, gradients backward; with
 * pp = 2 the next and previous stage are the same rank, so the two streams
 * need their own tags. */
enum { TAG_FWD = 0x6d6d01, TAG_BWD = 0x6d6d02 };

/* A reduce-scatter bucket after its packing: the MPI call's arguments. */
typedef struct RsPack {
  char *buf;   /* block r of every rank at dsp[r], then this rank's result */
  size_t full; /* elements of the whole bucket */
  int *cnt;    /* n counts, then n offsets */
  bool even;
} RsPack;

/* A bucket in flight: its request, its own pack space (other collectives
 * reuse m->scratch meanwhile) and where its results go. */
typedef struct MmrtPending {
  bool active, rs, ag; /* ag: a prefetched parameter gather (mmrt_all_gather_start) */
  MmrtAxis ax;
  MmrtDtype dt;
  MPI_Request rq;
  char *space; /* pack space */
  size_t space_bytes;
  int nbufs, cap;
  void **dst;   /* all-reduce: the buffers; reduce-scatter: the recvs */
  size_t *dims; /* all-reduce: counts; reduce-scatter: 3 per buffer */
  int *cnt;     /* reduce-scatter: 2n ints (MPI reads them until done) */
  size_t count; /* all-reduce: elements */
  float scale;
  RsPack pk;
  double t0;
  /* --trace (mmrt_trace_now): the start call's entry, the posting, the
   * last poll that found the request incomplete, the first time it was
   * seen complete (seen: 1 by an MPI_Test in mmrt_comm_progress, 2 at the
   * wait; an upper bound of the completion either way) */
  double tr_post, tr_last, tr_done;
  int seen;
} MmrtPending;

static MmrtCommCount counters[MMRT_COMM_NKINDS][MMRT_NAXES];
static MmrtCommCount phase_counters[MMRT_NPHASES][MMRT_COMM_NKINDS][MMRT_NAXES];
static int cur_phase;

const char *mmrt_axis_name(MmrtAxis ax) {
  return (unsigned)ax < MMRT_NAXES ? axis_names[ax] : "?";
}

const char *mmrt_comm_kind_name(MmrtCommKind k) {
  return (unsigned)k < MMRT_COMM_NKINDS ? kind_names[k] : "?";
}

static size_t esize(MmrtDtype dt) {
  switch (dt) {
    case MMRT_F32: return 4;
    case MMRT_BF16: return 2;
    case MMRT_BF16_F32: break; /* a product's dtype pair, never a message's */
  }
  return 0;
}

/* bf16 travels as 16-bit words; only sums need to know what they are. */
static MPI_Datatype mpi_type(MmrtDtype dt) {
  return dt == MMRT_BF16 ? MPI_UINT16_T : MPI_FLOAT;
}

static MPI_Op sum_op(const MmrtMesh *m, MmrtDtype dt) {
  return dt == MMRT_BF16 ? m->bf16_sum : MPI_SUM;
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

void mmrt_split_range(int64_t dim, int n, int r, int64_t *lo, int64_t *len) {
  int64_t q = dim / n, extra = dim % n;
  *len = q + (r < extra);
  *lo = r * q + (r < extra ? r : extra);
}

/* floor(bytes * k / n) without overflow. */
static uint64_t share(uint64_t bytes, uint64_t k, uint64_t n) {
  return bytes / n * k + bytes % n * k / n;
}

static void tally(MmrtCommKind k, MmrtAxis ax, int n, uint64_t elems, uint64_t bytes) {
  MmrtCommCount *cs[2] = {&counters[k][ax], &phase_counters[cur_phase][k][ax]};
  for (int i = 0; i < 2; i++) {
    cs[i]->calls++;
    cs[i]->elems += elems;
    cs[i]->bytes += bytes;
    cs[i]->n = n;
  }
}

/* --trace: a training step's forward and backward as "forward" and
 * "backward" events of category "phase" (generated code sets the phase at
 * the step's entry, at the backward's first node and at the update's;
 * not under a pipeline (mmrt_mesh_init with pp > 1), whose runtime sets phases per
 * action and records the actions itself). */
static int trace_phases = 1, open_phase = -1;
static double open_phase_t;

static uint64_t updates;

uint64_t mmrt_comm_updates(void) {
  return updates;
}

void mmrt_comm_set_phase(int phase) {
  cur_phase = phase >= 0 && phase < MMRT_NPHASES ? phase : MMRT_PHASE_FORWARD;
  updates += cur_phase == MMRT_PHASE_UPDATE;
  if (!trace_phases || !mmrt_trace_on()) return;
  double t = mmrt_trace_now();
  /* only forward -> backward -> update, as a training step runs them (an
   * evaluation's forward is left open and dropped) */
  if (open_phase >= 0 && cur_phase == open_phase + 1)
    mmrt_trace_add(mmrt_comm_phase_name((MmrtCommPhase)open_phase), "phase", open_phase_t, t, -1,
                   -1);
  open_phase = cur_phase == MMRT_PHASE_UPDATE ? -1 : cur_phase;
  open_phase_t = t;
}

const char *mmrt_comm_phase_name(MmrtCommPhase p) {
  static const char *const names[MMRT_NPHASES] = {"forward", "backward", "update"};
  return (unsigned)p < MMRT_NPHASES ? names[p] : "?";
}

MmrtCommCount mmrt_comm_counter_phase(MmrtCommPhase p, MmrtCommKind k, MmrtAxis ax) {
  MmrtCommCount zero = {0};
  if ((unsigned)p >= MMRT_NPHASES || (unsigned)k >= MMRT_COMM_NKINDS || (unsigned)ax >= MMRT_NAXES)
    return zero;
  return phase_counters[p][k][ax];
}

/* ---- errors ---- */

/* m->err = "<op> on axis <ax> (<n> ranks; <ax> rank <c>, world rank <w>): <detail>" */
static int fail(MmrtMesh *m, int code, const char *op, MmrtAxis ax, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(MmrtMesh *m, int code, const char *op, MmrtAxis ax, const char *fmt, ...) {
  int k;
  if (ax == MMRT_AXIS_WORLD)
    k = snprintf(m->err, sizeof m->err, "%s on axis world (%d rank%s; world rank %d): ", op,
                 m->size[ax], m->size[ax] == 1 ? "" : "s", m->coord[MMRT_AXIS_WORLD]);
  else
    k = snprintf(m->err, sizeof m->err,
                 "%s on axis %s (%d rank%s; %s rank %d, world rank %d): ", op, axis_names[ax],
                 m->size[ax], m->size[ax] == 1 ? "" : "s", axis_names[ax], m->coord[ax],
                 m->coord[MMRT_AXIS_WORLD]);
  if (k >= 0 && (size_t)k < sizeof m->err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err + k, sizeof m->err - (size_t)k, fmt, ap);
    va_end(ap);
  }
  return code;
}

static int mpi_fail(MmrtMesh *m, const char *op, MmrtAxis ax, int rc) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error code %d", rc);
  return fail(m, MMRT_ERR_COMM, op, ax, "failed: %s", s);
}

/* Common argument checks; ax must be valid before fail() can name it. */
static int check(MmrtMesh *m, const char *op, MmrtAxis ax, MmrtDtype dt) {
  if ((unsigned)ax >= MMRT_NAXES) {
    snprintf(m->err, sizeof m->err, "%s: no mesh axis %d (axes are 0..%d)", op, (int)ax,
             MMRT_NAXES - 1);
    return MMRT_ERR_ARG;
  }
  if (m->comm[ax] == MPI_COMM_NULL)
    return fail(m, MMRT_ERR_ARG, op, ax, "the mesh is not initialised");
  if (!esize(dt)) return fail(m, MMRT_ERR_ARG, op, ax, "unknown dtype %d", (int)dt);
  return MMRT_OK;
}

static int too_large(MmrtMesh *m, const char *op, MmrtAxis ax, uint64_t elems) {
  return fail(m, MMRT_ERR_ARG, op, ax,
              "%llu elements is more than MPI's int counts can address (%d)",
              (unsigned long long)elems, INT_MAX);
}

/* *out = a * b * c, false on overflow. */
static bool mul3(size_t a, size_t b, size_t c, size_t *out) {
  size_t ab;
  return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

/* Scratch of at least bytes (contents not kept), NULL with m->err set. */
static char *scratch(MmrtMesh *m, const char *op, MmrtAxis ax, size_t bytes) {
  if (bytes > m->scratch_bytes) {
    void *p = realloc(m->scratch, bytes);
    if (!p) {
      fail(m, MMRT_ERR_NOMEM, op, ax, "cannot allocate %zu bytes of scratch", bytes);
      return NULL;
    }
    m->scratch = p;
    m->scratch_bytes = bytes;
  }
  return m->scratch;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the watchdog ---- */

enum { TAG_PROBE = 0x6d6d10, TAG_REPLY = 0x6d6d11 };
#define SERVICE_S 0.02 /* how often a waiting rank looks for probes */

/* A waiting rank's answer to a probe. */
typedef struct Reply {
  int64_t seq;     /* collectives it started on the probed axis */
  int64_t cur_seq; /* ... on the axis of the call it waits in */
  int32_t cur_ax;  /* -1: not in a call */
  char op[20];
} Reply;

/* World rank of coordinate c on axis ax (this rank's other coordinates). */
static int world_of(const MmrtMesh *m, MmrtAxis ax, int c) {
  if (ax == MMRT_AXIS_WORLD) return c;
  if (ax == MMRT_AXIS_DP_NODE || ax == MMRT_AXIS_DP_CROSS) { /* their dp coordinate */
    int n = m->size[MMRT_AXIS_DP_NODE];
    c = ax == MMRT_AXIS_DP_NODE ? m->coord[MMRT_AXIS_DP_CROSS] * n + c
                                : c * n + m->coord[MMRT_AXIS_DP_NODE];
    ax = MMRT_AXIS_DP;
  }
  int k[MESH_NAXES];
  for (int a = 0; a < MESH_NAXES; a++) k[a] = a == (int)ax ? c : m->coord[a];
  /* a one-rank first stage (one0_coords): rank 0 is stage 0, 1 + tp the
   * second's; rank 0 waiting on fan[fan_cur] waits on tp rank fan_cur */
  if (m->one0) return k[MMRT_AXIS_PP] == 0 ? 0 : 1 + k[MMRT_AXIS_TP] + m->fan_cur;
  return mmrt_mesh_rank_of(m, k);
}

/* Answer the probes that have arrived on wd, seq its collectives' count. */
static void service_comm(MmrtMesh *m, MPI_Comm wd, int64_t seq) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PROBE, wd, &flag, &st) != MPI_SUCCESS || !flag) break;
    int64_t q[2];
    if (MPI_Recv(q, 2, MPI_INT64_T, st.MPI_SOURCE, TAG_PROBE, wd, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    Reply r = {.seq = seq, .cur_ax = m->cur_op ? m->cur_ax : -1};
    if (m->cur_op) {
      r.cur_seq = m->seq[m->cur_ax];
      snprintf(r.op, sizeof r.op, "%s", m->cur_op);
    }
    MPI_Send(&r, (int)sizeof r, MPI_BYTE, st.MPI_SOURCE, TAG_REPLY, wd); /* eager */
  }
}

/* Answer every probe that has arrived, on every axis (and on rank 0 of a
 * one-rank first stage, every fan communicator: whichever is swapped in,
 * wd[PP] and fan_wd[1..] are all of them). */
static void service(MmrtMesh *m) {
  for (int a = 0; a < MMRT_NAXES; a++)
    if (m->size[a] >= 2 && m->wd[a] != MPI_COMM_NULL) service_comm(m, m->wd[a], m->seq[a]);
  for (int k = 1; m->fan_wd && k < m->nfan; k++)
    if (m->fan_wd[k] != MPI_COMM_NULL) service_comm(m, m->fan_wd[k], m->fan_seq[k]);
}

/* Rank 0 of a one-rank first stage: make fan[k] the pp communicator (its
 * watchdog's too) until the same call again puts fan[0] back. */
static void fan_use(MmrtMesh *m, int k) {
  if (k == 0) return;
  MPI_Comm c = m->comm[MMRT_AXIS_PP], w = m->wd[MMRT_AXIS_PP];
  int64_t q = m->seq[MMRT_AXIS_PP];
  m->comm[MMRT_AXIS_PP] = m->fan[k], m->fan[k] = c;
  m->wd[MMRT_AXIS_PP] = m->fan_wd[k], m->fan_wd[k] = w;
  m->seq[MMRT_AXIS_PP] = m->fan_seq[k], m->fan_seq[k] = q;
  m->fan_cur = m->fan_cur ? 0 : k;
}

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t k = strlen(buf);
  if (k >= len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + k, len - k, fmt, ap);
  va_end(ap);
}

/* The deadline of `op` on axis ax has passed: probe the axis's other
 * ranks, wait a grace period for their answers (answering theirs), and
 * fail with a message naming the ranks that did not arrive.  coll: a
 * collective (every rank of the axis takes part, at the same seq). */
static int diagnose(MmrtMesh *m, const char *op, MmrtAxis ax, int coll) {
  int n = m->size[ax], me = m->coord[ax];
  double grace = m->timeout_s / 10;
  grace = grace < 0.5 ? 0.5 : grace > 5 ? 5 : grace;
  Reply *rep = calloc((size_t)n, sizeof *rep);
  MPI_Request *rr = malloc((size_t)n * sizeof *rr);
  char *got = calloc((size_t)n, 1);
  if (!rep || !rr || !got) {
    free(rep), free(rr), free(got);
    return fail(m, MMRT_ERR_COMM, op, ax, "did not finish within %.1f s; abort the job",
                m->timeout_s);
  }
  m->probe[0] = m->coord[MMRT_AXIS_WORLD];
  m->probe[1] = m->seq[ax];
  for (int p = 0; p < n; p++) {
    rr[p] = MPI_REQUEST_NULL;
    if (p == me) continue;
    MPI_Request sr;
    MPI_Irecv(&rep[p], (int)sizeof rep[p], MPI_BYTE, p, TAG_REPLY, m->wd[ax], &rr[p]);
    if (MPI_Isend(m->probe, 2, MPI_INT64_T, p, TAG_PROBE, m->wd[ax], &sr) == MPI_SUCCESS)
      MPI_Request_free(&sr); /* m->probe outlives it: the job is aborted next */
  }
  got[me] = 1;
  int left = n - 1;
  for (double t0 = now_s(); left > 0 && now_s() - t0 < grace;) {
    for (int p = 0; p < n; p++) {
      int flag = 0;
      if (!got[p] && MPI_Test(&rr[p], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag)
        got[p] = 1, left--;
    }
    service(m);
    sched_yield();
  }
  char silent[160] = "", behind[320] = "";
  int nsilent = 0, nbehind = 0;
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    int w = world_of(m, ax, p);
    if (!got[p]) {
      append(silent, sizeof silent, "%s%d", nsilent++ ? ", " : "", w);
      MPI_Cancel(&rr[p]);
      MPI_Wait(&rr[p], MPI_STATUS_IGNORE);
      continue;
    }
    Reply *r = &rep[p];
    r->op[sizeof r->op - 1] = 0;
    int same = r->cur_ax == (int)ax && strncmp(r->op, op, sizeof r->op - 1) == 0 &&
               (!coll || r->seq == m->seq[ax]);
    if (same) continue;
    if (r->cur_ax < 0 || r->cur_ax >= MMRT_NAXES)
      append(behind, sizeof behind, "%sworld rank %d is in no call", nbehind++ ? "; " : "", w);
    else
      append(behind, sizeof behind, "%sworld rank %d has not arrived: it waits in %s on axis %s",
             nbehind++ ? "; " : "", w, r->op, axis_names[r->cur_ax]);
    if (coll && r->cur_ax >= 0)
      append(behind, sizeof behind, " (collective #%lld of axis %s there, #%lld here)",
             (long long)r->seq, axis_names[ax], (long long)m->seq[ax]);
  }
  free(rep), free(rr), free(got);
  char detail[480] = "";
  if (nsilent)
    append(detail, sizeof detail,
           "world rank%s %s did not arrive (no answer within %.1f s: stopped, dead, or busy "
           "outside communication)",
           nsilent > 1 ? "s" : "", silent, grace);
  if (nbehind) append(detail, sizeof detail, "%s%s", nsilent ? "; " : "", behind);
  if (!nsilent && !nbehind)
    append(detail, sizeof detail, "every rank of the axis is waiting in it (a network fault?)");
  return fail(m, MMRT_ERR_COMM, op, ax, "did not finish within %.1f s: %s; abort the job",
              m->timeout_s, detail);
}

/* Poll nreq requests until all are done or m->timeout_s has passed, then
 * run the watchdog.  st (may be NULL) receives their statuses; coll: a
 * collective (counted in m->seq), else point to point. */
static int wait_reqs(MmrtMesh *m, const char *op, MmrtAxis ax, int nreq, MPI_Request *req,
                     MPI_Status *st, int coll) {
  MPI_Status own[2];
  if (!st) st = own;
  if (coll) m->seq[ax]++;
  m->cur_op = op;
  m->cur_ax = (int)ax;
  double t0 = now_s(), next = t0 + SERVICE_S;
  int rc;
  for (;;) {
    int done = 0;
    rc = MPI_Testall(nreq, req, &done, st);
    if (rc == MPI_ERR_IN_STATUS) {
      for (int i = 0; i < nreq; i++)
        if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING) {
          rc = mpi_fail(m, op, ax, st[i].MPI_ERROR);
          goto out;
        }
    }
    if (rc != MPI_SUCCESS) {
      rc = mpi_fail(m, op, ax, rc);
      break;
    }
    if (done) {
      rc = MMRT_OK;
      break;
    }
    double t = now_s();
    if (t >= next) {
      service(m);
      next = t + SERVICE_S;
    }
    if (t - t0 > m->timeout_s) {
      rc = diagnose(m, op, ax, coll);
      break;
    }
    sched_yield();
  }
out:
  m->cur_op = NULL;
  return rc;
}

/* After an MPI call: rc from a blocking call (rq == NULL) or from the
 * start of a non-blocking collective, which is then waited for. */
static int finish(MmrtMesh *m, const char *op, MmrtAxis ax, int rc, MPI_Request *rq) {
  if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
  return rq ? wait_reqs(m, op, ax, 1, rq, NULL, 1) : MMRT_OK;
}

/* dst (outer, len, inner) = src (outer, dim, inner)[:, lo : lo + len, :] */
static void slice_out(char *dst, const char *src, size_t outer, size_t dim, size_t inner, size_t lo,
                      size_t len, size_t es) {
  size_t row = len * inner * es;
  if (row)
    for (size_t o = 0; o < outer; o++)
      memcpy(dst + o * row, src + (o * dim + lo) * inner * es, row);
}

/* dst (outer, dim, inner)[:, lo : lo + len, :] = src (outer, len, inner) */
static void slice_in(char *dst, const char *src, size_t outer, size_t dim, size_t inner, size_t lo,
                     size_t len, size_t es) {
  size_t row = len * inner * es;
  if (row)
    for (size_t o = 0; o < outer; o++)
      memcpy(dst + (o * dim + lo) * inner * es, src + o * row, row);
}

static void copy(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memcpy(dst, src, bytes);
}

/* ---- mesh ---- */

int mmrt_mesh_rank_of(const MmrtMesh *m, const int coord[MESH_NAXES]) {
  return mesh_rank_of(m->size, coord, MESH_NAXES);
}

int mmrt_pp_next(const MmrtMesh *m) {
  return (m->coord[MMRT_AXIS_PP] + 1) % m->size[MMRT_AXIS_PP];
}

int mmrt_pp_prev(const MmrtMesh *m) {
  int n = m->size[MMRT_AXIS_PP];
  return (m->coord[MMRT_AXIS_PP] + n - 1) % n;
}

void mmrt_comm_set_timeout(MmrtMesh *m, double seconds) {
  m->timeout_s = seconds > 0 ? seconds : 0;
}

static int init_fail(MmrtMesh *m, char *err, size_t errlen, int code, const char *what, int rc) {
  char s[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (rc != MPI_SUCCESS && MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
    snprintf(s, sizeof s, "MPI error code %d", rc);
  snprintf(m->err, sizeof m->err, "mesh init: %s%s%s", what, rc != MPI_SUCCESS ? ": " : "", s);
  if (err && errlen) snprintf(err, errlen, "%s", m->err);
  return code;
}

/* "the trainer was compiled for tp=2 x dp=2 = 4 ranks, but mpirun started
 * 3 (start it with mpirun -np 4)": the axes that are split, innermost first. */
static void world_message(char *buf, size_t n, const char *who, const int sizes[MESH_NAXES],
                          int world) {
  int order[MESH_NAXES]; /* the axes from the fastest in the rank numbering */
  mesh_order(MESH_NAXES, order);
  char plan[96] = "";
  size_t k = 0;
  long long want = mesh_product(sizes, MESH_NAXES);
  for (int i = MESH_NAXES - 1; i >= 0; i--) {
    if (sizes[order[i]] > 1 && k < sizeof plan) {
      int w = snprintf(plan + k, sizeof plan - k, "%s%s=%d", k ? " x " : "", axis_names[order[i]],
                       sizes[order[i]]);
      if (w > 0) k += (size_t)w;
    }
  }
  if (want == 1)
    snprintf(buf, n,
             "the %s was compiled for 1 rank (no parallelism), but mpirun started %d "
             "(start it without mpirun, or with mpirun -np 1)",
             who, world);
  else
    snprintf(buf, n,
             "the %s was compiled for %s = %lld ranks, but mpirun started %d "
             "(start it with mpirun -np %lld)",
             who, plan, want, world, want);
}

/* A positive whole number from the environment, or 0. */
static int env_count(const char *name) {
  const char *v = getenv(name);
  char *end;
  long n = v && *v ? strtol(v, &end, 10) : 0;
  return n > 0 && n <= INT_MAX && !*end ? (int)n : 0;
}

int mmrt_launcher_world(int *rank) {
  static const char *const vars[2][2] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                         {"PMI_SIZE", "PMI_RANK"}};
  for (int i = 0; i < 2; i++) {
    int n = env_count(vars[i][0]);
    if (n > 0) {
      if (rank) *rank = env_count(vars[i][1]); /* rank 0 reads as 0 too */
      return n;
    }
  }
  if (rank) *rank = 0;
  return 0;
}

int mmrt_world_check(const char *who, const int sizes[MESH_NAXES], char *err, size_t errlen) {
  int world = mmrt_launcher_world(NULL);
  if (world == 0 || mesh_product(sizes, MESH_NAXES) == world) return MMRT_OK;
  char what[320];
  world_message(what, sizeof what, who, sizes, world);
  return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH, "%s", what);
}

/* "dp=1<sep>cp=2<sep>..." into buf: every axis, in the table's order. */
static void axis_list(char *buf, size_t n, const int sizes[MESH_NAXES], const char *sep) {
  size_t k = 0;
  for (int a = 0; a < MESH_NAXES && k < n; a++) {
    int w = snprintf(buf + k, n - k, "%s%s=%d", a ? sep : "", axis_names[a], sizes[a]);
    if (w > 0) k += (size_t)w;
  }
}

static int mesh_init(MmrtMesh *m, const int sizes[MESH_NAXES], int one0, char *err, size_t errlen);

int mmrt_mesh_init(MmrtMesh *m, const int sizes[MESH_NAXES], char *err, size_t errlen) {
  return mesh_init(m, sizes, 0, err, errlen);
}

int mmrt_mesh_init_one0(MmrtMesh *m, const int sizes[MESH_NAXES], char *err, size_t errlen) {
  for (int a = 0; a < MESH_NAXES; a++)
    if (a != MMRT_AXIS_PP && a != MMRT_AXIS_TP && sizes[a] != 1) {
      memset(m, 0, sizeof *m);
      return init_fail(m, err, errlen, MMRT_ERR_ARG,
                       "one rank for the first stage: only pp = 2 and tp", MPI_SUCCESS);
    }
  if (sizes[MMRT_AXIS_PP] != 2 || sizes[MMRT_AXIS_TP] < 2) {
    memset(m, 0, sizeof *m);
    return init_fail(m, err, errlen, MMRT_ERR_ARG,
                     "one rank for the first stage needs pp = 2 and tp > 1", MPI_SUCCESS);
  }
  return mesh_init(m, sizes, 1, err, errlen);
}

/* placement = separate, first stage on one rank: rank r's coordinates */
static void one0_coords(const int sizes[MESH_NAXES], int r, int *c) {
  for (int a = 0; a < MESH_NAXES; a++) c[a] = 0;
  c[MMRT_AXIS_PP] = r > 0;
  c[MMRT_AXIS_TP] = r > 0 ? (r - 1) % sizes[MMRT_AXIS_TP] : 0;
}

/* The communicators of the one-rank first stage: dp and cp each rank alone,
 * tp per stage (rank 0 alone), pp one per tp rank of the second stage (rank
 * 0 in each: its fan). */
static int one0_comms(MmrtMesh *m, const int sizes[MESH_NAXES], char *err, size_t errlen) {
  int rank = m->coord[MMRT_AXIS_WORLD], T = sizes[MMRT_AXIS_TP], rc = MPI_SUCCESS;
  MPI_Comm w = m->comm[MMRT_AXIS_WORLD];
  for (int a = 0; a < MESH_NAXES && rc == MPI_SUCCESS; a++) {
    if (a == MMRT_AXIS_PP) continue;
    int color = a == MMRT_AXIS_TP ? m->coord[MMRT_AXIS_PP] : rank;
    rc = MPI_Comm_split(w, color, m->coord[a], &m->comm[a]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm[a], MPI_ERRORS_RETURN);
  }
  if (rank == 0) {
    m->fan = calloc((size_t)T, sizeof *m->fan);
    if (!m->fan) return init_fail(m, err, errlen, MMRT_ERR_NOMEM, "out of memory", MPI_SUCCESS);
    for (int k = 0; k < T; k++) m->fan[k] = MPI_COMM_NULL;
    m->nfan = T;
  }
  for (int k = 0; k < T && rc == MPI_SUCCESS; k++) {
    MPI_Comm c = MPI_COMM_NULL;
    int in = rank == 0 || rank == k + 1;
    rc = MPI_Comm_split(w, in ? 0 : MPI_UNDEFINED, m->coord[MMRT_AXIS_PP], &c);
    if (rc == MPI_SUCCESS && in) rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (rank == 0)
      m->fan[k] = c;
    else if (in)
      m->comm[MMRT_AXIS_PP] = c;
  }
  if (rank == 0) m->comm[MMRT_AXIS_PP] = m->fan[0]; /* freed as comm[PP] */
  if (rc != MPI_SUCCESS)
    return init_fail(m, err, errlen, MMRT_ERR_COMM,
                     "building the communicators of the one-rank first stage failed", rc);
  return MMRT_OK;
}

static int mesh_init(MmrtMesh *m, const int sizes[MESH_NAXES], int one0, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  for (int a = 0; a < MMRT_NAXES; a++) m->comm[a] = m->wd[a] = MPI_COMM_NULL;
  m->bf16_sum = MPI_OP_NULL;
  long long want = 1;
  char what[320], list[160];
  trace_phases = sizes[MMRT_AXIS_PP] == 1;
  for (int a = 0; a < MESH_NAXES; a++) {
    if (sizes[a] < 1) {
      axis_list(list, sizeof list, sizes, " ");
      snprintf(what, sizeof what, "axis sizes must be at least 1, got %s", list);
      return init_fail(m, err, errlen, MMRT_ERR_ARG, what, MPI_SUCCESS);
    }
    want *= sizes[a];
    if (want > INT_MAX) {
      axis_list(list, sizeof list, sizes, " x ");
      snprintf(what, sizeof what, "%s is too many ranks", list);
      return init_fail(m, err, errlen, MMRT_ERR_ARG, what, MPI_SUCCESS);
    }
  }

  int inited = 0, finalized = 0, rc;
  MPI_Finalized(&finalized);
  if (finalized)
    return init_fail(m, err, errlen, MMRT_ERR_ARG, "MPI has already been finalised", MPI_SUCCESS);
  MPI_Initialized(&inited);
  if (!inited) {
    int provided;
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
      return init_fail(m, err, errlen, MMRT_ERR_COMM, "MPI_Init_thread failed", rc);
  }
  int world, rank;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (one0 && world != 1 + sizes[MMRT_AXIS_TP]) {
    snprintf(what, sizeof what,
             "the %s was compiled for 1 + %d = %d ranks (placement = separate: the first "
             "sub-model on rank 0, the second's tp = %d on ranks 1..%d), but mpirun started %d "
             "(start it with mpirun -np %d)",
             "trainer", sizes[MMRT_AXIS_TP], 1 + sizes[MMRT_AXIS_TP], sizes[MMRT_AXIS_TP],
             sizes[MMRT_AXIS_TP], world, 1 + sizes[MMRT_AXIS_TP]);
    snprintf(m->err, sizeof m->err, "%s", what);
    if (err && errlen) snprintf(err, errlen, "%s", what);
    return MMRT_ERR_MISMATCH;
  }
  if (!one0 && world != want) {
    world_message(what, sizeof what, "trainer", sizes, world);
    /* the whole message, without the "mesh init: " prefix */
    snprintf(m->err, sizeof m->err, "%s", what);
    if (err && errlen) snprintf(err, errlen, "%s", what);
    return MMRT_ERR_MISMATCH;
  }

  for (int a = 0; a < MESH_NAXES; a++) m->size[a] = sizes[a];
  m->size[MMRT_AXIS_WORLD] = world;
  m->coord[MMRT_AXIS_WORLD] = rank;
  if (one0)
    one0_coords(sizes, rank, m->coord);
  else
    mesh_coords(sizes, rank, m->coord, MESH_NAXES);
  m->one0 = one0;

  rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm[MMRT_AXIS_WORLD]);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm[MMRT_AXIS_WORLD], MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    m->comm[MMRT_AXIS_WORLD] = MPI_COMM_NULL;
    mmrt_mesh_free(m);
    return init_fail(m, err, errlen, MMRT_ERR_COMM, "duplicating MPI_COMM_WORLD failed", rc);
  }
  if (one0 && (rc = one0_comms(m, sizes, err, errlen)) != MMRT_OK) {
    mmrt_mesh_free(m);
    return rc;
  }
  for (int a = 0; a < MESH_NAXES && !one0; a++) {
    /* color: the world rank with this axis's coordinate set to 0, the
     * same for exactly the ranks that differ only on this axis */
    int k[MESH_NAXES];
    for (int b = 0; b < MESH_NAXES; b++) k[b] = b == a ? 0 : m->coord[b];
    int color = mesh_rank_of(sizes, k, MESH_NAXES);
    rc = MPI_Comm_split(m->comm[MMRT_AXIS_WORLD], color, m->coord[a], &m->comm[a]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm[a], MPI_ERRORS_RETURN);
    int n = 0, r = -1;
    if (rc == MPI_SUCCESS) {
      MPI_Comm_size(m->comm[a], &n);
      MPI_Comm_rank(m->comm[a], &r);
    }
    if (rc != MPI_SUCCESS || n != sizes[a] || r != m->coord[a]) {
      snprintf(what, sizeof what, "building the %s communicator (MPI_Comm_split) failed",
               axis_names[a]);
      mmrt_mesh_free(m);
      return init_fail(m, err, errlen, MMRT_ERR_COMM, what, rc);
    }
  }
  for (int a = 0; a < MMRT_NAXES; a++) {
    if (m->comm[a] == MPI_COMM_NULL) continue; /* hierarchical ZeRO's: mmrt_mesh_hzero */
    rc = MPI_Comm_dup(m->comm[a], &m->wd[a]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->wd[a], MPI_ERRORS_RETURN);
    /* a one-rank first stage: the second stage's other tp ranks duplicate
     * their pp communicator with rank 0 now (rank 0's copy: fan_wd[k]) */
    if (a == MMRT_AXIS_PP && rc == MPI_SUCCESS && m->nfan > 1) {
      m->fan_wd = malloc(sizeof *m->fan_wd * (size_t)m->nfan);
      m->fan_seq = calloc((size_t)m->nfan, sizeof *m->fan_seq);
      for (int k = 0; m->fan_wd && k < m->nfan; k++) m->fan_wd[k] = MPI_COMM_NULL;
      if (!m->fan_wd || !m->fan_seq) {
        mmrt_mesh_free(m);
        return init_fail(m, err, errlen, MMRT_ERR_NOMEM, "out of memory", MPI_SUCCESS);
      }
    }
    for (int k = 1; a == MMRT_AXIS_PP && rc == MPI_SUCCESS && k < m->nfan; k++) {
      rc = MPI_Comm_dup(m->fan[k], &m->fan_wd[k]);
      if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->fan_wd[k], MPI_ERRORS_RETURN);
    }
    if (rc != MPI_SUCCESS) {
      snprintf(what, sizeof what, "duplicating the %s communicator for the watchdog failed",
               axis_names[a]);
      mmrt_mesh_free(m);
      return init_fail(m, err, errlen, MMRT_ERR_COMM, what, rc);
    }
  }
  rc = MPI_Op_create(bf16_sum_fn, 1, &m->bf16_sum);
  if (rc != MPI_SUCCESS) {
    m->bf16_sum = MPI_OP_NULL;
    mmrt_mesh_free(m);
    return init_fail(m, err, errlen, MMRT_ERR_COMM, "creating the bf16 sum failed", rc);
  }
  m->cnt = malloc(4 * (size_t)world * sizeof *m->cnt);
  if (!m->cnt) {
    mmrt_mesh_free(m);
    return init_fail(m, err, errlen, MMRT_ERR_NOMEM, "out of memory", MPI_SUCCESS);
  }
  return MMRT_OK;
}

int mmrt_mesh_placement(MmrtMesh *m, FILE *out, char *err, size_t errlen) {
  const int W = m->size[MMRT_AXIS_WORLD], me = m->coord[MMRT_AXIS_WORLD];
  enum { N = MPI_MAX_PROCESSOR_NAME };
  char name[N] = "";
  int len = 0;
  if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS) snprintf(name, N, "?");
  char *all = me == 0 ? calloc((size_t)W, N) : NULL;
  int *host = me == 0 ? malloc((size_t)W * sizeof *host) : NULL;
  if (me == 0 && (!all || !host)) {
    free(all), free(host);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "placement: out of memory");
  }
  int rc = MPI_Gather(name, N, MPI_CHAR, all, N, MPI_CHAR, 0, m->comm[MMRT_AXIS_WORLD]);
  if (rc != MPI_SUCCESS) {
    free(all), free(host);
    return mmrt_errf(err, errlen, MMRT_ERR_COMM, "placement: gathering the host names failed");
  }
  if (me != 0) return MMRT_OK;
  /* host[r]: the lowest rank on rank r's host */
  int hosts = 0;
  for (int r = 0; r < W; r++) {
    host[r] = r;
    for (int q = 0; q < r && host[r] == r; q++)
      if (!strncmp(all + (size_t)q * N, all + (size_t)r * N, N)) host[r] = host[q];
    hosts += host[r] == r;
  }
  char axes[64] = "", sizes[64] = "";
  for (int a = 0, n = 0; a < MESH_NAXES; a++) {
    if (m->size[a] < 2) continue;
    size_t l = strlen(axes), ls = strlen(sizes);
    snprintf(axes + l, sizeof axes - l, "%s%s", n ? "." : "", axis_names[a]);
    snprintf(sizes + ls, sizeof sizes - ls, " %s=%d", axis_names[a], m->size[a]);
    n++;
  }
  fprintf(out, "placement: %d ranks on %d host%s (%s)\n", W, hosts, hosts == 1 ? "" : "s",
          sizes + 1);
  for (int h = 0; h < W; h++) {
    if (host[h] != h) continue;
    fprintf(out, "placement: host %.*s: ranks", N, all + (size_t)h * N);
    for (int r = h; r < W; r++)
      if (host[r] == h) fprintf(out, " %d", r);
    fprintf(out, " at %s", axes);
    for (int r = h; r < W; r++) {
      if (host[r] != h) continue;
      /* the coordinates of world rank r (mmrt_mesh_init's order) */
      int c[MESH_NAXES];
      if (m->one0)
        one0_coords(m->size, r, c);
      else
        mesh_coords(m->size, r, c, MESH_NAXES);
      fputc(' ', out);
      for (int a = 0, n = 0; a < MESH_NAXES; a++)
        if (m->size[a] > 1) fprintf(out, "%s%d", n++ ? "." : "", c[a]);
    }
    fputc('\n', out);
  }
  if (m->hz_node) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    fprintf(out,
            "placement: hierarchical ZeRO: %d node groups of %d dp ranks (dp %d..%d the first); "
            "the launcher's ranks per host: %s\n",
            m->size[MMRT_AXIS_DP] / m->hz_node, m->hz_node, 0, m->hz_node - 1,
            local ? local : "not given");
  }
  fflush(out);
  free(all), free(host);
  return MMRT_OK;
}

void mmrt_mesh_free(MmrtMesh *m) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (int a = 0; a < MMRT_NAXES; a++) {
    if (m->comm[a] != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m->comm[a]);
    if (m->wd[a] != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m->wd[a]);
    m->comm[a] = m->wd[a] = MPI_COMM_NULL;
  }
  for (int k = 1; k < m->nfan; k++) { /* fan[0] is comm[PP] */
    if (m->fan[k] != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m->fan[k]);
    if (m->fan_wd && m->fan_wd[k] != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m->fan_wd[k]);
  }
  free(m->fan);
  m->fan = NULL;
  free(m->fan_wd);
  m->fan_wd = NULL;
  free(m->fan_seq);
  m->fan_seq = NULL;
  free(m->fan_req_k);
  m->fan_req_k = NULL;
  free(m->fan_req_of);
  m->fan_req_of = NULL;
  m->nfan = 0;
  free(m->fan_req);
  m->fan_req = NULL;
  m->nfan_req = m->fan_cap = 0;
  free(m->fan_buf);
  m->fan_buf = NULL;
  m->fan_bytes = 0;
  if (m->bf16_sum != MPI_OP_NULL && !finalized) MPI_Op_free(&m->bf16_sum);
  m->bf16_sum = MPI_OP_NULL;
  free(m->scratch);
  m->scratch = NULL;
  m->scratch_bytes = 0;
  free(m->cnt);
  m->cnt = NULL;
  for (int s = 0; s < m->npend; s++) {
    MmrtPending *p = &m->pend[s];
    /* a bucket still in flight (a failed step; MPI cannot cancel a
     * collective): MPI may still write its space and read its counts, so
     * those stay allocated */
    if (!(p->active && p->rq != MPI_REQUEST_NULL)) free(p->space), free(p->cnt);
    free(p->dst), free(p->dims);
  }
  free(m->pend);
  m->pend = NULL;
  m->npend = 0;
  if (m->hz_free) m->hz_free(m);
}

int mmrt_comm_finalize(void) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized && MPI_Finalize() != MPI_SUCCESS) return MMRT_ERR_COMM;
  return MMRT_OK;
}

void mmrt_comm_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  abort(); /* MPI_Abort does not return; if it did, still end */
}

/* ---- collectives ---- */

static MmrtOverlapStats ovl; /* mmrt_comm_overlap_stats() (defined below) */
static int all_reduce(MmrtMesh *m, MmrtAxis ax, const void *send, void *recv, size_t count,
                      MmrtDtype dt);
int mmrt_all_reduce(MmrtMesh *m, MmrtAxis ax, const void *send, void *recv, size_t count,
                    MmrtDtype dt) {
  double t0 = now_s();
  int rc = all_reduce(m, ax, send, recv, count, dt);
  ovl.reduce_s += now_s() - t0;
  return rc;
}

static int all_reduce(MmrtMesh *m, MmrtAxis ax, const void *send, void *recv, size_t count,
                      MmrtDtype dt) {
  static const char op[] = "all_reduce";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  size_t es = esize(dt);
  int n = m->size[ax];
  tally(MMRT_COMM_ALL_REDUCE, ax, n, count, share((uint64_t)count * es, 2 * (uint64_t)(n - 1), n));
  if (n == 1 || count == 0) {
    copy(recv, send, count * es);
    return MMRT_OK;
  }
  /* pieces of at most INT_MAX elements: an all-reduce splits freely */
  for (size_t off = 0; off < count; off += INT_MAX) {
    int c = (int)(count - off < INT_MAX ? count - off : INT_MAX);
    const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * es;
    void *r = (char *)recv + off * es;
    MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
    rc = prq ? MPI_Iallreduce(s, r, c, mpi_type(dt), sum_op(m, dt), m->comm[ax], prq)
             : MPI_Allreduce(s, r, c, mpi_type(dt), sum_op(m, dt), m->comm[ax]);
    if ((rc = finish(m, op, ax, rc, prq))) return rc;
  }
  return MMRT_OK;
}

/* dp's all-gathers and reduce-scatters run in two levels (mmrt_hzero.c). */
static bool hz(const MmrtMesh *m, MmrtAxis ax) {
  return ax == MMRT_AXIS_DP && m && m->hz_node > 0;
}

/* cnt[r], dsp[r]: elements and offset of rank r's block (outer, len_r,
 * inner) in the rank-ordered concatenation of the blocks. */
static void blocks(int *cnt, int *dsp, int n, size_t outer, size_t dim, size_t inner) {
  for (int r = 0; r < n; r++) {
    int64_t lo, len;
    mmrt_split_range((int64_t)dim, n, r, &lo, &len);
    cnt[r] = (int)(outer * (size_t)len * inner);
    dsp[r] = (int)(outer * (size_t)lo * inner);
  }
}

/* What all_gather and reduce_scatter of an (outer, dim, inner) tensor
 * split along dim share: the checks, the count, a copy on a single rank
 * (*done = 1), else the blocks of every rank in m->cnt (counts, then
 * offsets). *full gets the full tensor's elements. */
static int split_begin(MmrtMesh *m, const char *op, MmrtCommKind kind, MmrtAxis ax,
                       const void *send, void *recv, size_t outer, size_t dim, size_t inner,
                       MmrtDtype dt, size_t *full, int *done) {
  *done = 0;
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  size_t es = esize(dt);
  int n = m->size[ax];
  if (!mul3(outer, dim, inner, full) || *full > INT_MAX)
    return too_large(m, op, ax, (uint64_t)outer * dim * inner);
  tally(kind, ax, n, *full, share((uint64_t)*full * es, (uint64_t)(n - 1), n));
  if (n == 1) {
    copy(recv, send, *full * es);
    *done = 1;
    return MMRT_OK;
  }
  blocks(m->cnt, m->cnt + n, n, outer, dim, inner);
  return MMRT_OK;
}

int mmrt_all_gather(MmrtMesh *m, MmrtAxis ax, const void *send, void *recv, size_t outer,
                    size_t dim, size_t inner, MmrtDtype dt) {
  static const char op[] = "all_gather";
  if (hz(m, ax)) return m->hz_all_gather(m, send, recv, outer, dim, inner, dt);
  size_t es = esize(dt), full;
  int done, rc = split_begin(m, op, MMRT_COMM_ALL_GATHER, ax, send, recv, outer, dim, inner, dt,
                             &full, &done);
  if (rc || done) return rc;
  int n = m->size[ax], me = m->coord[ax];
  int *cnt = m->cnt, *dsp = m->cnt + n;
  /* the blocks in rank order are the result when the split dim leads */
  char *dst = outer == 1 ? recv : scratch(m, op, ax, full * es);
  if (!dst) return MMRT_ERR_NOMEM;
  MPI_Datatype t = mpi_type(dt);
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  if (dim % (size_t)n == 0)
    rc = prq ? MPI_Iallgather(send, cnt[me], t, dst, cnt[me], t, m->comm[ax], prq)
             : MPI_Allgather(send, cnt[me], t, dst, cnt[me], t, m->comm[ax]);
  else
    rc = prq ? MPI_Iallgatherv(send, cnt[me], t, dst, cnt, dsp, t, m->comm[ax], prq)
             : MPI_Allgatherv(send, cnt[me], t, dst, cnt, dsp, t, m->comm[ax]);
  if ((rc = finish(m, op, ax, rc, prq))) return rc;
  if (outer != 1)
    for (int r = 0; r < n; r++) {
      int64_t lo, len;
      mmrt_split_range((int64_t)dim, n, r, &lo, &len);
      slice_in(recv, dst + (size_t)dsp[r] * es, outer, dim, inner, (size_t)lo, (size_t)len, es);
    }
  return MMRT_OK;
}

int mmrt_reduce_scatter(MmrtMesh *m, MmrtAxis ax, const void *send, void *recv, size_t outer,
                        size_t dim, size_t inner, MmrtDtype dt) {
  static const char op[] = "reduce_scatter";
  if (hz(m, ax)) {
    size_t d[3] = {outer, dim, inner};
    return m->hz_reduce_scatter(m, &send, &recv, d, 1, dt);
  }
  size_t es = esize(dt), full;
  int done, rc = split_begin(m, op, MMRT_COMM_REDUCE_SCATTER, ax, send, recv, outer, dim, inner, dt,
                             &full, &done);
  if (rc || done) return rc;
  int n = m->size[ax], me = m->coord[ax];
  int *cnt = m->cnt, *dsp = m->cnt + n;
  const char *src = send;
  if (outer != 1) {
    char *buf = scratch(m, op, ax, full * es);
    if (!buf) return MMRT_ERR_NOMEM;
    for (int r = 0; r < n; r++) {
      int64_t lo, len;
      mmrt_split_range((int64_t)dim, n, r, &lo, &len);
      slice_out(buf + (size_t)dsp[r] * es, send, outer, dim, inner, (size_t)lo, (size_t)len, es);
    }
    src = buf;
  }
  MPI_Datatype t = mpi_type(dt);
  MPI_Op o = sum_op(m, dt);
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  if (dim % (size_t)n == 0)
    rc = prq ? MPI_Ireduce_scatter_block(src, recv, cnt[me], t, o, m->comm[ax], prq)
             : MPI_Reduce_scatter_block(src, recv, cnt[me], t, o, m->comm[ax]);
  else
    rc = prq ? MPI_Ireduce_scatter(src, recv, cnt, t, o, m->comm[ax], prq)
             : MPI_Reduce_scatter(src, recv, cnt, t, o, m->comm[ax]);
  return finish(m, op, ax, rc, prq);
}

/* The (outer, dim, inner) view of a tensor around dimension d, where
 * dimension `other` has size other_len instead of its global size. */
static void view(const int64_t *shape, int ndim, int d, int other, int64_t other_len, size_t *outer,
                 size_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < ndim; i++) {
    size_t s = (size_t)(i == other ? other_len : shape[i]);
    if (i < d)
      *outer *= s;
    else if (i > d)
      *inner *= s;
  }
}

int mmrt_all_to_all(MmrtMesh *m, MmrtAxis ax, const void *send, void *recv, const int64_t *shape,
                    int ndim, int gather_dim, int scatter_dim, MmrtDtype dt) {
  static const char op[] = "all_to_all";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  if (ndim < 1 || !shape)
    return fail(m, MMRT_ERR_ARG, op, ax, "needs a shape of at least one dimension");
  if (gather_dim < 0 || gather_dim >= ndim || scatter_dim < 0 || scatter_dim >= ndim ||
      gather_dim == scatter_dim)
    return fail(m, MMRT_ERR_ARG, op, ax,
                "gather_dim %d and scatter_dim %d must be two different dimensions of a "
                "%d-d tensor",
                gather_dim, scatter_dim, ndim);
  uint64_t total = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || __builtin_mul_overflow(total, (uint64_t)shape[i], &total))
      return fail(m, MMRT_ERR_ARG, op, ax, "bad shape: dimension %d is %lld", i,
                  (long long)shape[i]);
  }
  if (total > INT_MAX) return too_large(m, op, ax, total);
  size_t es = esize(dt);
  int n = m->size[ax], me = m->coord[ax];
  int64_t glo, glen, slo, slen;
  mmrt_split_range(shape[gather_dim], n, me, &glo, &glen);
  mmrt_split_range(shape[scatter_dim], n, me, &slo, &slen);
  /* send: global split along gather_dim; seen around scatter_dim */
  size_t so, si, go, gi;
  view(shape, ndim, scatter_dim, gather_dim, glen, &so, &si);
  /* recv: global split along scatter_dim; seen around gather_dim */
  view(shape, ndim, gather_dim, scatter_dim, slen, &go, &gi);
  size_t in_elems = so * (size_t)shape[scatter_dim] * si;
  size_t out_elems = go * (size_t)shape[gather_dim] * gi;
  tally(MMRT_COMM_ALL_TO_ALL, ax, n, in_elems,
        share((uint64_t)in_elems * es, (uint64_t)(n - 1), n));
  if (n == 1) {
    copy(recv, send, in_elems * es);
    return MMRT_OK;
  }
  int *scnt = m->cnt, *sdsp = m->cnt + n, *rcnt = m->cnt + 2 * n, *rdsp = m->cnt + 3 * n;
  blocks(scnt, sdsp, n, so, (size_t)shape[scatter_dim], si);
  blocks(rcnt, rdsp, n, go, (size_t)shape[gather_dim], gi);
  /* a block is a contiguous piece of the caller's buffer when the split
   * dim leads (so == 1 / go == 1); otherwise pack or unpack via scratch */
  size_t in_bytes = so == 1 ? 0 : (in_elems * es + 63) / 64 * 64;
  size_t tmp_bytes = in_bytes + (go == 1 ? 0 : out_elems * es);
  char *tmp = NULL;
  if (tmp_bytes && !(tmp = scratch(m, op, ax, tmp_bytes))) return MMRT_ERR_NOMEM;
  const char *src = send;
  if (so != 1) {
    for (int r = 0; r < n; r++) {
      int64_t lo, len;
      mmrt_split_range(shape[scatter_dim], n, r, &lo, &len);
      slice_out(tmp + (size_t)sdsp[r] * es, send, so, (size_t)shape[scatter_dim], si, (size_t)lo,
                (size_t)len, es);
    }
    src = tmp;
  }
  char *dst = go == 1 ? recv : tmp + in_bytes;
  MPI_Datatype t = mpi_type(dt);
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  if (shape[gather_dim] % n == 0 && shape[scatter_dim] % n == 0)
    rc = prq ? MPI_Ialltoall(src, scnt[0], t, dst, rcnt[0], t, m->comm[ax], prq)
             : MPI_Alltoall(src, scnt[0], t, dst, rcnt[0], t, m->comm[ax]);
  else
    rc = prq ? MPI_Ialltoallv(src, scnt, sdsp, t, dst, rcnt, rdsp, t, m->comm[ax], prq)
             : MPI_Alltoallv(src, scnt, sdsp, t, dst, rcnt, rdsp, t, m->comm[ax]);
  if ((rc = finish(m, op, ax, rc, prq))) return rc;
  if (go != 1)
    for (int s = 0; s < n; s++) {
      int64_t lo, len;
      mmrt_split_range(shape[gather_dim], n, s, &lo, &len);
      slice_in(recv, dst + (size_t)rdsp[s] * es, go, (size_t)shape[gather_dim], gi, (size_t)lo,
               (size_t)len, es);
    }
  return MMRT_OK;
}

/* The fan's space: n bytes (mmrt_mesh_init_one0's rank 0). */
static void *fan_space(MmrtMesh *m, size_t n) {
  if (n > m->fan_bytes) {
    void *p = realloc(m->fan_buf, n);
    if (!p) return NULL;
    m->fan_buf = p, m->fan_bytes = n;
  }
  return m->fan_buf;
}

int mmrt_broadcast(MmrtMesh *m, MmrtAxis ax, void *buf, size_t count, MmrtDtype dt, int root) {
  static const char op[] = "broadcast";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  int n = m->size[ax];
  if (root < 0 || root >= n)
    return fail(m, MMRT_ERR_ARG, op, ax, "root %d is not a coordinate of the axis (0..%d)", root,
                n - 1);
  if (count > INT_MAX) return too_large(m, op, ax, count);
  size_t es = esize(dt);
  tally(MMRT_COMM_BROADCAST, ax, n, count,
        n > 1 && m->coord[ax] == root ? (uint64_t)count * es : 0);
  if (n == 1 || count == 0) return MMRT_OK;
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  rc = prq ? MPI_Ibcast(buf, (int)count, mpi_type(dt), root, m->comm[ax], prq)
           : MPI_Bcast(buf, (int)count, mpi_type(dt), root, m->comm[ax]);
  rc = finish(m, op, ax, rc, prq);
  /* a one-rank first stage: once more with each other tp rank of the
   * second stage (rank 0 the root: the same data; else dropped) */
  for (int k = 1; rc == MMRT_OK && ax == MMRT_AXIS_PP && k < m->nfan; k++) {
    void *b = m->coord[ax] == root ? buf : fan_space(m, count * es);
    if (!b) return fail(m, MMRT_ERR_NOMEM, op, ax, "out of memory");
    fan_use(m, k); /* watched as the first: the watchdog names world rank 1 + k */
    int r = prq ? MPI_Ibcast(b, (int)count, mpi_type(dt), root, m->comm[ax], prq)
                : MPI_Bcast(b, (int)count, mpi_type(dt), root, m->comm[ax]);
    rc = finish(m, op, ax, r, prq);
    fan_use(m, k);
  }
  return rc;
}

int mmrt_barrier(MmrtMesh *m, MmrtAxis ax) {
  static const char op[] = "barrier";
  int rc = check(m, op, ax, MMRT_F32);
  if (rc) return rc;
  int n = m->size[ax];
  tally(MMRT_COMM_BARRIER, ax, n, 0, 0);
  if (n == 1) return MMRT_OK;
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  rc = prq ? MPI_Ibarrier(m->comm[ax], prq) : MPI_Barrier(m->comm[ax]);
  return finish(m, op, ax, rc, prq);
}

/* Rank 0 of a one-rank first stage: the pp all-reduce once with each tp
 * rank of the second stage, rank 0's own operand each time; it keeps the
 * result with tp rank 0 (the logical pp group it is first of). */
static int fan_all_reduce(MmrtMesh *m, void *buf, int count, MPI_Datatype type, MPI_Op mop,
                          const char *what) {
  int es = 0;
  MPI_Type_size(type, &es);
  size_t n = (size_t)count * (size_t)es;
  char *mine = fan_space(m, 2 * n);
  if (!mine) return fail(m, MMRT_ERR_NOMEM, what, MMRT_AXIS_PP, "out of memory");
  memcpy(mine, buf, n);
  /* blocking or not as the other ranks call it (the two do not match) */
  for (int k = 0; k < m->nfan; k++) {
    void *out = k == 0 ? buf : mine + n;
    MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
    fan_use(m, k); /* fan[k] as comm[PP], watched (counted in its seq) */
    MPI_Comm c = m->comm[MMRT_AXIS_PP];
    int rc = prq ? MPI_Iallreduce(mine, out, count, type, mop, c, prq)
                 : MPI_Allreduce(mine, out, count, type, mop, c);
    rc = finish(m, what, MMRT_AXIS_PP, rc, prq);
    fan_use(m, k);
    if (rc) return rc;
  }
  return MMRT_OK;
}

int mmrt_all_reduce_mpi(MmrtMesh *m, MmrtAxis ax, void *buf, int count, MPI_Datatype type,
                        MPI_Op mop, const char *what) {
  int rc = check(m, what, ax, MMRT_F32);
  if (rc) return rc;
  if (m->size[ax] == 1 || count == 0) return MMRT_OK;
  if (ax == MMRT_AXIS_PP && m->nfan > 1) return fan_all_reduce(m, buf, count, type, mop, what);
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  rc = prq ? MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, mop, m->comm[ax], prq)
           : MPI_Allreduce(MPI_IN_PLACE, buf, count, type, mop, m->comm[ax]);
  return finish(m, what, ax, rc, prq);
}

/* ---- point to point ---- */

static int check_peer(MmrtMesh *m, const char *op, MmrtAxis ax, int peer, const char *role) {
  int n = m->size[ax];
  if (peer == MMRT_NO_PEER) return MMRT_OK;
  if (peer < 0 || peer >= n)
    return fail(m, MMRT_ERR_ARG, op, ax, "%s %d is not a coordinate of the axis (0..%d)", role,
                peer, n - 1);
  return MMRT_OK;
}

/* The received element count must be what the caller expected: a schedule
 * that pairs the wrong transfers shows here, not as garbage later. */
static int check_received(MmrtMesh *m, const char *op, MmrtAxis ax, MPI_Status *st, MmrtDtype dt,
                          size_t want, int peer) {
  int got = 0;
  MPI_Get_count(st, mpi_type(dt), &got);
  if ((size_t)got != want)
    return fail(m, MMRT_ERR_COMM, op, ax, "expected %zu elements from %s rank %d, got %d", want,
                axis_names[ax], peer, got);
  return MMRT_OK;
}

int mmrt_send(MmrtMesh *m, MmrtAxis ax, const void *buf, size_t count, MmrtDtype dt, int peer,
              int tag) {
  static const char op[] = "send";
  int rc = check(m, op, ax, dt);
  if (rc || (rc = check_peer(m, op, ax, peer, "peer"))) return rc;
  if (peer == MMRT_NO_PEER) return MMRT_OK;
  if (peer == m->coord[ax])
    return fail(m, MMRT_ERR_ARG, op, ax,
                "send to itself: a rank has no peer on a size-1 axis (use mmrt_sendrecv, "
                "which copies, or skip the transfer)");
  if (count > INT_MAX) return too_large(m, op, ax, count);
  tally(MMRT_COMM_SEND, ax, m->size[ax], count, (uint64_t)count * esize(dt));
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  rc = prq ? MPI_Isend(buf, (int)count, mpi_type(dt), peer, tag, m->comm[ax], prq)
           : MPI_Send(buf, (int)count, mpi_type(dt), peer, tag, m->comm[ax]);
  if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
  return prq ? wait_reqs(m, op, ax, 1, prq, NULL, 0) : MMRT_OK;
}

int mmrt_recv(MmrtMesh *m, MmrtAxis ax, void *buf, size_t count, MmrtDtype dt, int peer, int tag) {
  static const char op[] = "recv";
  int rc = check(m, op, ax, dt);
  if (rc || (rc = check_peer(m, op, ax, peer, "peer"))) return rc;
  if (peer == MMRT_NO_PEER) return MMRT_OK;
  if (peer == m->coord[ax])
    return fail(m, MMRT_ERR_ARG, op, ax,
                "receive from itself: a rank has no peer on a size-1 axis (use "
                "mmrt_sendrecv, which copies, or skip the transfer)");
  if (count > INT_MAX) return too_large(m, op, ax, count);
  tally(MMRT_COMM_RECV, ax, m->size[ax], count, 0);
  MPI_Status st;
  if (m->timeout_s > 0) {
    MPI_Request rq;
    rc = MPI_Irecv(buf, (int)count, mpi_type(dt), peer, tag, m->comm[ax], &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
    if ((rc = wait_reqs(m, op, ax, 1, &rq, &st, 0))) return rc;
  } else {
    rc = MPI_Recv(buf, (int)count, mpi_type(dt), peer, tag, m->comm[ax], &st);
    if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
  }
  return check_received(m, op, ax, &st, dt, count, peer);
}

int mmrt_sendrecv(MmrtMesh *m, MmrtAxis ax, const void *sendbuf, size_t sendcount, int dest,
                  void *recvbuf, size_t recvcount, int src, MmrtDtype dt, int tag) {
  static const char op[] = "sendrecv";
  int rc = check(m, op, ax, dt);
  if (rc || (rc = check_peer(m, op, ax, dest, "dest")) || (rc = check_peer(m, op, ax, src, "src")))
    return rc;
  if (sendcount > INT_MAX || recvcount > INT_MAX)
    return too_large(m, op, ax, sendcount > recvcount ? sendcount : recvcount);
  int n = m->size[ax], me = m->coord[ax];
  size_t es = esize(dt);
  if (dest != MMRT_NO_PEER)
    tally(MMRT_COMM_SEND, ax, n, sendcount, dest == me ? 0 : (uint64_t)sendcount * es);
  if (src != MMRT_NO_PEER) tally(MMRT_COMM_RECV, ax, n, recvcount, 0);
  if (dest == me && src == me) {
    if (sendcount != recvcount)
      return fail(m, MMRT_ERR_ARG, op, ax, "sending %zu elements to itself but receiving %zu",
                  sendcount, recvcount);
    copy(recvbuf, sendbuf, sendcount * es);
    return MMRT_OK;
  }
  int to = dest == MMRT_NO_PEER ? MPI_PROC_NULL : dest;
  int from = src == MMRT_NO_PEER ? MPI_PROC_NULL : src;
  MPI_Datatype t = mpi_type(dt);
  MPI_Status st[2];
  if (m->timeout_s > 0) {
    MPI_Request rq[2];
    rc = MPI_Irecv(recvbuf, (int)recvcount, t, from, tag, m->comm[ax], &rq[0]);
    if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
    rc = MPI_Isend(sendbuf, (int)sendcount, t, to, tag, m->comm[ax], &rq[1]);
    if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
    if ((rc = wait_reqs(m, op, ax, 2, rq, st, 0))) return rc;
  } else {
    rc = MPI_Sendrecv(sendbuf, (int)sendcount, t, to, tag, recvbuf, (int)recvcount, t, from, tag,
                      m->comm[ax], &st[0]);
    if (rc != MPI_SUCCESS) return mpi_fail(m, op, ax, rc);
  }
  return from == MPI_PROC_NULL ? MMRT_OK : check_received(m, op, ax, &st[0], dt, recvcount, src);
}

/* ---- pipeline transfers (runtime/comm/mmrt_pp.c) ---- */

int mmrt_isend_raw(MmrtMesh *m, MmrtAxis ax, const void *buf, size_t elems, size_t bytes, int peer,
                   int tag, MPI_Request *rq) {
  static const char op[] = "send";
  int rc = check(m, op, ax, MMRT_F32);
  if (rc || (rc = check_peer(m, op, ax, peer, "peer"))) return rc;
  if (peer == MMRT_NO_PEER || peer == m->coord[ax])
    return fail(m, MMRT_ERR_ARG, op, ax, "a pipeline send needs another rank of the axis");
  if (bytes > INT_MAX) return too_large(m, op, ax, bytes);
  tally(MMRT_COMM_SEND, ax, m->size[ax], elems, bytes);
  rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm[ax], rq);
  /* a one-rank first stage: the same to each tp rank of the second */
  for (int k = 1; rc == MPI_SUCCESS && ax == MMRT_AXIS_PP && k < m->nfan; k++) {
    if (m->nfan_req == m->fan_cap) {
      int cap = m->fan_cap ? 2 * m->fan_cap : 16;
      MPI_Request *r = realloc(m->fan_req, sizeof *r * (size_t)cap);
      if (r) m->fan_req = r;
      int *rk = r ? realloc(m->fan_req_k, sizeof *rk * (size_t)cap) : NULL;
      if (rk) m->fan_req_k = rk;
      MPI_Request *ro = rk ? realloc(m->fan_req_of, sizeof *ro * (size_t)cap) : NULL;
      if (!ro) return fail(m, MMRT_ERR_NOMEM, op, ax, "out of memory");
      m->fan_req_of = ro, m->fan_cap = cap;
    }
    tally(MMRT_COMM_SEND, ax, m->size[ax], elems, bytes);
    m->fan_req_k[m->nfan_req] = k;
    m->fan_req_of[m->nfan_req] = *rq;
    rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->fan[k], &m->fan_req[m->nfan_req++]);
  }
  return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, op, ax, rc);
}

int mmrt_recv_raw(MmrtMesh *m, MmrtAxis ax, void *buf, size_t elems, size_t bytes, int peer,
                  int tag, const char *what) {
  int rc = check(m, what, ax, MMRT_F32);
  if (rc || (rc = check_peer(m, what, ax, peer, "peer"))) return rc;
  if (peer == MMRT_NO_PEER || peer == m->coord[ax])
    return fail(m, MMRT_ERR_ARG, what, ax, "a pipeline recv needs another rank of the axis");
  if (bytes > INT_MAX) return too_large(m, what, ax, bytes);
  tally(MMRT_COMM_RECV, ax, m->size[ax], elems, 0);
  MPI_Request rq;
  MPI_Status st;
  rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm[ax], &rq);
  if (rc != MPI_SUCCESS) return mpi_fail(m, what, ax, rc);
  if (m->timeout_s > 0) {
    if ((rc = wait_reqs(m, what, ax, 1, &rq, &st, 0))) return rc;
  } else if ((rc = MPI_Wait(&rq, &st)) != MPI_SUCCESS) {
    return mpi_fail(m, what, ax, rc);
  }
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if ((size_t)got != bytes)
    return fail(m, MMRT_ERR_COMM, what, ax, "expected %zu bytes, got %d", bytes, got);
  /* a one-rank first stage: each tp rank of the second sends its copy (the
   * same values); tp rank 0's is kept, the others' received and dropped */
  for (int k = 1; ax == MMRT_AXIS_PP && k < m->nfan; k++) {
    void *drop = fan_space(m, bytes);
    if (!drop) return fail(m, MMRT_ERR_NOMEM, what, ax, "out of memory");
    tally(MMRT_COMM_RECV, ax, m->size[ax], elems, 0);
    fan_use(m, k); /* watched as the first: the watchdog names world rank 1 + k */
    rc = MPI_Irecv(drop, (int)bytes, MPI_BYTE, peer, tag, m->comm[ax], &rq);
    if (rc != MPI_SUCCESS)
      rc = mpi_fail(m, what, ax, rc);
    else if (m->timeout_s > 0)
      rc = wait_reqs(m, what, ax, 1, &rq, &st, 0);
    else if ((rc = MPI_Wait(&rq, &st)) != MPI_SUCCESS)
      rc = mpi_fail(m, what, ax, rc);
    fan_use(m, k);
    if (rc) return rc;
  }
  return MMRT_OK;
}

int mmrt_wait_sends(MmrtMesh *m, MmrtAxis ax, int n, MPI_Request *rq, const char *what) {
  if (ax == MMRT_AXIS_PP && m->nfan_req > 0) {
    /* the fan's extra sends of these requests only: waiting for another
     * send's copies (one whose second-stage reader comes later) would
     * hold this rank while its peers wait for its next receive */
    int rc = MMRT_OK, kept = 0;
    for (int i = 0; i < m->nfan_req; i++) {
      int mine = 0;
      for (int j = 0; j < n && !mine; j++)
        mine = rq[j] != MPI_REQUEST_NULL && rq[j] == m->fan_req_of[i];
      if (!mine || rc != MMRT_OK) {
        m->fan_req[kept] = m->fan_req[i], m->fan_req_k[kept] = m->fan_req_k[i];
        m->fan_req_of[kept++] = m->fan_req_of[i];
        continue;
      }
      int k = m->fan_req_k[i];
      fan_use(m, k); /* each watched on its own communicator */
      if (m->timeout_s > 0)
        rc = wait_reqs(m, what, ax, 1, &m->fan_req[i], NULL, 0);
      else if ((rc = MPI_Wait(&m->fan_req[i], MPI_STATUS_IGNORE)) != MPI_SUCCESS)
        rc = mpi_fail(m, what, ax, rc);
      fan_use(m, k);
    }
    m->nfan_req = kept;
    if (rc) return rc;
  }
  if (n <= 0) return MMRT_OK;
  if (m->timeout_s <= 0) {
    int rc = MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
    return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, what, ax, rc);
  }
  MPI_Status *st = malloc(sizeof *st * (size_t)n);
  if (!st) return fail(m, MMRT_ERR_NOMEM, what, ax, "out of memory for %d statuses", n);
  int rc = wait_reqs(m, what, ax, n, rq, st, 0);
  free(st);
  return rc;
}

int mmrt_tp_gather_chunks(MmrtMesh *m, void *buf, size_t elems, size_t es, const char *what) {
  MmrtAxis ax = MMRT_AXIS_TP;
  int rc = check(m, what, ax, MMRT_F32);
  if (rc) return rc;
  int n = m->size[ax];
  size_t full;
  if (!mul3(elems, es, 1, &full) || full > INT_MAX) return too_large(m, what, ax, elems);
  tally(MMRT_COMM_ALL_GATHER, ax, n, elems, share((uint64_t)full, (uint64_t)(n - 1), n));
  if (n == 1) return MMRT_OK;
  int *cnt = m->cnt, *dsp = m->cnt + n; /* in bytes: whole elements each */
  blocks(cnt, dsp, n, 1, elems, es);
  MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
  rc = prq ? MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_BYTE,
                             m->comm[ax], prq)
           : MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_BYTE,
                            m->comm[ax]);
  return finish(m, what, ax, rc, prq);
}

int mmrt_send_next(MmrtMesh *m, const void *buf, size_t count, MmrtDtype dt) {
  return mmrt_send(m, MMRT_AXIS_PP, buf, count, dt, mmrt_pp_next(m), TAG_FWD);
}

int mmrt_recv_prev(MmrtMesh *m, void *buf, size_t count, MmrtDtype dt) {
  return mmrt_recv(m, MMRT_AXIS_PP, buf, count, dt, mmrt_pp_prev(m), TAG_FWD);
}

int mmrt_send_prev(MmrtMesh *m, const void *buf, size_t count, MmrtDtype dt) {
  return mmrt_send(m, MMRT_AXIS_PP, buf, count, dt, mmrt_pp_prev(m), TAG_BWD);
}

int mmrt_recv_next(MmrtMesh *m, void *buf, size_t count, MmrtDtype dt) {
  return mmrt_recv(m, MMRT_AXIS_PP, buf, count, dt, mmrt_pp_next(m), TAG_BWD);
}

/* ---- bucketed gradient all-reduce ---- */

static void scale_buf(void *p, size_t count, MmrtDtype dt, float scale) {
  if (scale == 1.0f) return;
  if (dt == MMRT_BF16) {
    uint16_t *h = p;
    for (size_t i = 0; i < count; i++) h[i] = f32_to_bf16(bf16_to_f32(h[i]) * scale);
  } else {
    float *f = p;
    for (size_t i = 0; i < count; i++) f[i] *= scale;
  }
}

static MmrtOverlapStats ovl; /* mmrt_comm_overlap_stats() */
static MmrtOverlapStats pf;  /* the same for the prefetched gathers */

static int all_reduce_buckets(MmrtMesh *m, MmrtAxis ax, void *const *bufs, const size_t *counts,
                              int nbufs, MmrtDtype dt, size_t bucket_bytes, float scale) {
  static const char op[] = "all_reduce_buckets";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  size_t es = esize(dt), cap = bucket_bytes / es;
  if (cap == 0)
    return fail(m, MMRT_ERR_ARG, op, ax, "a bucket of %zu bytes holds no element", bucket_bytes);
  if (cap > INT_MAX) cap = INT_MAX;
  size_t total = 0;
  for (int k = 0; k < nbufs; k++) {
    if (counts[k] && !bufs[k])
      return fail(m, MMRT_ERR_ARG, op, ax, "buffer %d of %zu elements is NULL", k, counts[k]);
    total += counts[k];
  }
  char *pack = NULL;
  int k = 0; /* the bucket starts in bufs[k] at element off */
  size_t off = 0;
  while (k < nbufs) {
    if (off == counts[k]) {
      k++, off = 0;
      continue;
    }
    size_t fill = counts[k] - off < cap ? counts[k] - off : cap;
    char *first = (char *)bufs[k] + off * es;
    if (fill == cap || fill == total) {
      /* the bucket lies in one buffer */
      if ((rc = mmrt_all_reduce(m, ax, first, first, fill, dt))) return rc;
      scale_buf(first, fill, dt, scale);
      off += fill;
      total -= fill;
      continue;
    }
    if (!pack && !(pack = scratch(m, op, ax, cap * es))) return MMRT_ERR_NOMEM;
    /* pack buffers k.. from off until the bucket is full or they end */
    int k1 = k;
    size_t off1 = off;
    fill = 0;
    while (k1 < nbufs && fill < cap) {
      size_t take = counts[k1] - off1 < cap - fill ? counts[k1] - off1 : cap - fill;
      copy(pack + fill * es, (char *)bufs[k1] + off1 * es, take * es);
      fill += take;
      off1 += take;
      if (off1 == counts[k1]) k1++, off1 = 0;
    }
    if ((rc = mmrt_all_reduce(m, ax, pack, pack, fill, dt))) return rc;
    scale_buf(pack, fill, dt, scale);
    /* unpack the same pieces */
    size_t done = 0;
    while (done < fill) {
      size_t take = counts[k] - off < fill - done ? counts[k] - off : fill - done;
      copy((char *)bufs[k] + off * es, pack + done * es, take * es);
      done += take;
      off += take;
      if (off == counts[k]) k++, off = 0;
    }
    total -= fill;
  }
  return MMRT_OK;
}

int mmrt_all_reduce_buckets(MmrtMesh *m, MmrtAxis ax, void *const *bufs, const size_t *counts,
                            int nbufs, MmrtDtype dt, size_t bucket_bytes, float scale) {
  double t0 = now_s();
  int rc = all_reduce_buckets(m, ax, bufs, counts, nbufs, dt, bucket_bytes, scale);
  ovl.blocking_s += now_s() - t0;
  ovl.blocking_calls++;
  return rc;
}

/* Several reduce-scatters as one: rank r's parts of every tensor are packed
 * next to each other (block r) into space (NULL: m->scratch; else grown
 * with realloc), so that one MPI reduce-scatter sums the blocks, and this
 * rank's block is unpacked into the recv buffers. *pk->cnt must hold 2n
 * ints. */
static int rs_pack(MmrtMesh *m, const char *op, MmrtAxis ax, const void *const *send,
                   const void *const *recv, const size_t *dims, int nbufs, MmrtDtype dt,
                   char **space, size_t *space_bytes, RsPack *pk) {
  if (nbufs < 0 || (nbufs > 0 && (!send || !recv || !dims)))
    return fail(m, MMRT_ERR_ARG, op, ax, "needs send and recv buffers and their dims");
  size_t es = esize(dt), full = 0;
  int n = m->size[ax];
  for (int k = 0; k < nbufs; k++) {
    size_t f;
    if (!mul3(dims[3 * k], dims[3 * k + 1], dims[3 * k + 2], &f) || full + f > INT_MAX)
      return too_large(m, op, ax,
                       (uint64_t)full + (uint64_t)dims[3 * k] * dims[3 * k + 1] * dims[3 * k + 2]);
    if (f && (!send[k] || !recv[k]))
      return fail(m, MMRT_ERR_ARG, op, ax, "buffer %d of %zu elements is NULL", k, f);
    full += f;
  }
  tally(MMRT_COMM_REDUCE_SCATTER, ax, n, full, share((uint64_t)full * es, (uint64_t)(n - 1), n));
  pk->full = full;
  if (full == 0) return MMRT_OK;
  int *cnt = pk->cnt, *dsp = pk->cnt + n;
  pk->even = true;
  for (int r = 0; r < n; r++) {
    size_t c = 0;
    for (int k = 0; k < nbufs; k++) {
      int64_t lo, len;
      mmrt_split_range((int64_t)dims[3 * k + 1], n, r, &lo, &len);
      c += dims[3 * k] * (size_t)len * dims[3 * k + 2];
    }
    cnt[r] = (int)c;
    dsp[r] = r ? dsp[r - 1] + cnt[r - 1] : 0;
    pk->even &= cnt[r] == cnt[0];
  }
  size_t bytes = (full + (size_t)cnt[m->coord[ax]]) * es;
  char *buf;
  if (!space)
    buf = scratch(m, op, ax, bytes);
  else if (bytes > *space_bytes && (buf = realloc(*space, bytes)))
    *space = buf, *space_bytes = bytes;
  else
    buf = bytes > *space_bytes ? NULL : *space;
  if (!buf) return fail(m, MMRT_ERR_NOMEM, op, ax, "cannot allocate %zu bytes of scratch", bytes);
  pk->buf = buf;
  for (int r = 0; r < n; r++) {
    char *at = buf + (size_t)dsp[r] * es;
    for (int k = 0; k < nbufs; k++) {
      int64_t lo, len;
      mmrt_split_range((int64_t)dims[3 * k + 1], n, r, &lo, &len);
      slice_out(at, send[k], dims[3 * k], dims[3 * k + 1], dims[3 * k + 2], (size_t)lo, (size_t)len,
                es);
      at += dims[3 * k] * (size_t)len * dims[3 * k + 2] * es;
    }
  }
  return MMRT_OK;
}

/* Start (prq) or run the MPI reduce-scatter of a packed bucket. */
static int rs_post(MmrtMesh *m, MmrtAxis ax, MmrtDtype dt, const RsPack *pk, MPI_Request *prq) {
  MPI_Datatype t = mpi_type(dt);
  MPI_Op o = sum_op(m, dt);
  int me = m->coord[ax];
  char *mine = pk->buf + pk->full * esize(dt);
  if (pk->even)
    return prq ? MPI_Ireduce_scatter_block(pk->buf, mine, pk->cnt[me], t, o, m->comm[ax], prq)
               : MPI_Reduce_scatter_block(pk->buf, mine, pk->cnt[me], t, o, m->comm[ax]);
  return prq ? MPI_Ireduce_scatter(pk->buf, mine, pk->cnt, t, o, m->comm[ax], prq)
             : MPI_Reduce_scatter(pk->buf, mine, pk->cnt, t, o, m->comm[ax]);
}

/* This rank's block of a reduced bucket into the recv buffers. */
static void rs_unpack(const MmrtMesh *m, MmrtAxis ax, void *const *recv, const size_t *dims,
                      int nbufs, MmrtDtype dt, const RsPack *pk) {
  size_t es = esize(dt);
  const char *mine = pk->buf + pk->full * es;
  for (int k = 0; k < nbufs; k++) {
    int64_t lo, len;
    mmrt_split_range((int64_t)dims[3 * k + 1], m->size[ax], m->coord[ax], &lo, &len);
    size_t part = dims[3 * k] * (size_t)len * dims[3 * k + 2] * es;
    copy(recv[k], mine, part);
    mine += part;
  }
}

int mmrt_reduce_scatter_bucket(MmrtMesh *m, MmrtAxis ax, const void *const *send, void *const *recv,
                               const size_t *dims, int nbufs, MmrtDtype dt) {
  static const char op[] = "reduce_scatter_bucket";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  if (hz(m, ax)) return m->hz_reduce_scatter(m, send, (void *const *)recv, dims, nbufs, dt);
  double t0 = now_s();
  RsPack pk = {.cnt = m->cnt};
  if ((rc = rs_pack(m, op, ax, send, (const void *const *)recv, dims, nbufs, dt, NULL, NULL, &pk)))
    return rc;
  if (pk.full) {
    MPI_Request rq, *prq = m->timeout_s > 0 ? &rq : NULL;
    if ((rc = finish(m, op, ax, rs_post(m, ax, dt, &pk, prq), prq))) return rc;
    rs_unpack(m, ax, recv, dims, nbufs, dt, &pk);
  }
  ovl.blocking_s += now_s() - t0;
  ovl.blocking_calls++;
  return MMRT_OK;
}

/* ---- overlapped gradient buckets ---- */

/* slot's record, grown on demand, ready for nbufs buffers; NULL with
 * m->err set. */
static MmrtPending *pending(MmrtMesh *m, const char *op, MmrtAxis ax, int slot, int nbufs) {
  if (slot < 0 || slot >= 1 << 20 || nbufs < 0) {
    fail(m, MMRT_ERR_ARG, op, ax, "bucket slot %d of %d buffers is out of range", slot, nbufs);
    return NULL;
  }
  if (slot >= m->npend) {
    int n = slot + 1 > 2 * m->npend ? slot + 1 : 2 * m->npend;
    MmrtPending *p = realloc(m->pend, (size_t)n * sizeof *p);
    if (!p) goto nomem;
    memset(p + m->npend, 0, (size_t)(n - m->npend) * sizeof *p);
    m->pend = p;
    m->npend = n;
  }
  MmrtPending *p = &m->pend[slot];
  if (p->active) {
    fail(m, MMRT_ERR_ARG, op, ax, "bucket %d is started again before its wait", slot);
    return NULL;
  }
  if (nbufs > p->cap) {
    void **d = realloc(p->dst, (size_t)nbufs * sizeof *d);
    if (d) p->dst = d;
    size_t *c = d ? realloc(p->dims, (size_t)nbufs * 3 * sizeof *c) : NULL;
    if (!c) goto nomem;
    p->dims = c;
    p->cap = nbufs;
  }
  if (!p->cnt && !(p->cnt = malloc(2 * (size_t)m->size[MMRT_AXIS_WORLD] * sizeof *p->cnt)))
    goto nomem;
  p->ax = ax;
  p->nbufs = nbufs;
  p->rq = MPI_REQUEST_NULL;
  return p;
nomem:
  fail(m, MMRT_ERR_NOMEM, op, ax, "out of memory for bucket %d", slot);
  return NULL;
}

static int all_reduce_bucket_start(MmrtMesh *m, MmrtAxis ax, int slot, void *const *bufs,
                                   const size_t *counts, int nbufs, MmrtDtype dt, float scale) {
  static const char op[] = "all_reduce_buckets";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  MmrtPending *p = pending(m, op, ax, slot, nbufs);
  if (!p) return m->err[0] && strstr(m->err, "memory") ? MMRT_ERR_NOMEM : MMRT_ERR_ARG;
  size_t es = esize(dt), total = 0;
  for (int k = 0; k < nbufs; k++) {
    if (counts[k] && !bufs[k])
      return fail(m, MMRT_ERR_ARG, op, ax, "buffer %d of %zu elements is NULL", k, counts[k]);
    total += counts[k];
    p->dst[k] = bufs[k];
    p->dims[k] = counts[k];
  }
  if (total > INT_MAX) return too_large(m, op, ax, total);
  p->rs = p->ag = false;
  p->dt = dt;
  p->count = total;
  p->scale = scale;
  p->active = true;
  p->t0 = now_s();
  p->tr_post = p->tr_last = p->tr_done = mmrt_trace_now();
  p->seen = 1; /* until posted: complete */
  ovl.started++;
  if (total == 0) return MMRT_OK; /* as mmrt_all_reduce_buckets: no call */
  int n = m->size[ax];
  tally(MMRT_COMM_ALL_REDUCE, ax, n, total, share((uint64_t)total * es, 2 * (uint64_t)(n - 1), n));
  void *buf = bufs[0];
  if (nbufs > 1) { /* pack: the buffers are one concatenation */
    if (total * es > p->space_bytes) {
      char *s = realloc(p->space, total * es);
      if (!s) return fail(m, MMRT_ERR_NOMEM, op, ax, "cannot allocate %zu bytes", total * es);
      p->space = s, p->space_bytes = total * es;
    }
    size_t at = 0;
    for (int k = 0; k < nbufs; k++)
      copy(p->space + at * es, bufs[k], counts[k] * es), at += counts[k];
    buf = p->space;
  }
  if (n == 1) return MMRT_OK;
  p->tr_post = p->tr_last = mmrt_trace_now();
  p->seen = 0;
  rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)total, mpi_type(dt), sum_op(m, dt), m->comm[ax],
                      &p->rq);
  return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, op, ax, rc);
}

/* --trace: the start call as "bucket_start" (packing and posting) */
static void trace_start(int slot, double tt0, int rc) {
  if (rc || !mmrt_trace_on()) return;
  const char *k[] = {"bucket"};
  double v[] = {slot};
  mmrt_trace_add_args("bucket_start", "comm", tt0, mmrt_trace_now(), -1, -1, 1, k, v);
}

int mmrt_all_reduce_bucket_start(MmrtMesh *m, MmrtAxis ax, int slot, void *const *bufs,
                                 const size_t *counts, int nbufs, MmrtDtype dt, float scale) {
  double t0 = now_s(), tt0 = mmrt_trace_now();
  int rc = all_reduce_bucket_start(m, ax, slot, bufs, counts, nbufs, dt, scale);
  ovl.start_s += now_s() - t0;
  trace_start(slot, tt0, rc);
  return rc;
}

/* Hierarchical ZeRO (mmrt_hzero.c): a started bucket or gather is done
 * before its start returns; its slot is marked started with nothing in
 * flight, so that its wait returns at once. */
static int hz_done(MmrtMesh *m, const char *op, MmrtAxis ax, int slot) {
  MmrtPending *p = pending(m, op, ax, slot, 0);
  if (!p) return m->err[0] && strstr(m->err, "memory") ? MMRT_ERR_NOMEM : MMRT_ERR_ARG;
  p->rs = p->ag = false;
  p->count = 0;
  p->scale = 1;
  p->active = true;
  p->t0 = now_s();
  p->tr_post = p->tr_last = p->tr_done = mmrt_trace_now();
  p->seen = 1;
  return MMRT_OK;
}

static int reduce_scatter_bucket_start(MmrtMesh *m, MmrtAxis ax, int slot, const void *const *send,
                                       void *const *recv, const size_t *dims, int nbufs,
                                       MmrtDtype dt) {
  static const char op[] = "reduce_scatter_bucket";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  if (hz(m, ax))
    return (rc = m->hz_reduce_scatter(m, send, recv, dims, nbufs, dt)) ? rc
                                                                       : hz_done(m, op, ax, slot);
  MmrtPending *p = pending(m, op, ax, slot, nbufs);
  if (!p) return m->err[0] && strstr(m->err, "memory") ? MMRT_ERR_NOMEM : MMRT_ERR_ARG;
  p->pk = (RsPack){.cnt = p->cnt};
  if ((rc = rs_pack(m, op, ax, send, (const void *const *)recv, dims, nbufs, dt, &p->space,
                    &p->space_bytes, &p->pk)))
    return rc;
  for (int k = 0; k < nbufs; k++) {
    p->dst[k] = recv[k];
    for (int j = 0; j < 3; j++) p->dims[3 * k + j] = dims[3 * k + j];
  }
  p->rs = true;
  p->ag = false;
  p->dt = dt;
  p->active = true;
  p->t0 = now_s();
  p->tr_post = p->tr_last = p->tr_done = mmrt_trace_now();
  p->seen = 1;
  ovl.started++;
  if (!p->pk.full || m->size[ax] == 1) return MMRT_OK;
  p->seen = 0;
  rc = rs_post(m, ax, dt, &p->pk, &p->rq);
  return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, op, ax, rc);
}

int mmrt_reduce_scatter_bucket_start(MmrtMesh *m, MmrtAxis ax, int slot, const void *const *send,
                                     void *const *recv, const size_t *dims, int nbufs,
                                     MmrtDtype dt) {
  double t0 = now_s(), tt0 = mmrt_trace_now();
  int rc = reduce_scatter_bucket_start(m, ax, slot, send, recv, dims, nbufs, dt);
  ovl.start_s += now_s() - t0;
  trace_start(slot, tt0, rc);
  return rc;
}

static int all_gather_start(MmrtMesh *m, MmrtAxis ax, int slot, const void *send, void *recv,
                            size_t outer, size_t dim, size_t inner, MmrtDtype dt) {
  static const char op[] = "all_gather";
  if (hz(m, ax)) {
    int rc = m->hz_all_gather(m, send, recv, outer, dim, inner, dt);
    return rc ? rc : hz_done(m, op, ax, slot);
  }
  MmrtPending *p = pending(m, op, ax, slot, 1);
  if (!p) return m->err[0] && strstr(m->err, "memory") ? MMRT_ERR_NOMEM : MMRT_ERR_ARG;
  size_t es = esize(dt), full;
  int done, rc = split_begin(m, op, MMRT_COMM_ALL_GATHER, ax, send, recv, outer, dim, inner, dt,
                             &full, &done);
  if (rc) return rc;
  p->rs = false, p->ag = true;
  p->dt = dt;
  p->count = full;
  p->dst[0] = recv;
  p->dims[0] = outer, p->dims[1] = dim, p->dims[2] = inner;
  p->active = true;
  p->t0 = now_s();
  p->tr_post = p->tr_last = p->tr_done = mmrt_trace_now();
  p->seen = 1;
  pf.started++;
  if (done) return MMRT_OK; /* one rank: copied */
  int n = m->size[ax], me = m->coord[ax];
  memcpy(p->cnt, m->cnt, 2 * (size_t)n * sizeof *p->cnt); /* MPI reads them until done */
  char *dst = recv;
  if (outer != 1) { /* the blocks in rank order, rearranged at the wait */
    if (full * es > p->space_bytes) {
      char *sp = realloc(p->space, full * es);
      if (!sp) return fail(m, MMRT_ERR_NOMEM, op, ax, "cannot allocate %zu bytes", full * es);
      p->space = sp, p->space_bytes = full * es;
    }
    dst = p->space;
  }
  MPI_Datatype t = mpi_type(dt);
  p->seen = 0;
  p->tr_post = p->tr_last = mmrt_trace_now();
  if (dim % (size_t)n == 0)
    rc = MPI_Iallgather(send, p->cnt[me], t, dst, p->cnt[me], t, m->comm[ax], &p->rq);
  else
    rc = MPI_Iallgatherv(send, p->cnt[me], t, dst, p->cnt, p->cnt + n, t, m->comm[ax], &p->rq);
  return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, op, ax, rc);
}

int mmrt_all_gather_start(MmrtMesh *m, MmrtAxis ax, int slot, const void *send, void *recv,
                          size_t outer, size_t dim, size_t inner, MmrtDtype dt) {
  double t0 = now_s(), tt0 = mmrt_trace_now();
  int rc = all_gather_start(m, ax, slot, send, recv, outer, dim, inner, dt);
  pf.start_s += now_s() - t0;
  if (!rc && mmrt_trace_on()) {
    const char *k[] = {"slot"};
    double v[] = {slot};
    mmrt_trace_add_args("gather_start", "comm", tt0, mmrt_trace_now(), -1, -1, 1, k, v);
  }
  return rc;
}

int mmrt_bucket_wait(MmrtMesh *m, int slot) {
  if (!m || slot < 0 || slot >= m->npend || !m->pend[slot].active) {
    if (m) snprintf(m->err, sizeof m->err, "bucket_wait: bucket %d was not started", slot);
    return MMRT_ERR_ARG;
  }
  MmrtPending *p = &m->pend[slot];
  const char *op = p->ag ? "all_gather" : p->rs ? "reduce_scatter_bucket" : "all_reduce_buckets";
  MmrtOverlapStats *st = p->ag ? &pf : &ovl;
  double t0 = now_s(), tt0 = mmrt_trace_now();
  st->window_s += t0 - p->t0;
  int flag = 1, rc = MMRT_OK;
  if (p->rq != MPI_REQUEST_NULL && (rc = MPI_Test(&p->rq, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
    return mpi_fail(m, op, p->ax, rc);
  st->done_at_wait += flag != 0;
  if (flag && !p->seen) p->seen = 2, p->tr_done = tt0;
  if (m->timeout_s > 0 && m->size[p->ax] > 1 && (p->rs ? p->pk.full : p->count) > 0)
    rc = wait_reqs(m, op, p->ax, 1, &p->rq, NULL, 1); /* the watchdog (a done request passes) */
  else if (!flag && (rc = MPI_Wait(&p->rq, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
    rc = mpi_fail(m, op, p->ax, rc);
  double tt1 = mmrt_trace_now(); /* blocked until here */
  if (!p->seen) p->seen = 2, p->tr_done = tt1;
  p->active = false;
  if (rc) return rc;
  size_t es = esize(p->dt);
  if (p->ag) {
    int n = m->size[p->ax];
    if (p->dims[0] != 1 && n > 1)
      for (int r = 0; r < n; r++) {
        int64_t lo, len;
        mmrt_split_range((int64_t)p->dims[1], n, r, &lo, &len);
        slice_in(p->dst[0], p->space + (size_t)p->cnt[n + r] * es, p->dims[0], p->dims[1],
                 p->dims[2], (size_t)lo, (size_t)len, es);
      }
  } else if (p->rs) {
    if (p->pk.full) rs_unpack(m, p->ax, p->dst, p->dims, p->nbufs, p->dt, &p->pk);
  } else if (p->nbufs > 1) {
    size_t at = 0;
    for (int k = 0; k < p->nbufs; k++) {
      scale_buf(p->space + at * es, p->dims[k], p->dt, p->scale);
      copy(p->dst[k], p->space + at * es, p->dims[k] * es);
      at += p->dims[k];
    }
  } else if (p->nbufs == 1) {
    scale_buf(p->dst[0], p->count, p->dt, p->scale);
  }
  st->wait_s += now_s() - t0;
  st->waited++;
  if (mmrt_trace_on() && p->ag) { /* the same for a prefetched gather, by its slot */
    const char *k[] = {"slot", "seen", "lo"}, *kw[] = {"slot", "blocked"};
    double v[] = {slot, p->seen, 1e6 * (p->tr_last - p->tr_post)}, vw[] = {slot, 1e6 * (tt1 - tt0)};
    mmrt_trace_add_args("gather", "comm", p->tr_post, p->tr_done, -1, -1, 3, k, v);
    mmrt_trace_add_args("gather_wait", "comm", tt0, mmrt_trace_now(), -1, -1, 2, kw, vw);
  } else if (mmrt_trace_on()) {
    /* "bucket_reduce": posted to first seen complete ("seen" 1: by a poll,
     * 2: at the wait; "lo" microseconds after the event's start: the last
     * poll that saw it incomplete, a lower bound of the completion);
     * "bucket_wait": the wait call, "blocked" microseconds of it in MPI
     * (the rest unpacks) */
    const char *k[] = {"bucket", "seen", "lo"}, *kw[] = {"bucket", "blocked"};
    double v[] = {slot, p->seen, 1e6 * (p->tr_last - p->tr_post)}, vw[] = {slot, 1e6 * (tt1 - tt0)};
    mmrt_trace_add_args("bucket_reduce", "comm", p->tr_post, p->tr_done, -1, -1, 3, k, v);
    mmrt_trace_add_args("bucket_wait", "comm", tt0, mmrt_trace_now(), -1, -1, 2, kw, vw);
  }
  return MMRT_OK;
}

void mmrt_comm_progress(MmrtMesh *m) {
  bool any = false;
  for (int s = 0; s < m->npend; s++) {
    MmrtPending *p = &m->pend[s];
    int flag;
    any |= p->active && !p->ag;
    if (p->active && p->rq != MPI_REQUEST_NULL) {
      double t = mmrt_trace_now();
      MPI_Test(&p->rq, &flag, MPI_STATUS_IGNORE);
      if (flag)
        p->seen = 1, p->tr_done = mmrt_trace_now();
      else
        p->tr_last = t;
    }
  }
  ovl.polls += any;
}

MmrtOverlapStats mmrt_comm_overlap_stats(void) {
  return ovl;
}

/* One line of s: the gradient buckets' (with the kernels polled) or the
 * prefetched gathers'. */
static void overlap_line(FILE *f, const char *what, const MmrtOverlapStats *s, bool polls) {
  fprintf(f, "%s: %llu started, %llu waited for, %llu complete at their wait", what,
          (unsigned long long)s->started, (unsigned long long)s->waited,
          (unsigned long long)s->done_at_wait);
  if (polls) fprintf(f, ", %llu kernels ran while one was in flight", (unsigned long long)s->polls);
  fprintf(f, "; %.1f ms in the starts, %.1f ms from start to wait, %.1f ms blocked in the waits\n",
          1e3 * s->start_s, 1e3 * s->window_s, 1e3 * s->wait_s);
}

void mmrt_comm_overlap_print(FILE *f) {
  if (ovl.started) overlap_line(f, "overlapped gradient buckets", &ovl, true);
  if (pf.started) overlap_line(f, "prefetched parameter gathers (ZeRO-3)", &pf, false);
  if (ovl.blocking_calls)
    fprintf(f, "blocking gradient buckets: %llu calls, %.1f ms in them\n",
            (unsigned long long)ovl.blocking_calls, 1e3 * ovl.blocking_s);
}

/* ---- ring shifts ---- */

/* Totals for the trainer's "ring shifts" line, and per shift in flight (at
 * most a K/V and a dK/dV shift at once) its start, found again by its
 * requests at the wait. Under --trace each shift is a "ring_shift" event
 * (send and receive posted to both done) and its wait a "ring_wait" event
 * (blocked), category comm: the hidden fraction of the transfer is
 * 1 - sum(ring_wait) / sum(ring_shift) (bench/cp.sh). */
enum { RING_INFLIGHT = 4 };
static struct {
  uint64_t shifts;
  double window_s, wait_s;
  struct {
    const MPI_Request *rq;
    double t0, tt0; /* now_s(), mmrt_trace_now() */
  } fly[RING_INFLIGHT];
} ring_st;

int mmrt_ring_shift_start(MmrtMesh *m, MmrtAxis ax, MPI_Comm comm, int n, int me, const void *send,
                          void *recv, size_t count, MmrtDtype dt, int tag, MPI_Request rq[2]) {
  static const char op[] = "ring_shift";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  if (count > INT_MAX) return too_large(m, op, ax, count);
  tally(MMRT_COMM_RING, ax, m->size[ax], count, (uint64_t)count * esize(dt));
  ring_st.shifts++;
  int slot = 0;
  for (int i = 0; i < RING_INFLIGHT; i++)
    if (!ring_st.fly[i].rq) {
      slot = i;
      break;
    }
  ring_st.fly[slot].rq = rq;
  ring_st.fly[slot].t0 = now_s();
  ring_st.fly[slot].tt0 = mmrt_trace_now();
  rc = MPI_Irecv(recv, (int)count, mpi_type(dt), (me + n - 1) % n, tag, comm, &rq[0]);
  if (rc == MPI_SUCCESS)
    rc = MPI_Isend(send, (int)count, mpi_type(dt), (me + 1) % n, tag, comm, &rq[1]);
  return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, op, ax, rc);
}

int mmrt_all_to_all_group(MmrtMesh *m, MmrtAxis ax, MPI_Comm comm, int n, const void *send,
                          void *recv, size_t count, MmrtDtype dt) {
  static const char op[] = "all_to_all";
  int rc = check(m, op, ax, dt);
  if (rc) return rc;
  if (count * (size_t)n > INT_MAX) return too_large(m, op, ax, count * (size_t)n);
  size_t es = esize(dt);
  tally(MMRT_COMM_ALL_TO_ALL, ax, m->size[ax], count * (size_t)n,
        share((uint64_t)count * (uint64_t)n * es, (uint64_t)(n - 1), n));
  rc = MPI_Alltoall(send, (int)count, mpi_type(dt), recv, (int)count, mpi_type(dt), comm);
  return rc == MPI_SUCCESS ? MMRT_OK : mpi_fail(m, op, ax, rc);
}

int mmrt_ring_shift_test(MPI_Request rq[2]) {
  int done = 0;
  MPI_Testall(2, rq, &done, MPI_STATUSES_IGNORE);
  return done;
}

int mmrt_ring_shift_wait(MmrtMesh *m, MmrtAxis ax, MPI_Request rq[2]) {
  double t0 = now_s(), tt0 = mmrt_trace_now(), start = t0, tstart = tt0;
  for (int i = 0; i < RING_INFLIGHT; i++)
    if (ring_st.fly[i].rq == rq) {
      start = ring_st.fly[i].t0, tstart = ring_st.fly[i].tt0;
      ring_st.fly[i].rq = NULL;
      break;
    }
  ring_st.window_s += t0 - start;
  int rc = wait_reqs(m, "ring_shift", ax, 2, rq, NULL, 0);
  ring_st.wait_s += now_s() - t0;
  if (mmrt_trace_on()) {
    double tt1 = mmrt_trace_now();
    mmrt_trace_add("ring_shift", "comm", tstart, tt1, -1, -1);
    mmrt_trace_add("ring_wait", "comm", tt0, tt1, -1, -1);
  }
  return rc;
}

void mmrt_comm_ring_print(FILE *f) {
  if (ring_st.shifts)
    fprintf(f,
            "ring shifts: %llu, %.1f ms from start to wait (computing), %.1f ms blocked in the "
            "waits\n",
            (unsigned long long)ring_st.shifts, 1e3 * ring_st.window_s, 1e3 * ring_st.wait_s);
}

/* ---- counters ---- */

MmrtCommCount mmrt_comm_counter(MmrtCommKind k, MmrtAxis ax) {
  MmrtCommCount zero = {0};
  if ((unsigned)k >= MMRT_COMM_NKINDS || (unsigned)ax >= MMRT_NAXES) return zero;
  return counters[k][ax];
}

uint64_t mmrt_comm_bytes_total(void) {
  uint64_t t = 0;
  for (int k = 0; k < MMRT_COMM_NKINDS; k++)
    for (int a = 0; a < MMRT_NAXES; a++) t += counters[k][a].bytes;
  return t;
}

void mmrt_comm_counters_reset(void) {
  memset(&ovl, 0, sizeof ovl);
  memset(&pf, 0, sizeof pf);
  memset(&ring_st, 0, sizeof ring_st);
  memset(counters, 0, sizeof counters);
  memset(phase_counters, 0, sizeof phase_counters);
}

void mmrt_comm_counters_print(FILE *f) {
  uint64_t calls = 0, bytes = 0;
  fprintf(f, "%-15s %-8s %5s %10s %20s %14s %12s\n", "collective", "axis", "n", "calls",
          "fwd/bwd/update", "elements", "MiB sent");
  for (int k = 0; k < MMRT_COMM_NKINDS; k++)
    for (int a = 0; a < MMRT_NAXES; a++) {
      const MmrtCommCount *c = &counters[k][a];
      if (!c->calls) continue;
      char ph[64];
      snprintf(ph, sizeof ph, "%llu/%llu/%llu", (unsigned long long)phase_counters[0][k][a].calls,
               (unsigned long long)phase_counters[1][k][a].calls,
               (unsigned long long)phase_counters[2][k][a].calls);
      fprintf(f, "%-15s %-8s %5d %10llu %20s %14llu %12.3f\n", kind_names[k], axis_names[a], c->n,
              (unsigned long long)c->calls, ph, (unsigned long long)c->elems,
              (double)c->bytes / (1024.0 * 1024.0));
      calls += c->calls;
      bytes += c->bytes;
    }
  fprintf(f, "%-15s %-8s %5s %10llu %20s %14s %12.3f\n", "total", "", "", (unsigned long long)calls,
          "", "", (double)bytes / (1024.0 * 1024.0));
}

size_t mmrt_comm_counters_json(char *buf, size_t len) {
  size_t pos = 0;
  uint64_t bytes = 0;
#define PUT(...)                                                                                   \
  do {                                                                                             \
    int w_ = snprintf(pos < len ? buf + pos : NULL, pos < len ? len - pos : 0, __VA_ARGS__);       \
    if (w_ > 0) pos += (size_t)w_;                                                                 \
  } while (0)
  PUT("{");
  for (int k = 0; k < MMRT_COMM_NKINDS; k++)
    for (int a = 0; a < MMRT_NAXES; a++) {
      const MmrtCommCount *c = &counters[k][a];
      if (!c->calls) continue;
      PUT("\"%s.%s\":{\"n\":%d,\"calls\":%llu,\"elems\":%llu,\"bytes\":%llu},", kind_names[k],
          axis_names[a], c->n, (unsigned long long)c->calls, (unsigned long long)c->elems,
          (unsigned long long)c->bytes);
      bytes += c->bytes;
    }
  PUT("\"bytes\":%llu}", (unsigned long long)bytes);
#undef PUT
  if (len && pos >= len) buf[len - 1] = '\0';
  return pos;
}
