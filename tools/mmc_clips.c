/* mmc_clips.c: the `mmc-clips` tool: writes video clips (mmrt_video.h) for
 * a person to look at.
 *
 *   mmc-clips [--data DIR] [--split train|test] [--seed S] [--frames F]
 *             [--first I] OUT N
 *
 * writes clips I .. I + N - 1 of the split under seed S (defaults: the
 * Debian data, train, seed 0, 17 frames, first 0; the held-out clips the
 * trainer evaluates on are --split test --seed 12) into OUT (created if
 * missing) as clip_<index>.png, the frames side by side (64 x 64F, 8-bit
 * gray, byte = round(255 v)), clip_<index>.gif, the frames animated
 * (10 frames a second, looping; 256-gray palette, so the same bytes),
 * and captions.txt, one line a clip: "index item label caption". */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_gif.h"
#include "mmrt_png.h"
#include "mmrt_video.h"

#define ERRLEN 1024

static int usage(void) {
  fprintf(stderr, "usage: mmc-clips [--data DIR] [--split train|test] [--seed S] [--frames F] "
                  "[--first I] OUT N\n");
  return 2;
}

/* Clip ci's frames (F, S, S) as bytes into px and as a strip (S, F S) into strip. */
static void to_bytes(const float *clip, int F, uint8_t *px, uint8_t *strip) {
  const int S = MMRT_VIDEO_SIDE;
  for (int t = 0; t < F; t++)
    for (int r = 0; r < S; r++)
      for (int c = 0; c < S; c++) {
        uint8_t b = mmrt_video_byte(clip[((size_t)t * S + (size_t)r) * S + (size_t)c]);
        px[((size_t)t * S + (size_t)r) * S + (size_t)c] = b;
        strip[(size_t)r * (size_t)(F * S) + (size_t)(t * S + c)] = b;
      }
}

static int parse_u64(const char *s, uint64_t *v) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || end == s || *end || *s == '-') return 0;
  *v = x;
  return 1;
}

static int dump(const char *out, MmrtVideo *v, uint64_t first, uint64_t n, char *err,
                size_t errlen) {
  const int S = MMRT_VIDEO_SIDE, F = v->frames;
  size_t per = (size_t)F * (size_t)(S * S);
  float *clip = malloc(sizeof *clip * per);
  uint8_t *px = malloc(per), *strip = malloc(per);
  char path[4096], cap[128];
  snprintf(path, sizeof path, "%s/captions.txt", out);
  FILE *txt = fopen(path, "w");
  int rc = !clip || !px || !strip ? mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory")
           : !txt
               ? mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot write: %s", path, strerror(errno))
               : MMRT_OK;
  for (uint64_t i = first; rc == MMRT_OK && i < first + n; i++) {
    MmrtClipInfo ci;
    mmrt_video_clip(v, i, clip, &ci);
    to_bytes(clip, F, px, strip);
    mmrt_video_caption(&ci, cap, sizeof cap);
    fprintf(txt, "%llu %lld %d %s\n", (unsigned long long)i, (long long)ci.item, ci.label, cap);
    snprintf(path, sizeof path, "%s/clip_%05llu.png", out, (unsigned long long)i);
    rc = mmrt_png_write_gray(path, S, F * S, strip, err, errlen);
    snprintf(path, sizeof path, "%s/clip_%05llu.gif", out, (unsigned long long)i);
    if (rc == MMRT_OK) rc = mmrt_gif_write_gray(path, F, S, S, px, err, errlen);
  }
  if (txt && fclose(txt) != 0 && rc == MMRT_OK)
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s/captions.txt: cannot write: %s", out,
                   strerror(errno));
  free(clip), free(px), free(strip);
  return rc;
}

int main(int argc, char **argv) {
  const char *data = NULL, *split = "train", *pos[2] = {NULL, NULL};
  uint64_t seed = 0, frames = MMRT_VIDEO_FRAMES, first = 0, n = 0;
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has = i + 1 < argc;
    if (!strcmp(a, "--data") && has)
      data = argv[++i];
    else if (!strcmp(a, "--split") && has)
      split = argv[++i];
    else if (!strcmp(a, "--seed") && has) {
      if (!parse_u64(argv[++i], &seed))
        return fprintf(stderr, "mmc-clips: bad --seed %s\n", argv[i]), 2;
    } else if (!strcmp(a, "--frames") && has) {
      if (!parse_u64(argv[++i], &frames) || frames > 4097)
        return fprintf(stderr, "mmc-clips: bad --frames %s (1 + 4k)\n", argv[i]), 2;
    } else if (!strcmp(a, "--first") && has) {
      if (!parse_u64(argv[++i], &first))
        return fprintf(stderr, "mmc-clips: bad --first %s\n", argv[i]), 2;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "mmc-clips: unknown or incomplete option %s\n", a);
      return usage();
    } else if (npos < 2)
      pos[npos++] = a;
    else
      return usage();
  }
  if (npos != 2) return usage();
  if (!parse_u64(pos[1], &n) || n == 0 || n > 1000000)
    return fprintf(stderr, "mmc-clips: N must be a count in [1, 1000000]; got %s\n", pos[1]), 2;
  if (strcmp(split, "train") && strcmp(split, "test"))
    return fprintf(stderr, "mmc-clips: --split is train or test; got %s\n", split), 2;
  if (mkdir(pos[0], 0777) != 0 && errno != EEXIST)
    return fprintf(stderr, "mmc-clips: cannot create %s: %s\n", pos[0], strerror(errno)), 1;
  char err[ERRLEN];
  MmrtImages ds = {0};
  MmrtVideo v = {0};
  int rc = mmrt_fmnist_load(&ds, data, strcmp(split, "test") ? MMRT_SPLIT_TRAIN : MMRT_SPLIT_TEST,
                            err, sizeof err);
  if (rc == MMRT_OK) rc = mmrt_video_init(&v, &ds, (int)frames, seed, err, sizeof err);
  if (rc == MMRT_OK) rc = dump(pos[0], &v, first, n, err, sizeof err);
  mmrt_video_free(&v);
  mmrt_images_free(&ds);
  if (rc != MMRT_OK) {
    fprintf(stderr, "mmc-clips: error: %s\n", err);
    return 1;
  }
  return 0;
}
