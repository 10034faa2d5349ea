/* The evaluation through the pipeline (mmrt_pp.h): @forward stage by stage
 * on the pp ranks that hold each stage, on their own parameters. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_ckpt.h"
#include "mmrt_comm.h"
#include "mmrt_pp.h"

int mmrt_pp_eval_last(const MmrtModelDesc *m, const void *mesh) {
  const MmrtMesh *me = mesh;
  return (int)((m->pp_stages - 1) % m->pp) == me->coord[MMRT_AXIS_PP];
}

int mmrt_pp_eval(const MmrtModelDesc *m, void *mesh, char **arenas, const MmrtPpHooks *h, int share,
                 const char *what) {
  MmrtMesh *mh = mesh;
  int P = (int)m->pp, S = (int)m->pp_stages, me = mh->coord[MMRT_AXIS_PP];
  int64_t nx = m->pp_eval_nxfer;
  /* tags above the training step's (mmrt_pp_new checks those): every
   * training message is received within its step */
  int base = (int)((m->pp_nxfer + 1) * m->micro_batches + m->naccum);
  int ub = 32767, flag = 0, *pub = NULL;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &pub, &flag);
  if (flag && pub) ub = *pub;
  if (base + nx >= ub) return h->fail(h->user, "too many pipeline transfers for MPI's tags");
  MPI_Request *rq = calloc((size_t)nx + 1, sizeof *rq);
  char msg[256];
  if (!rq) return h->fail(h->user, "out of memory for the evaluation's transfers");
  int n = 0, rc = 0;
  for (int s = me; s < S && !rc; s += P) {
    for (int64_t i = 0; i < nx && !rc; i++) { /* what stage s reads from other ranks */
      int from = (int)m->pp_eval_route[i].from, to = (int)m->pp_eval_route[i].to;
      if (to != s || from % P == me) continue;
      const MmrtTensorDesc *d = &m->pp_eval_xfer[i];
      size_t el = (size_t)h->elems(h->user, d),
             by = el * (size_t)mmrt_st_dtype_size((MmrtStDtype)d->dtype);
      snprintf(msg, sizeof msg, "recv from pp rank %d (evaluation stage %d's input)", from % P, s);
      if (mmrt_recv_raw(mh, MMRT_AXIS_PP, arenas[d->arena] + d->offset, el, by, from % P,
                        base + (int)i, msg))
        rc = h->fail(h->user, mh->err);
    }
    if (!rc) {
      snprintf(msg, sizeof msg, "%s (pipeline stage %d)", what, s);
      rc = h->run(h->user, m->pp_eval_fn[s], arenas, msg);
    }
    for (int64_t i = 0; i < nx && !rc; i++) { /* what it made for other ranks */
      int from = (int)m->pp_eval_route[i].from, to = (int)m->pp_eval_route[i].to;
      if (from != s || to % P == me) continue;
      const MmrtTensorDesc *d = &m->pp_eval_xfer[i];
      size_t el = (size_t)h->elems(h->user, d),
             by = el * (size_t)mmrt_st_dtype_size((MmrtStDtype)d->dtype);
      if (mmrt_isend_raw(mh, MMRT_AXIS_PP, arenas[d->arena] + d->offset, el, by, to % P,
                         base + (int)i, &rq[n++]))
        rc = h->fail(h->user, mh->err);
    }
  }
  /* the next batch overwrites what was sent */
  if (!rc && mmrt_wait_sends(mh, MMRT_AXIS_PP, n, rq, "the evaluation's pipeline sends"))
    rc = h->fail(h->user, mh->err);
  free(rq);
  if (rc || !share) return rc;
  /* the last stage's loss and logits on every pp rank (a decoding task
   * reads the logits everywhere) */
  int root = (S - 1) % P;
  if (m->eval_loss_offset >= 0 &&
      mmrt_broadcast(mh, MMRT_AXIS_PP, arenas[MMRT_ARENA_ACT] + m->eval_loss_offset, 1, MMRT_F32,
                     root) != MMRT_OK)
    return h->fail(h->user, mh->err);
  if (m->eval_logits_offset >= 0 &&
      mmrt_broadcast(mh, MMRT_AXIS_PP, arenas[MMRT_ARENA_ACT] + m->eval_logits_offset,
                     (size_t)(m->logits_rows * m->logits_cols), MMRT_F32, root) != MMRT_OK)
    return h->fail(h->user, mh->err);
  return 0;
}
