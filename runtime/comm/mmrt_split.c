/* mmrt_split.c: kernels on values split over a mesh axis, for the step
 * functions of multi-rank trainers (declared in mmrt_main.h).
 *
 * Vocabulary parallel (Megatron): a table [V, C] or logits [N, V] split
 * along V over the `axis` ranks; rank c holds vocabulary rows [c Vl,
 * (c + 1) Vl). The embedding of an id another rank holds is a zero row
 * (the partial sums add up over the axis); the cross entropy combines the
 * ranks' log-sum-exps and target logits with one all-reduce of N (n + 1)
 * floats, so the loss and the saved lse are the whole vocabulary's. A
 * padded vocabulary (passes/vocabpad.c) has V real classes: the columns
 * from V on are out of the softmax and the loss, their gradient zero.
 * Every function uses only the collectives of mmrt_comm.h; a NULL mesh is
 * one rank (coordinate 0, no communication). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"
#include "mmrt_kernels.h"
#include "mmrt_main.h"

/* ---- small helpers ---- */

int mmrt_step_coord(const void *mesh, int axis) {
  return mesh && axis >= 0 && axis < MMRT_NAXES ? ((const MmrtMesh *)mesh)->coord[axis] : 0;
}

int mmrt_step_count_labels(const int32_t *labels, int64_t n, int ignore) {
  int c = 0;
  for (int64_t i = 0; i < n; i++) c += labels[i] != ignore;
  return c;
}

int mmrt_step_all_reduce(void *mesh, int axes, float *x, int64_t n) {
  for (int a = 0; mesh && a < MMRT_DESC_NAXES; a++) {
    if (!(axes >> a & 1)) continue;
    int rc = mmrt_all_reduce(mesh, (MmrtAxis)a, x, x, (size_t)n, MMRT_F32);
    if (rc != MMRT_OK) return rc;
  }
  return 0;
}

/* ---- vocabulary parallel ---- */

static int64_t first_row(const void *mesh, int axis, int64_t Vl) {
  return (int64_t)mmrt_step_coord(mesh, axis) * Vl;
}

void mmrt_split_embedding_fwd(void *mesh, int axis, float *out, const float *table,
                              const int32_t *ids, int64_t N, int64_t Vl, int64_t C) {
  int64_t v0 = first_row(mesh, axis, Vl);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++) {
    int64_t r = (int64_t)ids[i] - v0;
    if (r >= 0 && r < Vl)
      memcpy(out + i * C, table + r * C, sizeof(float) * (size_t)C);
    else
      memset(out + i * C, 0, sizeof(float) * (size_t)C);
  }
}

void mmrt_split_embedding_bwd(void *mesh, int axis, float *dtable, const float *dout,
                              const int32_t *ids, int64_t N, int64_t Vl, int64_t C) {
  int64_t v0 = first_row(mesh, axis, Vl);
  memset(dtable, 0, sizeof(float) * (size_t)(Vl * C));
  for (int64_t i = 0; i < N; i++) { /* in order: sums in the serial order */
    int64_t r = (int64_t)ids[i] - v0;
    if (r < 0 || r >= Vl) continue;
    float *d = dtable + r * C;
    const float *g = dout + i * C;
    for (int64_t c = 0; c < C; c++) d[c] += g[c];
  }
}

/* The columns of this rank's Vl that are real classes (< V), from v0. */
static int64_t real_cols(int64_t v0, int64_t Vl, int64_t V) {
  return V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
}

int mmrt_split_cross_entropy_fwd(void *mesh, int axis, float *loss, float *lse, const float *logits,
                                 const int32_t *labels, int64_t N, int64_t Vl, int64_t V,
                                 int ignore) {
  MmrtMesh *m = mesh;
  int n = m ? m->size[axis] : 1, c = mmrt_step_coord(mesh, axis);
  int64_t v0 = (int64_t)c * Vl, Vr = real_cols(v0, Vl, V);
  float *g = calloc((size_t)(N * (n + 1)),
                    sizeof *g); /* per row: each rank's lse, then the target logit */
  if (!g) return MMRT_ERR_NOMEM;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; r++) {
    const float *x = logits + r * Vl;
    g[r * (n + 1) + c] = mmrt_row_lse(x, Vr); /* all padding: -inf, no mass */
    int64_t t = (int64_t)labels[r] - v0;
    if (labels[r] != ignore && t >= 0 && t < Vr) g[r * (n + 1) + n] = x[t];
  }
  int rc = m ? mmrt_all_reduce(m, (MmrtAxis)axis, g, g, (size_t)(N * (n + 1)), MMRT_F32) : MMRT_OK;
  if (rc != MMRT_OK) {
    free(g);
    return rc;
  }
  double sum = 0;
  int count = 0;
  for (int64_t r = 0; r < N; r++) {
    const float *h = g + r * (n + 1);
    float mx = -INFINITY;
    for (int k = 0; k < n; k++) mx = h[k] > mx ? h[k] : mx;
    double s = 0;
    for (int k = 0; k < n; k++) s += exp((double)h[k] - mx);
    lse[r] = (float)(mx + log(s));
    if (labels[r] == ignore) continue;
    sum += (double)lse[r] - h[n];
    count++;
  }
  *loss = count ? (float)(sum / count) : 0.0f;
  free(g);
  return count;
}

void mmrt_split_cross_entropy_bwd(void *mesh, int axis, float *dlogits, const float *logits,
                                  const float *lse, const int32_t *labels, float dloss, int64_t N,
                                  int64_t Vl, int64_t V, int ignore) {
  int64_t v0 = first_row(mesh, axis, Vl), Vr = real_cols(v0, Vl, V);
  int count = mmrt_step_count_labels(labels, N, ignore);
  float scale = count ? dloss / (float)count : 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; r++) {
    float *d = dlogits + r * Vl;
    const float *x = logits + r * Vl;
    if (labels[r] == ignore) {
      memset(d, 0, sizeof(float) * (size_t)Vl);
      continue;
    }
    mmrt_row_exp_scaled(d, x, Vr, lse[r], scale);
    for (int64_t j = Vr; j < Vl; j++) d[j] = 0; /* padding: never trained */
    int64_t t = (int64_t)labels[r] - v0;
    if (t >= 0 && t < Vr) d[t] -= scale;
  }
}

/* ---- split statistics: layer norm over channels split on an axis ---- */

/* The rows' partial sums s[0..n) summed over the axis (in place). */
static int axis_sum(void *mesh, int axis, float *s, int64_t n) {
  return mesh ? mmrt_all_reduce(mesh, (MmrtAxis)axis, s, s, (size_t)n, MMRT_F32) : MMRT_OK;
}

/* Row r's channel c of x laid out (outer, C, inner), r = o * inner + i:
 * x[(o * C + c) * inner + i] (inner 1: rows of C) */
static inline int64_t ln_at(int64_t r, int64_t c, int64_t C, int64_t inner) {
  return inner == 1 ? r * C + c : ((r / inner) * C + c) * inner + r % inner;
}

int mmrt_split_layernorm_fwd(void *mesh, int axis, float *y, float *mean, float *rstd,
                             const float *x, const float *gamma, const float *beta, int64_t N,
                             int64_t C, int64_t Cg, int64_t inner, float eps) {
  float *s = malloc(sizeof(float) * (size_t)(N ? N : 1));
  if (!s) return MMRT_ERR_NOMEM;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; r++) {
    float a = 0.0f;
    for (int64_t c = 0; c < C; c++) a += x[ln_at(r, c, C, inner)];
    s[r] = a;
  }
  int rc = axis_sum(mesh, axis, s, N);
  if (rc == MMRT_OK) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
      float m = s[r] / (float)Cg, v = 0.0f;
      for (int64_t c = 0; c < C; c++) {
        float d = x[ln_at(r, c, C, inner)] - m;
        v += d * d;
      }
      mean[r] = m;
      s[r] = v;
    }
    rc = axis_sum(mesh, axis, s, N);
  }
  if (rc == MMRT_OK) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
      float m = mean[r], rs = 1.0f / sqrtf(s[r] / (float)Cg + eps);
      for (int64_t c = 0; c < C; c++) {
        int64_t k = ln_at(r, c, C, inner);
        y[k] = (x[k] - m) * rs * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f);
      }
      rstd[r] = rs;
    }
  }
  free(s);
  return rc;
}

int mmrt_split_layernorm_bwd(void *mesh, int axis, float *dx, float *dgamma, float *dbeta,
                             const float *dy, const float *x, const float *mean, const float *rstd,
                             const float *gamma, int64_t N, int64_t C, int64_t Cg, int64_t inner) {
  float *s = malloc(sizeof(float) * (size_t)(2 * N + 1)); /* per row: sum g, sum g * xhat */
  if (!s) return MMRT_ERR_NOMEM;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; r++) {
    float m = mean[r], rs = rstd[r], sg = 0.0f, sgh = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      int64_t k = ln_at(r, c, C, inner);
      float g = dy[k] * (gamma ? gamma[c] : 1.0f);
      sg += g;
      sgh += g * (x[k] - m) * rs;
    }
    s[2 * r] = sg, s[2 * r + 1] = sgh;
  }
  int rc = axis_sum(mesh, axis, s, 2 * N);
  if (rc == MMRT_OK && dx) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
      float m = mean[r], rs = rstd[r];
      float sg = s[2 * r] / (float)Cg, sgh = s[2 * r + 1] / (float)Cg;
      for (int64_t c = 0; c < C; c++) {
        int64_t k = ln_at(r, c, C, inner);
        float g = dy[k] * (gamma ? gamma[c] : 1.0f), h = (x[k] - m) * rs;
        dx[k] = rs * (g - sg - h * sgh);
      }
    }
  }
  free(s);
  if (rc != MMRT_OK || !(dgamma || dbeta)) return rc;
  /* this rank's channels: the serial kernel's column sums, row order kept */
  if (inner > 1)
    mmrt_layernorm_axis_bwd(NULL, dgamma, dbeta, dy, x, mean, rstd, gamma, N / inner, C, inner, 0);
  else
    mmrt_layernorm_bwd(NULL, dgamma, dbeta, dy, x, mean, rstd, gamma, (int)N, (int)C, 0);
  return MMRT_OK;
}
