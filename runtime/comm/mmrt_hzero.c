/* Hierarchical ZeRO: `zero` within node groups of dp ranks, ZeRO-1 across
 * them (mmrt_comm.h "hierarchical ZeRO", docs/hzero.md).  The IR keeps
 * flat ZeRO over dp (the parameter and optimizer state stored as dp part
 * c, the gradients reduce-scattered to it); the runtime carries each of
 * dp's all-gathers and reduce-scatters out in two levels over the
 * sub-communicators DP_NODE and DP_CROSS, which the counters see. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"

typedef struct MmrtHzCopy {
  const void *key; /* the stored part's address */
  char *buf;       /* the parts o' n + i of every node group o', in o' order */
  size_t bytes;
  uint64_t updates; /* mmrt_comm_updates() when gathered */
  bool valid;
} MmrtHzCopy;

static int hz_all_gather(MmrtMesh *m, const void *send, void *recv, size_t outer, size_t dim,
                         size_t inner, MmrtDtype dt);
static int hz_reduce_scatter(MmrtMesh *m, const void *const *send, void *const *recv,
                             const size_t *dims, int nbufs, MmrtDtype dt);
static void hz_free(MmrtMesh *m);

static int hz_fail(MmrtMesh *m, int code, const char *op, const char *what) {
  snprintf(m->err, sizeof m->err, "%s (hierarchical ZeRO, node groups of %d dp ranks): %s", op,
           m->hz_node, what);
  return code;
}

int mmrt_mesh_hzero(MmrtMesh *m, int node, char *err, size_t errlen) {
  int D = m->size[MMRT_AXIS_DP], c = m->coord[MMRT_AXIS_DP];
  if (node < 2 || D % node || D / node < 2 || m->comm[MMRT_AXIS_DP] == MPI_COMM_NULL)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "hierarchical ZeRO: node groups of %d dp ranks do not make two or more "
                     "groups of dp = %d",
                     node, D);
  const MmrtAxis ax[2] = {MMRT_AXIS_DP_NODE, MMRT_AXIS_DP_CROSS};
  const int color[2] = {c / node, c % node}, key[2] = {c % node, c / node},
            size[2] = {node, D / node};
  for (int k = 0; k < 2; k++) {
    int rc = MPI_Comm_split(m->comm[MMRT_AXIS_DP], color[k], key[k], &m->comm[ax[k]]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm[ax[k]], MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(m->comm[ax[k]], &m->wd[ax[k]]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->wd[ax[k]], MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS)
      return mmrt_errf(err, errlen, MMRT_ERR_COMM,
                       "hierarchical ZeRO: building the %s communicator failed",
                       mmrt_axis_name(ax[k]));
    m->size[ax[k]] = size[k];
    m->coord[ax[k]] = key[k];
  }
  m->hz_node = node;
  m->hz_all_gather = hz_all_gather;
  m->hz_reduce_scatter = hz_reduce_scatter;
  m->hz_free = hz_free;
  return MMRT_OK;
}

static char *space(MmrtMesh *m, size_t bytes) {
  if (bytes > m->hz_space_bytes) {
    char *p = realloc(m->hz_space, bytes);
    if (!p) return NULL;
    m->hz_space = p, m->hz_space_bytes = bytes;
  }
  return m->hz_space;
}

/* The node copy of the part stored at key, of bytes (NULL: out of memory). */
static MmrtHzCopy *node_copy(MmrtMesh *m, const void *key, size_t bytes) {
  for (int k = 0; k < m->nhz_copy; k++)
    if (m->hz_copy[k].key == key && m->hz_copy[k].bytes == bytes) return &m->hz_copy[k];
  if (m->nhz_copy == m->hz_cap) {
    int cap = m->hz_cap ? 2 * m->hz_cap : 64;
    MmrtHzCopy *p = realloc(m->hz_copy, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    m->hz_copy = p, m->hz_cap = cap;
  }
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf) return NULL;
  m->hz_copy[m->nhz_copy] = (MmrtHzCopy){.key = key, .buf = buf, .bytes = bytes};
  return &m->hz_copy[m->nhz_copy++];
}

/* Part c (of parts of len along dim) of an (outer, dim, inner) tensor <->
 * a contiguous (outer, len, inner) block. */
static void part_in(char *full, const char *blk, size_t outer, size_t dim, size_t inner, size_t c,
                    size_t len, size_t es) {
  for (size_t o = 0; o < outer; o++)
    memcpy(full + ((o * dim + c * len) * inner) * es, blk + o * len * inner * es, len * inner * es);
}
static void part_out(char *blk, const char *full, size_t outer, size_t dim, size_t inner, size_t c,
                     size_t len, size_t es) {
  for (size_t o = 0; o < outer; o++)
    memcpy(blk + o * len * inner * es, full + ((o * dim + c * len) * inner) * es, len * inner * es);
}

static int hz_all_gather(MmrtMesh *m, const void *send, void *recv, size_t outer, size_t dim,
                         size_t inner, MmrtDtype dt) {
  static const char op[] = "all_gather";
  const size_t N = (size_t)m->hz_node, D = (size_t)m->size[MMRT_AXIS_DP], K = D / N,
               es = dt == MMRT_F32    ? 4
                    : dt == MMRT_BF16 ? 2
                                      : 0;
  if (!es) return hz_fail(m, MMRT_ERR_ARG, op, "unknown dtype");
  if (dim % D) return hz_fail(m, MMRT_ERR_ARG, op, "the split dim does not divide over dp");
  const size_t len = dim / D, X = outer * len * inner;
  MmrtHzCopy *cp = node_copy(m, send, K * X * es);
  char *all = space(m, N * K * X * es);
  if (!cp || !all) return hz_fail(m, MMRT_ERR_NOMEM, op, "out of memory");
  int rc;
  if (!cp->valid || cp->updates != mmrt_comm_updates()) {
    /* across: the parts o' n + i of every group, in o' order */
    if ((rc = mmrt_all_gather(m, MMRT_AXIS_DP_CROSS, send, cp->buf, 1, K * X, 1, dt))) return rc;
    cp->valid = true, cp->updates = mmrt_comm_updates();
  }
  /* within: every place's node copy, in place order: block (i', o') */
  if ((rc = mmrt_all_gather(m, MMRT_AXIS_DP_NODE, cp->buf, all, 1, N * K * X, 1, dt))) return rc;
  for (size_t ii = 0; ii < N; ii++)
    for (size_t o = 0; o < K; o++)
      part_in(recv, all + (ii * K + o) * X * es, outer, dim, inner, o * N + ii, len, es);
  return MMRT_OK;
}

static int hz_reduce_scatter(MmrtMesh *m, const void *const *send, void *const *recv,
                             const size_t *dims, int nbufs, MmrtDtype dt) {
  static const char op[] = "reduce_scatter";
  const size_t N = (size_t)m->hz_node, D = (size_t)m->size[MMRT_AXIS_DP], K = D / N,
               es = dt == MMRT_F32    ? 4
                    : dt == MMRT_BF16 ? 2
                                      : 0;
  if (!es) return hz_fail(m, MMRT_ERR_ARG, op, "unknown dtype");
  size_t S = 0;
  for (int t = 0; t < nbufs; t++) {
    if (dims[3 * t + 1] % D) return hz_fail(m, MMRT_ERR_ARG, op, "a split dim does not divide");
    S += dims[3 * t] * (dims[3 * t + 1] / D) * dims[3 * t + 2];
  }
  /* P: N K S (by destination place i', then tensor, then group o'),
   * R: K S, Q: K S (by group, then tensor), Z: S */
  char *P = space(m, (N * K * S + 2 * K * S + S) * es);
  if (!P) return hz_fail(m, MMRT_ERR_NOMEM, op, "out of memory");
  char *R = P + N * K * S * es, *Q = R + K * S * es, *Z = Q + K * S * es;
  for (size_t ii = 0, off = 0; ii < N; ii++, off = 0)
    for (int t = 0; t < nbufs; t++) {
      size_t outer = dims[3 * t], dim = dims[3 * t + 1], inner = dims[3 * t + 2], len = dim / D,
             X = outer * len * inner;
      for (size_t o = 0; o < K && X; o++)
        part_out(P + (ii * K * S + K * off + o * X) * es, send[t], outer, dim, inner, o * N + ii,
                 len, es);
      off += X;
    }
  int rc = mmrt_reduce_scatter(m, MMRT_AXIS_DP_NODE, P, R, 1, N * K * S, 1, dt);
  if (rc) return rc;
  for (int t = 0, off = 0; t < nbufs; t++) {
    size_t X = dims[3 * t] * (dims[3 * t + 1] / D) * dims[3 * t + 2];
    for (size_t o = 0; o < K; o++)
      memcpy(Q + (o * S + (size_t)off) * es, R + (K * (size_t)off + o * X) * es, X * es);
    off += (int)X;
  }
  if ((rc = mmrt_reduce_scatter(m, MMRT_AXIS_DP_CROSS, Q, Z, 1, K * S, 1, dt))) return rc;
  for (int t = 0, off = 0; t < nbufs; t++) {
    size_t X = dims[3 * t] * (dims[3 * t + 1] / D) * dims[3 * t + 2];
    if (X) memcpy(recv[t], Z + (size_t)off * es, X * es);
    off += (int)X;
  }
  return MMRT_OK;
}

static void hz_free(MmrtMesh *m) {
  for (int k = 0; k < m->nhz_copy; k++) free(m->hz_copy[k].buf);
  free(m->hz_copy), free(m->hz_space);
  m->hz_copy = NULL, m->hz_space = NULL;
  m->nhz_copy = m->hz_cap = m->hz_node = 0;
  m->hz_space_bytes = 0;
}
