/* mmrt_feed_video.c: video clips for a reconstruction model (WFVAE).
 *
 * Input video f32[B, 1, F, 64, 64] (B, C, T, H, W), F = 1 + 4k: one clip
 * per row (mmrt_video.h), values in [0, 1]. Training row r of step s is
 * train-split clip (s - 1) * B + r under the run seed; evaluation row r of
 * a test batch is test-split clip i (i = the row's position in the test
 * split, so a pass covers clips 0 .. 9999) under MMRT_VIDEO_HELDOUT_SEED,
 * the same held-out clips for every run seed. Rows past a short batch are
 * black (0). No labels: the trainer's evaluation reports the model's loss
 * and no accuracy. A video autoencoder (forwards encode and decode, compiled
 * as @encode and @decode for a one-rank trainer: mmc compile) also gets the
 * PSNR of its reconstructions at every evaluation, on the same held-out
 * clips: each clip encoded, decoded, clamped to [0, 1] and scored against
 * the clip with peak 1 (mmrt_video_psnr), the mean over the clips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_feed.h"
#include "mmrt_vfiles.h"
#include "mmrt_video.h"

typedef struct Clips {
  MmrtVideo train, heldout;
  int files; /* from video files (vf) */
  MmrtVfiles vf;
} Clips;

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtTensorDesc *v = mmrt_desc_input(c->m, MMRT_IN(VID_VIDEO));
  const int64_t shape[5] = {c->B, 1, -1, MMRT_VIDEO_SIDE, MMRT_VIDEO_SIDE},
                any[5] = {c->B, -1, -1, -1, -1};
  int files = mmrt_vfiles_is(c->data);
  if (!mmrt_feed_is(v, MMRT_ST_F32, 5, files ? any : shape)) return 0;
  if (files && v->shape[1] != 1 && v->shape[1] != 3) {
    snprintf(err, errlen, "model %s: input video has %lld channels; video files give 1 or 3",
             c->m->name, (long long)v->shape[1]);
    return -1;
  }
  c->batch[0] = v, c->nbatch = 1, c->labels = NULL;
  if (v->shape[2] < 1 || (v->shape[2] - 1) % 4) {
    snprintf(err, errlen, "model %s: input video has %lld frames; clips have 1 + 4k (e.g. 17)",
             c->m->name, (long long)v->shape[2]);
    return -1;
  }
  return 1;
}

static int open_data(MmrtFeedCtx *c, const char *dir, char *err, size_t errlen) {
  Clips *k = c->priv ? c->priv : calloc(1, sizeof *k);
  if (!k) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  c->priv = k;
  if (!mmrt_vfiles_is(dir)) return mmrt_feed_open_fmnist(c, dir, err, errlen);
  if (!mmrt_feed_vfiles_open)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "%s: a list of video files, but this program was linked without the video "
                     "decoder (its model takes no 5-D video input)",
                     dir);
  k->files = 1;
  return mmrt_feed_vfiles_open(c, &k->vf, dir, c->batch[0]->shape + 1, err, errlen);
}

static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Clips *k = c->priv;
  if (k->files) return MMRT_OK;
  mmrt_video_free(&k->train), mmrt_video_free(&k->heldout); /* again after a resume */
  int F = (int)c->batch[0]->shape[2],
      rc = mmrt_video_init(&k->train, &c->train, F, c->seed, err, errlen);
  return rc != MMRT_OK
             ? rc
             : mmrt_video_init(&k->heldout, &c->test, F, MMRT_VIDEO_HELDOUT_SEED, err, errlen);
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  Clips *k = c->priv;
  float *x = mmrt_feed_at(c, c->batch[0]);
  if (k->files) {
    mmrt_feed_vfiles_rows(c, &k->vf, it, rows, eval, sample0, x, NULL);
    return;
  }
  MmrtVideo *v = eval ? &k->heldout : &k->train;
  size_t per = (size_t)v->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE;
  for (int64_t r = c->lo; r < c->lo + c->rows; r++) {
    float *row = x + (size_t)(r - c->lo) * per;
    if (r >= rows)
      memset(row, 0, sizeof *row * per);
    else
      mmrt_video_clip(v, eval ? (uint64_t)mmrt_iter_index(it, r) : sample0 + (uint64_t)r, row,
                      NULL);
  }
}

/* The mean PSNR of the reconstructed held-out clips; 1 when the model has
 * no @encode and @decode (not an autoencoder, or a multi-rank build). */
static int psnr(MmrtFeedCtx *c, double *value, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  if (!m->vae_encode_step || !m->vae_decode_step || !m->vae_tensors) return 1;
  const MmrtTensorDesc *lat = &m->vae_tensors[MMRT_VAE_LATENTS],
                       *in = &m->vae_tensors[MMRT_VAE_DEC_IN],
                       *out = &m->vae_tensors[MMRT_VAE_CLIPS];
  int64_t n = 1, per = 1;
  for (int64_t d = 0; d < lat->ndim; d++) n *= lat->shape[d];
  for (int64_t d = 1; d < c->batch[0]->ndim; d++) per *= c->batch[0]->shape[d];
  if (out->ndim != c->batch[0]->ndim || out->shape[0] != c->B ||
      out->shape[2] != c->batch[0]->shape[2])
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "model %s: decode must return clips of the input video's shape", m->name);
  double sum = 0;
  int64_t counted = 0, batches = 0;
  err[0] = 0;
  int rc = mmrt_feed_restart_eval(c, err, errlen);
  MmrtProgress pr;
  mmrt_progress_begin(&pr, "PSNR eval batch", 0, mmrt_feed_eval_total(c), "clips", c->loud);
  while (rc == MMRT_OK && !(c->stop && c->stop(c))) { /* a stop: the caller reports no PSNR */
    int64_t rows = mmrt_iter_next(&c->eval_it);
    if (rows == 0 || (c->eval_batches >= 0 && batches >= c->eval_batches)) break;
    fill(c, &c->eval_it, rows, 1, 0);
    if (c->step(c, m->vae_encode_step, "@encode (the held-out clips' latents)"))
      return MMRT_ERR_ARG;
    memcpy(mmrt_feed_at(c, in), mmrt_feed_at(c, lat), sizeof(float) * (size_t)n);
    if (c->step(c, m->vae_decode_step, "@decode (their reconstruction)")) return MMRT_ERR_ARG;
    const float *x = mmrt_feed_at(c, c->batch[0]), *y = mmrt_feed_at(c, out);
    for (int64_t r = 0; r < rows && r < c->B; r++, counted++)
      sum += mmrt_video_psnr(x + r * per, y + r * per, (size_t)per);
    batches++;
    mmrt_progress_tick(&pr, batches, (double)counted, NULL);
  }
  mmrt_progress_break(&pr);
  *value = counted ? sum / (double)counted : NAN;
  return rc;
}

static void close_clips(MmrtFeedCtx *c) {
  Clips *k = c->priv;
  if (!k) return;
  mmrt_video_free(&k->train), mmrt_video_free(&k->heldout);
  if (k->files) mmrt_vfiles_close(&k->vf);
  free(k);
  c->priv = NULL;
}

const MmrtFeeder mmrt_feed_video = {
    .name = "video",
    .format = MMRT_FMT_CLIPS_VIDEO,
    .inputs = "video F32[B, 1, 1 + 4k, 64, 64]",
    .bind = bind,
    .open = open_data,
    .start = start,
    .fill = fill,
    .metric = psnr,
    .metric_key = "eval_psnr",
    .metric_words = "PSNR",
    .metric_every = 1,
    .close = close_clips,
};
