/* mmc-calibrate (run as `mmc calibrate [-o FILE.dev] [--quick]`): measures
 * this machine with the runtime's own kernels and writes a device
 * description (support/device.h) for `mmc plan --device`. One device is one
 * rank: run it under `mpirun -np N` to describe N ranks sharing this machine
 * (each rank's kernels measured while the others run theirs, and the MPI
 * collectives among them). docs/planner.md says what each figure is. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mmrt_threads.h"
#include "mmrt_comm.h"
#include "mmrt_kernels.h"
#include "support/att_tile.h"
#include "support/device.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static MPI_Comm comm = MPI_COMM_NULL;
static int nranks = 1; /* the ranks sharing this machine (calibrate's world) */

/* A cache's size, KiB (0: unknown): sysconf's name for it, else the
 * kernel's description of cpu0's cache index idx */
static double cache_size_kb(int name, int idx) {
  long b = sysconf(name);
  if (b > 0) return (double)b / 1024;
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
  FILE *f = fopen(path, "r");
  double kb = 0;
  char unit = 'K';
  if (f) {
    if (fscanf(f, "%lf%c", &kb, &unit) < 1) kb = 0;
    fclose(f);
  }
  return unit == 'M' ? kb * 1024 : kb;
}

/* a core's L2 */
static double l2_kb(void) {
  return cache_size_kb(_SC_LEVEL2_CACHE_SIZE, 2);
}

/* the last-level cache (L3) */
static double llc_kb(void) {
  return cache_size_kb(_SC_LEVEL3_CACHE_SIZE, 3);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median time of `reps` calls of fn (after one warm-up): a kernel's
 * typical time, not the rare call the scheduler cuts on a shared machine.
 * The collectives below take medians too. Under mpirun every rank starts
 * the same kernel together, as a trainer's ranks run the same ops at once
 * (left to drift, one rank's products met the other's streaming loop). */
typedef void (*BenchFn)(void *);
/* prep (untimed, when not NULL) runs before each timed call */
static double median_prep_s(BenchFn prep, BenchFn fn, void *u, int reps) {
  if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
  double *t = malloc((size_t)reps * sizeof *t), m;
  if (!t) return 0;
  fn(u);
  for (int i = 0; i < reps; i++) {
    if (prep) prep(u);
    double t0 = now();
    fn(u);
    t[i] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  m = t[reps / 2];
  free(t);
  return m;
}

static double median_s(BenchFn fn, void *u, int reps) {
  return median_prep_s(NULL, fn, u, reps);
}

typedef struct {
  MmrtDtype dt;
  void *a, *b, *c;
  int n, batch;
} MmArgs;

static void run_mm(void *u) {
  MmArgs *m = u;
  mmrt_matmul(m->dt, m->c, m->a, m->b, m->batch, m->n, m->n, m->n, 1.0f, 0);
}

typedef struct {
  float *out, *lse, *q, *k, *v, *dq, *dk, *dv, *dout;
  int B, T, H, D;
} AttArgs;

static void run_att_fwd(void *u) {
  AttArgs *a = u;
  float sc = 1.0f / sqrtf((float)a->D);
  mmrt_attention_fwd(a->out, a->lse, a->q, a->k, a->v, a->B, a->T, a->T, a->H, a->H, a->D, 1, sc);
}

static void run_att_bwd(void *u) {
  AttArgs *a = u;
  float sc = 1.0f / sqrtf((float)a->D);
  mmrt_attention_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->out, a->lse, a->B, a->T,
                     a->T, a->H, a->H, a->D, 1, sc, 0);
}

/* a linear layer's three products (forward, input and weight gradients), as
 * the generated code calls them */
typedef struct {
  float *x, *w, *y, *dx, *dw;
  int rows, K, N, form;
} LinArgs;

static void run_lin(void *u) {
  LinArgs *l = u;
  if (l->form == 0)
    mmrt_linear_fwd(MMRT_F32, l->y, l->x, l->w, NULL, l->rows, l->K, l->N);
  else if (l->form == 1)
    mmrt_linear_bwd_data(MMRT_F32, l->dx, l->y, l->w, l->rows, l->K, l->N, 0);
  else
    mmrt_linear_bwd_weights(MMRT_F32, l->dw, NULL, l->y, l->x, l->rows, l->K, l->N, 0);
}

/* a small op on one thread, then a product on all (the pair a small
 * model's step is made of) */
typedef struct {
  LinArgs *lin;
  struct VecArgs *vec;
} LinAfter;

static void run_stream(void *u);

static void run_stream_after_small(void *u) {
  mmrt_threads_small(1);
  run_stream(u);
  mmrt_threads_small(0);
  run_stream(u);
}

static void run_lin_after_small(void *u) {
  LinAfter *p = u;
  mmrt_threads_small(1);
  run_stream(p->vec);
  mmrt_threads_small(0);
  run_lin(p->lin);
}

/* a convolution's three kernels (forward, input and weight gradients), as
 * the generated code calls them */
typedef struct {
  MmrtConv cv;
  float *x, *w, *y, *dx, *dw;
  int form;
} ConvArgs;

static void run_conv(void *u) {
  ConvArgs *c = u;
  if (c->form == 0)
    mmrt_conv2d_fwd(MMRT_F32, &c->cv, c->y, c->x, c->w, NULL);
  else if (c->form == 1)
    mmrt_conv2d_bwd_data(MMRT_F32, &c->cv, c->dx, c->y, c->w, 0);
  else
    mmrt_conv2d_bwd_weights(MMRT_F32, &c->cv, c->dw, NULL, c->y, c->x, 0);
}

typedef struct VecArgs {
  float *x, *y, *z;
  long n;
  int rounds;
} VecArgs;

/* Other data, four times a core's L2: read and written back before a cold
 * call (evict), as a trainer's call meets its code and operands after the
 * ops between its uses have filled the core's caches */
static unsigned char *junk;
static long junk_n;

static void evict(void *u) {
  (void)u;
  for (long i = 0; i < junk_n; i += 64) junk[i]++;
}

/* The vector loops below are compiled for the widest vector ISA the CPU
 * has, as codegen compiles the trainer's loops for the host CPU (the
 * runtime's hot rows do the same: MMRT_CLONES); a baseline x86-64 build's
 * SSE2 loop reaches a quarter of an AVX-512 one's rate in cache. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define CAL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CAL_CLONES
#endif

CAL_CLONES static void stream_block(float *restrict z, const float *restrict x,
                                    const float *restrict y, long n) {
#pragma omp simd
  for (long i = 0; i < n; i++) z[i] = x[i] + 0.5f * y[i];
}

/* two degree-8 polynomials of each element by Horner's rule, added: 34
 * flops an element, multiplies and adds (C11 does not contract them into
 * fused multiply-adds, as codegen's loops do not), from registers: the
 * rate of elementwise arithmetic, not of loads and stores. Two chains, as
 * the kernels' expansions have independent halves (tanh's polynomial and
 * exponential, the range reduction beside the polynomial): one chain's
 * latency bound halved the rate, and codegen's gelu_tanh ran at twice it */
CAL_CLONES static void poly_block(float *x, long n, int rounds) {
  for (int r = 0; r < rounds; r++) {
#pragma omp simd
    for (long i = 0; i < n; i++) {
      float v = x[i], p = 0.5f, q = 0.25f;
      for (int k = 0; k < 8; k++) {
        p = p * v + 0.03125f * (float)(k + 1);
        q = q * v - 0.015625f * (float)(k + 1);
      }
      x[i] = (p + q) * 1e-3f + 0.25f;
    }
  }
}

/* each thread its contiguous share of [0, n) */
#define THREAD_SHARE(n, lo, cnt)                                                                   \
  int nt_ = omp_get_num_threads(), t_ = omp_get_thread_num();                                      \
  long lo = (n) * t_ / nt_, cnt = (n) * (t_ + 1) / nt_ - lo

/* before a cold call: the operands x and y evicted from the core's cache
 * (its other data read and written back over them), the result z's lines
 * made resident again (written), as the trainer's op writes into a room
 * the op before it used */
static void evict_operands(void *u) {
  VecArgs *v = u;
  evict(u);
  for (long i = 0; i < v->n; i += 16) v->z[i] = 0;
}

/* before a remote call: the operand x written by all the rank's threads,
 * each its share as an op split over them writes its result (share_threads:
 * how many; the call then runs on the first), or by the calling thread
 * alone (own) */
static int share_threads = 1;
static void write_shared(void *u) {
  VecArgs *v = u;
#pragma omp parallel num_threads(share_threads)
  {
    THREAD_SHARE(v->n, lo, cnt);
    for (long i = lo; i < lo + cnt; i++) v->x[i] = 1.0f + (float)(i & 7);
  }
}
static void write_own(void *u) {
  VecArgs *v = u;
  for (long i = 0; i < v->n; i++) v->x[i] = 1.0f + (float)(i & 7);
}

static void run_stream(void *u) { /* z = x + 0.5 y: 12 bytes an element */
  VecArgs *v = u;
#pragma omp parallel
  {
    THREAD_SHARE(v->n, lo, cnt);
    stream_block(v->z + lo, v->x + lo, v->y + lo, cnt);
  }
}

typedef struct RowArgs {
  float *y, *mean, *rstd, *x, *g, *b;
  int N, C;
} RowArgs;

static void run_layernorm(void *u) {
  RowArgs *r = u;
  mmrt_layernorm_fwd(r->y, r->mean, r->rstd, r->x, r->g, r->b, r->N, r->C, 1e-5f);
}

static void run_poly(void *u) { /* in cache: 34 flops an element a round */
  VecArgs *v = u;
#pragma omp parallel
  {
    THREAD_SHARE(v->n, lo, cnt);
    poly_block(v->x + lo, cnt, v->rounds);
  }
}

static void *fill(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "mmc calibrate: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  unsigned char *c = p;
  for (size_t i = 0; i < bytes; i += 4) {
    float f = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    memcpy(c + i, &f, bytes - i >= 4 ? 4 : bytes - i);
  }
  return p;
}

/* The median times of a 3 x 3 convolution's three kernels (N x C x S x S,
 * C channels out, stride 1, padding 1: the output as large as the input),
 * summed into *t; their FLOPs (ir_flops' count, 2 N C C 9 S S each) into
 * *flops. */
static void conv_times(BenchFn prep, int N, int C, int S, int reps, double *t, double *flops) {
  ConvArgs c = {.cv = {.N = N, .C = C, .OC = C, .groups = 1}};
  for (int i = 0; i < 2; i++)
    c.cv.in[i] = S, c.cv.k[i] = 3, c.cv.stride[i] = 1, c.cv.pad_lo[i] = c.cv.pad_hi[i] = 1;
  c.cv.in[2] = c.cv.k[2] = c.cv.stride[2] = 1;
  size_t act = (size_t)N * C * S * S * 4, wb = (size_t)C * C * 9 * 4;
  c.x = fill(act), c.y = fill(act), c.dx = fill(act), c.w = fill(wb), c.dw = fill(wb);
  *t = 0;
  for (c.form = 0; c.form < 3; c.form++) *t += median_prep_s(prep, run_conv, &c, reps);
  *flops = 3 * 2.0 * N * C * C * 9 * S * S;
  free(c.x), free(c.y), free(c.dx), free(c.w), free(c.dw);
}

static double linear_tflops(int n, int reps) {
  size_t b = (size_t)n * n * 4;
  LinArgs l = {fill(b), fill(b), fill(b), fill(b), fill(b), n, n, n, 0};
  double t = 0;
  for (l.form = 0; l.form < 3; l.form++) t += median_s(run_lin, &l, reps);
  free(l.x), free(l.w), free(l.y), free(l.dx), free(l.dw);
  return 3 * 2.0 * n * n * n / t / 1e12;
}

static double matmul_tflops(MmrtDtype dt, int n, int reps) {
  size_t es = dt == MMRT_BF16 ? 2 : 4, bytes = (size_t)n * n * es;
  MmArgs m = {dt, fill(bytes), fill(bytes), fill(bytes), n, 1};
  if (dt == MMRT_BF16) /* bf16 halves of the fill: small finite numbers */
    for (size_t i = 0; i < (size_t)n * n; i++)
      ((uint16_t *)m.a)[i] = ((uint16_t *)m.b)[i] = 0x3c00 + (uint16_t)(i % 64);
  double t = median_s(run_mm, &m, reps);
  free(m.a), free(m.b), free(m.c);
  return 2.0 * n * n * n / t / 1e12;
}

/* The kernels' figures of d (every rate and fixed time), one round. */
static void measure_kernels(MmDevice *dv, int quick, int reps) {
  /* products: fp32 as the trainer's products are, a linear layer's three
   * (forward, input and weight gradients: the runtime's calls, each with
   * its own operand layout; the weight gradient's ran 15 to 20% slower than
   * a square matmul, the input gradient's at its rate) at n rows, n x n,
   * their FLOPs over their summed median times; bf16 a square matmul */
  dv->fp32_tflops = linear_tflops(quick ? 256 : 512, reps);
  dv->bf16_tflops = matmul_tflops(MMRT_BF16, quick ? 256 : 512, reps);
  dv->matmul_efficiency = 1; /* measured rates: what the kernels reach */
  /* the attention kernels (causal), forward and backward apart, at four
   * shapes: t = a + e x (work items: batch rows x heads x 64-query tiles)
   * + b x (the scores computed, the causal half) + c x FLOPs. Two of head
   * size 16 at 16,384 and 524,288 scores and one of head size 64 at 524,288
   * give c (from the head sizes), then those two and one of 4 items and
   * 2,048 scores give e, b and a; c is the attention_efficiency of the fp32
   * product's rate (both directions' FLOPs together), b the per-score time
   * of each (the exponentials), e a work item's (its tiles' loads, its
   * rows' statistics), a the fixed time of a call (the threads' start,
   * their workspace). */
  int ash[4][4] = {{4, 32, 4, 16}, {2, 256, 4, 16}, {2, 256, 4, 64}, {1, 32, 4, 16}};
  double at[2][4], afl[2][4], asc[4], ait[4];
  for (int k = 0; k < 4; k++) {
    AttArgs a = {.B = ash[k][0], .T = ash[k][1], .H = ash[k][2], .D = ash[k][3]};
    if (quick && k) a.T /= 2;
    size_t qb = (size_t)a.B * a.T * a.H * a.D * 4, lb = (size_t)a.B * a.H * a.T * 4;
    a.out = fill(qb), a.q = fill(qb), a.k = fill(qb), a.v = fill(qb), a.dq = fill(qb);
    a.dk = fill(qb), a.dv = fill(qb), a.dout = fill(qb), a.lse = fill(lb);
    at[0][k] = median_s(run_att_fwd, &a, reps);
    at[1][k] = median_s(run_att_bwd, &a, reps);
    /* ir_flops' count: forward 2BHTS(2D), backward 2BHTS(5D), the causal half included */
    double sc = (double)a.B * a.H * a.T * a.T;
    afl[0][k] = 2.0 * sc * 2 * a.D, afl[1][k] = 2.0 * sc * 5 * a.D, asc[k] = 0.5 * sc;
    ait[k] = mm_att_items(a.B, a.T, a.H);
    free(a.out), free(a.q), free(a.k), free(a.v), free(a.dq), free(a.dk), free(a.dv);
    free(a.dout), free(a.lse);
  }
  double rate = dv->fp32_tflops * 1e12;
  double c =
      (at[0][2] + at[1][2] - at[0][1] - at[1][1]) / (afl[0][2] + afl[1][2] - afl[0][1] - afl[1][1]);
  if (!(c >= 1 / rate)) c = 1 / rate; /* no faster than the product */
  dv->attention_efficiency = fmax(1e-3, 1 / (c * rate));
  /* the rest of shapes 0, 1 and 3 (16, 32 and 4 work items): t - c FLOPs =
   * a + e items + b scores, solved for each direction; where noise makes
   * a figure negative, e is left out (0) and a, b come from shapes 0 and 1 */
  double a_sum = 0, e_sum = 0, b[2];
  for (int dir = 0; dir < 2; dir++) {
    double r[3], it[3], sc[3];
    int ks[3] = {0, 1, 3};
    for (int j = 0; j < 3; j++)
      r[j] = at[dir][ks[j]] - c * afl[dir][ks[j]], it[j] = ait[ks[j]], sc[j] = asc[ks[j]];
    /* differences against shape 0: e di1 + b ds1 = dr1, e di2 + b ds2 = dr2 */
    double di1 = it[1] - it[0], ds1 = sc[1] - sc[0], dr1 = r[1] - r[0];
    double di2 = it[2] - it[0], ds2 = sc[2] - sc[0], dr2 = r[2] - r[0];
    double det = di1 * ds2 - di2 * ds1;
    double e = det != 0 ? (dr1 * ds2 - dr2 * ds1) / det : -1;
    double bb = det != 0 ? (di1 * dr2 - di2 * dr1) / det : -1;
    double a0 = r[0] - e * it[0] - bb * sc[0];
    if (!(e >= 0 && bb >= 0 && a0 >= 0)) {
      e = 0;
      bb = fmax(0, dr1 / ds1);
      a0 = fmax(0, r[0] - bb * sc[0]);
    }
    b[dir] = bb, e_sum += e, a_sum += a0;
  }
  dv->attention_score_ns = b[0] * 1e9, dv->attention_score_ns_bwd = b[1] * 1e9;
  dv->attention_overhead_us = a_sum / 2 * 1e6;
  dv->attention_item_us = e_sum / 2 * 1e6;
  /* memory bandwidth: a streaming z = x + 0.5 y over 3 x 32 MiB, or over
   * twice the rank's share of the last-level cache where that is more
   * (the ranks stream together: twice the cache in all), so that the
   * figure is memory's, not the cache's: a Xeon VM with 480 MiB of L3
   * measured 54 GB/s over 96 MiB, where GPT-2 124M's gradient norm read
   * its 500 MB at 19 */
  VecArgs v = {.n = (quick ? 2L : 8L) << 20};
  if (!quick) {
    long beyond = (long)(2 * llc_kb() * 1024 / nranks / 12);
    if (beyond > v.n) v.n = beyond;
  }
  v.x = fill((size_t)v.n * 4), v.y = fill((size_t)v.n * 4), v.z = fill((size_t)v.n * 4);
  double ts = median_s(run_stream, &v, reps);
  dv->mem_bw_gbs = 12.0 * (double)v.n / ts / 1e9;
  /* the last-level cache: a rank's share of it (llc_kb, its size over the
   * ranks) and the same loop's rate over a set within it, half the share
   * and at most eight L2s (llc_bw_gbs: what a rank whose whole step fits
   * there streams at) */
  dv->llc_kb = llc_kb() / nranks;
  /* more ranks than CPUs: ranks take turns on a core, which the per-call
   * figures above do not see (a short call runs within one turn), so no
   * such level is described (with it, GPT2Tiny on 4 ranks of 2 CPUs was
   * predicted 0.6 of its step: the rates' own error then showed) */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu > 0 && nranks > ncpu) dv->llc_kb = 0;
  double lset = fmin(dv->llc_kb * 1024 / 2, 8 * l2_kb() * 1024);
  dv->llc_bw_gbs = dv->mem_bw_gbs;
  if (lset <= 4 * l2_kb() * 1024) {
    dv->llc_kb = 0;
  } else {
    VecArgs lv = {.x = v.x, .y = v.y, .z = v.z, .n = (long)(lset / 12)};
    if (lv.n > v.n) lv.n = v.n;
    /* all ranks' loops between two barriers: each rank's share of what the
     * ranks stream together (timed per call, ranks that share a CPU ran
     * their short loops in turn, each at the whole cache's rate: 4 ranks
     * on 2 CPUs were predicted 0.55 of their GPT2Tiny step) */
    run_stream(&lv);
    if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
    double t0 = now();
    for (int i = 0; i < 4 * reps; i++) run_stream(&lv);
    if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
    double tl = (now() - t0) / (4 * reps);
    dv->llc_bw_gbs = fmax(dv->mem_bw_gbs, 12.0 * (double)lv.n / tl / 1e9);
  }
  /* the vector rate: elementwise arithmetic in cache, on all threads
   * (16,384 elements, 64 KiB) */
  VecArgs f = {.x = v.x, .n = 16384, .rounds = quick ? 16 : 64};
  double tf = median_s(run_poly, &f, reps);
  dv->vector_tflops = 34.0 * f.n * f.rounds / tf / 1e12;
  free(v.x), free(v.y), free(v.z);
  /* the time of one small op: an 8 x 8 matmul through the runtime
   * (dispatch, cache look-up), on one thread as the trainer runs an op of
   * fewer than 2^15 elements or 2^20 FLOPs (codegen's small ops,
   * mmrt_threads_small) */
  share_threads = omp_get_max_threads();
  mmrt_threads_small(1);
  MmArgs s = {MMRT_F32, fill(256), fill(256), fill(256), 8, 1};
  double tsm = 0;
  tsm = median_s(run_mm, &s, 201);
  free(s.a), free(s.b), free(s.c);
  /* and a small elementwise op (4,096 elements), also on one thread as the
   * trainer runs it: a small model's norms, adds and reductions are such
   * ops. (Split over the OpenMP threads, its fork and join measured 1 to
   * 30 us, as much as the load on the machine let the other thread wake;
   * the trainer's small ops never pay it.) The op overhead is the larger */
  VecArgs e = {.n = 4096};
  e.x = fill(4 * 4096), e.y = fill(4 * 4096), e.z = fill(4 * 4096);
  double te = median_s(run_stream, &e, 1001);
  /* the bandwidth of such an op's data in cache (cache_bw_gbs): the same
   * loop over four times the elements (192 KiB, in a core's L2), the
   * difference of the two times per byte. The small op's fixed time is
   * then its time less its bytes at that bandwidth (the cost model charges
   * those apart) */
  /* cold_bw_gbs: the same op with its two operands evicted before each call
   * (four times a core's L2 of other data read since, as a trainer's op
   * meets an operand made or read long before it: cost.c cold_bytes); the
   * operands' bytes over the time the call takes beyond the hot one's, less
   * their time in cache */
  double l2 = l2_kb() * 1024;
  junk_n = (long)(4 * (l2 > 0 ? l2 : 1 << 20));
  junk = fill((size_t)junk_n);
  double tcold = median_prep_s(evict_operands, run_stream, &e, 201);
  /* remote_bw_gbs: a one-thread op over 32,768 elements (GPT2Tiny's MLP:
   * 128 KiB an operand, in a core's L2) whose operand x the rank's threads
   * wrote, each its share, as a product split over them writes its result,
   * against the same op after its own thread wrote x: all but the first
   * thread's share come from the other cores' caches, costing the
   * difference (a 2-core Xeon: 9.2 us against 4.3) */
  double tsh = 0, town = 0;
  VecArgs er = {.n = 32768};
  if (share_threads > 1) {
    er.x = fill(4 * 32768), er.y = fill(4 * 32768), er.z = fill(4 * 32768);
    tsh = median_prep_s(write_shared, run_stream, &er, 201);
    town = median_prep_s(write_own, run_stream, &er, 201);
    free(er.x), free(er.y), free(er.z);
  }
  VecArgs e4 = {.n = 4 * 4096};
  e4.x = fill(4 * 4 * 4096), e4.y = fill(4 * 4 * 4096), e4.z = fill(4 * 4 * 4096);
  double te4 = median_s(run_stream, &e4, 1001);
  free(e4.x), free(e4.y), free(e4.z);
  /* a row-wise kernel's time per row besides its elements (row_ns): the
   * runtime's layer norm over 16,384 elements as 1,024 rows of 16 and as 16
   * rows of 1,024, on one thread as the trainer runs a small one (the
   * row's sums, their horizontal adds, the square root and the loop's
   * start); the difference per row */
  RowArgs ra = {fill(4 * 16384), fill(4 * 1024), fill(4 * 1024), fill(4 * 16384),
                fill(4 * 1024),  fill(4 * 1024), 1024,           16};
  double tr_many = median_s(run_layernorm, &ra, 201);
  ra.N = 16, ra.C = 1024;
  double tr_few = median_s(run_layernorm, &ra, 201);
  free(ra.y), free(ra.mean), free(ra.rstd), free(ra.x), free(ra.g), free(ra.b);
  dv->row_ns = fmax(0, (tr_many - tr_few) / (1024 - 16) * 1e9);
  mmrt_threads_small(0);
  double cbw = te4 > te ? 12.0 * 3 * 4096 / (te4 - te) : dv->mem_bw_gbs * 1e9;
  dv->cache_bw_gbs = fmax(dv->mem_bw_gbs, cbw / 1e9);
  double cold_s = tcold - te + 8.0 * 4096 / (dv->cache_bw_gbs * 1e9);
  dv->cold_bw_gbs =
      cold_s > 0 ? fmin(dv->cache_bw_gbs, 8.0 * 4096 / cold_s / 1e9) : dv->cache_bw_gbs;
  double away = 4.0 * er.n * (share_threads - 1) / share_threads;
  dv->remote_bw_gbs = tsh > town ? away / (tsh - town) / 1e9 : 0;
  double ted = te - 12.0 * 4096 / (dv->cache_bw_gbs * 1e9);
  dv->op_overhead_us = fmax(tsm, fmax(ted, 0)) * 1e6;
  /* a product's fixed time: a small linear layer's three products (128 rows,
   * 64 x 64, as a small model's: 2^20 FLOPs, on all the threads) less their
   * FLOPs at the large product's rate, each called as the trainer calls a
   * product: after a small op on one thread (less that op's time), so that
   * it pays the wake-up of threads that waited meanwhile (back to back, a
   * product finds them spinning still) */
  LinArgs l = {fill(128 * 64 * 4),
               fill(64 * 64 * 4),
               fill(128 * 64 * 4),
               fill(128 * 64 * 4),
               fill(64 * 64 * 4),
               128,
               64,
               64,
               0};
  LinAfter la = {&l, &e};
  /* a vector op split over the threads (parallel_overhead_us): the same
   * 4,096-element loop on all of them right after it ran on one, less that
   * one's time: the fork, the join and the waiting threads' wake-up that
   * every op of 2^15 elements or more pays in the trainer */
  double tpar = median_s(run_stream_after_small, &e, 1001) - te;
  dv->parallel_overhead_us = fmax(dv->op_overhead_us, tpar * 1e6);
  /* (cold: a core's caches filled with other data before each call, as
   * between a trainer's uses of one product, whose code, oneDNN's state for
   * it and its weight then come from the next level: 5 to 10 us more a call
   * than back to back on a Xeon, where re-reading just its input and output
   * first took nothing off; the small op before it then cold too, less its
   * cold time) */
  double mo = 0;
  for (l.form = 0; l.form < 3; l.form++)
    mo += median_prep_s(evict, run_lin_after_small, &la, 201) - tcold -
          2.0 * 128 * 64 * 64 / (dv->fp32_tflops * 1e12);
  free(l.x), free(l.w), free(l.y), free(l.dx), free(l.dw);
  free(e.x), free(e.y), free(e.z);
  dv->matmul_overhead_us = fmax(dv->op_overhead_us, mo / 3 * 1e6);
  /* a convolution's fixed time: a small one's three kernels (2 x 8 x 16 x
   * 16, as a small model's) less their FLOPs at the rate a larger one's
   * (4 x 32 x 32 x 32) adds over it, a third of it a call. Both on one
   * thread, as the trainer runs a small convolution (codegen's small ops,
   * under 2^20 FLOPs: mmrt_threads_small), which also keeps the figure
   * steady on a busy machine (a parallel region's join there can wait a
   * time slice for a descheduled thread) */
  double cts, cfs, ctl, cfl;
  mmrt_threads_small(1);
  conv_times(evict, 2, 8, 16, 201, &cts, &cfs);
  conv_times(evict, 4, 32, quick ? 16 : 32, reps, &ctl, &cfl);
  mmrt_threads_small(0);
  double crate = ctl > cts ? (cfl - cfs) / (ctl - cts) : dv->fp32_tflops * 1e12;
  dv->conv_overhead_us = fmax(dv->op_overhead_us, (cts - cfs / crate) / 3 * 1e6);
  free(junk);
  junk = NULL, junk_n = 0;
}

/* The device's kernel figures as fields of MmDevice, by offset: the ones
 * measure_kernels writes (a round's median is taken of each) */
#define KERNEL_FIELDS(X)                                                                           \
  X(fp32_tflops)                                                                                   \
  X(bf16_tflops)                                                                                   \
  X(matmul_efficiency)                                                                             \
  X(attention_efficiency)                                                                          \
  X(attention_score_ns)                                                                            \
  X(attention_score_ns_bwd)                                                                        \
  X(attention_overhead_us)                                                                         \
  X(attention_item_us)                                                                             \
  X(mem_bw_gbs)                                                                                    \
  X(vector_tflops)                                                                                 \
  X(op_overhead_us)                                                                                \
  X(matmul_overhead_us)                                                                            \
  X(conv_overhead_us)                                                                              \
  X(parallel_overhead_us)                                                                          \
  X(cache_bw_gbs) X(cold_bw_gbs) X(remote_bw_gbs) X(llc_kb) X(llc_bw_gbs) X(row_ns)

/* comm_compute_share: what a non-blocking all-reduce of count floats
 * (x into y) costs the compute it overlaps, as a fraction of its own time
 * t_ar. The compute is products of 192 x 192 (more than the trainer's
 * small-op limit: on the rank's threads), enough of them to take about
 * twice t_ar, with an MPI_Test after each as the trainer polls its
 * buckets between kernels (mmrt_comm_progress); the all-reduce posted
 * before the first and waited for after the last. (with both - alone) /
 * t_ar: 0 where a separate engine moves the bytes, 1 where MPI's copies
 * and sums run on the cores the products need (one machine's shared
 * memory). The median of 3 rounds, within [0, 1]. */
static double comm_share(float *x, float *y, int count, double t_ar) {
  MmArgs mm = {MMRT_F32, fill(192 * 192 * 4), fill(192 * 192 * 4), fill(192 * 192 * 4), 192, 1};
  double tk = median_s(run_mm, &mm, 11), sh[3];
  int k = tk > 0 ? (int)ceil(2 * t_ar / tk) : 4;
  k = k < 4 ? 4 : k > 4000 ? 4000 : k;
  MPI_Allreduce(MPI_IN_PLACE, &k, 1, MPI_INT, MPI_MAX, comm); /* the same work on every rank */
  for (int r = 0; r < 3; r++) {
    MPI_Barrier(comm);
    double t0 = now();
    for (int i = 0; i < k; i++) run_mm(&mm);
    double alone = now() - t0;
    MPI_Request rq;
    int flag;
    MPI_Barrier(comm);
    t0 = now();
    MPI_Iallreduce(x, y, count, MPI_FLOAT, MPI_SUM, comm, &rq);
    for (int i = 0; i < k; i++) {
      run_mm(&mm);
      MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
    }
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    sh[r] = (now() - t0 - alone) / t_ar;
  }
  free(mm.a), free(mm.b), free(mm.c);
  qsort(sh, 3, sizeof *sh, cmp_d);
  return sh[1] < 0 ? 0 : sh[1] > 1 ? 1 : sh[1];
}

/* The median times of an 8-byte and of a count-float all-reduce as a
 * trainer calls them: the runtime's mmrt_all_reduce over a mesh of the
 * world's ranks with the trainer's default watchdog (a non-blocking
 * all-reduce polled until done, runtime/comm/mmrt_comm.c), each after a
 * barrier. MPI's blocking all-reduce, measured before, took 0.25 to 0.6 us
 * for 8 bytes on a 2-CPU Zen 3 where the runtime's takes 4 to 7, and
 * GPT2Tiny's cp = 2 step spent its 36 all-reduces' latency at the
 * runtime's figure. 0, or 1 with a message. */
static int runtime_all_reduce(int world, float *x, int count, double *t_small, double *t_big) {
  MmrtMesh ms;
  int sizes[MESH_NAXES];
  for (int a = 0; a < MESH_NAXES; a++) sizes[a] = 1;
  sizes[MMRT_AXIS_DP] = world;
  char err[256];
  if (mmrt_mesh_init(&ms, sizes, err, sizeof err)) {
    fprintf(stderr, "mmc calibrate: %s\n", err);
    return 1;
  }
  mmrt_comm_set_timeout(&ms, MMRT_COMM_TIMEOUT_DEFAULT);
  double ts[200];
  for (int big = 0; big < 2; big++) {
    int reps = big ? 16 : 200;
    for (int i = 0; i < reps; i++) {
      MPI_Barrier(comm);
      double t0 = now();
      int rc = mmrt_all_reduce(&ms, MMRT_AXIS_DP, x, x, big ? (size_t)count : 2, MMRT_F32);
      ts[i] = now() - t0;
      if (rc) {
        fprintf(stderr, "mmc calibrate: the all-reduce failed (%d)\n", rc);
        mmrt_mesh_free(&ms);
        return 1;
      }
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp_d);
    *(big ? t_big : t_small) = ts[reps / 2];
  }
  mmrt_mesh_free(&ms);
  return 0;
}

int main(int argc, char **argv) {
  mmrt_omp_setup(argc, argv);
  const char *out = NULL;
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: mmc calibrate [-o FILE.dev] [--quick]\n"
             "  measures this machine and writes a device description (stdout without -o);\n"
             "  under mpirun with N ranks, one device is one of them. docs/planner.md\n");
      return 0;
    } else {
      fprintf(stderr,
              "mmc calibrate: unknown argument '%s' (usage: mmc calibrate [-o FILE.dev] "
              "[--quick])\n",
              argv[i]);
      return 2;
    }
  }
  int world = 1, rank = 0;
  int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
  if (under_mpi) {
    MPI_Init(&argc, &argv);
    comm = MPI_COMM_WORLD;
    MPI_Comm_size(comm, &world);
    MPI_Comm_rank(comm, &rank);
  }
  nranks = world;
  int reps = quick ? 5 : 21, rounds = quick ? 1 : 5;
  MmDevice d = {0};
  /* the kernels' figures, rounds times a few tenths of a second apart: on a
   * machine others share, one round can meet another program's burst (the
   * rates halve, a fixed time grows tenfold); each figure is the median of
   * its rounds' */
  MmDevice rd[5];
  for (int r = 0; r < rounds; r++) {
    memset(&rd[r], 0, sizeof rd[r]);
    measure_kernels(&rd[r], quick, reps);
  }
  double col[5];
#define MEDIAN_FIELD(f)                                                                            \
  for (int r = 0; r < rounds; r++) col[r] = rd[r].f;                                               \
  qsort(col, (size_t)rounds, sizeof *col, cmp_d);                                                  \
  d.f = col[rounds / 2];
  KERNEL_FIELDS(MEDIAN_FIELD)
#undef MEDIAN_FIELD
  /* memory: what this rank may use of the machine's */
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  d.mem_gb = pages > 0 && psz > 0 ? (double)pages * (double)psz / 1e9 / world : 1;
  /* the cache a one-thread op's data stays in between the ops that make
   * and read it: a core's L2 (the trainer's small ops run on its first
   * thread) */
  d.cache_kb = l2_kb();
  /* the threads this rank's kernels ran on (vector_tflops is theirs together) */
  d.threads = omp_get_max_threads();
  /* links: the runtime's all-reduces among the ranks (one machine: no inter-node link) */
  d.devices_per_node = world;
  d.intra_bw_gbs = d.mem_bw_gbs, d.intra_lat_us = 1;
  if (world > 1) {
    /* 4 MiB: a trainer's messages run from bytes (a small model's) to a few
     * MiB (GPT-2 124M's tp all-reduces of 0.75 MiB, its dp buckets of 9);
     * the runtime's 16 MiB all-reduce, taken before, ran at half the 4 MiB
     * one's rate on a 2-CPU Zen 3 (1.0 against 2.0 GB/s) */
    int nbig = 1 << 20;
    float *x = fill((size_t)nbig * 4), *y = fill((size_t)nbig * 4);
    /* medians, as the kernels': the trainer's figure is its median step.
     * (Means were taken before, for the stalls a step meets at each
     * collective; on a busy machine one descheduled rank in 200 8-byte
     * all-reduces made the latency 370 us, where the trainers' steps
     * showed 1 to 20.) */
    double t1 = 0, t2 = 0;
    if (runtime_all_reduce(world, x, nbig, &t1, &t2)) return 1;
    double steps = 2.0 * (world - 1), alpha = t1 / steps;
    double sent = 2.0 * (world - 1) / world * nbig * 4;
    double beta = (t2 - steps * alpha) / sent;
    d.intra_lat_us = alpha * 1e6;
    d.intra_bw_gbs = beta > 0 ? 1 / beta / 1e9 : d.mem_bw_gbs;
    d.comm_compute_share = comm_share(x, y, nbig, t2);
    /* every rank's kernels measured at once: the slowest rank is the device
     * (its rates the least, its times the most: a time goes in negated) */
    struct {
      double *v, sign;
    } worst[] = {{&d.fp32_tflops, 1},
                 {&d.bf16_tflops, 1},
                 {&d.mem_bw_gbs, 1},
                 {&d.vector_tflops, 1},
                 {&d.attention_efficiency, 1},
                 {&d.cache_bw_gbs, 1},
                 {&d.cold_bw_gbs, 1},
                 {&d.remote_bw_gbs, 1},
                 {&d.llc_bw_gbs, 1},
                 {&d.op_overhead_us, -1},
                 {&d.matmul_overhead_us, -1},
                 {&d.attention_overhead_us, -1},
                 {&d.attention_item_us, -1},
                 {&d.attention_score_ns, -1},
                 {&d.attention_score_ns_bwd, -1},
                 {&d.conv_overhead_us, -1},
                 {&d.row_ns, -1},
                 {&d.parallel_overhead_us, -1},
                 {&d.comm_compute_share, -1}};
    enum { NW = sizeof worst / sizeof worst[0] };
    double mine[NW], least[NW];
    for (int k = 0; k < NW; k++) mine[k] = worst[k].sign * *worst[k].v;
    MPI_Allreduce(mine, least, NW, MPI_DOUBLE, MPI_MIN, comm);
    for (int k = 0; k < NW; k++) *worst[k].v = worst[k].sign * least[k];
    free(x), free(y);
  }
  d.inter_bw_gbs = d.intra_bw_gbs, d.inter_lat_us = d.intra_lat_us;
  int rc = 0;
  if (rank == 0) {
    char cpu[256] = "unknown CPU", line[512];
    FILE *ci = fopen("/proc/cpuinfo", "r");
    while (ci && fgets(line, sizeof line, ci))
      if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
        snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
        cpu[strcspn(cpu, "\n")] = 0;
        break;
      }
    if (ci) fclose(ci);
    char host[128] = "this machine", hdr[1024];
    gethostname(host, sizeof host);
    time_t tt = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&tt));
    snprintf(d.name, sizeof d.name, "calibrated-%dx", world);
    /* the threads and their wait policy the figures were measured with: a
     * trainer that chose another policy (it samples the machine's load at
     * its start) runs its kernels at other fixed costs (docs/planner.md) */
    char omp[256];
    mmrt_omp_describe(omp, sizeof omp);
    snprintf(hdr, sizeof hdr,
             "# written by mmc calibrate on %s, %s\n# CPU: %s; %d rank%s, each %s\n"
             "# one device = one rank; every figure measured (docs/planner.md)\n",
             host, when, cpu, world, world == 1 ? "" : "s", omp);
    char tmp[1100];
    FILE *o = stdout;
    if (out) {
      snprintf(tmp, sizeof tmp, "%s.tmp%d", out, (int)getpid());
      o = fopen(tmp, "w");
      if (!o) {
        fprintf(stderr, "mmc calibrate: cannot write '%s'\n", out);
        rc = 1;
      }
    }
    if (o) {
      mm_device_write(o, &d, hdr);
      if (out) {
        int bad = ferror(o);
        bad |= fclose(o) != 0;
        if (bad || rename(tmp, out) != 0) {
          remove(tmp);
          fprintf(stderr, "mmc calibrate: cannot write '%s'\n", out);
          rc = 1;
        } else
          fprintf(stderr, "mmc calibrate: wrote %s\n", out);
      }
    }
  }
  if (under_mpi) MPI_Finalize();
  return rc;
}
