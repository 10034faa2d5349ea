/* mmrt_feed_frames.c: classifying single frames of the moving-item clips
 * (mmrt_video.h), the frame classifier of the text-to-video evaluation
 * (README "Sampling").
 *
 * Inputs frames f32[B, 1, 64, 64] (values in [0, 1], as the clips and the
 * sampler's decoded clips) and labels i32[B] (the item's class). Sample i
 * is frame f of clip i, f = floor(u * 17) for u element i of Philox stream
 * "frames/frame" under the split's seed: training sample (s - 1) B + r fills
 * row r of step s from the train-split clips under the run seed; evaluation
 * rows are held-out clips (test split, MMRT_VIDEO_HELDOUT_SEED), so the
 * accuracy the trainer reports is on frames of clips it never trained on. */
#include <stdlib.h>
#include <string.h>

#include "mmrt_mem.h"
#include "mmrt_feed.h"
#include "mmrt_video.h"

typedef struct Frames {
  MmrtVideo train, heldout;
  const MmrtTensorDesc *px, *lb;
} Frames;

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *px = mmrt_desc_input(m, MMRT_IN(FRM_FRAMES)),
                       *lb = mmrt_desc_input(m, MMRT_IN(FRM_LABELS));
  const int64_t img[4] = {c->B, 1, MMRT_VIDEO_SIDE, MMRT_VIDEO_SIDE}, vec[1] = {c->B};
  if (!mmrt_feed_is(px, MMRT_ST_F32, 4, img) || !mmrt_feed_is(lb, MMRT_ST_I32, 1, vec)) return 0;
  Frames *d = calloc(1, sizeof *d);
  if (!d) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory"), -1;
  d->px = px, d->lb = lb;
  c->priv = d;
  c->batch[0] = px, c->batch[1] = c->labels = lb, c->nbatch = 2;
  return 1;
}

static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Frames *d = c->priv;
  mmrt_video_free(&d->train), mmrt_video_free(&d->heldout); /* again after a resume */
  int rc = mmrt_video_init(&d->train, &c->train, MMRT_VIDEO_FRAMES, c->seed, err, errlen);
  return rc != MMRT_OK ? rc
                       : mmrt_video_init(&d->heldout, &c->test, MMRT_VIDEO_FRAMES,
                                         MMRT_VIDEO_HELDOUT_SEED, err, errlen);
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  Frames *d = c->priv;
  MmrtVideo *v = eval ? &d->heldout : &d->train;
  const uint64_t seed = eval ? MMRT_VIDEO_HELDOUT_SEED : c->seed;
  const size_t per = (size_t)MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE;
  float *px = mmrt_feed_at(c, d->px);
  int32_t *y = mmrt_feed_at(c, d->lb);
  float *clip = mmrt_xmalloc(sizeof *clip * per * MMRT_VIDEO_FRAMES, "a clip's frames");
  for (int64_t r = c->lo; r < c->lo + c->rows; r++) {
    int64_t k = r - c->lo;
    if (r >= rows) { /* padding rows: black, ignored */
      memset(px + k * per, 0, sizeof *px * per);
      y[k] = (int32_t)c->m->ignore_index;
      continue;
    }
    uint64_t i = eval ? (uint64_t)mmrt_iter_index(it, r) : sample0 + (uint64_t)r;
    float u;
    mmrt_rng_uniform(&u, seed, mmrt_rng_stream("frames/frame", 0), i, i + 1);
    int f = (int)(u * MMRT_VIDEO_FRAMES);
    MmrtClipInfo ci;
    mmrt_video_clip(v, i, clip, &ci);
    memcpy(px + k * per, clip + (size_t)(f < MMRT_VIDEO_FRAMES ? f : 0) * per, sizeof *px * per);
    y[k] = ci.label;
  }
  free(clip);
}

static void close_frames(MmrtFeedCtx *c) {
  Frames *d = c->priv;
  if (!d) return;
  mmrt_video_free(&d->train), mmrt_video_free(&d->heldout);
  free(d);
  c->priv = NULL;
}

const MmrtFeeder mmrt_feed_frames = {
    .name = "clip-frame classification",
    .format = MMRT_FMT_CLIPS_FRAMES,
    .inputs = "frames F32[B, 1, 64, 64] and labels I32[B]",
    .bind = bind,
    .open = mmrt_feed_open_fmnist,
    .start = start,
    .fill = fill,
    .close = close_frames,
};
