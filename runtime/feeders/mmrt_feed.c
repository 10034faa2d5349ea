/* mmrt_feed.c: what the trainer's data feeders and the trainer share (see
 * mmrt_feed.h); the table of feeders is mmrt_feeders.c. */
#include "mmrt_feed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_caption.h"
#include "mmrt_comm.h"

int mmrt_feed_is(const MmrtTensorDesc *t, int dt, int ndim, const int64_t *shape) {
  if (!t || t->dtype != dt || t->ndim != ndim) return 0;
  for (int d = 0; d < ndim; d++)
    if (shape[d] >= 0 && t->shape[d] != shape[d]) return 0;
  return 1;
}

void *mmrt_feed_at(const MmrtFeedCtx *c, const MmrtTensorDesc *d) {
  return c->arenas[d->arena] + d->offset;
}

int64_t mmrt_feed_classes(const MmrtModelDesc *m) {
  return m->logits_classes; /* a padded vocabulary's real classes */
}

int mmrt_feed_open_fmnist(MmrtFeedCtx *c, const char *dir, char *err, size_t errlen) {
  int rc = mmrt_fmnist_load(&c->train, dir, MMRT_SPLIT_TRAIN, err, errlen);
  return rc != MMRT_OK ? rc : mmrt_fmnist_load(&c->test, dir, MMRT_SPLIT_TEST, err, errlen);
}

int64_t mmrt_feed_eval_total(const MmrtFeedCtx *c) {
  int64_t n = c->B > 0 ? (c->test.n + c->B - 1) / c->B : 0;
  return c->eval_batches >= 0 && c->eval_batches < n ? c->eval_batches : n;
}

int mmrt_feed_restart_eval(MmrtFeedCtx *c, char *err, size_t errlen) {
  mmrt_iter_free(&c->eval_it); /* a fresh pass in file order */
  return mmrt_iter_init(&c->eval_it, &c->test, c->B, 0, 0, err, errlen);
}

/* Generation never picks PAD, BOS or the image-context token. */
static int generable(int64_t id) {
  return id != MMRT_TOK_PAD && id != MMRT_TOK_BOS && id != MMRT_TOK_IMG;
}

_Noreturn void mmrt_feed_comm_fail(MmrtFeedCtx *c) {
  MmrtMesh *mesh = c->mesh;
  fprintf(stderr, "trainer (rank %d): error: %s\n", mesh->coord[MMRT_AXIS_WORLD], mesh->err);
  mmrt_comm_abort(1);
}

void mmrt_feed_argmax(MmrtFeedCtx *c, int32_t *best, int gen) {
  const MmrtModelDesc *m = c->m;
  MmrtMesh *mesh = c->mesh;
  const float *lg = (const float *)(c->arenas[MMRT_ARENA_ACT] + m->eval_logits_offset);
  int64_t a = m->logits_vocab_axis, V = m->logits_cols, R = m->logits_rows;
  int64_t c0 = a >= 0 && mesh ? (int64_t)mesh->coord[a] * V : 0;
  struct {
    float v;
    int i;
  } *vi = a >= 0 && mesh ? malloc(sizeof *vi * (size_t)R) : NULL;
  for (int64_t r = 0; r < R; r++) {
    const float *row = lg + r * V;
    int32_t b = -1;
    for (int32_t k = 0; k < (int32_t)V; k++)
      if (k + c0 < m->logits_classes && (!gen || generable(k + c0)) && (b < 0 || row[k] > row[b]))
        b = k;
    int none = b < 0; /* a rank whose piece of the vocabulary has nothing generable */
    if (none) b = 0;
    best[r] = (int32_t)(b + c0);
    if (vi) vi[r].v = none ? -INFINITY : row[b], vi[r].i = best[r];
  }
  if (vi) {
    /* MAXLOC keeps the lowest index among equal values, as the serial scan does */
    if (mmrt_all_reduce_mpi(mesh, (MmrtAxis)a, vi, (int)R, MPI_FLOAT_INT, MPI_MAXLOC,
                            "the argmax of the logits (all-reduce MAXLOC)") != MMRT_OK)
      mmrt_feed_comm_fail(c);
    for (int64_t r = 0; r < R; r++) best[r] = vi[r].i;
    free(vi);
  }
}
