/* mpi_comm.c: mmrt_comm's mesh and collectives against naive computations.
 *
 * Run under `mpirun -np 4` (meshes 4x1x1, 1x1x4, 2x1x2, ... as dp x cp x
 * tp, some with pp) and alone (a singleton world: every axis has size 1).
 * Every rank builds the same global tensors from a formula, whose seed
 * includes the id of its group on the axis under test (so data from a
 * wrong group shows), and checks its own part.  Values are small integers,
 * exact in fp32 and bf16, so results are compared exactly.
 *
 * Check must not fork under MPI: the runner is CK_NOFORK.  --timeout S runs
 * every collective through the non-blocking, polled path.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"

/* mmrt_mesh_init on dp x cp x tp x pp (any other axis of size 1). */
static int mesh_init4(MmrtMesh *m, int dp, int cp, int tp, int pp, char *err, size_t n) {
  int size[MESH_NAXES];
  for (int a = 0; a < MESH_NAXES; a++) size[a] = 1;
  size[MMRT_AXIS_DP] = dp, size[MMRT_AXIS_CP] = cp, size[MMRT_AXIS_TP] = tp,
  size[MMRT_AXIS_PP] = pp;
  return mmrt_mesh_init(m, size, err, n);
}

static int world, wrank;
static double timeout_s;

typedef struct Plan {
  int dp, cp, tp, pp;
} Plan;

static const Plan plans4[] = {
    {4, 1, 1, 1}, {1, 1, 4, 1}, {2, 1, 2, 1}, {1, 2, 2, 1},
    {1, 4, 1, 1}, {1, 1, 2, 2}, {2, 1, 1, 2}, {1, 1, 1, 4},
};
static const Plan plans1[] = {{1, 1, 1, 1}};
static const Plan *plans;
static int nplans;

/* A failed check must not make this rank skip a collective the others
 * enter (they would wait for it forever): checks inside a test only note
 * the first failure, and verdict() at the end of the test, reached by every
 * rank, agrees on the result over the world and fails the test on all
 * ranks. */
static char first_failure[512];
static int nfailures;

static void expect_at(int line, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void expect_at(int line, int ok, const char *fmt, ...) {
  if (ok || nfailures++) return;
  int k = snprintf(first_failure, sizeof first_failure, "line %d: ", line);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(first_failure + k, sizeof first_failure - (size_t)k, fmt, ap);
  va_end(ap);
}
#define EXPECT(c, ...) expect_at(__LINE__, !!(c), __VA_ARGS__)
#define EXPECT_EQ(a, b)                                                                            \
  expect_at(__LINE__, (long long)(a) == (long long)(b), "%s is %lld, want %lld", #a,               \
            (long long)(a), (long long)(b))
#define EXPECT_TRUE(c)   expect_at(__LINE__, !!(c), "%s", #c)
#define EXPECT_OK(rc, m) expect_at(__LINE__, (rc) == MMRT_OK, "%s", (m)->err)

static void verdict(void) {
  int mine = nfailures, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  nfailures = 0;
  ck_assert_msg(!any, "rank %d: %s", wrank,
                mine ? first_failure : "a check failed on another rank");
}

/* A mesh that cannot be built leaves the ranks out of step: end the job. */
static void open_mesh(MmrtMesh *m, Plan p) {
  char err[256];
  if (mesh_init4(m, p.dp, p.cp, p.tp, p.pp, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "rank %d: mesh %dx%dx%dx%d: %s\n", wrank, p.dp, p.cp, p.tp, p.pp, err);
    mmrt_comm_abort(1);
  }
  mmrt_comm_set_timeout(m, timeout_s);
}

/* World rank of the member with coordinate c on axis ax of this rank's
 * group. */
static int member(const MmrtMesh *m, MmrtAxis ax, int c) {
  if (ax == MMRT_AXIS_WORLD) return c;
  int co[MESH_NAXES];
  for (int a = 0; a < MESH_NAXES; a++) co[a] = m->coord[a];
  co[ax] = c;
  return mmrt_mesh_rank_of(m, co);
}

/* A small integer from (seed, i): exact in bf16, and sums of a few stay
 * exact. */
static float val(int seed, int64_t i) {
  return (float)((seed * 131 + i * 7 + (i / 5) * 3) % 61 - 30);
}

static uint16_t to_bf16(float f) /* exact for the integers val() makes */
{
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int64_t numel(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* dst = src[..., lo:lo+len, ...] along dimension d, element by element. */
static void naive_slice(float *dst, const float *src, const int64_t *shape, int ndim, int d,
                        int64_t lo, int64_t len) {
  int64_t total = numel(shape, ndim);
  for (int64_t f = 0; f < total; f++) {
    int64_t idx[8] = {0}, rest = f; /* ndim <= 8 */
    for (int i = ndim - 1; i >= 0; i--) {
      idx[i] = rest % shape[i];
      rest /= shape[i];
    }
    if (idx[d] < lo || idx[d] >= lo + len) continue;
    idx[d] -= lo;
    int64_t g = 0;
    for (int i = 0; i < ndim; i++) g = g * (i == d ? len : shape[i]) + idx[i];
    dst[g] = src[f];
  }
}

static void check_eq(const float *got, const float *want, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      EXPECT(0, "%s: element %lld is %g, want %g", what, (long long)i, got[i], want[i]);
      return;
    }
}

static const char *plan_name(Plan p) {
  static char buf[64];
  snprintf(buf, sizeof buf, "%dx%dx%dx%d", p.dp, p.cp, p.tp, p.pp);
  return buf;
}

/* ---------------------------------------------------------------- */

START_TEST(mesh_layout) {
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    Plan p = plans[pi];
    /* pp outermost, then dp, cp, tp innermost */
    int r = wrank;
    EXPECT_EQ(m.coord[MMRT_AXIS_TP], r % p.tp);
    EXPECT_EQ(m.coord[MMRT_AXIS_CP], r / p.tp % p.cp);
    EXPECT_EQ(m.coord[MMRT_AXIS_DP], r / (p.tp * p.cp) % p.dp);
    EXPECT_EQ(m.coord[MMRT_AXIS_PP], r / (p.tp * p.cp * p.dp));
    EXPECT_EQ(mmrt_mesh_rank_of(&m, m.coord), r);
    EXPECT_EQ(m.size[MMRT_AXIS_WORLD], world);
    /* each communicator holds the ranks that differ only on its axis,
     * ordered by that coordinate */
    MPI_Group wg;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */ {
      int n;
      MPI_Comm_size(m.comm[a], &n);
      EXPECT_EQ(n, m.size[a]);
      MPI_Group g;
      MPI_Comm_group(m.comm[a], &g);
      for (int c = 0; c < n; c++) {
        int w;
        MPI_Group_translate_ranks(g, 1, &c, wg, &w);
        EXPECT(w == member(&m, (MmrtAxis)a, c), "mesh %s axis %s member %d: %d", plan_name(p),
               mmrt_axis_name((MmrtAxis)a), c, w);
        if (a == MMRT_AXIS_TP) /* tp groups are adjacent ranks */
          EXPECT_EQ(w, r - m.coord[MMRT_AXIS_TP] + c);
      }
      MPI_Group_free(&g);
    }
    MPI_Group_free(&wg);
    EXPECT_EQ(mmrt_pp_next(&m), (m.coord[MMRT_AXIS_PP] + 1) % p.pp);
    EXPECT_EQ(mmrt_pp_prev(&m), (m.coord[MMRT_AXIS_PP] + p.pp - 1) % p.pp);
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

START_TEST(split_range) {
  int64_t lo, len;
  mmrt_split_range(10, 4, 0, &lo, &len);
  ck_assert(lo == 0 && len == 3);
  mmrt_split_range(10, 4, 1, &lo, &len);
  ck_assert(lo == 3 && len == 3);
  mmrt_split_range(10, 4, 2, &lo, &len);
  ck_assert(lo == 6 && len == 2);
  mmrt_split_range(10, 4, 3, &lo, &len);
  ck_assert(lo == 8 && len == 2);
  mmrt_split_range(3, 4, 3, &lo, &len);
  ck_assert(lo == 3 && len == 0);
  mmrt_split_range(8, 2, 1, &lo, &len);
  ck_assert(lo == 4 && len == 4);
}
END_TEST

START_TEST(all_reduce) {
  static const size_t counts[] = {1, 37, 1000};
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */
      for (int ci = 0; ci < 3; ci++) {
        MmrtAxis ax = (MmrtAxis)a;
        size_t n = counts[ci];
        float *x = malloc(n * 4), *y = malloc(n * 4), *want = calloc(n, 4);
        for (size_t i = 0; i < n; i++) x[i] = val(wrank, (int64_t)i);
        for (int c = 0; c < m.size[ax]; c++)
          for (size_t i = 0; i < n; i++) want[i] += val(member(&m, ax, c), (int64_t)i);
        int rc = mmrt_all_reduce(&m, ax, x, y, n, MMRT_F32);
        EXPECT_OK(rc, &m);
        check_eq(y, want, (int64_t)n, "all_reduce out of place");
        rc = mmrt_all_reduce(&m, ax, x, x, n, MMRT_F32);
        EXPECT_OK(rc, &m);
        check_eq(x, want, (int64_t)n, "all_reduce in place");
        free(x), free(y), free(want);
      }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

START_TEST(all_reduce_bf16) {
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */ {
      MmrtAxis ax = (MmrtAxis)a;
      enum { N = 333 };
      uint16_t x[N];
      float want[N] = {0}, got[N];
      for (int i = 0; i < N; i++) x[i] = to_bf16(val(wrank + 5, i));
      for (int c = 0; c < m.size[ax]; c++)
        for (int i = 0; i < N; i++) want[i] += val(member(&m, ax, c) + 5, i);
      int rc = mmrt_all_reduce(&m, ax, x, x, N, MMRT_BF16);
      EXPECT_OK(rc, &m);
      for (int i = 0; i < N; i++) got[i] = from_bf16(x[i]);
      check_eq(got, want, N, "bf16 all_reduce");
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

/* bf16 sums that round (the tp all-reduces and reduce-scatters of
 * `precision = bf16`, docs/bf16-tp.md): each rank's values have 7 bits of
 * significand at scales 2^0 .. 2^-5, so a sum of two needs up to 13 bits and
 * most sums (some of them ties) must be rounded to bf16's 8. The runtime
 * sums a pair in f32 (exact here) and rounds it to nearest even, once per
 * pairwise add: over 2 ranks the result is the exact sum rounded once,
 * computed here apart (frexp, nearbyint: round half to even, ldexp), not
 * with the runtime's bit trick; over n ranks, n - 1 roundings, each at most
 * 2^-9 of a partial sum's magnitude. */
static float rbf_val(int seed, int64_t i) {
  uint32_t h = (uint32_t)seed * 2654435761u + (uint32_t)i * 40503u;
  h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
  return ldexpf((float)((int)(h % 255u) - 127), -(int)(h / 255u % 6u));
}

static double rne_bf16_ref(double x) {
  if (x == 0) return 0;
  int e;
  double f = frexp(x, &e); /* x = f 2^e, 0.5 <= |f| < 1: 8 bits are f 2^8 */
  return ldexp(nearbyint(ldexp(f, 8)), e - 8);
}

/* got (n values of a sum over an axis of `size` members) against the exact
 * sums `exact` and the sums of magnitudes `mag` */
static void check_bf16_sum(const uint16_t *got, const double *exact, const double *mag, int64_t n,
                           int size, const char *what) {
  int64_t rounded = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = from_bf16(got[i]), r = rne_bf16_ref(exact[i]);
    rounded += r != exact[i];
    if (size <= 2) {
      if (g != r) {
        EXPECT(0, "%s: element %lld is %.9g, want %.9g (the exact sum %.9g rounded once)", what,
               (long long)i, g, r, exact[i]);
        return;
      }
    } else if (fabs(g - exact[i]) > (size - 1) * ldexp(mag[i], -9) * (1 + ldexp(1, -8))) {
      EXPECT(0, "%s: element %lld is %.9g, the exact sum %.9g: more than %d roundings off", what,
             (long long)i, g, exact[i], size - 1);
      return;
    }
  }
  EXPECT(size < 2 || rounded > n / 4, "%s: only %lld of %lld sums needed rounding", what,
         (long long)rounded, (long long)n);
}

START_TEST(bf16_sum_rounding) {
  enum { N = 3 * 8 * 5 };
  uint16_t x[N], out[N];
  double exact[N], mag[N];
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) {
      MmrtAxis ax = (MmrtAxis)a;
      char what[160];
      for (int i = 0; i < N; i++) {
        x[i] = to_bf16(rbf_val(wrank, i)); /* exact: 7 bits */
        exact[i] = mag[i] = 0;
        for (int c = 0; c < m.size[ax]; c++) {
          double v = rbf_val(member(&m, ax, c), i);
          exact[i] += v, mag[i] += fabs(v);
        }
      }
      EXPECT_OK(mmrt_all_reduce(&m, ax, x, out, N, MMRT_BF16), &m);
      snprintf(what, sizeof what, "bf16 all_reduce mesh %s axis %s (%d members)",
               plan_name(plans[pi]), mmrt_axis_name(ax), m.size[ax]);
      check_bf16_sum(out, exact, mag, N, m.size[ax], what);
      /* every member has the same bits (a tp group's replicated activations
       * must not drift apart): each checks that the members' checksums sum
       * to its own times their count, so all equal the mean */
      float mine = 0, sum;
      for (int i = 0; i < N; i++) mine = (float)(((uint32_t)mine * 31u + out[i]) % 65521u);
      EXPECT_OK(mmrt_all_reduce(&m, ax, &mine, &sum, 1, MMRT_F32), &m);
      EXPECT(sum == mine * (float)m.size[ax], "%s: the members' results differ", what);
      /* reduce_scatter along dim 1 of [3, 8, 5]: this rank's rows */
      int64_t lo, len;
      mmrt_split_range(8, m.size[ax], m.coord[ax], &lo, &len);
      EXPECT_OK(mmrt_reduce_scatter(&m, ax, x, out, 3, 8, 5, MMRT_BF16), &m);
      double ex[N], mg[N];
      int64_t k = 0;
      for (int o = 0; o < 3; o++)
        for (int64_t r = lo; r < lo + len; r++)
          for (int j = 0; j < 5; j++, k++)
            ex[k] = exact[(o * 8 + r) * 5 + j], mg[k] = mag[(o * 8 + r) * 5 + j];
      snprintf(what, sizeof what, "bf16 reduce_scatter mesh %s axis %s (%d members)",
               plan_name(plans[pi]), mmrt_axis_name(ax), m.size[ax]);
      check_bf16_sum(out, ex, mg, k, m.size[ax], what);
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

static const int64_t T3[3] = {3, 8, 5};

/* all_gather and reduce_scatter along dims 0, 1, 2 of a [3, 8, 5] tensor
 * (uneven parts on dims 0 and 2). */
START_TEST(all_gather) {
  int64_t total = numel(T3, 3);
  float *g = malloc(total * 4), *part = malloc(total * 4), *out = malloc(total * 4);
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */
      for (int d = 0; d < 3; d++) {
        MmrtAxis ax = (MmrtAxis)a;
        int seed = 1000 + member(&m, ax, 0); /* the group's id */
        for (int64_t i = 0; i < total; i++) g[i] = val(seed, i);
        int64_t lo, len;
        mmrt_split_range(T3[d], m.size[ax], m.coord[ax], &lo, &len);
        naive_slice(part, g, T3, 3, d, lo, len);
        size_t outer = 1, inner = 1;
        for (int i = 0; i < d; i++) outer *= (size_t)T3[i];
        for (int i = d + 1; i < 3; i++) inner *= (size_t)T3[i];
        memset(out, 0xff, total * 4);
        int rc = mmrt_all_gather(&m, ax, part, out, outer, (size_t)T3[d], inner, MMRT_F32);
        EXPECT_OK(rc, &m);
        char what[160];
        snprintf(what, sizeof what, "all_gather mesh %s axis %s dim %d", plan_name(plans[pi]),
                 mmrt_axis_name(ax), d);
        check_eq(out, g, total, what);
      }
    mmrt_mesh_free(&m);
  }
  free(g), free(part), free(out);
  verdict();
}
END_TEST

START_TEST(all_gather_bf16) {
  int64_t total = numel(T3, 3);
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    MmrtAxis ax = MMRT_AXIS_WORLD;
    float g[120], part[120], got[120];
    uint16_t hp[120], hout[120];
    for (int64_t i = 0; i < total; i++) g[i] = val(77, i);
    int64_t lo, len;
    mmrt_split_range(T3[2], m.size[ax], m.coord[ax], &lo, &len);
    naive_slice(part, g, T3, 3, 2, lo, len);
    for (int64_t i = 0; i < 24 * len; i++) hp[i] = to_bf16(part[i]);
    int rc = mmrt_all_gather(&m, ax, hp, hout, 24, 5, 1, MMRT_BF16);
    EXPECT_OK(rc, &m);
    for (int64_t i = 0; i < total; i++) got[i] = from_bf16(hout[i]);
    check_eq(got, g, total, "bf16 all_gather along dim 2");
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

START_TEST(reduce_scatter) {
  int64_t total = numel(T3, 3);
  float *x = malloc(total * 4), *sum = malloc(total * 4), *want = malloc(total * 4),
        *out = malloc(total * 4);
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */
      for (int d = 0; d < 3; d++) {
        MmrtAxis ax = (MmrtAxis)a;
        for (int64_t i = 0; i < total; i++) {
          x[i] = val(wrank, i);
          sum[i] = 0;
          for (int c = 0; c < m.size[ax]; c++) sum[i] += val(member(&m, ax, c), i);
        }
        int64_t lo, len;
        mmrt_split_range(T3[d], m.size[ax], m.coord[ax], &lo, &len);
        naive_slice(want, sum, T3, 3, d, lo, len);
        size_t outer = 1, inner = 1;
        for (int i = 0; i < d; i++) outer *= (size_t)T3[i];
        for (int i = d + 1; i < 3; i++) inner *= (size_t)T3[i];
        int rc = mmrt_reduce_scatter(&m, ax, x, out, outer, (size_t)T3[d], inner, MMRT_F32);
        EXPECT_OK(rc, &m);
        char what[160];
        snprintf(what, sizeof what, "reduce_scatter mesh %s axis %s dim %d", plan_name(plans[pi]),
                 mmrt_axis_name(ax), d);
        check_eq(out, want, (int64_t)outer * len * (int64_t)inner, what);
      }
    mmrt_mesh_free(&m);
  }
  free(x), free(sum), free(want), free(out);
  verdict();
}
END_TEST

/* S(gd) -> S(sd): send = global split along gd, recv = global split along
 * sd; then back again. */
static void a2a_case(MmrtMesh *m, MmrtAxis ax, const int64_t *shape, int ndim, int gd, int sd) {
  int64_t total = numel(shape, ndim);
  float *g = malloc(total * 4), *in = malloc(total * 4), *out = malloc(total * 4),
        *want = malloc(total * 4), *back = malloc(total * 4);
  int seed = 2000 + member(m, ax, 0);
  for (int64_t i = 0; i < total; i++) g[i] = val(seed, i);
  int n = m->size[ax], me = m->coord[ax];
  int64_t glo, glen, slo, slen;
  mmrt_split_range(shape[gd], n, me, &glo, &glen);
  mmrt_split_range(shape[sd], n, me, &slo, &slen);
  naive_slice(in, g, shape, ndim, gd, glo, glen);
  naive_slice(want, g, shape, ndim, sd, slo, slen);
  int rc = mmrt_all_to_all(m, ax, in, out, shape, ndim, gd, sd, MMRT_F32);
  EXPECT_OK(rc, m);
  char what[128];
  snprintf(what, sizeof what, "all_to_all axis %s (%d ranks) S(%d) -> S(%d) of %d-d",
           mmrt_axis_name(ax), n, gd, sd, ndim);
  check_eq(out, want, total / shape[sd] * slen, what);
  rc = mmrt_all_to_all(m, ax, out, back, shape, ndim, sd, gd, MMRT_F32);
  EXPECT_OK(rc, m);
  check_eq(back, in, total / shape[gd] * glen, "all_to_all round trip");
  free(g), free(in), free(out), free(want), free(back);
}

START_TEST(all_to_all) {
  static const int64_t ulysses[4] = {2, 8, 4, 3}; /* (B, T, NH, HS) */
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */ {
      MmrtAxis ax = (MmrtAxis)a;
      for (int gd = 0; gd < 3; gd++)
        for (int sd = 0; sd < 3; sd++)
          if (gd != sd) a2a_case(&m, ax, T3, 3, gd, sd);
      a2a_case(&m, ax, ulysses, 4, 1, 2);
      a2a_case(&m, ax, ulysses, 4, 2, 1);
      a2a_case(&m, ax, ulysses, 4, 0, 3);
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

START_TEST(broadcast) {
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */ {
      MmrtAxis ax = (MmrtAxis)a;
      for (int root = 0; root < m.size[ax]; root++) {
        enum { N = 41 };
        float x[N], want[N];
        for (int i = 0; i < N; i++) {
          x[i] = val(wrank, i);
          want[i] = val(member(&m, ax, root), i);
        }
        int rc = mmrt_broadcast(&m, ax, x, N, MMRT_F32, root);
        EXPECT_OK(rc, &m);
        check_eq(x, want, N, "broadcast");
      }
      EXPECT(mmrt_barrier(&m, ax) == 0, "%s", m.err);
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

/* A pipeline transfer split over tp (mmrt_tp_gather_chunks): each tp rank
 * holds only its chunk, mmrt_split_range of the elements (uneven and, with
 * fewer elements than ranks, empty), of elements of 1 to 8 bytes; after
 * the gather every rank holds the whole, the same bytes as the formula's
 * (the seed holds the tp group's id: another group's bytes would show). */
START_TEST(tp_gather_chunks) {
  static const size_t counts[] = {1, 3, 7, 8, 13, 1000};
  static const size_t sizes[] = {1, 2, 4, 8};
  unsigned char *buf = malloc(1000 * 8), *want = malloc(1000 * 8);
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    int seed = 77 + member(&m, MMRT_AXIS_TP, 0);
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
      for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        size_t n = counts[c], es = sizes[z], bytes = n * es;
        for (size_t i = 0; i < bytes; i++) want[i] = (unsigned char)(seed * 31 + i * 7 + i / es);
        int64_t lo, len;
        mmrt_split_range((int64_t)n, m.size[MMRT_AXIS_TP], m.coord[MMRT_AXIS_TP], &lo, &len);
        memset(buf, 0xa5, bytes);
        memcpy(buf + lo * es, want + lo * es, (size_t)len * es);
        int rc = mmrt_tp_gather_chunks(&m, buf, n, es, "tp_gather_chunks");
        EXPECT_OK(rc, &m);
        EXPECT(memcmp(buf, want, bytes) == 0,
               "tp_gather_chunks mesh %s: %zu elements of %zu bytes differ after the gather",
               plan_name(plans[pi]), n, es);
      }
    mmrt_mesh_free(&m);
  }
  free(buf), free(want);
  verdict();
}
END_TEST

/* Pipeline transfers: forward to the next stage, backward to the previous
 * one, wrapping around; even stages send first so that no two neighbours
 * both wait in a blocking send. */
START_TEST(pipeline_send_recv) {
  for (int pi = 0; pi < nplans; pi++) {
    Plan p = plans[pi];
    if (p.pp < 2) continue;
    MmrtMesh m;
    open_mesh(&m, p);
    enum { N = 300 };
    float act[N], got[N], want[N];
    int me = m.coord[MMRT_AXIS_PP];
    for (int dir = 0; dir < 2; dir++) {
      for (int i = 0; i < N; i++) {
        act[i] = val(wrank + 10 * dir, i);
        int from = dir == 0 ? mmrt_pp_prev(&m) : mmrt_pp_next(&m);
        want[i] = val(member(&m, MMRT_AXIS_PP, from) + 10 * dir, i);
      }
      int rc = 0;
      for (int phase = 0; phase < 2; phase++) {
        if ((me % 2 == 0) == (phase == 0))
          rc = dir == 0 ? mmrt_send_next(&m, act, N, MMRT_F32)
                        : mmrt_send_prev(&m, act, N, MMRT_F32);
        else
          rc = dir == 0 ? mmrt_recv_prev(&m, got, N, MMRT_F32)
                        : mmrt_recv_next(&m, got, N, MMRT_F32);
        EXPECT_OK(rc, &m);
      }
      check_eq(got, want, N, dir == 0 ? "send_next/recv_prev" : "send_prev/recv_next");
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

/* A ring step on every axis with mmrt_sendrecv (a self copy on size-1
 * axes), and a chain with MMRT_NO_PEER at its ends. */
START_TEST(sendrecv_ring) {
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */ {
      MmrtAxis ax = (MmrtAxis)a;
      int n = m.size[ax], me = m.coord[ax];
      enum { N = 57 };
      float x[N], got[N], want[N];
      for (int i = 0; i < N; i++) {
        x[i] = val(wrank + 3, i);
        want[i] = val(member(&m, ax, (me + n - 1) % n) + 3, i);
      }
      int rc = mmrt_sendrecv(&m, ax, x, N, (me + 1) % n, got, N, (me + n - 1) % n, MMRT_F32, 7);
      EXPECT_OK(rc, &m);
      check_eq(got, want, N, "sendrecv ring");
      /* chain: no receive on the first, no send on the last */
      for (int i = 0; i < N; i++) got[i] = -99;
      int dest = me + 1 < n ? me + 1 : MMRT_NO_PEER, src = me > 0 ? me - 1 : MMRT_NO_PEER;
      if (n > 1) {
        rc = mmrt_sendrecv(&m, ax, x, N, dest, got, N, src, MMRT_F32, 8);
        EXPECT_OK(rc, &m);
        if (me > 0)
          check_eq(got, want, N, "sendrecv chain");
        else
          EXPECT_TRUE(got[0] == -99);
      }
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

/* Odd-sized buffers (one empty, NULL) under several bucket sizes. */
START_TEST(buckets) {
  static const size_t sizes[] = {1, 7, 0, 1000, 3, 513, 2};
  enum { NB = 7 };
  static const size_t bucket_bytes[] = {4, 64, 102, 4096, 1 << 20};
  size_t total = 0;
  for (int k = 0; k < NB; k++) total += sizes[k];
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    MmrtAxis axes[2] = {MMRT_AXIS_DP, MMRT_AXIS_WORLD};
    for (int ai = 0; ai < 2; ai++)
      for (int bi = 0; bi < 5; bi++) {
        MmrtAxis ax = axes[ai];
        int n = m.size[ax];
        float *bufs[NB], *want[NB];
        for (int k = 0; k < NB; k++) {
          bufs[k] = sizes[k] ? malloc(sizes[k] * 4) : NULL;
          want[k] = sizes[k] ? calloc(sizes[k], 4) : NULL;
          for (size_t i = 0; i < sizes[k]; i++) {
            bufs[k][i] = val(wrank * 7 + k, (int64_t)i);
            for (int c = 0; c < n; c++) want[k][i] += val(member(&m, ax, c) * 7 + k, (int64_t)i);
            want[k][i] *= 0.5f;
          }
        }
        mmrt_comm_counters_reset();
        int rc = mmrt_all_reduce_buckets(&m, ax, (void *const *)bufs, sizes, NB, MMRT_F32,
                                         bucket_bytes[bi], 0.5f);
        EXPECT_OK(rc, &m);
        for (int k = 0; k < NB; k++) {
          check_eq(bufs[k], want[k], (int64_t)sizes[k], "bucketed all_reduce");
          free(bufs[k]), free(want[k]);
        }
        size_t cap = bucket_bytes[bi] / 4;
        MmrtCommCount c = mmrt_comm_counter(MMRT_COMM_ALL_REDUCE, ax);
        EXPECT(c.calls == (total + cap - 1) / cap,
               "bucket of %zu bytes: %llu all_reduce calls, want %zu", bucket_bytes[bi],
               (unsigned long long)c.calls, (total + cap - 1) / cap);
        EXPECT_EQ(c.elems, total);
      }
    /* bf16, scale 1 */
    uint16_t a[5], b[11];
    void *bb[2] = {a, b};
    size_t cnt[2] = {5, 11};
    for (int i = 0; i < 5; i++) a[i] = to_bf16(val(wrank, i));
    for (int i = 0; i < 11; i++) b[i] = to_bf16(val(wrank + 1, i));
    int rc = mmrt_all_reduce_buckets(&m, MMRT_AXIS_WORLD, bb, cnt, 2, MMRT_BF16, 8, 1.0f);
    EXPECT_OK(rc, &m);
    for (int i = 0; i < 11; i++) {
      float wa = 0, wb = 0;
      for (int c = 0; c < world; c++) wa += val(c, i), wb += val(c + 1, i);
      if (i < 5) EXPECT(from_bf16(a[i]) == wa, "bf16 bucket a[%d]", i);
      EXPECT(from_bf16(b[i]) == wb, "bf16 bucket b[%d]", i);
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

/* Several reduce-scatters in one call (a ZeRO gradient bucket): each part
 * equals the tensor's own mmrt_reduce_scatter, uneven and empty dims too,
 * and the call counts once with the summed elements. */
START_TEST(reduce_scatter_bucket) {
  enum { NB = 4 };
  static const size_t dims[3 * NB] = {3, 8, 5, 1, 7, 3, 2, 0, 4, 1, 10, 1};
  for (int pi = 0; pi < nplans; pi++) {
    MmrtMesh m;
    open_mesh(&m, plans[pi]);
    MmrtAxis axes[2] = {MMRT_AXIS_DP, MMRT_AXIS_WORLD};
    for (int ai = 0; ai < 2; ai++) {
      MmrtAxis ax = axes[ai];
      float *x[NB], *got[NB], *want[NB];
      size_t full = 0;
      for (int k = 0; k < NB; k++) {
        size_t f = dims[3 * k] * dims[3 * k + 1] * dims[3 * k + 2];
        full += f;
        x[k] = f ? malloc(f * 4) : NULL;
        got[k] = f ? calloc(f, 4) : NULL;
        want[k] = f ? calloc(f, 4) : NULL;
        for (size_t i = 0; i < f; i++) x[k][i] = val(wrank * 5 + k, (int64_t)i);
        EXPECT_OK(mmrt_reduce_scatter(&m, ax, x[k], want[k], dims[3 * k], dims[3 * k + 1],
                                      dims[3 * k + 2], MMRT_F32),
                  &m);
      }
      mmrt_comm_counters_reset();
      EXPECT_OK(mmrt_reduce_scatter_bucket(&m, ax, (const void *const *)x, (void *const *)got, dims,
                                           NB, MMRT_F32),
                &m);
      MmrtCommCount c = mmrt_comm_counter(MMRT_COMM_REDUCE_SCATTER, ax);
      EXPECT(c.calls == 1 && c.elems == full,
             "reduce_scatter_bucket counted %llu calls of %llu elements",
             (unsigned long long)c.calls, (unsigned long long)c.elems);
      for (int k = 0; k < NB; k++) {
        int64_t lo, len;
        mmrt_split_range((int64_t)dims[3 * k + 1], m.size[ax], m.coord[ax], &lo, &len);
        check_eq(got[k], want[k], (int64_t)(dims[3 * k] * (size_t)len * dims[3 * k + 2]),
                 "bucketed reduce_scatter");
        free(x[k]), free(got[k]), free(want[k]);
      }
    }
    mmrt_mesh_free(&m);
  }
  verdict();
}
END_TEST

/* The counters against the accounting formulas, per kind and axis. */
static uint64_t frac(uint64_t bytes, uint64_t k, uint64_t n) {
  return (uint64_t)floor((double)bytes * (double)k / (double)n);
}

static void expect_count(MmrtCommKind k, MmrtAxis ax, uint64_t calls, uint64_t elems,
                         uint64_t bytes, int n) {
  MmrtCommCount c = mmrt_comm_counter(k, ax);
  EXPECT(c.calls == calls && c.elems == elems && c.bytes == bytes && c.n == n,
         "rank %d: %s.%s: calls %llu elems %llu bytes %llu n %d; want %llu %llu %llu %d", wrank,
         mmrt_comm_kind_name(k), mmrt_axis_name(ax), (unsigned long long)c.calls,
         (unsigned long long)c.elems, (unsigned long long)c.bytes, c.n, (unsigned long long)calls,
         (unsigned long long)elems, (unsigned long long)bytes, n);
}

START_TEST(counters) {
  MmrtMesh m;
  open_mesh(&m, plans[nplans > 2 ? 2 : 0]); /* 2x1x2 on 4 ranks */
  int ntp = m.size[MMRT_AXIS_TP], ndp = m.size[MMRT_AXIS_DP], nw = world;
  float *x = calloc(4096, 4), *y = calloc(4096, 4);
  mmrt_comm_counters_reset();

  EXPECT_OK(mmrt_all_reduce(&m, MMRT_AXIS_TP, x, y, 1000, MMRT_F32), &m);
  EXPECT_OK(mmrt_all_reduce(&m, MMRT_AXIS_TP, x, x, 333, MMRT_F32), &m);
  expect_count(MMRT_COMM_ALL_REDUCE, MMRT_AXIS_TP, 2, 1333,
               frac(4000, 2 * (ntp - 1), ntp) + frac(1332, 2 * (ntp - 1), ntp), ntp);

  EXPECT_OK(mmrt_all_gather(&m, MMRT_AXIS_DP, x, y, 3, 8, 5, MMRT_F32), &m);
  expect_count(MMRT_COMM_ALL_GATHER, MMRT_AXIS_DP, 1, 120, frac(480, ndp - 1, ndp), ndp);

  EXPECT_OK(mmrt_reduce_scatter(&m, MMRT_AXIS_WORLD, x, y, 3, 8, 5, MMRT_F32), &m);
  expect_count(MMRT_COMM_REDUCE_SCATTER, MMRT_AXIS_WORLD, 1, 120, frac(480, nw - 1, nw), nw);

  int64_t shape[4] = {2, 8, 4, 3};
  EXPECT_OK(mmrt_all_to_all(&m, MMRT_AXIS_TP, x, y, shape, 4, 1, 2, MMRT_F32), &m);
  uint64_t local = 2 * 8 * 4 * 3 / (uint64_t)ntp;
  expect_count(MMRT_COMM_ALL_TO_ALL, MMRT_AXIS_TP, 1, local, frac(local * 4, ntp - 1, ntp), ntp);

  uint16_t h[50] = {0};
  EXPECT_OK(mmrt_all_reduce(&m, MMRT_AXIS_DP, h, h, 50, MMRT_BF16), &m);
  expect_count(MMRT_COMM_ALL_REDUCE, MMRT_AXIS_DP, 1, 50, frac(100, 2 * (ndp - 1), ndp), ndp);

  /* 102 bytes: (n - 1) / n of it is rounded down on 4 ranks */
  uint16_t part[51] = {0}, whole[51]; /* this rank sends its 13 (or, alone, 51) */
  EXPECT_OK(mmrt_all_gather(&m, MMRT_AXIS_WORLD, part, whole, 1, 51, 1, MMRT_BF16), &m);
  expect_count(MMRT_COMM_ALL_GATHER, MMRT_AXIS_WORLD, 1, 51, frac(102, nw - 1, nw), nw);

  EXPECT_OK(mmrt_broadcast(&m, MMRT_AXIS_WORLD, x, 10, MMRT_F32, 0), &m);
  expect_count(MMRT_COMM_BROADCAST, MMRT_AXIS_WORLD, 1, 10, nw > 1 && wrank == 0 ? 40 : 0, nw);

  int me = m.coord[MMRT_AXIS_WORLD];
  EXPECT_OK(mmrt_sendrecv(&m, MMRT_AXIS_WORLD, x, 20, (me + 1) % nw, y, 20, (me + nw - 1) % nw,
                          MMRT_F32, 1),
            &m);
  expect_count(MMRT_COMM_SEND, MMRT_AXIS_WORLD, 1, 20, nw > 1 ? 80 : 0, nw);
  expect_count(MMRT_COMM_RECV, MMRT_AXIS_WORLD, 1, 20, 0, nw);

  EXPECT_OK(mmrt_barrier(&m, MMRT_AXIS_WORLD), &m);
  expect_count(MMRT_COMM_BARRIER, MMRT_AXIS_WORLD, 1, 0, 0, nw);

  uint64_t total = 0;
  for (int k = 0; k < MMRT_COMM_NKINDS; k++)
    for (int a = 0; a <= MMRT_AXIS_WORLD; a++) /* the mesh and the world */
      total += mmrt_comm_counter((MmrtCommKind)k, (MmrtAxis)a).bytes;
  EXPECT_EQ(mmrt_comm_bytes_total(), total);

  /* the JSON and the table */
  char json[2048], row[160];
  size_t need = mmrt_comm_counters_json(json, sizeof json);
  EXPECT_TRUE(need < sizeof json);
  EXPECT_EQ(need, strlen(json));
  snprintf(row, sizeof row,
           "\"all_reduce.tp\":{\"n\":%d,\"calls\":2,\"elems\":1333,\"bytes\":%llu}", ntp,
           (unsigned long long)mmrt_comm_counter(MMRT_COMM_ALL_REDUCE, MMRT_AXIS_TP).bytes);
  EXPECT(strstr(json, row), "%s not in %s", row, json);
  snprintf(row, sizeof row, "\"bytes\":%llu}", (unsigned long long)total);
  EXPECT(strstr(json, row), "%s not at the end of %s", row, json);
  EXPECT_TRUE(json[0] == '{');
  char small[16];
  EXPECT_EQ(mmrt_comm_counters_json(small, sizeof small), need);
  EXPECT_EQ(strlen(small), sizeof small - 1);

  char *text = NULL;
  size_t tlen = 0;
  FILE *f = open_memstream(&text, &tlen);
  mmrt_comm_counters_print(f);
  fclose(f);
  EXPECT(strstr(text, "reduce_scatter  world"), "%s", text);
  EXPECT(strstr(text, "barrier"), "%s", text);
  EXPECT(strstr(text, "total"), "%s", text);
  free(text);

  mmrt_comm_counters_reset();
  EXPECT_EQ(mmrt_comm_bytes_total(), 0);
  EXPECT_EQ(mmrt_comm_counter(MMRT_COMM_ALL_REDUCE, MMRT_AXIS_TP).calls, 0);
  EXPECT_EQ(mmrt_comm_counters_json(json, sizeof json), strlen("{\"bytes\":0}"));
  free(x), free(y);
  mmrt_mesh_free(&m);
  verdict();
}
END_TEST

/* Argument errors name the collective and the axis; the world-size check
 * says what the trainer expected. */
/* Hierarchical ZeRO (mmrt_hzero.c) on dp = 4 as 2 node groups of 2: dp's
 * all-gathers and reduce-scatters give the flat ones' results, in f32 and
 * bf16, counted on dp_node and dp_cross; the gather across the groups is
 * made once per update (mmrt_comm_set_phase(UPDATE) expires it); a node
 * size that does not tile dp is refused. */
START_TEST(hzero) {
  if (world != 4) return;
  MmrtMesh m;
  open_mesh(&m, plans[0]); /* dp = 4 */
  char err[256];
  EXPECT(mmrt_mesh_hzero(&m, 3, err, sizeof err) == MMRT_ERR_ARG, "node groups of 3 accepted");
  EXPECT_OK(mmrt_mesh_hzero(&m, 2, err, sizeof err), &m);
  EXPECT(m.size[MMRT_AXIS_DP_NODE] == 2 && m.coord[MMRT_AXIS_DP_NODE] == wrank % 2 &&
             m.size[MMRT_AXIS_DP_CROSS] == 2 && m.coord[MMRT_AXIS_DP_CROSS] == wrank / 2,
         "rank %d: dp_node %d/%d, dp_cross %d/%d", wrank, m.coord[MMRT_AXIS_DP_NODE],
         m.size[MMRT_AXIS_DP_NODE], m.coord[MMRT_AXIS_DP_CROSS], m.size[MMRT_AXIS_DP_CROSS]);
  int64_t total = numel(T3, 3), lo, len;
  float g[120], part[120], out[120];
  uint16_t hp[120], hout[120];
  mmrt_split_range(T3[1], 4, m.coord[MMRT_AXIS_DP], &lo, &len);
  mmrt_comm_counters_reset();
  for (int round = 0; round < 3; round++) { /* an update between rounds 1 and 2 */
    if (round == 2) mmrt_comm_set_phase(MMRT_PHASE_UPDATE);
    for (int64_t i = 0; i < total; i++) g[i] = val(round == 2 ? 5 : 4, i);
    naive_slice(part, g, T3, 3, 1, lo, len);
    memset(out, 0xff, sizeof out);
    EXPECT_OK(mmrt_all_gather(&m, MMRT_AXIS_DP, part, out, 3, 8, 5, MMRT_F32), &m);
    check_eq(out, g, total, "hierarchical all_gather");
  }
  mmrt_comm_set_phase(MMRT_PHASE_FORWARD);
  expect_count(MMRT_COMM_ALL_GATHER, MMRT_AXIS_DP_NODE, 3, 3 * 120, 3 * frac(480, 1, 2), 2);
  expect_count(MMRT_COMM_ALL_GATHER, MMRT_AXIS_DP_CROSS, 2, 2 * 60, 2 * frac(240, 1, 2), 2);
  expect_count(MMRT_COMM_ALL_GATHER, MMRT_AXIS_DP, 0, 0, 0, 0);
  for (int64_t i = 0; i < 15 * len; i++) hp[i] = to_bf16(part[i]);
  EXPECT_OK(mmrt_all_gather(&m, MMRT_AXIS_DP, hp, hout, 3, 8, 5, MMRT_BF16), &m);
  for (int64_t i = 0; i < total; i++) out[i] = from_bf16(hout[i]);
  check_eq(out, g, total, "hierarchical bf16 all_gather");
  /* a bucket of four tensors (one empty), blocking and started */
  enum { NB = 4 };
  static const size_t dims[3 * NB] = {3, 8, 5, 1, 4, 3, 2, 0, 4, 1, 12, 1};
  for (int started = 0; started < 2; started++) {
    float *x[NB], *got[NB], *want[NB];
    size_t full = 0;
    for (int k = 0; k < NB; k++) {
      size_t f = dims[3 * k] * dims[3 * k + 1] * dims[3 * k + 2];
      int64_t sh[3] = {(int64_t)dims[3 * k], (int64_t)dims[3 * k + 1], (int64_t)dims[3 * k + 2]};
      full += f;
      x[k] = f ? malloc(f * 4) : NULL;
      got[k] = f ? calloc(f, 4) : NULL;
      want[k] = f ? calloc(f, 4) : NULL;
      float *sum = f ? calloc(f, 4) : NULL;
      for (size_t i = 0; i < f; i++) {
        x[k][i] = val(wrank * 5 + k, (int64_t)i);
        for (int r = 0; r < 4; r++) sum[i] += val(r * 5 + k, (int64_t)i);
      }
      mmrt_split_range(sh[1], 4, m.coord[MMRT_AXIS_DP], &lo, &len);
      if (f) naive_slice(want[k], sum, sh, 3, 1, lo, len);
      free(sum);
    }
    mmrt_comm_counters_reset();
    if (started) {
      EXPECT_OK(mmrt_reduce_scatter_bucket_start(&m, MMRT_AXIS_DP, 3, (const void *const *)x,
                                                 (void *const *)got, dims, NB, MMRT_F32),
                &m);
      EXPECT_OK(mmrt_bucket_wait(&m, 3), &m);
    } else {
      EXPECT_OK(mmrt_reduce_scatter_bucket(&m, MMRT_AXIS_DP, (const void *const *)x,
                                           (void *const *)got, dims, NB, MMRT_F32),
                &m);
    }
    expect_count(MMRT_COMM_REDUCE_SCATTER, MMRT_AXIS_DP_NODE, 1, full, frac(4 * full, 1, 2), 2);
    expect_count(MMRT_COMM_REDUCE_SCATTER, MMRT_AXIS_DP_CROSS, 1, full / 2, frac(2 * full, 1, 2),
                 2);
    for (int k = 0; k < NB; k++) {
      check_eq(got[k], want[k], (int64_t)(dims[3 * k] * dims[3 * k + 1] / 4 * dims[3 * k + 2]),
               started ? "hierarchical reduce_scatter_bucket_start"
                       : "hierarchical reduce_scatter_bucket");
      free(x[k]), free(got[k]), free(want[k]);
    }
  }
  mmrt_mesh_free(&m);
  verdict();
}
END_TEST

START_TEST(errors) {
  MmrtMesh m;
  char err[256];
  int rc = mesh_init4(&m, 1, 1, world + 1, 1, err, sizeof err);
  EXPECT_EQ(rc, MMRT_ERR_MISMATCH);
  char want[200];
  snprintf(want, sizeof want,
           "the trainer was compiled for tp=%d = %d ranks, but mpirun started %d (start it "
           "with mpirun -np %d)",
           world + 1, world + 1, world, world + 1);
  EXPECT(strcmp(err, want) == 0, "%s", err);
  mmrt_mesh_free(&m); /* nothing to free, and harmless */
  rc = mesh_init4(&m, 0, 1, 1, 1, err, sizeof err);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(err, "at least 1"), "%s", err);

  open_mesh(&m, plans[nplans > 2 ? 2 : 0]);
  float x[120] = {0}, y[120];
  int64_t shape[3] = {3, 8, 5};
  rc = mmrt_all_to_all(&m, MMRT_AXIS_TP, x, y, shape, 3, 1, 1, MMRT_F32);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  snprintf(want, sizeof want,
           "all_to_all on axis tp (%d rank%s; tp rank %d, world rank %d): ", m.size[MMRT_AXIS_TP],
           m.size[MMRT_AXIS_TP] == 1 ? "" : "s", m.coord[MMRT_AXIS_TP], wrank);
  EXPECT(strncmp(m.err, want, strlen(want)) == 0, "%s", m.err);
  EXPECT(strstr(m.err, "two different dimensions"), "%s", m.err);
  rc = mmrt_broadcast(&m, MMRT_AXIS_DP, x, 4, MMRT_F32, 9);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(m.err, "broadcast on axis dp") && strstr(m.err, "root 9"), "%s", m.err);
  rc = mmrt_all_reduce(&m, (MmrtAxis)7, x, x, 4, MMRT_F32);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(m.err, "no mesh axis 7"), "%s", m.err);
  rc = mmrt_all_reduce(&m, MMRT_AXIS_DP, x, x, 4, (MmrtDtype)9);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(m.err, "unknown dtype 9"), "%s", m.err);
  rc = mmrt_all_reduce_buckets(&m, MMRT_AXIS_DP, NULL, NULL, 0, MMRT_F32, 2, 1.0f);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(m.err, "holds no element"), "%s", m.err);
  /* pp has size 1 here: the next stage is this rank */
  rc = mmrt_send_next(&m, x, 4, MMRT_F32);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(m.err, "send on axis pp (1 rank;") && strstr(m.err, "itself"), "%s", m.err);
  rc = mmrt_recv(&m, MMRT_AXIS_TP, x, 4, MMRT_F32, 5, 0);
  EXPECT_EQ(rc, MMRT_ERR_ARG);
  EXPECT(strstr(m.err, "peer 5 is not a coordinate"), "%s", m.err);
  mmrt_mesh_free(&m);
  verdict();
}
END_TEST

/* MPI errors come back (MPI_ERRORS_RETURN) as a message naming the call:
 * a receive into a buffer smaller than the message, and a message shorter
 * than expected.  Ranks 0 and 1 of the world only. */
START_TEST(mpi_errors) {
  if (world < 2) return;
  MmrtMesh m;
  open_mesh(&m, plans[0]);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
  int rc;
  if (wrank == 0) {
    rc = mmrt_send(&m, MMRT_AXIS_WORLD, x, 8, MMRT_F32, 1, 3);
    EXPECT_OK(rc, &m);
    rc = mmrt_send(&m, MMRT_AXIS_WORLD, x, 4, MMRT_F32, 1, 4);
    EXPECT_OK(rc, &m);
  } else if (wrank == 1) {
    rc = mmrt_recv(&m, MMRT_AXIS_WORLD, y, 4, MMRT_F32, 0, 3);
    EXPECT_EQ(rc, MMRT_ERR_COMM);
    EXPECT(strstr(m.err, "recv on axis world (") && strstr(m.err, "TRUNCATE"), "%s", m.err);
    rc = mmrt_recv(&m, MMRT_AXIS_WORLD, y, 8, MMRT_F32, 0, 4);
    EXPECT_EQ(rc, MMRT_ERR_COMM);
    EXPECT(strstr(m.err, "expected 8 elements from world rank 0, got 4"), "%s", m.err);
  }
  EXPECT(mmrt_barrier(&m, MMRT_AXIS_WORLD) == 0, "%s", m.err);
  mmrt_mesh_free(&m);
  verdict();
}
END_TEST

static Suite *comm_suite(void) {
  Suite *s = suite_create("mmrt_comm");
  TCase *tc = tcase_create("comm");
  tcase_set_timeout(tc, 0);
  tcase_add_test(tc, mesh_layout);
  tcase_add_test(tc, split_range);
  tcase_add_test(tc, all_reduce);
  tcase_add_test(tc, all_reduce_bf16);
  tcase_add_test(tc, bf16_sum_rounding);
  tcase_add_test(tc, all_gather);
  tcase_add_test(tc, all_gather_bf16);
  tcase_add_test(tc, reduce_scatter);
  tcase_add_test(tc, all_to_all);
  tcase_add_test(tc, broadcast);
  tcase_add_test(tc, pipeline_send_recv);
  tcase_add_test(tc, tp_gather_chunks);
  tcase_add_test(tc, sendrecv_ring);
  tcase_add_test(tc, buckets);
  tcase_add_test(tc, reduce_scatter_bucket);
  tcase_add_test(tc, counters);
  tcase_add_test(tc, hzero);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, mpi_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--timeout") == 0) timeout_s = atof(argv[++i]);
  /* mmrt_mesh_init starts MPI itself; a 1-rank mesh on a bigger world is
   * a mismatch but leaves MPI running, which is all we need here */
  MmrtMesh probe;
  char err[256];
  int rc = mesh_init4(&probe, 1, 1, 1, 1, err, sizeof err);
  if (rc == MMRT_OK) mmrt_mesh_free(&probe);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  if (world == 4) {
    plans = plans4;
    nplans = (int)(sizeof plans4 / sizeof plans4[0]);
  } else if (world == 1) {
    plans = plans1;
    nplans = 1;
  } else {
    fprintf(stderr, "mpi_comm: run with 1 or 4 ranks, not %d\n", world);
    mmrt_comm_finalize();
    return 2;
  }
  SRunner *sr = srunner_create(comm_suite());
  srunner_set_fork_status(sr, CK_NOFORK); /* no fork after MPI_Init */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  mmrt_comm_finalize();
  if (failed) fprintf(stderr, "mpi_comm: rank %d of %d: %d test(s) failed\n", wrank, world, failed);
  return failed ? 1 : 0;
}
