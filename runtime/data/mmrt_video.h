/* mmrt_video.h: video clips made from Fashion-MNIST items (the data the
 * video autoencoder trains on), each a pure function of (seed, index).
 *
 * A clip is F frames (F = 1 + 4k, default 17) of a 64x64 black canvas on
 * which one 28x28 Fashion-MNIST item moves in a straight line: values f32
 * in [0, 1] (byte / 255, so the background is exactly 0, as zero padding
 * is, and PSNR takes peak 1; a model wanting [-1, 1] maps 2x - 1 itself),
 * laid out (F, 64, 64), as the (C = 1, T, H, W) of one row of a
 * Conv3d / WFVAE input f32[B, 1, F, 64, 64].
 *
 * Clip `index` of a split of n items under `seed`:
 *   item      perm[index % n] with perm = mmrt_rng_permutation(n, seed',
 *             index / n), seed' = seed ^ MMRT_VIDEO_PERM_SALT: every n
 *             consecutive clips use every item once;
 *   direction one of 8 (left, right, up, down and the diagonals), word 0
 *             of stream "mmrt/video" at position 4 * index + 0;
 *   speed     s in [1, smax] pixels per frame along each moving axis
 *             (word 1), smax = max(1, floor(36 / (F - 1))) (36 = 64 - 28:
 *             the free room), so at F = 17 the speed is 1 or 2;
 *   start     top-left corner (x0, y0) (words 2 and 3), drawn on each
 *             moving axis among the starts whose whole path stays on the
 *             canvas, on a still axis anywhere in [0, 36].
 * Word j is drawn as (u32 * range) >> 32 (no modulo bias). Position at
 * frame t: p0 + v t reflected into [0, 36] (the item bounces, staying
 * whole on the canvas); with the start rule a bounce only happens when
 * F - 1 > 36, i.e. never at the default 17 frames, so the caption ("a
 * sneaker moving left", the class as the caption task names it,
 * mmrt_caption_answer(label, 0)) is true of the whole clip. Positions are
 * whole pixels: frame t holds the item's bytes / 255 unchanged at
 * (x(t), y(t)) and 0 elsewhere. Nothing depends on which clips were made
 * before, on batch size or on ranks. */
#ifndef MMRT_VIDEO_H
#define MMRT_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_data.h"

#define MMRT_VIDEO_SIDE      64
#define MMRT_VIDEO_FRAMES    17                                   /* default: 1 + 4 * 4 */
#define MMRT_VIDEO_ROOM      (MMRT_VIDEO_SIDE - MMRT_FMNIST_SIDE) /* 36 */
#define MMRT_VIDEO_PERM_SALT 0x766964656f636c70ull                /* "videoclp" */
/* Held-out clips use this seed whatever the run seed, so their scores
 * compare across runs. */
#define MMRT_VIDEO_HELDOUT_SEED 12u

typedef enum MmrtVideoDir {
  MMRT_DIR_LEFT,
  MMRT_DIR_RIGHT,
  MMRT_DIR_UP,
  MMRT_DIR_DOWN,
  MMRT_DIR_UP_LEFT,
  MMRT_DIR_UP_RIGHT,
  MMRT_DIR_DOWN_LEFT,
  MMRT_DIR_DOWN_RIGHT,
  MMRT_VIDEO_NDIRS
} MmrtVideoDir;

/* What clip `index` shows (mmrt_video_info). */
typedef struct MmrtClipInfo {
  uint64_t index;
  int64_t item;   /* in the split */
  int label;      /* its class */
  int dir, speed; /* MmrtVideoDir, pixels per frame */
  int vx, vy;     /* velocity, pixels per frame (x right, y down) */
  int x0, y0;     /* top-left corner at frame 0 */
} MmrtClipInfo;

/* The clips of one split under one seed; caches the item order of one
 * epoch of n clips. */
typedef struct MmrtVideo {
  const MmrtImages *ds;
  uint64_t seed;
  int frames;
  uint32_t *perm; /* (ds->n) */
  int64_t perm_epoch;
} MmrtVideo;

/* frames must be 1 + 4k (k >= 0), ds non-empty 28x28; MMRT_ERR_ARG else. */
int mmrt_video_init(MmrtVideo *v, const MmrtImages *ds, int frames, uint64_t seed, char *err,
                    size_t errlen);
void mmrt_video_free(MmrtVideo *v);

void mmrt_video_info(MmrtVideo *v, uint64_t index, MmrtClipInfo *ci);

/* Top-left corner of the item at frame t. */
void mmrt_video_pos(const MmrtClipInfo *ci, int t, int *x, int *y);

/* Clip `index` into out (frames * 64 * 64 floats); ci may be NULL. */
void mmrt_video_clip(MmrtVideo *v, uint64_t index, float *out, MmrtClipInfo *ci);

/* The PSNR in dB of one reconstructed clip: out (n values) clamped to
 * [0, 1] against ref (n values in [0, 1]), peak 1:
 * 10 log10(1 / mean((clamp(out) - ref)^2)), the squares summed in double;
 * MMRT_VIDEO_PSNR_MAX when they are equal. Scores average it over clips. */
#define MMRT_VIDEO_PSNR_MAX 100.0
double mmrt_video_psnr(const float *ref, const float *out, size_t n);

/* A value in [0, 1] as a byte, round(255 v) (clamped first). */
uint8_t mmrt_video_byte(float v);

/* "left", "up-right", ...; NULL outside the directions. */
const char *mmrt_video_dir_name(int dir);

/* "a sneaker moving left" into buf; its length (snprintf's). */
int mmrt_video_caption(const MmrtClipInfo *ci, char *buf, size_t n);

#endif
