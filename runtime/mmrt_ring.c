/* mmrt_ring.c: context parallel over the cp axis (declared in mmrt_main.h
 * through mmrt_abi.def): ring attention and the balanced layout's
 * collectives and RoPE.
 *
 * Ring attention (Liu et al. 2023; the flash-attention form). Each rank
 * keeps its block of queries; the key/value blocks travel around the cp
 * ring: at step s rank r holds the block of rank (r - s) mod P, starts
 * shifting it to rank r + 1 (mmrt_ring_shift_start, non-blocking) and,
 * while it travels, computes its queries against it with the flash kernel
 * of mmrt_ops.c (mmrt_attention_fwd: a block's normalised output and
 * log-sum-exp), merged into the running output by log-sum-exp:
 *   lse = log(e^lse1 + e^lse2),  out = e^(lse1 - lse) out1 + e^(lse2 - lse) out2.
 * P - 1 shifts of 2 (B T) KVH D elements forward. The backward runs the same
 * ring with the final out and lse (so every block's probabilities are the
 * global ones, mmrt_attention_bwd): dq accumulates on the rank, dK and dV
 * accumulate in buffers that travel with their block, one shift behind, and
 * arrive home after the P-th shift.
 *
 * Causal: the balanced ("zigzag") layout, so that every rank has the same
 * work: the sequence is cut in 2P chunks of c = T / 2 local rows, rank i
 * holds chunks i and 2P - 1 - i in that order. Query chunk gq sees key
 * chunk gk fully when gk < gq, causally when gk == gq, not at all when
 * gk > gq. The trainer's other values split over cp are in the same layout
 * (ir_cp_balanced): the slices, gathers and reduce-scatters over cp below
 * and RoPE's positions follow it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"
#include "mmrt_main.h"

enum { TAG_KV = 0x6d6d21, TAG_DKV = 0x6d6d22 };

/* The global chunk (in units of the local length / nc) of local chunk x. */
static int gchunk(int r, int P, int nc, int x) {
  return nc == 1 ? r : x == 0 ? r : 2 * P - 1 - r;
}

static int nomem(MmrtMesh *m, const char *what) {
  if (m) snprintf(m->err, sizeof m->err, "%s: out of memory", what);
  return MMRT_ERR_NOMEM;
}

/* out, lse (+)= the block's (o2, l2) by log-sum-exp: n rows of H heads,
 * lse with head strides ldl and ldl2. */
static void merge(float *out, float *lse, int ldl, const float *o2, const float *l2, int ldl2,
                  int n, int H, int D) {
  for (int h = 0; h < H; h++)
    for (int t = 0; t < n; t++) {
      float a = lse[(size_t)h * ldl + t], b = l2[(size_t)h * ldl2 + t];
      if (b == -INFINITY) continue;
      float mx = a > b ? a : b, wa = a == -INFINITY ? 0.0f : expf(a - mx), wb = expf(b - mx);
      float s = wa + wb, ia = wa / s, ib = wb / s;
      float *o = out + ((size_t)t * H + h) * D;
      const float *p = o2 + ((size_t)t * H + h) * D;
      for (int d = 0; d < D; d++) o[d] = ia * o[d] + ib * p[d];
      lse[(size_t)h * ldl + t] = mx + logf(s);
    }
}

typedef struct Ring {
  MmrtMesh *m;
  int P, r, nc, B, T, H, KVH, D, causal;
  int64_t c;
  size_t qrow, kvrow, nkv; /* floats per query row, per key row, of one k (or v) block */
} Ring;

static Ring ring_of(void *mesh, int B, int T, int H, int KVH, int D, int causal) {
  MmrtMesh *m = mesh;
  Ring g = {m,
            m ? m->size[MMRT_AXIS_CP] : 1,
            m ? m->coord[MMRT_AXIS_CP] : 0,
            causal ? 2 : 1,
            B,
            T,
            H,
            KVH,
            D,
            causal,
            0,
            (size_t)H * D,
            (size_t)KVH * D,
            0};
  g.c = T / g.nc;
  g.nkv = (size_t)B * T * g.kvrow;
  return g;
}

/* Which part of query chunk x sees key chunk y of rank src: 0 none,
 * 1 causally (the same chunk), 2 all. */
static int visible(const Ring *g, int x, int src, int y) {
  if (!g->causal) return 2;
  int gq = gchunk(g->r, g->P, g->nc, x), gk = gchunk(src, g->P, g->nc, y);
  return gk < gq ? 2 : gk == gq ? 1 : 0;
}

/* Progress of a shift in flight (Open MPI moves large messages only inside
 * MPI calls). */
static void poll(MPI_Request *rq, int active) {
  if (active) mmrt_ring_shift_test(rq);
}

/* The forward's work on the block of rank src (k, v): merged into out, lse. */
static void fwd_block(const Ring *g, float *out, float *lse, const float *q, const float *k,
                      const float *v, int src, float scale, float *to, float *tl, MPI_Request *rq,
                      int active) {
  if (!g->causal) { /* one call over every row: no mask, the chunk order does not matter */
    mmrt_attention_fwd(to, tl, q, k, v, g->B, g->T, g->T, g->H, g->KVH, g->D, 0, scale);
    poll(rq, active);
    for (int b = 0; b < g->B; b++)
      merge(out + (size_t)b * g->T * g->qrow, lse + (size_t)b * g->H * g->T, g->T,
            to + (size_t)b * g->T * g->qrow, tl + (size_t)b * g->H * g->T, g->T, g->T, g->H, g->D);
    return;
  }
  int c = (int)g->c;
  for (int b = 0; b < g->B; b++)
    for (int x = 0; x < g->nc; x++)
      for (int y = 0; y < g->nc; y++) {
        int vis = visible(g, x, src, y);
        if (!vis) continue;
        size_t qo = ((size_t)b * g->T + (size_t)x * c) * g->qrow;
        size_t ko = ((size_t)b * g->T + (size_t)y * c) * g->kvrow;
        mmrt_attention_fwd(to, tl, q + qo, k + ko, v + ko, 1, c, c, g->H, g->KVH, g->D, vis == 1,
                           scale);
        merge(out + qo, lse + (size_t)b * g->H * g->T + (size_t)x * c, g->T, to, tl, c, c, g->H,
              g->D);
        poll(rq, active);
      }
}

int mmrt_ring_attention_fwd(void *mesh, float *out, float *lse, const float *q, const float *k,
                            const float *v, int B, int T, int H, int KVH, int D, int causal,
                            float scale) {
  Ring g = ring_of(mesh, B, T, H, KVH, D, causal);
  if (g.P <= 1) {
    mmrt_attention_fwd(out, lse, q, k, v, B, T, T, H, KVH, D, causal, scale);
    return MMRT_OK;
  }
  size_t nq = (size_t)B * T * g.qrow;
  float *kv = malloc(sizeof(float) * 4 * g.nkv),
        *to = malloc(sizeof(float) * (nq + (size_t)B * H * T));
  if (!kv || !to) {
    free(kv), free(to);
    return nomem(g.m, "mmrt_ring_attention_fwd");
  }
  float *cur = kv, *next = kv + 2 * g.nkv, *tl = to + nq;
  memcpy(cur, k, sizeof(float) * g.nkv);
  memcpy(cur + g.nkv, v, sizeof(float) * g.nkv);
  memset(out, 0, sizeof(float) * nq);
  for (size_t i = 0; i < (size_t)B * H * T; i++) lse[i] = -INFINITY;
  int rc = MMRT_OK;
  for (int s = 0; s < g.P && !rc; s++) {
    MPI_Request rq[2];
    int shift = s < g.P - 1;
    if (shift &&
        (rc = mmrt_ring_shift_start(g.m, MMRT_AXIS_CP, cur, next, 2 * g.nkv, MMRT_F32, TAG_KV, rq)))
      break;
    fwd_block(&g, out, lse, q, cur, cur + g.nkv, (g.r - s + g.P) % g.P, scale, to, tl, rq, shift);
    if (shift) {
      rc = mmrt_ring_shift_wait(g.m, MMRT_AXIS_CP, rq);
      float *t = cur;
      cur = next, next = t;
    }
  }
  free(kv), free(to);
  return rc;
}

/* The backward's work on the block of rank src (k, v): dq += its part,
 * dk, dv (the block's travelling accumulators) += theirs. */
static void bwd_block(const Ring *g, float *dq, float *dk, float *dv, const float *dout,
                      const float *q, const float *k, const float *v, const float *out,
                      const float *lse, int src, float scale, float *tl, MPI_Request *rq,
                      int active) {
  if (!g->causal) {
    mmrt_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, g->B, g->T, g->T, g->H, g->KVH, g->D, 0,
                       scale, 1);
    poll(rq, active);
    return;
  }
  int c = (int)g->c;
  for (int b = 0; b < g->B; b++)
    for (int x = 0; x < g->nc; x++) {
      for (int h = 0; h < g->H; h++) /* this chunk's lse, (1, H, c) */
        memcpy(tl + (size_t)h * c, lse + ((size_t)b * g->H + h) * g->T + (size_t)x * c,
               sizeof(float) * (size_t)c);
      for (int y = 0; y < g->nc; y++) {
        int vis = visible(g, x, src, y);
        if (!vis) continue;
        size_t qo = ((size_t)b * g->T + (size_t)x * c) * g->qrow;
        size_t ko = ((size_t)b * g->T + (size_t)y * c) * g->kvrow;
        mmrt_attention_bwd(dq + qo, dk + ko, dv + ko, dout + qo, q + qo, k + ko, v + ko, out + qo,
                           tl, 1, c, c, g->H, g->KVH, g->D, vis == 1, scale, 1);
        poll(rq, active);
      }
    }
}

int mmrt_ring_attention_bwd(void *mesh, float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, int B, int T, int H, int KVH, int D, int causal,
                            float scale) {
  Ring g = ring_of(mesh, B, T, H, KVH, D, causal);
  if (g.P <= 1) {
    mmrt_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, T, H, KVH, D, causal, scale, 0);
    return MMRT_OK;
  }
  size_t n = g.nkv;
  /* kv: the block held and the next; dkv: their accumulators */
  float *buf = malloc(sizeof(float) * (8 * n + (size_t)H * T));
  if (!buf) return nomem(g.m, "mmrt_ring_attention_bwd");
  float *cur = buf, *next = buf + 2 * n, *dcur = buf + 4 * n, *dnext = buf + 6 * n;
  float *tl = buf + 8 * n;
  memcpy(cur, k, sizeof(float) * n);
  memcpy(cur + n, v, sizeof(float) * n);
  memset(dcur, 0, sizeof(float) * 2 * n);
  memset(dq, 0, sizeof(float) * (size_t)B * T * g.qrow);
  int rc = MMRT_OK;
  for (int s = 0; s < g.P && !rc; s++) {
    MPI_Request rq[2], rd[2];
    int shift = s < g.P - 1;
    if (shift &&
        (rc = mmrt_ring_shift_start(g.m, MMRT_AXIS_CP, cur, next, 2 * n, MMRT_F32, TAG_KV, rq)))
      break;
    bwd_block(&g, dq, dcur, dcur + n, dout, q, cur, cur + n, out, lse, (g.r - s + g.P) % g.P, scale,
              tl, rq, shift);
    /* the accumulators follow their block, and go home after the last step */
    if ((rc = mmrt_ring_shift_start(g.m, MMRT_AXIS_CP, dcur, dnext, 2 * n, MMRT_F32, TAG_DKV, rd)))
      break;
    if (shift && (rc = mmrt_ring_shift_wait(g.m, MMRT_AXIS_CP, rq))) break;
    if ((rc = mmrt_ring_shift_wait(g.m, MMRT_AXIS_CP, rd))) break;
    float *t = cur;
    cur = next, next = t;
    t = dcur, dcur = dnext, dnext = t;
  }
  if (!rc) {
    memcpy(dk, dcur, sizeof(float) * n);
    memcpy(dv, dcur + n, sizeof(float) * n);
  }
  free(buf);
  return rc;
}

/* ---- the balanced layout's collectives and RoPE ---- */

/* Global chunk (of 2P) of local half x of rank r. */
static int64_t half_of(int r, int P, int x) {
  return gchunk(r, P, 2, x);
}

void mmrt_cp_slice_balanced(void *mesh, void *dst, const void *src, int64_t outer, int64_t dim,
                            int64_t inner, int64_t esize) {
  MmrtMesh *m = mesh;
  int P = m ? m->size[MMRT_AXIS_CP] : 1, r = m ? m->coord[MMRT_AXIS_CP] : 0;
  size_t c = (size_t)(dim / (2 * P)), row = c * (size_t)inner * (size_t)esize;
  for (int64_t o = 0; o < outer; o++)
    for (int x = 0; x < 2; x++)
      memcpy((char *)dst + ((size_t)o * 2 + (size_t)x) * row,
             (const char *)src + ((size_t)o * (size_t)dim + (size_t)half_of(r, P, x) * c) *
                                     (size_t)inner * (size_t)esize,
             row);
}

/* dst (outer, dim, inner) in global order <-> src in the contiguous
 * split's order (rank r's part = its two chunks): chunk (p, x) of the
 * contiguous order is global chunk half_of(p, x). */
static void reorder(float *dst, const float *src, int64_t outer, int64_t dim, int64_t inner, int P,
                    int to_global) {
  size_t c = (size_t)(dim / (2 * P)) * (size_t)inner;
  for (int64_t o = 0; o < outer; o++)
    for (int p = 0; p < P; p++)
      for (int x = 0; x < 2; x++) {
        size_t at = (size_t)o * (size_t)dim * (size_t)inner;
        size_t a = at + ((size_t)p * 2 + (size_t)x) * c, g = at + (size_t)half_of(p, P, x) * c;
        memcpy(dst + (to_global ? g : a), src + (to_global ? a : g), sizeof(float) * c);
      }
}

int mmrt_cp_gather_balanced(void *mesh, float *dst, const float *src, int64_t outer, int64_t dim,
                            int64_t inner) {
  MmrtMesh *m = mesh;
  int P = m->size[MMRT_AXIS_CP];
  size_t n = (size_t)outer * (size_t)dim * (size_t)inner;
  float *t = malloc(sizeof(float) * (n ? n : 1));
  if (!t) return nomem(m, "mmrt_cp_gather_balanced");
  int rc =
      mmrt_all_gather(m, MMRT_AXIS_CP, src, t, (size_t)outer, (size_t)dim, (size_t)inner, MMRT_F32);
  if (!rc) reorder(dst, t, outer, dim, inner, P, 1);
  free(t);
  return rc;
}

int mmrt_cp_reduce_scatter_balanced(void *mesh, float *dst, const float *src, int64_t outer,
                                    int64_t dim, int64_t inner) {
  MmrtMesh *m = mesh;
  int P = m->size[MMRT_AXIS_CP];
  size_t n = (size_t)outer * (size_t)dim * (size_t)inner;
  float *t = malloc(sizeof(float) * (n ? n : 1));
  if (!t) return nomem(m, "mmrt_cp_reduce_scatter_balanced");
  reorder(t, src, outer, dim, inner, P, 0);
  int rc = mmrt_reduce_scatter(m, MMRT_AXIS_CP, t, dst, (size_t)outer, (size_t)dim, (size_t)inner,
                               MMRT_F32);
  free(t);
  return rc;
}

void mmrt_cp_rope_balanced(void *mesh, float *y, const float *x, int B, int T, int H, int D,
                           float theta, int pos_offset, int backward) {
  MmrtMesh *m = mesh;
  int P = m ? m->size[MMRT_AXIS_CP] : 1, r = m ? m->coord[MMRT_AXIS_CP] : 0, c = T / 2;
  size_t row = (size_t)H * D;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < 2; h++) {
      size_t o = ((size_t)b * T + (size_t)h * c) * row;
      int pos = pos_offset + (int)half_of(r, P, h) * c;
      if (backward)
        mmrt_rope_bwd(y + o, x + o, 1, c, H, D, theta, pos, 0);
      else
        mmrt_rope_fwd(y + o, x + o, 1, c, H, D, theta, pos);
    }
}
