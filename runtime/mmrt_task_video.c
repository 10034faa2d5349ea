/* mmrt_task_video.c: video clips for a reconstruction model (WFVAE).
 *
 * Input video f32[B, 1, F, 64, 64] (B, C, T, H, W), F = 1 + 4k: one clip
 * per row (mmrt_video.h), values in [0, 1]. Training row r of step s is
 * train-split clip (s - 1) * B + r under the run seed; evaluation row r of
 * a test batch is test-split clip i (i = the row's position in the test
 * split, so a pass covers clips 0 .. 9999) under MMRT_VIDEO_HELDOUT_SEED,
 * the same held-out clips for every run seed. Rows past a short batch are
 * black (0). No labels: the trainer's evaluation reports the model's loss
 * only (no accuracy), and there is no metric of the task's own yet (the
 * reconstruction trainer adds PSNR). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_task.h"
#include "mmrt_video.h"

typedef struct Clips {
  MmrtVideo train, heldout;
} Clips;

static int bind(MmrtTaskCtx *c, char *err, size_t errlen) {
  const MmrtTensorDesc *v = mmrt_desc_input(c->m, "video");
  const int64_t shape[5] = {c->B, 1, -1, MMRT_VIDEO_SIDE, MMRT_VIDEO_SIDE};
  if (!mmrt_task_is(v, MMRT_ST_F32, 5, shape)) return 0;
  c->batch[0] = v, c->nbatch = 1, c->labels = NULL;
  if (v->shape[2] < 1 || (v->shape[2] - 1) % 4) {
    snprintf(err, errlen, "model %s: input video has %lld frames; clips have 1 + 4k (e.g. 17)",
             c->m->name, (long long)v->shape[2]);
    return -1;
  }
  return 1;
}

static int start(MmrtTaskCtx *c, char *err, size_t errlen) {
  Clips *k = c->priv ? c->priv : calloc(1, sizeof *k);
  if (!k) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  c->priv = k;
  mmrt_video_free(&k->train), mmrt_video_free(&k->heldout); /* again after a resume */
  int F = (int)c->batch[0]->shape[2],
      rc = mmrt_video_init(&k->train, &c->train, F, c->seed, err, errlen);
  return rc != MMRT_OK
             ? rc
             : mmrt_video_init(&k->heldout, &c->test, F, MMRT_VIDEO_HELDOUT_SEED, err, errlen);
}

static void fill(MmrtTaskCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  Clips *k = c->priv;
  MmrtVideo *v = eval ? &k->heldout : &k->train;
  size_t per = (size_t)v->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE;
  float *x = mmrt_task_at(c, c->batch[0]);
  for (int64_t r = c->lo; r < c->lo + c->rows; r++) {
    float *row = x + (size_t)(r - c->lo) * per;
    if (r >= rows)
      memset(row, 0, sizeof *row * per);
    else
      mmrt_video_clip(v, eval ? (uint64_t)mmrt_iter_index(it, r) : sample0 + (uint64_t)r, row,
                      NULL);
  }
}

static void close_clips(MmrtTaskCtx *c) {
  Clips *k = c->priv;
  if (!k) return;
  mmrt_video_free(&k->train), mmrt_video_free(&k->heldout);
  free(k);
  c->priv = NULL;
}

const MmrtTask mmrt_task_video = {
    .name = "video",
    .inputs = "video F32[B, 1, 1 + 4k, 64, 64]",
    .bind = bind,
    .open = mmrt_task_open_fmnist,
    .start = start,
    .fill = fill,
    .close = close_clips,
};
