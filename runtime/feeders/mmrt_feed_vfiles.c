/* mmrt_feed_vfiles.c: video files (mmrt_vfiles.h) for the feeders of
 * video (mmrt_feed_video.c) and text-to-video (mmrt_feed_dit.c), when
 * --data names a JSON or JSONL list of videos: the rows of a batch decoded
 * from the files, the next training batch's rows decoded on the loader
 * thread while the step runs (docs/video.md "Training from video files"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"
#include "mmrt_feed.h"
#include "mmrt_loader.h"
#include "mmrt_vfiles.h"

int mmrt_feed_vfiles_open(MmrtFeedCtx *c, MmrtVfiles *v, const char *json, const int64_t *cthw,
                          char *err, size_t errlen) {
  int skip = c->text && c->text->bad_samples && !strcmp(c->text->bad_samples, "skip");
  int rc = mmrt_vfiles_open(v, json, (int)cthw[0], (int)cthw[1], (int)cthw[2], (int)cthw[3],
                            c->video_fps, skip, err, errlen);
  if (rc != MMRT_OK) return rc;
  /* the splits' sizes for the iterators (no pixels): evaluation reads the
   * entries in file order */
  mmrt_images_free(&c->train), mmrt_images_free(&c->test);
  c->train.n = c->test.n = v->n;
  c->count_skipped = skip;
  c->skipped = 0;
  char bad[64] = "";
  if (v->bad_at_read)
    snprintf(bad, sizeof bad, " (%lld bad: --bad-samples skip)", (long long)v->bad_at_read);
  snprintf(c->note, sizeof c->note,
           "video files: %s, %d entries%s; clips of %d frames at %s, %dx%d, %s", json, v->n, bad,
           (int)cthw[1], c->video_fps > 0 ? "the --video-fps" : "the source's fps", (int)cthw[3],
           (int)cthw[2], cthw[0] == 1 ? "grey" : "RGB");
  return MMRT_OK;
}

/* A bad sample with --bad-samples fail: the message, and the run ends (the
 * other ranks' collectives are aborted with it). */
static _Noreturn void data_fail(MmrtFeedCtx *c, const char *msg) {
  MmrtMesh *mesh = c->mesh;
  if (mesh)
    fprintf(stderr, "trainer (rank %d): error: --data %s: %s\n", mesh->coord[MMRT_AXIS_WORLD],
            c->data, msg);
  else
    fprintf(stderr, "trainer: error: --data %s: %s\n", c->data, msg);
  if (mesh) mmrt_comm_abort(1);
  exit(1);
}

void mmrt_feed_vfiles_rows(MmrtFeedCtx *c, MmrtVfiles *v, const MmrtBatchIter *it, int64_t rows,
                           int eval, uint64_t sample0, float *out, int64_t *used) {
  int64_t n = 0, lo = c->lo, hi = c->lo + c->rows;
  int64_t *ent = malloc(sizeof *ent * (size_t)(c->rows + 1));
  uint64_t *smp = malloc(sizeof *smp * (size_t)(c->rows + 1));
  char err[MMRT_VFILES_ERR + 64];
  if (!ent || !smp) data_fail(c, "out of memory");
  for (int64_t r = lo; r < hi && r < rows; r++, n++) {
    smp[n] = eval ? (uint64_t)mmrt_iter_index(it, r) : sample0 + (uint64_t)r;
    ent[n] = eval ? (int64_t)smp[n] : mmrt_vfiles_entry(v, c->seed, smp[n]);
  }
  if (mmrt_vfiles_batch(v, ent, smp, n, out, used, err, sizeof err) != MMRT_OK) data_fail(c, err);
  memset(out + (size_t)n * v->per, 0, sizeof *out * v->per * (size_t)(c->rows - n)); /* padding */
  for (int64_t k = n; used && k < c->rows; k++) used[k] = -1;
  c->skipped = v->skipped;
  if (!eval) { /* the next step's rows, on the loader thread while this step runs */
    for (int64_t k = 0; k < c->rows; k++) {
      smp[k] = sample0 + (uint64_t)c->B + (uint64_t)(lo + k);
      ent[k] = mmrt_vfiles_entry(v, c->seed, smp[k]);
    }
    mmrt_vfiles_ahead(v, ent, smp, c->rows);
  }
  free(ent), free(smp);
}
