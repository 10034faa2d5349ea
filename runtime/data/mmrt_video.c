/* mmrt_video.c: Fashion-MNIST items moving across a 64x64 canvas (see
 * mmrt_video.h for the clip format and how each clip is drawn). */
#include "mmrt_video.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_caption.h"
#include "mmrt_rng.h"

static const char *const dir_names[MMRT_VIDEO_NDIRS] = {
    "left", "right", "up", "down", "up-left", "up-right", "down-left", "down-right",
};
static const int dir_x[MMRT_VIDEO_NDIRS] = {-1, 1, 0, 0, -1, 1, -1, 1};
static const int dir_y[MMRT_VIDEO_NDIRS] = {0, 0, -1, 1, -1, -1, 1, 1};

int mmrt_video_init(MmrtVideo *v, const MmrtImages *ds, int frames, uint64_t seed, char *err,
                    size_t errlen) {
  memset(v, 0, sizeof *v);
  if (frames < 1 || (frames - 1) % 4)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "video clips have 1 + 4k frames (1, 5, 9, ..., 17, ...); got %d", frames);
  if (!ds || ds->n <= 0 || ds->n > UINT32_MAX || ds->rows != MMRT_FMNIST_SIDE ||
      ds->cols != MMRT_FMNIST_SIDE)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "video clips need a non-empty split of %dx%d items",
                     MMRT_FMNIST_SIDE, MMRT_FMNIST_SIDE);
  v->perm = malloc(sizeof *v->perm * (size_t)ds->n);
  if (!v->perm) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  v->ds = ds, v->seed = seed, v->frames = frames, v->perm_epoch = -1;
  return MMRT_OK;
}

void mmrt_video_free(MmrtVideo *v) {
  free(v->perm);
  memset(v, 0, sizeof *v);
}

/* A draw in [0, range) from word j of clip `index`. */
static int draw(uint64_t seed, uint64_t index, int j, int range) {
  uint32_t u = mmrt_rng_u32(seed, mmrt_rng_stream("mmrt/video", 0), 4 * index + (uint64_t)j);
  return (int)(((uint64_t)u * (uint64_t)range) >> 32);
}

/* A start on one axis, from word j: anywhere when still, else one whose
 * path of span = speed * (F - 1) pixels stays in [0, ROOM] when it fits. */
static int start_on(const MmrtVideo *v, uint64_t index, int j, int dirc, int span) {
  if (dirc == 0 || span > MMRT_VIDEO_ROOM) return draw(v->seed, index, j, MMRT_VIDEO_ROOM + 1);
  int lo = dirc > 0 ? 0 : span;
  return lo + draw(v->seed, index, j, MMRT_VIDEO_ROOM - span + 1);
}

void mmrt_video_info(MmrtVideo *v, uint64_t index, MmrtClipInfo *ci) {
  uint64_t n = (uint64_t)v->ds->n;
  int64_t epoch = (int64_t)(index / n);
  if (epoch != v->perm_epoch) {
    mmrt_rng_permutation(v->perm, (uint32_t)n, v->seed ^ MMRT_VIDEO_PERM_SALT, (uint64_t)epoch);
    v->perm_epoch = epoch;
  }
  memset(ci, 0, sizeof *ci);
  ci->index = index;
  ci->item = v->perm[index % n];
  ci->label = v->ds->labels[ci->item];
  int smax = v->frames > 1 ? MMRT_VIDEO_ROOM / (v->frames - 1) : 1;
  if (smax < 1) smax = 1;
  ci->dir = draw(v->seed, index, 0, MMRT_VIDEO_NDIRS);
  ci->speed = 1 + draw(v->seed, index, 1, smax);
  ci->vx = dir_x[ci->dir] * ci->speed, ci->vy = dir_y[ci->dir] * ci->speed;
  int span = ci->speed * (v->frames - 1);
  ci->x0 = start_on(v, index, 2, dir_x[ci->dir], span);
  ci->y0 = start_on(v, index, 3, dir_y[ci->dir], span);
}

/* p reflected into [0, ROOM]. */
static int reflect(int64_t p) {
  const int64_t L = MMRT_VIDEO_ROOM;
  int64_t q = p % (2 * L);
  if (q < 0) q += 2 * L;
  return (int)(q > L ? 2 * L - q : q);
}

void mmrt_video_pos(const MmrtClipInfo *ci, int t, int *x, int *y) {
  *x = reflect((int64_t)ci->x0 + (int64_t)ci->vx * t);
  *y = reflect((int64_t)ci->y0 + (int64_t)ci->vy * t);
}

void mmrt_video_clip(MmrtVideo *v, uint64_t index, float *out, MmrtClipInfo *ci) {
  MmrtClipInfo own;
  if (!ci) ci = &own;
  mmrt_video_info(v, index, ci);
  const int S = MMRT_VIDEO_SIDE, W = MMRT_FMNIST_SIDE;
  const uint8_t *px = v->ds->pixels + (size_t)ci->item * (size_t)(W * W);
  memset(out, 0, sizeof *out * (size_t)v->frames * (size_t)(S * S));
  for (int t = 0; t < v->frames; t++) {
    int x, y;
    mmrt_video_pos(ci, t, &x, &y);
    float *f = out + (size_t)t * (size_t)(S * S);
    for (int r = 0; r < W; r++)
      for (int c = 0; c < W; c++) f[(y + r) * S + x + c] = (float)px[r * W + c] / 255.0f;
  }
}

const char *mmrt_video_dir_name(int dir) {
  return dir >= 0 && dir < MMRT_VIDEO_NDIRS ? dir_names[dir] : NULL;
}

int mmrt_video_caption(const MmrtClipInfo *ci, char *buf, size_t n) {
  const char *what = mmrt_caption_answer(ci->label, 0), *dir = mmrt_video_dir_name(ci->dir);
  return snprintf(buf, n, "%s moving %s", what ? what : "an item", dir ? dir : "nowhere");
}

double mmrt_video_psnr(const float *ref, const float *out, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; i++) {
    double o = out[i] < 0 ? 0 : out[i] > 1 ? 1 : out[i], d = o - (double)ref[i];
    se += d * d;
  }
  double mse = n ? se / (double)n : 0, db = mse > 0 ? -10.0 * log10(mse) : MMRT_VIDEO_PSNR_MAX;
  return db < MMRT_VIDEO_PSNR_MAX ? db : MMRT_VIDEO_PSNR_MAX;
}

uint8_t mmrt_video_byte(float v) {
  return (uint8_t)lrintf((v < 0 ? 0 : v > 1 ? 1 : v) * 255.0f);
}
