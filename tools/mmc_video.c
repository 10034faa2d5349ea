/* mmc_video.c: `mmc video FILE|DATA.json...`, the driver's command over
 * runtime/mmrt_vdec.h: each video decoded, sampled to --frames at --fps,
 * cropped and resized to --size or the nearest of --buckets; one line a
 * video on stdout, and with --out the frames as raw float32, with
 * --png-strip a PNG of them (docs/video.md).  Any bad video or JSON entry
 * stops the run with exit 1 before either output is written. */
#include <errno.h>
#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmc_cli.h"
#include "mmrt_ckpt.h"
#include "mmrt_vdec.h"
#include "tools/mmc_video.h"

static int usage(FILE *out, const char *args, const char *help, int rc) {
  fprintf(out,
          "usage: mmc video %s\n\n%s\n\nOptions:\n"
          "  --frames N         frames per clip (default 17)\n"
          "  --fps F            sample at F frames a second: clip frame k is source frame\n"
          "                     floor(k * src_fps / F) (default: the source's fps, step 1)\n"
          "  --size HxW         crop the center to W:H and resize to H x W (default 64x64)\n"
          "  --buckets HxW,...  instead of --size: the bucket of nearest aspect ratio\n"
          "  --max-pixels N     refuse videos of more than N pixels a frame (default 8294400)\n"
          "  --out FILE.f32     write every clip: float32 little-endian in [0, 1], per video\n"
          "                     3 planes R, G, B of N frames of H x W, each row major\n"
          "  --png-strip FILE.png  write the clips as a PNG: a row of frames per video\n"
          "  -h, --help         this help\n",
          args, help);
  return rc;
}

static int bad(const char *args, const char *help, const char *fmt, const char *arg) {
  mmc_cli_refuse("", fmt, arg);
  return usage(stderr, args, help, 2);
}

/* "HxW" at s, sides 1..4096; *end after it. */
static bool parse_hw(const char *s, int *h, int *w, const char **end) {
  char *e;
  errno = 0;
  long a = strtol(s, &e, 10);
  if (e == s || *e != 'x' || errno || a < 1 || a > 4096 || *s == '-' || *s == '+') return false;
  const char *s2 = e + 1;
  long b = strtol(s2, &e, 10);
  if (e == s2 || errno || b < 1 || b > 4096 || *s2 == '-' || *s2 == '+') return false;
  *h = (int)a, *w = (int)b, *end = e;
  return true;
}

typedef struct Buf {
  uint8_t *p;
  size_t n, cap;
  bool fail;
} Buf;

static void png_mem(png_structp png, png_bytep data, png_size_t len) {
  Buf *b = png_get_io_ptr(png);
  if (b->fail) return;
  if (b->n + len > b->cap) {
    size_t c = (b->n + len) * 2;
    uint8_t *q = realloc(b->p, c);
    if (!q) {
      b->fail = true;
      return;
    }
    b->p = q, b->cap = c;
  }
  memcpy(b->p + b->n, data, len);
  b->n += len;
}
static void png_noflush(png_structp png) {
  (void)png;
}

static bool encode(png_structp png, png_infop info, int W, int H, png_bytep *rows, Buf *b) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, b, png_mem, png_noflush);
  png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, NULL);
  return true;
}

/* The strip: each clip a row of its frames left to right, clips top to
 * bottom, black beyond a narrower row. */
static int write_strip(const char *path, MmrtVdecClip *c, int n, char *err, size_t errlen) {
  int W = 0, H = 0;
  for (int i = 0; i < n; i++) {
    if (c[i].w * c[i].frames > W) W = c[i].w * c[i].frames;
    H += c[i].h;
  }
  if ((int64_t)W * H > (1LL << 28))
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: the strip would be %dx%d: too large", path, W,
                     H);
  uint8_t *img = calloc((size_t)W * H, 3);
  png_bytep *rows = malloc(sizeof *rows * (size_t)H);
  Buf b = {0};
  int rc = MMRT_OK;
  png_structp png =
      img && rows ? png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL) : NULL;
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
    goto out;
  }
  for (int i = 0, y0 = 0; i < n; y0 += c[i].h, i++) {
    size_t plane = (size_t)c[i].frames * c[i].h * c[i].w;
    for (int t = 0; t < c[i].frames; t++)
      for (int y = 0; y < c[i].h; y++)
        for (int x = 0; x < c[i].w; x++)
          for (int ch = 0; ch < 3; ch++) {
            float v = c[i].pix[ch * plane + ((size_t)t * c[i].h + y) * c[i].w + x];
            img[((size_t)(y0 + y) * W + t * c[i].w + x) * 3 + ch] = (uint8_t)(v * 255.0f + 0.5f);
          }
  }
  for (int y = 0; y < H; y++) rows[y] = img + (size_t)y * W * 3;
  if (!encode(png, info, W, H, rows, &b)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: PNG encoding failed", path);
    goto out;
  }
  if (b.fail)
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
  else
    rc = mmrt_write_file_atomic(path, b.p, b.n, err, errlen);
out:
  if (png) png_destroy_write_struct(&png, info ? &info : NULL);
  free(b.p);
  free(rows);
  free(img);
  return rc;
}

static bool is_json(const char *p) {
  size_t n = strlen(p);
  return n >= 5 && strcmp(p + n - 5, ".json") == 0;
}

int mmc_video(int argc, char **argv, const char *args, const char *help) {
  const char *outp = NULL, *stripp = NULL;
  long frames = 17, max_pixels = MMRT_VDEC_MAX_PIXELS_DEF;
  double fps = 0;
  int h = 64, w = 64, nb = 0, buckets[2 * 64];
  bool have_size = false;
  char **files = calloc((size_t)argc + 1, sizeof *files);
  int nfiles = 0, rc = 0;
  if (!files) return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      free(files);
      return usage(stdout, args, help, 0);
    }
    if (a[0] != '-') {
      files[nfiles++] = argv[i];
      continue;
    }
    bool known = !strcmp(a, "--frames") || !strcmp(a, "--fps") || !strcmp(a, "--size") ||
                 !strcmp(a, "--buckets") || !strcmp(a, "--out") || !strcmp(a, "--png-strip") ||
                 !strcmp(a, "--max-pixels");
    if (!known)
      rc = bad(args, help, "unknown option '%s'", a);
    else if (!v)
      rc = bad(args, help, "%s needs a value", a);
    else if (!strcmp(a, "--frames")) {
      if (!mmc_cli_long(v, 1, MMRT_VDEC_MAX_FRAMES, &frames))
        rc = bad(args, help, "--frames '%s': expected a whole number from 1 to 4096", v);
    } else if (!strcmp(a, "--fps")) {
      char *end;
      errno = 0;
      fps = strtod(v, &end);
      if (end == v || *end || errno || !(fps > 0 && fps <= 1000))
        rc = bad(args, help, "--fps '%s': expected a number above 0, at most 1000", v);
    } else if (!strcmp(a, "--size")) {
      const char *e;
      have_size = true;
      if (!parse_hw(v, &h, &w, &e) || *e)
        rc = bad(args, help, "--size '%s': expected HxW, sides from 1 to 4096", v);
    } else if (!strcmp(a, "--buckets")) {
      const char *s = v, *e;
      nb = 0;
      while (nb < 64 && parse_hw(s, &buckets[2 * nb], &buckets[2 * nb + 1], &e)) {
        nb++;
        s = e;
        if (*s != ',') break;
        s++;
      }
      if (!nb || *s || s[-1] == ',')
        rc = bad(args, help, "--buckets '%s': expected HxW,HxW,... (at most 64, sides 1 to 4096)",
                 v);
    } else if (!strcmp(a, "--max-pixels")) {
      if (!mmc_cli_long(v, 1, 1L << 40, &max_pixels))
        rc = bad(args, help, "--max-pixels '%s': expected a whole number from 1", v);
    } else if (!strcmp(a, "--out"))
      outp = v;
    else
      stripp = v;
    if (rc) break;
    i++;
  }
  if (!rc && !nfiles) rc = bad(args, help, "%s", "no video or JSON file given");
  if (!rc && have_size && nb) rc = bad(args, help, "%s", "--size and --buckets exclude each other");
  if (rc) {
    free(files);
    return rc;
  }
  MmrtVdecSpec spec = {.frames = (int)frames,
                       .fps = fps,
                       .h = h,
                       .w = w,
                       .buckets = nb ? buckets : NULL,
                       .nbuckets = nb,
                       .max_pixels = max_pixels};
  MmrtVdecClip *clips = NULL;
  int nclips = 0;
  char err[1024];
  for (int i = 0; i < nfiles && !rc; i++) {
    MmrtVdecEntry *ent = NULL;
    int nent = 1;
    bool json = is_json(files[i]);
    if (json && mmrt_vdec_json_read(files[i], &spec, &ent, &nent, err, sizeof err) != MMRT_OK) {
      fprintf(stderr, "mmc: error: %s\n", err);
      rc = 1;
      break;
    }
    for (int j = 0; j < nent && !rc; j++) {
      const char *path = json ? ent[j].path : files[i];
      MmrtVdecClip *nc = realloc(clips, sizeof *clips * (size_t)(nclips + 1));
      if (!nc) {
        fprintf(stderr, "mmc: error: out of memory\n");
        rc = 1;
        break;
      }
      clips = nc;
      MmrtVdecClip *c = &clips[nclips];
      if (mmrt_vdec_read(path, &spec, c, err, sizeof err) != MMRT_OK) {
        if (json)
          fprintf(stderr, "mmc: error: %s: entry %d: %s\n", files[i], j, err);
        else
          fprintf(stderr, "mmc: error: %s\n", err);
        rc = 1;
        break;
      }
      nclips++;
      if (json) printf("%s: entry %d: \"%s\"\n", files[i], j, ent[j].cap);
      printf("%s: %s, %s, %.3f s, %.3f fps, %dx%d; %d frames at %.3f fps, %dx%d", path,
             c->container, c->codec, c->duration, c->src_fps, c->src_w, c->src_h, c->frames,
             fps > 0 ? fps : c->src_fps, c->h, c->w);
      if (c->bucket >= 0) printf(" (bucket %d)", c->bucket);
      printf("; %d source frames decoded; indices", c->decoded);
      for (int k = 0; k < c->frames; k++) printf(" %d", c->index[k]);
      printf("\n");
    }
    mmrt_vdec_json_free(ent, json ? nent : 0);
  }
  if (!rc && outp) {
    size_t total = 0;
    for (int i = 0; i < nclips; i++) total += (size_t)3 * clips[i].frames * clips[i].h * clips[i].w;
    float *all = malloc(sizeof(float) * (total ? total : 1));
    if (!all) {
      fprintf(stderr, "mmc: error: out of memory for --out\n");
      rc = 1;
    } else {
      size_t at = 0;
      for (int i = 0; i < nclips; i++) {
        size_t n = (size_t)3 * clips[i].frames * clips[i].h * clips[i].w;
        memcpy(all + at, clips[i].pix, sizeof(float) * n);
        at += n;
      }
      if (mmrt_write_file_atomic(outp, all, sizeof(float) * total, err, sizeof err) != MMRT_OK) {
        fprintf(stderr, "mmc: error: %s\n", err);
        rc = 1;
      }
      free(all);
    }
  }
  if (!rc && stripp && write_strip(stripp, clips, nclips, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "mmc: error: %s\n", err);
    rc = 1;
  }
  for (int i = 0; i < nclips; i++) mmrt_vdec_free(&clips[i]);
  free(clips);
  free(files);
  return rc;
}
