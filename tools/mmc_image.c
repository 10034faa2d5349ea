/* mmc_image.c: `mmc image FILE...`, the driver's command over
 * runtime/data/mmrt_image.h: each image decoded and preprocessed as a vision
 * processor does (CLIP/LLaVA's or InternVL2's), one line a file on stdout,
 * and with --out the normalised pixels as raw float32 (docs/images.md).
 * Any bad file stops the run with exit 1 before --out is written. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmc_cli.h"
#include "mmrt_ckpt.h"
#include "mmrt_image.h"
#include "tools/mmc_image.h"

static int usage(FILE *out, const char *args, const char *help, int rc) {
  fprintf(out,
          "usage: mmc image %s\n\n%s\n\nOptions:\n"
          "  --mode clip|internvl|none  the processor (default clip): clip resizes the shortest\n"
          "                     edge to N and crops the center N x N; internvl cuts 1 to K tiles\n"
          "                     of N x N by the closest grid, plus a thumbnail when more than\n"
          "                     one; none keeps the decoded image whole (one tile of its size)\n"
          "  --size N           the tile size (default 224 for clip, 448 for internvl)\n"
          "  --max-tiles K      internvl: at most K tiles besides the thumbnail (default 12)\n"
          "  --mean a,b,c       the per-channel mean (default CLIP's or ImageNet's)\n"
          "  --std a,b,c        the per-channel std (default CLIP's or ImageNet's)\n"
          "  --max-pixels N     refuse images of more than N pixels (default 89478485)\n"
          "  --out FILE.f32     write every tile's pixels: float32 little-endian, per image per\n"
          "                     tile (grid row by row, then the thumbnail) 3 planes R, G, B of\n"
          "                     N x N, each row major\n"
          "  -h, --help         this help\n",
          args, help);
  return rc;
}

static int bad(const char *args, const char *help, const char *fmt, const char *arg) {
  mmc_cli_refuse("", fmt, arg);
  return usage(stderr, args, help, 2);
}

/* "a,b,c": three finite numbers (positive when std). */
static bool parse3(const char *s, float v[3], bool positive) {
  char *end;
  for (int i = 0; i < 3; i++) {
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || errno || !(d == d) || d > 1e30 || d < -1e30 || (positive && !(d > 0)))
      return false;
    v[i] = (float)d;
    if (i < 2 && *end != ',') return false;
    s = end + (i < 2);
  }
  return *end == 0;
}

int mmc_image(int argc, char **argv, const char *args, const char *help) {
  const char *mode = "clip", *outp = NULL;
  bool have_size = false;
  long size = 0, max_tiles = 0, max_pixels = MMRT_IMAGE_MAX_PIXELS_DEFAULT;
  float mean[3], std[3];
  bool have_mean = false, have_std = false;
  char **files = calloc((size_t)argc + 1, sizeof *files);
  int nfiles = 0, rc = 0;
  if (!files) return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      free(files);
      return usage(stdout, args, help, 0);
    }
    if (a[0] != '-' || strcmp(a, "-") == 0) {
      files[nfiles++] = argv[i];
      continue;
    }
    bool known = !strcmp(a, "--mode") || !strcmp(a, "--size") || !strcmp(a, "--max-tiles") ||
                 !strcmp(a, "--mean") || !strcmp(a, "--std") || !strcmp(a, "--out") ||
                 !strcmp(a, "--max-pixels");
    if (!known)
      rc = bad(args, help, "unknown option '%s'", a);
    else if (!v)
      rc = bad(args, help, "%s needs a value", a);
    else if (!strcmp(a, "--mode")) {
      if (strcmp(v, "clip") && strcmp(v, "internvl") && strcmp(v, "none"))
        rc = bad(args, help, "--mode '%s': expected clip, internvl or none", v);
      mode = v;
    } else if (!strcmp(a, "--size")) {
      have_size = true;
      if (!mmc_cli_long(v, 1, 4096, &size))
        rc = bad(args, help, "--size '%s': expected a whole number from 1 to 4096", v);
    } else if (!strcmp(a, "--max-tiles")) {
      if (!mmc_cli_long(v, 1, 64, &max_tiles))
        rc = bad(args, help, "--max-tiles '%s': expected a whole number from 1 to 64", v);
    } else if (!strcmp(a, "--max-pixels")) {
      if (!mmc_cli_long(v, 1, 1L << 40, &max_pixels))
        rc = bad(args, help, "--max-pixels '%s': expected a whole number from 1", v);
    } else if (!strcmp(a, "--mean")) {
      if (!(have_mean = parse3(v, mean, false)))
        rc = bad(args, help, "--mean '%s': expected three numbers a,b,c", v);
    } else if (!strcmp(a, "--std")) {
      if (!(have_std = parse3(v, std, true)))
        rc = bad(args, help, "--std '%s': expected three positive numbers a,b,c", v);
    } else
      outp = v;
    if (rc) break;
    i++;
  }
  bool internvl = strcmp(mode, "internvl") == 0, none = strcmp(mode, "none") == 0;
  if (!rc && !nfiles) rc = bad(args, help, "%s", "no image file given");
  if (!rc && max_tiles && !internvl)
    rc = bad(args, help, "%s", "--max-tiles is for --mode internvl (clip and none make one tile)");
  if (!rc && have_size && none)
    rc = bad(args, help, "%s", "--size is not for --mode none (the image keeps its size)");
  if (rc) {
    free(files);
    return rc;
  }
  if (!size) size = internvl ? 448 : 224;
  if (!max_tiles) max_tiles = 12;
  if (!have_mean)
    memcpy(mean, internvl ? mmrt_image_imagenet_mean : mmrt_image_clip_mean, sizeof mean);
  if (!have_std) memcpy(std, internvl ? mmrt_image_imagenet_std : mmrt_image_clip_std, sizeof std);

  float *all = NULL;
  size_t nall = 0;
  char err[1024];
  for (int i = 0; i < nfiles && !rc; i++) {
    MmrtImage im;
    if (mmrt_image_read(files[i], max_pixels, &im, err, sizeof err) != MMRT_OK) {
      fprintf(stderr, "mmc: error: %s\n", err);
      rc = 1;
      break;
    }
    MmrtTileGrid g = {1, 1, 0};
    float *t = NULL;
    int nt = 1, tw = none ? im.w : (int)size, th = none ? im.h : (int)size;
    size_t per = (size_t)3 * tw * th;
    int r = none       ? ((t = malloc(sizeof(float) * per))
                              ? (mmrt_image_normalise(&im, mean, std, t), MMRT_OK)
                              : mmrt_errf(err, sizeof err, MMRT_ERR_NOMEM, "out of memory"))
            : internvl ? mmrt_image_internvl(&im, (int)size, (int)max_tiles, mean, std, &t, &nt, &g,
                                             err, sizeof err)
                       : ((t = malloc(sizeof(float) * per))
                              ? mmrt_image_clip(&im, (int)size, mean, std, t, err, sizeof err)
                              : mmrt_errf(err, sizeof err, MMRT_ERR_NOMEM, "out of memory"));
    if (r == MMRT_OK) {
      printf("%s: %s %s, %dx%d after orientation %d; %s %dx%d tiles: grid %dx%d, thumbnail %d, "
             "%d tile%s\n",
             files[i], im.kind, im.detail, im.w, im.h, im.orientation, mode, tw, th, g.cols, g.rows,
             g.thumbnail, nt, nt == 1 ? "" : "s");
      if (outp) {
        float *n2 = realloc(all, sizeof(float) * (nall + per * nt));
        if (!n2) {
          r = mmrt_errf(err, sizeof err, MMRT_ERR_NOMEM, "out of memory for --out");
        } else {
          all = n2;
          memcpy(all + nall, t, sizeof(float) * per * nt);
          nall += per * nt;
        }
      }
    }
    if (r != MMRT_OK) {
      fprintf(stderr, "mmc: error: %s: %s\n", files[i], err);
      rc = 1;
    }
    free(t);
    mmrt_image_free(&im);
  }
  if (!rc && outp &&
      mmrt_write_file_atomic(outp, all ? (const void *)all : (const void *)"", sizeof(float) * nall,
                             err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "mmc: error: %s\n", err);
    rc = 1;
  }
  free(all);
  free(files);
  return rc;
}
