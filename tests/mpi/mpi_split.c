/* mpi_split.c: the vocabulary-parallel kernels of runtime/comm/mmrt_split.c
 * (split embedding and cross entropy, forward and backward) against naive
 * loops over the whole vocabulary.
 *
 * Run under `mpirun -np 2` (the vocabulary split over tp = 2, and a dp = 2
 * mesh whose tp axis of one rank leaves each rank the whole vocabulary) and
 * alone (a NULL mesh and a one-rank mesh). Every rank builds the same whole
 * table, logits, ids and labels from a formula and checks its own part:
 * the embedding rows of its vocabulary range (zero rows for the others, so
 * that the sum over the ranks is the whole lookup), the table gradient of
 * its rows (the sum, in row order, of the output gradients of the ids it
 * holds), the loss and log-sum-exp of the whole vocabulary on every rank,
 * and its columns of d logits = (softmax - onehot) * dloss / count.
 * Rows are ignored (label -100), a row's logits reach 1000 (no overflow),
 * the targets fall at both ends of each rank's range, and a batch where
 * every row is ignored gives loss 0 and zero gradients. A padded vocabulary
 * (passes/vocabpad.c: the kernels told the real classes, fewer than the
 * columns) leaves the padding out of the loss and lse, and its dlogits 0,
 * also on a rank that holds padding alone.
 *
 * Check must not fork under MPI: the runner is CK_NOFORK; a failed check
 * only notes itself so that every rank still enters every collective. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"
#include "mmrt_main.h"

/* mmrt_mesh_init on dp x cp x tp x pp (any other axis of size 1). */
static int mesh_init4(MmrtMesh *m, int dp, int cp, int tp, int pp, char *err, size_t n) {
  int size[MESH_NAXES];
  for (int a = 0; a < MESH_NAXES; a++) size[a] = 1;
  size[MMRT_AXIS_DP] = dp, size[MMRT_AXIS_CP] = cp, size[MMRT_AXIS_TP] = tp,
  size[MMRT_AXIS_PP] = pp;
  return mmrt_mesh_init(m, size, err, n);
}

enum { V = 14, C = 5, N = 11, IGNORE = -100 };

static int world, wrank;
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

static void verdict(void) {
  int mine = nfailures, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  nfailures = 0;
  ck_assert_msg(!any, "rank %d: %s", wrank,
                mine ? first_failure : "a check failed on another rank");
}

/* The meshes of this world size: (dp, tp) and whether to pass NULL. */
typedef struct Setup {
  int dp, tp, null_mesh;
} Setup;
static const Setup setups2[] = {{1, 2, 0}, {2, 1, 0}};
static const Setup setups1[] = {{1, 1, 1}, {1, 1, 0}};
static const Setup *setups;
static int nsetups;

static void *open_mesh(MmrtMesh *m, Setup s) {
  if (s.null_mesh) return NULL;
  char err[256];
  if (mesh_init4(m, s.dp, 1, s.tp, 1, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "rank %d: mesh dp=%d tp=%d: %s\n", wrank, s.dp, s.tp, err);
    mmrt_comm_abort(1);
  }
  return m;
}

static float fval(int seed, int64_t i) { /* a float in about [-2, 2] */
  return (float)(2.0 * sin(0.7 * (double)i + 1.3 * seed) + 0.25 * cos(3.1 * (double)i));
}

/* ids covering both halves, both ends of each, and repeats */
static const int32_t ids[N] = {0, 13, 6, 7, 3, 13, 0, 9, 6, 12, 7};

START_TEST(embedding) {
  for (int si = 0; si < nsetups; si++) {
    MmrtMesh mesh;
    void *m = open_mesh(&mesh, setups[si]);
    int n = setups[si].tp, c = mmrt_step_coord(m, MMRT_AXIS_TP);
    int64_t Vl = V / n, v0 = c * Vl;
    float table[V * C], dout[N * C], out[N * C], whole[N * C], dtable[V * C];
    for (int64_t i = 0; i < V * C; i++) table[i] = fval(1, i);
    for (int64_t i = 0; i < N * C; i++) dout[i] = fval(2, i);
    for (int64_t i = 0; i < N * C; i++) out[i] = NAN;
    mmrt_split_embedding_fwd(m, MMRT_AXIS_TP, out, table + v0 * C, ids, N, Vl, C);
    for (int64_t i = 0; i < N; i++)
      for (int64_t k = 0; k < C; k++) {
        int mine = ids[i] >= v0 && ids[i] < v0 + Vl;
        float want = mine ? table[ids[i] * C + k] : 0.0f;
        EXPECT(out[i * C + k] == want, "setup %d rank %d: out[%lld][%lld] = %g, want %g (id %d)",
               si, c, (long long)i, (long long)k, out[i * C + k], want, ids[i]);
      }
    /* the partial lookups add up over the vocabulary axis to the whole one */
    memcpy(whole, out, sizeof whole);
    if (m) EXPECT(mmrt_step_all_reduce(m, 1 << MMRT_AXIS_TP, whole, N * C) == 0, "all-reduce");
    for (int64_t i = 0; i < N * C; i++)
      EXPECT(whole[i] == table[ids[i / C] * C + i % C], "setup %d: the sum over ranks at %lld", si,
             (long long)i);
    /* backward: the rows this rank holds, each the sum in order of its ids' gradients */
    for (int64_t i = 0; i < V * C; i++) dtable[i] = NAN;
    mmrt_split_embedding_bwd(m, MMRT_AXIS_TP, dtable, dout, ids, N, Vl, C);
    for (int64_t r = 0; r < Vl; r++)
      for (int64_t k = 0; k < C; k++) {
        float want = 0.0f;
        for (int64_t i = 0; i < N; i++)
          if (ids[i] == v0 + r) want += dout[i * C + k];
        EXPECT(dtable[r * C + k] == want, "setup %d rank %d: dtable[%lld][%lld] = %g, want %g", si,
               c, (long long)(v0 + r), (long long)k, dtable[r * C + k], want);
      }
    if (m) mmrt_mesh_free(&mesh);
  }
  verdict();
}
END_TEST

/* the whole-vocabulary loss and lse over the vr real classes (the columns
 * from vr on are padding), in double */
static double naive_ce(const float *x, const int32_t *lab, int vr, double *lse, int *count) {
  double sum = 0;
  *count = 0;
  for (int r = 0; r < N; r++) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < vr; j++) mx = fmax(mx, x[r * V + j]);
    for (int j = 0; j < vr; j++) s += exp(x[r * V + j] - mx);
    lse[r] = mx + log(s);
    if (lab[r] == IGNORE) continue;
    sum += lse[r] - x[r * V + lab[r]];
    ++*count;
  }
  return *count ? sum / *count : 0.0;
}

static void check_ce(void *m, int si, const float *x, const int32_t *lab, float dloss, int vr) {
  int n = m ? ((MmrtMesh *)m)->size[MMRT_AXIS_TP] : 1, c = mmrt_step_coord(m, MMRT_AXIS_TP);
  int64_t Vl = V / n, v0 = c * Vl;
  float local[N * V], loss = NAN, lse[N], d[N * V];
  for (int r = 0; r < N; r++) memcpy(local + r * Vl, x + r * V + v0, sizeof(float) * (size_t)Vl);
  double wlse[N];
  int wcount;
  double want = naive_ce(x, lab, vr, wlse, &wcount);
  int count =
      mmrt_split_cross_entropy_fwd(m, MMRT_AXIS_TP, &loss, lse, local, lab, N, Vl, vr, IGNORE);
  EXPECT(count == wcount, "setup %d: %d labels counted, want %d", si, count, wcount);
  EXPECT(fabs(loss - want) <= 1e-6 * fmax(1.0, fabs(want)),
         "setup %d rank %d: loss %.9g, want %.9g", si, c, loss, want);
  for (int r = 0; r < N; r++)
    EXPECT(fabs(lse[r] - wlse[r]) <= 1e-6 * fmax(1.0, fabs(wlse[r])),
           "setup %d rank %d: lse[%d] %.9g, want %.9g", si, c, r, lse[r], wlse[r]);
  for (int64_t i = 0; i < N * Vl; i++) d[i] = NAN;
  mmrt_split_cross_entropy_bwd(m, MMRT_AXIS_TP, d, local, lse, lab, dloss, N, Vl, vr, IGNORE);
  for (int r = 0; r < N; r++)
    for (int64_t j = 0; j < Vl; j++) {
      double g = 0;
      if (lab[r] != IGNORE && v0 + j < vr)
        g = (exp(x[r * V + v0 + j] - wlse[r]) - (lab[r] == v0 + j)) * dloss / wcount;
      EXPECT(fabs(d[r * Vl + j] - g) <= 1e-6 * fabs(dloss),
             "setup %d rank %d: dlogits[%d][%lld] = %.9g, want %.9g", si, c, r, (long long)(v0 + j),
             d[r * Vl + j], g);
    }
}

START_TEST(cross_entropy) {
  float x[N * V];
  for (int64_t i = 0; i < N * V; i++) x[i] = 3.0f * fval(3, i);
  for (int j = 0; j < V; j++) x[4 * V + j] = 1000.0f - (float)j; /* exp would overflow unshifted */
  /* targets at both ends of each half (0, 6, 7, 13), ignored rows */
  const int32_t lab[N] = {0, 6, IGNORE, 7, 13, 2, IGNORE, 9, 11, 6, 4};
  const int32_t lab9[N] = {0, 6, IGNORE, 7, 8, 2, IGNORE, 8, 1, 6, 4};
  const int32_t lab5[N] = {0, 4, IGNORE, 3, 4, 2, IGNORE, 1, 1, 0, 4};
  const int32_t none[N] = {IGNORE, IGNORE, IGNORE, IGNORE, IGNORE, IGNORE,
                           IGNORE, IGNORE, IGNORE, IGNORE, IGNORE};
  for (int si = 0; si < nsetups; si++) {
    MmrtMesh mesh;
    void *m = open_mesh(&mesh, setups[si]);
    check_ce(m, si, x, lab, 1.0f, V);
    check_ce(m, si, x, lab, 0.37f, V);
    check_ce(m, si, x, none, 1.0f, V);
    /* a padded vocabulary: 9 real classes (rank 1 of tp = 2 holds 7 and 8),
     * then 5 (rank 1 holds only padding); row 4's padding would dominate */
    check_ce(m, si, x, lab9, 0.37f, 9);
    check_ce(m, si, x, lab5, 1.0f, 5);
    if (m) mmrt_mesh_free(&mesh);
  }
  verdict();
}
END_TEST

int main(void) {
  MmrtMesh probe; /* starts MPI; a mismatch leaves it running, which is all we need */
  char err[256];
  if (mesh_init4(&probe, 1, 1, 1, 1, err, sizeof err) == MMRT_OK) mmrt_mesh_free(&probe);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  if (world == 2) {
    setups = setups2;
    nsetups = 2;
  } else if (world == 1) {
    setups = setups1;
    nsetups = 2;
  } else {
    fprintf(stderr, "mpi_split: run with 1 or 2 ranks, not %d\n", world);
    mmrt_comm_finalize();
    return 2;
  }
  Suite *s = suite_create("mmrt_split");
  TCase *tc = tcase_create("vocabulary parallel");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, embedding);
  tcase_add_test(tc, cross_entropy);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* no fork after MPI_Init */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  mmrt_comm_finalize();
  if (failed)
    fprintf(stderr, "mpi_split: rank %d of %d: %d test(s) failed\n", wrank, world, failed);
  return failed ? 1 : 0;
}
