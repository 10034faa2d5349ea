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
 * and RoPE's positions follow it.
 *
 * USP (cp = U x R, mmrt_abi.def): the ring runs over R groups of U ranks,
 * each group moving its rows to a head split by an all-to-all first and
 * the output back after (below). */
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
  MPI_Comm comm; /* the ring's ranks: cp, or under USP those of one Ulysses index */
  int P, r, nc, B, T, H, KVH, D, causal;
  int64_t c;
  size_t qrow, kvrow, nkv; /* floats per query row, per key row, of one k (or v) block */
} Ring;

static Ring ring_of(MmrtMesh *m, MPI_Comm comm, int P, int r, int B, int T, int H, int KVH, int D,
                    int causal) {
  Ring g = {.m = m,
            .comm = comm,
            .P = P,
            .r = r,
            .nc = causal ? 2 : 1,
            .B = B,
            .T = T,
            .H = H,
            .KVH = KVH,
            .D = D,
            .causal = causal,
            .qrow = (size_t)H * D,
            .kvrow = (size_t)KVH * D};
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

/* The ring proper over g's ranks, on the rows it holds (in the balanced
 * layout of the ring's chunks when causal). */
static int ring_fwd(const Ring *gp, float *out, float *lse, const float *q, const float *k,
                    const float *v, float scale, float *ws) {
  const Ring g = *gp;
  if (g.P <= 1) {
    mmrt_attention_fwd(out, lse, q, k, v, g.B, g.T, g.T, g.H, g.KVH, g.D, g.causal, scale);
    return MMRT_OK;
  }
  size_t nq = (size_t)g.B * g.T * g.qrow;
  float *kv = ws, *to = ws + 4 * g.nkv; /* support/ring_ws.h */
  float *cur = kv, *next = kv + 2 * g.nkv, *tl = to + nq;
  memcpy(cur, k, sizeof(float) * g.nkv);
  memcpy(cur + g.nkv, v, sizeof(float) * g.nkv);
  memset(out, 0, sizeof(float) * nq);
  for (size_t i = 0; i < (size_t)g.B * g.H * g.T; i++) lse[i] = -INFINITY;
  int rc = MMRT_OK;
  for (int s = 0; s < g.P && !rc; s++) {
    MPI_Request rq[2];
    int shift = s < g.P - 1;
    if (shift && (rc = mmrt_ring_shift_start(g.m, MMRT_AXIS_CP, g.comm, g.P, g.r, cur, next,
                                             2 * g.nkv, MMRT_F32, TAG_KV, rq)))
      break;
    fwd_block(&g, out, lse, q, cur, cur + g.nkv, (g.r - s + g.P) % g.P, scale, to, tl, rq, shift);
    if (shift) {
      rc = mmrt_ring_shift_wait(g.m, MMRT_AXIS_CP, rq);
      float *t = cur;
      cur = next, next = t;
    }
  }
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

static int ring_bwd(const Ring *gp, float *dq, float *dk, float *dv, const float *dout,
                    const float *q, const float *k, const float *v, const float *out,
                    const float *lse, float scale, float *ws) {
  const Ring g = *gp;
  if (g.P <= 1) {
    mmrt_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, g.B, g.T, g.T, g.H, g.KVH, g.D,
                       g.causal, scale, 0);
    return MMRT_OK;
  }
  size_t n = g.nkv;
  /* kv: the block held and the next; dkv: their accumulators (support/ring_ws.h) */
  float *buf = ws;
  float *cur = buf, *next = buf + 2 * n, *dcur = buf + 4 * n, *dnext = buf + 6 * n;
  float *tl = buf + 8 * n;
  memcpy(cur, k, sizeof(float) * n);
  memcpy(cur + n, v, sizeof(float) * n);
  memset(dcur, 0, sizeof(float) * 2 * n);
  memset(dq, 0, sizeof(float) * (size_t)g.B * g.T * g.qrow);
  int rc = MMRT_OK;
  for (int s = 0; s < g.P && !rc; s++) {
    MPI_Request rq[2], rd[2];
    int shift = s < g.P - 1;
    if (shift && (rc = mmrt_ring_shift_start(g.m, MMRT_AXIS_CP, g.comm, g.P, g.r, cur, next, 2 * n,
                                             MMRT_F32, TAG_KV, rq)))
      break;
    bwd_block(&g, dq, dcur, dcur + n, dout, q, cur, cur + n, out, lse, (g.r - s + g.P) % g.P, scale,
              tl, rq, shift);
    /* the accumulators follow their block, and go home after the last step */
    if ((rc = mmrt_ring_shift_start(g.m, MMRT_AXIS_CP, g.comm, g.P, g.r, dcur, dnext, 2 * n,
                                    MMRT_F32, TAG_DKV, rd)))
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
  return rc;
}

/* ---- USP: Ulysses groups inside the ring ----
 * cp = U x R: cp rank c = g U + u is index u of Ulysses group g (the U
 * ranks with c / U = g) and rank g of ring u. The Ulysses all-to-all moves
 * a group's rows to every member for H / U of the heads (and KVH / U key
 * and value heads); the ring then runs over the groups. Layout of a rank's
 * T rows (nc chunks of c rows): chunk x of rank (g, u) is piece u of the
 * ring's chunk x of group g, so after the all-to-all the group's rows are
 * in the ring's layout: row (x U + u) c + o. */

static struct {
  MPI_Comm parent, uly, ring;
  int U;
} subs = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, 0};

static int groups(MmrtMesh *m, int U) {
  MPI_Comm cp = m->comm[MMRT_AXIS_CP];
  if (subs.U == U && subs.parent == cp) return MMRT_OK;
  int c = m->coord[MMRT_AXIS_CP];
  if (MPI_Comm_split(cp, c / U, c % U, &subs.uly) != MPI_SUCCESS ||
      MPI_Comm_split(cp, c % U, c / U, &subs.ring) != MPI_SUCCESS) {
    snprintf(m->err, sizeof m->err, "ring attention: cannot split cp into Ulysses groups of %d", U);
    return MMRT_ERR_COMM;
  }
  subs.parent = cp, subs.U = U;
  return MMRT_OK;
}

/* x (B, T, Hx, D) of this rank's rows <-> xh (B, U T, Hx / U, D) of the
 * group's rows and this rank's heads (to_heads: x -> xh). send, recv:
 * B T Hx D floats each. */
static int uly_move(MmrtMesh *m, int U, int nc, int B, int T, int Hx, int D, float *x, float *xh,
                    float *send, float *recv, int to_heads) {
  size_t Hu = (size_t)Hx / (size_t)U, hd = Hu * (size_t)D, blk = (size_t)B * (size_t)T * hd;
  size_t c = (size_t)T / (size_t)nc, T2 = (size_t)U * (size_t)T;
  for (int u = 0; u < U; u++) /* pack the block for (or from) member u */
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        float *sp = send + (size_t)u * blk + ((size_t)b * T + (size_t)t) * hd;
        size_t row = ((size_t)t / c * (size_t)U + (size_t)u) * c + (size_t)t % c;
        if (to_heads)
          memcpy(sp, x + (((size_t)b * T + (size_t)t) * Hx + (size_t)u * Hu) * D,
                 sizeof(float) * hd);
        else
          memcpy(sp, xh + ((size_t)b * T2 + row) * hd, sizeof(float) * hd);
      }
  int rc = mmrt_all_to_all_group(m, MMRT_AXIS_CP, subs.uly, U, send, recv, blk, MMRT_F32);
  if (rc) return rc;
  for (int u = 0; u < U; u++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const float *rp = recv + (size_t)u * blk + ((size_t)b * T + (size_t)t) * hd;
        size_t row = ((size_t)t / c * (size_t)U + (size_t)u) * c + (size_t)t % c;
        if (to_heads)
          memcpy(xh + ((size_t)b * T2 + row) * hd, rp, sizeof(float) * hd);
        else
          memcpy(x + (((size_t)b * T + (size_t)t) * Hx + (size_t)u * Hu) * D, rp,
                 sizeof(float) * hd);
      }
  return MMRT_OK;
}

static Ring usp_ring(MmrtMesh *m, int U, int B, int T, int H, int KVH, int D, int causal) {
  int P = m ? m->size[MMRT_AXIS_CP] : 1, c = m ? m->coord[MMRT_AXIS_CP] : 0;
  if (U <= 1)
    return ring_of(m, m ? m->comm[MMRT_AXIS_CP] : MPI_COMM_NULL, P, c, B, T, H, KVH, D, causal);
  return ring_of(m, subs.ring, P / U, c / U, B, U * T, H / U, KVH / U, D, causal);
}

/* USP's degree U for this call (or a negative status) and its ring. */
static int usp_setup(MmrtMesh *m, int ulysses, int B, int T, int H, int KVH, int D, int causal,
                     Ring *g) {
  int U = m && ulysses > 1 ? ulysses : 1, rc;
  if (U > 1 && (rc = groups(m, U))) return rc;
  *g = usp_ring(m, U, B, T, H, KVH, D, causal);
  return U;
}

int mmrt_ring_attention_fwd(void *mesh, float *out, float *lse, const float *q, const float *k,
                            const float *v, int B, int T, int H, int KVH, int D, int causal,
                            int ulysses, float scale, float *ws) {
  MmrtMesh *m = mesh;
  Ring g;
  int U = usp_setup(m, ulysses, B, T, H, KVH, D, causal, &g), rc;
  if (U <= 1) return U < 0 ? U : ring_fwd(&g, out, lse, q, k, v, scale, ws);
  /* lse stays in the head-split layout (B, H / U, U T): only the backward reads it */
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D;
  float *w = ws; /* support/ring_ws.h: USP's part, then the ring's */
  float *qh = w, *oh = qh + nq, *kh = oh + nq, *vh = kh + nk, *sb = vh + nk, *rb = sb + nq;
  int nc = causal ? 2 : 1;
  rc = uly_move(m, U, nc, B, T, H, D, (float *)q, qh, sb, rb, 1);
  if (!rc) rc = uly_move(m, U, nc, B, T, KVH, D, (float *)k, kh, sb, rb, 1);
  if (!rc) rc = uly_move(m, U, nc, B, T, KVH, D, (float *)v, vh, sb, rb, 1);
  if (!rc) rc = ring_fwd(&g, oh, lse, qh, kh, vh, scale, w + 4 * nq + 2 * nk);
  if (!rc) rc = uly_move(m, U, nc, B, T, H, D, out, oh, sb, rb, 0);
  return rc;
}

int mmrt_ring_attention_bwd(void *mesh, float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, int B, int T, int H, int KVH, int D, int causal,
                            int ulysses, float scale, float *ws) {
  MmrtMesh *m = mesh;
  Ring g;
  int U = usp_setup(m, ulysses, B, T, H, KVH, D, causal, &g), rc;
  if (U <= 1) return U < 0 ? U : ring_bwd(&g, dq, dk, dv, dout, q, k, v, out, lse, scale, ws);
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D;
  float *w = ws; /* support/ring_ws.h: USP's part, then the ring's */
  float *qh = w, *oh = qh + nq, *doh = oh + nq, *dqh = doh + nq, *kh = dqh + nq, *vh = kh + nk;
  float *dkh = vh + nk, *dvh = dkh + nk, *sb = dvh + nk, *rb = sb + nq;
  int nc = causal ? 2 : 1;
  rc = uly_move(m, U, nc, B, T, H, D, (float *)q, qh, sb, rb, 1);
  if (!rc) rc = uly_move(m, U, nc, B, T, H, D, (float *)out, oh, sb, rb, 1);
  if (!rc) rc = uly_move(m, U, nc, B, T, H, D, (float *)dout, doh, sb, rb, 1);
  if (!rc) rc = uly_move(m, U, nc, B, T, KVH, D, (float *)k, kh, sb, rb, 1);
  if (!rc) rc = uly_move(m, U, nc, B, T, KVH, D, (float *)v, vh, sb, rb, 1);
  if (!rc) rc = ring_bwd(&g, dqh, dkh, dvh, doh, qh, kh, vh, oh, lse, scale, w + 6 * nq + 4 * nk);
  if (!rc) rc = uly_move(m, U, nc, B, T, H, D, dq, dqh, sb, rb, 0);
  if (!rc) rc = uly_move(m, U, nc, B, T, KVH, D, dk, dkh, sb, rb, 0);
  if (!rc) rc = uly_move(m, U, nc, B, T, KVH, D, dv, dvh, sb, rb, 0);
  return rc;
}

/* ---- the balanced layout's collectives and RoPE ---- */

/* Global piece (of 2P) of local half x of cp rank c: under USP (U > 1)
 * piece u of the ring's chunk x of group g = c / U (c = g U + u). */
static int64_t half_of(int c, int P, int x, int U) {
  int R = P / U, g = c / U, u = c % U;
  return (int64_t)gchunk(g, R, 2, x) * U + u;
}

void mmrt_cp_slice_balanced(void *mesh, void *dst, const void *src, int64_t outer, int64_t dim,
                            int64_t inner, int64_t esize, int ulysses) {
  MmrtMesh *m = mesh;
  int P = m ? m->size[MMRT_AXIS_CP] : 1, r = m ? m->coord[MMRT_AXIS_CP] : 0;
  size_t c = (size_t)(dim / (2 * P)), row = c * (size_t)inner * (size_t)esize;
  for (int64_t o = 0; o < outer; o++)
    for (int x = 0; x < 2; x++)
      memcpy((char *)dst + ((size_t)o * 2 + (size_t)x) * row,
             (const char *)src + ((size_t)o * (size_t)dim + (size_t)half_of(r, P, x, ulysses) * c) *
                                     (size_t)inner * (size_t)esize,
             row);
}

/* dst (outer, dim, inner) in global order <-> src in the contiguous
 * split's order (rank r's part = its two chunks): chunk (p, x) of the
 * contiguous order is global chunk half_of(p, x). */
static void reorder(float *dst, const float *src, int64_t outer, int64_t dim, int64_t inner, int P,
                    int U, int to_global) {
  size_t c = (size_t)(dim / (2 * P)) * (size_t)inner;
  for (int64_t o = 0; o < outer; o++)
    for (int p = 0; p < P; p++)
      for (int x = 0; x < 2; x++) {
        size_t at = (size_t)o * (size_t)dim * (size_t)inner;
        size_t a = at + ((size_t)p * 2 + (size_t)x) * c, g = at + (size_t)half_of(p, P, x, U) * c;
        memcpy(dst + (to_global ? g : a), src + (to_global ? a : g), sizeof(float) * c);
      }
}

int mmrt_cp_gather_balanced(void *mesh, float *dst, const float *src, int64_t outer, int64_t dim,
                            int64_t inner, int ulysses) {
  MmrtMesh *m = mesh;
  int P = m->size[MMRT_AXIS_CP];
  size_t n = (size_t)outer * (size_t)dim * (size_t)inner;
  float *t = malloc(sizeof(float) * (n ? n : 1));
  if (!t) return nomem(m, "mmrt_cp_gather_balanced");
  int rc =
      mmrt_all_gather(m, MMRT_AXIS_CP, src, t, (size_t)outer, (size_t)dim, (size_t)inner, MMRT_F32);
  if (!rc) reorder(dst, t, outer, dim, inner, P, ulysses, 1);
  free(t);
  return rc;
}

int mmrt_cp_reduce_scatter_balanced(void *mesh, float *dst, const float *src, int64_t outer,
                                    int64_t dim, int64_t inner, int ulysses) {
  MmrtMesh *m = mesh;
  int P = m->size[MMRT_AXIS_CP];
  size_t n = (size_t)outer * (size_t)dim * (size_t)inner;
  float *t = malloc(sizeof(float) * (n ? n : 1));
  if (!t) return nomem(m, "mmrt_cp_reduce_scatter_balanced");
  reorder(t, src, outer, dim, inner, P, ulysses, 0);
  int rc = mmrt_reduce_scatter(m, MMRT_AXIS_CP, t, dst, (size_t)outer, (size_t)dim, (size_t)inner,
                               MMRT_F32);
  free(t);
  return rc;
}

void mmrt_cp_rope_balanced(void *mesh, float *y, const float *x, int B, int T, int H, int D,
                           float theta, int pos_offset, int backward, int ulysses) {
  MmrtMesh *m = mesh;
  int P = m ? m->size[MMRT_AXIS_CP] : 1, r = m ? m->coord[MMRT_AXIS_CP] : 0, c = T / 2;
  size_t row = (size_t)H * D;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < 2; h++) {
      size_t o = ((size_t)b * T + (size_t)h * c) * row;
      int pos = pos_offset + (int)half_of(r, P, h, ulysses) * c;
      if (backward)
        mmrt_rope_bwd(y + o, x + o, 1, c, H, D, theta, pos, 0);
      else
        mmrt_rope_fwd(y + o, x + o, 1, c, H, D, theta, pos);
    }
}
