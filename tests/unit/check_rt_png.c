/* check_rt_png.c: PNG input and output (runtime/data/mmrt_png.c): round trips,
 * every PNG colour type and bit depth libpng writes (the files written here
 * with libpng directly, expected gray values computed here), wrong sizes,
 * truncated / corrupt / non-PNG files, write failures, and a real
 * Fashion-MNIST test image normalising to the IDX path's floats. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tmpdir_fixture.h"
#include "mmrt_data.h"
#include "mmrt_log.h"
#include "mmrt_png.h"

static void make_tmpdir(void) {
  tmpdir_make("mmrt_png");
}
static void remove_tmpdir(void) {
  tmpdir_remove();
}

static void tmp_path(char *buf, size_t len, const char *name) {
  ck_assert_int_lt(snprintf(buf, len, "%s/%s", tmpdir, name), (int)len);
}

static uint32_t rng_state;

static uint32_t rnd(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return rng_state >> 8;
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  unsigned char *buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void spit(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  if (len) ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

/* ---- PNG files written here with libpng, independently of mmrt_png ---- */

typedef struct TestPng {
  int w, h, depth, ctype, interlace;
  const uint8_t *rows; /* packed rows as the PNG stores them (16-bit big-endian) */
  const png_color *palette;
  int npalette;
  const uint8_t *trans_alpha; /* palette tRNS */
  int ntrans;
  const png_color_16 *trans_color; /* gray or RGB tRNS */
  int gamma;                       /* write gAMA 1/2.2 and cHRM (sRGB primaries) */
} TestPng;

static int channels_of(int ctype) {
  switch (ctype) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    case PNG_COLOR_TYPE_PALETTE: return 1;
  }
  return 0;
}

static size_t rowbytes_of(const TestPng *t) {
  return ((size_t)t->w * (size_t)channels_of(t->ctype) * (size_t)t->depth + 7) / 8;
}

/* 1 on success; the libpng structs are in the caller's frame. */
static int write_test_png_body(png_structp png, png_infop info, FILE *f, const TestPng *t) {
  if (setjmp(png_jmpbuf(png))) return 0;
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)t->w, (png_uint_32)t->h, t->depth, t->ctype,
               t->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (t->palette) png_set_PLTE(png, info, t->palette, t->npalette);
  if (t->trans_alpha || t->trans_color)
    png_set_tRNS(png, info, t->trans_alpha, t->ntrans, t->trans_color);
  if (t->gamma) {
    png_set_gAMA_fixed(png, info, 45455);
    png_set_cHRM_fixed(png, info, 31270, 32900, 64000, 33000, 30000, 60000, 15000, 6000);
  }
  png_write_info(png, info);
  int passes = t->interlace ? png_set_interlace_handling(png) : 1;
  size_t rb = rowbytes_of(t);
  for (int pass = 0; pass < passes; pass++)
    for (int y = 0; y < t->h; y++) png_write_row(png, t->rows + (size_t)y * rb);
  png_write_end(png, NULL);
  return 1;
}

static void write_test_png(const char *path, const TestPng *t) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  ck_assert_ptr_nonnull(png);
  png_infop info = png_create_info_struct(png);
  ck_assert_ptr_nonnull(info);
  int ok = write_test_png_body(png, info, f, t);
  png_destroy_write_struct(&png, &info);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_msg(ok, "libpng failed writing the test file %s", path);
}

/* BT.601 luma of 8-bit (or 16-bit, scale 257) samples, unrounded, 0..255. */
static double luma(double r, double g, double b, double scale) {
  return (0.299 * r + 0.587 * g + 0.114 * b) / scale;
}

/* How close a converted pixel must be to the exact value computed here:
 * TOL_ROUNDED: rounded once at 16 bits (16-bit files, alpha compositing,
 *   gray), so within 0.5 plus a little for libpng's 15-bit weights;
 * TOL_8BIT_COLOUR: libpng's rgb_to_gray on 8-bit colour truncates, so the
 *   result may be 1 below the exact value rounded: checked as
 *   |got - round(exact)| <= 1 (the contract: +-1 rounding). */
#define TOL_ROUNDED     0.52
#define TOL_8BIT_COLOUR (-1.0)

static void read_expect(const char *path, int h, int w, const double *expect, double tol) {
  uint8_t *got = malloc((size_t)h * (size_t)w);
  char err[512];
  int rc = mmrt_png_read_gray(path, h, w, got, err, sizeof err);
  ck_assert_msg(rc == MMRT_OK, "%s", err);
  for (int k = 0; k < h * w; k++) {
    double diff = tol < 0 ? fabs(got[k] - floor(expect[k] + 0.5)) : fabs(got[k] - expect[k]);
    ck_assert_msg(diff <= fabs(tol), "%s: pixel %d (y %d, x %d) is %d, expected %.3f (%s%g)", path,
                  k, k / w, k % w, got[k], expect[k], tol < 0 ? "rounded, +-" : "+-", fabs(tol));
  }
  free(got);
}

/* ---- tests ---- */

START_TEST(round_trip) {
  make_tmpdir();
  rng_state = 1;
  const int sizes[][2] = {{28, 28}, {13, 29}, {1, 1}, {1, 300}, {70, 3}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    int h = sizes[s][0], w = sizes[s][1];
    uint8_t *px = malloc((size_t)h * w), *back = malloc((size_t)h * w);
    for (int k = 0; k < h * w; k++) px[k] = (uint8_t)(k == 0 ? 0 : k == 1 ? 255 : rnd());
    char path[512], err[512];
    tmp_path(path, sizeof path, "rt.png");
    int rc = mmrt_png_write_gray(path, h, w, px, err, sizeof err);
    ck_assert_msg(rc == MMRT_OK, "%s", err);
    rc = mmrt_png_read_gray(path, h, w, back, err, sizeof err);
    ck_assert_msg(rc == MMRT_OK, "%s", err);
    ck_assert_msg(memcmp(px, back, (size_t)h * w) == 0, "%d x %d differs", w, h);
    free(px);
    free(back);
  }
  /* the written file is a plain 8-bit gray PNG to libpng itself */
  char path[512];
  tmp_path(path, sizeof path, "rt.png");
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  ck_assert_ptr_nonnull(info);
  if (setjmp(png_jmpbuf(png))) ck_abort_msg("libpng could not read %s", path);
  png_init_io(png, f);
  png_read_info(png, info);
  ck_assert_int_eq(png_get_image_width(png, info), 3);
  ck_assert_int_eq(png_get_image_height(png, info), 70);
  ck_assert_int_eq(png_get_bit_depth(png, info), 8);
  ck_assert_int_eq(png_get_color_type(png, info), PNG_COLOR_TYPE_GRAY);
  png_destroy_read_struct(&png, &info, NULL);
  fclose(f);
  /* no temporary left behind */
  DIR *d = opendir(tmpdir);
  ck_assert_ptr_nonnull(d);
  int entries = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') {
      entries++;
      ck_assert_str_eq(e->d_name, "rt.png");
    }
  closedir(d);
  ck_assert_int_eq(entries, 1);
  remove_tmpdir();
}
END_TEST

enum { H = 28, W = 28, N = H * W };

START_TEST(rgb_to_gray) {
  make_tmpdir();
  rng_state = 2;
  uint8_t rows[N * 3];
  double expect[N];
  for (int k = 0; k < N; k++) {
    uint8_t r = (uint8_t)rnd(), g = (uint8_t)rnd(), b = (uint8_t)rnd();
    if (k < 8) /* pure colours and extremes */
      r = (k & 1) ? 255 : 0, g = (k & 2) ? 255 : 0, b = (k & 4) ? 255 : 0;
    rows[3 * k] = r, rows[3 * k + 1] = g, rows[3 * k + 2] = b;
    expect[k] = luma(r, g, b, 1);
  }
  ck_assert(fabs(expect[1] - 76.245) < 1e-9); /* pure red: 0.299 * 255 */
  char path[512];
  for (int variant = 0; variant < 3; variant++) {
    /* plain; with gAMA + cHRM (must not change the weights or add gamma);
     * interlaced */
    TestPng t = {.w = W,
                 .h = H,
                 .depth = 8,
                 .ctype = PNG_COLOR_TYPE_RGB,
                 .rows = rows,
                 .gamma = variant == 1,
                 .interlace = variant == 2};
    tmp_path(path, sizeof path, "rgb.png");
    write_test_png(path, &t);
    read_expect(path, H, W, expect, TOL_8BIT_COLOUR);
  }
  /* RGBA: composited onto black */
  uint8_t rgba[N * 4];
  for (int k = 0; k < N; k++) {
    memcpy(rgba + 4 * k, rows + 3 * k, 3);
    uint8_t a = k % 3 == 0 ? 255 : k % 3 == 1 ? 0 : (uint8_t)rnd();
    rgba[4 * k + 3] = a;
    expect[k] = luma(rows[3 * k], rows[3 * k + 1], rows[3 * k + 2], 1) * a / 255.0;
  }
  TestPng t = {.w = W, .h = H, .depth = 8, .ctype = PNG_COLOR_TYPE_RGB_ALPHA, .rows = rgba};
  tmp_path(path, sizeof path, "rgba.png");
  write_test_png(path, &t);
  read_expect(path, H, W, expect, TOL_8BIT_COLOUR);
  remove_tmpdir();
}
END_TEST

START_TEST(sixteen_bit) {
  make_tmpdir();
  rng_state = 3;
  char path[512];
  /* gray 16 */
  uint8_t g16[N * 2];
  double expect[N];
  for (int k = 0; k < N; k++) {
    unsigned v = k == 0 ? 0 : k == 1 ? 65535 : k == 2 ? 0x8080 : rnd() & 0xffff;
    g16[2 * k] = (uint8_t)(v >> 8), g16[2 * k + 1] = (uint8_t)v;
    expect[k] = v / 257.0;
  }
  TestPng t = {.w = W, .h = H, .depth = 16, .ctype = PNG_COLOR_TYPE_GRAY, .rows = g16};
  tmp_path(path, sizeof path, "g16.png");
  write_test_png(path, &t);
  read_expect(path, H, W, expect, TOL_ROUNDED);
  /* values that are exact 8-bit values scaled by 257 come back exactly */
  for (int k = 0; k < N; k++) {
    unsigned v = (k * 37 % 256) * 257u;
    g16[2 * k] = (uint8_t)(v >> 8), g16[2 * k + 1] = (uint8_t)v;
    expect[k] = k * 37 % 256;
  }
  write_test_png(path, &t);
  read_expect(path, H, W, expect, 0.0);
  /* RGB 16 */
  uint8_t rgb16[N * 6];
  for (int k = 0; k < N; k++) {
    unsigned c[3];
    for (int i = 0; i < 3; i++) {
      c[i] = rnd() & 0xffff;
      rgb16[6 * k + 2 * i] = (uint8_t)(c[i] >> 8), rgb16[6 * k + 2 * i + 1] = (uint8_t)c[i];
    }
    expect[k] = luma(c[0], c[1], c[2], 257);
  }
  TestPng t2 = {.w = W, .h = H, .depth = 16, .ctype = PNG_COLOR_TYPE_RGB, .rows = rgb16};
  tmp_path(path, sizeof path, "rgb16.png");
  write_test_png(path, &t2);
  read_expect(path, H, W, expect, TOL_ROUNDED);
  /* gray+alpha 16 */
  uint8_t ga16[N * 4];
  for (int k = 0; k < N; k++) {
    unsigned v = rnd() & 0xffff, a = k % 2 ? 65535 : rnd() & 0xffff;
    ga16[4 * k] = (uint8_t)(v >> 8), ga16[4 * k + 1] = (uint8_t)v;
    ga16[4 * k + 2] = (uint8_t)(a >> 8), ga16[4 * k + 3] = (uint8_t)a;
    expect[k] = v / 257.0 * (a / 65535.0);
  }
  TestPng t3 = {.w = W, .h = H, .depth = 16, .ctype = PNG_COLOR_TYPE_GRAY_ALPHA, .rows = ga16};
  tmp_path(path, sizeof path, "ga16.png");
  write_test_png(path, &t3);
  read_expect(path, H, W, expect, TOL_ROUNDED);
  remove_tmpdir();
}
END_TEST

START_TEST(gray_alpha_palette_low_depth) {
  make_tmpdir();
  rng_state = 4;
  char path[512];
  double expect[N];
  /* gray + alpha, 8-bit */
  uint8_t ga[N * 2];
  for (int k = 0; k < N; k++) {
    uint8_t g = (uint8_t)rnd(), a = k % 4 == 0 ? 0 : k % 4 == 1 ? 255 : (uint8_t)rnd();
    ga[2 * k] = g, ga[2 * k + 1] = a;
    expect[k] = g * a / 255.0;
  }
  TestPng t = {.w = W, .h = H, .depth = 8, .ctype = PNG_COLOR_TYPE_GRAY_ALPHA, .rows = ga};
  tmp_path(path, sizeof path, "ga.png");
  write_test_png(path, &t);
  read_expect(path, H, W, expect, TOL_ROUNDED);

  /* palette, 8-bit and 4-bit indices, with and without tRNS */
  png_color pal[16];
  uint8_t palpha[16];
  for (int i = 0; i < 16; i++) {
    pal[i].red = (png_byte)rnd(), pal[i].green = (png_byte)rnd(), pal[i].blue = (png_byte)rnd();
    palpha[i] = i == 0 ? 0 : i < 8 ? 255 : (uint8_t)rnd();
  }
  uint8_t idx[N], packed4[H * (W / 2)];
  for (int k = 0; k < N; k++) idx[k] = (uint8_t)(rnd() % 16);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x += 2)
      packed4[y * (W / 2) + x / 2] = (uint8_t)(idx[y * W + x] << 4 | idx[y * W + x + 1]);
  for (int trns = 0; trns < 2; trns++) {
    for (int k = 0; k < N; k++) {
      const png_color *c = &pal[idx[k]];
      expect[k] = luma(c->red, c->green, c->blue, 1) * (trns ? palpha[idx[k]] / 255.0 : 1);
    }
    TestPng p8 = {.w = W,
                  .h = H,
                  .depth = 8,
                  .ctype = PNG_COLOR_TYPE_PALETTE,
                  .rows = idx,
                  .palette = pal,
                  .npalette = 16,
                  .trans_alpha = trns ? palpha : NULL,
                  .ntrans = trns ? 16 : 0};
    tmp_path(path, sizeof path, "pal8.png");
    write_test_png(path, &p8);
    read_expect(path, H, W, expect, TOL_8BIT_COLOUR);
    TestPng p4 = p8;
    p4.depth = 4;
    p4.rows = packed4;
    tmp_path(path, sizeof path, "pal4.png");
    write_test_png(path, &p4);
    read_expect(path, H, W, expect, TOL_8BIT_COLOUR);
  }

  /* gray palette: an exact colour map */
  for (int i = 0; i < 16; i++) pal[i].red = pal[i].green = pal[i].blue = (png_byte)(i * 16 + 3);
  for (int k = 0; k < N; k++) expect[k] = idx[k] * 16 + 3;
  TestPng pg = {.w = W,
                .h = H,
                .depth = 8,
                .ctype = PNG_COLOR_TYPE_PALETTE,
                .rows = idx,
                .palette = pal,
                .npalette = 16};
  tmp_path(path, sizeof path, "palgray.png");
  write_test_png(path, &pg);
  read_expect(path, H, W, expect, 0.0);

  /* 1, 2 and 4-bit gray expand to 0..255 exactly */
  for (int depth = 1; depth <= 4; depth *= 2) {
    int per = 8 / depth, maxv = (1 << depth) - 1;
    uint8_t packed[H * W]; /* enough for any depth */
    memset(packed, 0, sizeof packed);
    size_t rb = (W * (size_t)depth + 7) / 8;
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        int v = (int)(rnd() % (unsigned)(maxv + 1));
        int shift = 8 - depth * (x % per + 1);
        packed[y * rb + x / per] |= (uint8_t)(v << shift);
        expect[y * W + x] = v * 255.0 / maxv;
      }
    TestPng tg = {.w = W, .h = H, .depth = depth, .ctype = PNG_COLOR_TYPE_GRAY, .rows = packed};
    tmp_path(path, sizeof path, "lowgray.png");
    write_test_png(path, &tg);
    read_expect(path, H, W, expect, 0.0);
  }

  /* 8-bit gray with a tRNS colour: those pixels become black */
  uint8_t g[N];
  for (int k = 0; k < N; k++) {
    g[k] = k % 5 == 0 ? 200 : (uint8_t)rnd();
    expect[k] = g[k] == 200 ? 0 : g[k];
  }
  png_color_16 tc = {.gray = 200};
  TestPng tt = {
      .w = W, .h = H, .depth = 8, .ctype = PNG_COLOR_TYPE_GRAY, .rows = g, .trans_color = &tc};
  tmp_path(path, sizeof path, "graytrns.png");
  write_test_png(path, &tt);
  read_expect(path, H, W, expect, 0.0);
  remove_tmpdir();
}
END_TEST

START_TEST(wrong_size) {
  make_tmpdir();
  char path[512], err[512], want[1024];
  uint8_t px[32 * 30] = {0}, out[N];
  tmp_path(path, sizeof path, "big.png");
  ck_assert_int_eq(mmrt_png_write_gray(path, 32, 30, px, err, sizeof err), MMRT_OK);
  int rc = mmrt_png_read_gray(path, H, W, out, err, sizeof err);
  ck_assert_int_eq(rc, MMRT_ERR_MISMATCH);
  snprintf(want, sizeof want, "%s: image is 30 x 32 pixels (width x height), expected 28 x 28",
           path);
  ck_assert_str_eq(err, want);
  /* transposed is wrong too */
  ck_assert_int_eq(mmrt_png_read_gray(path, 30, 32, px, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_int_eq(mmrt_png_read_gray(path, 32, 30, px, err, sizeof err), MMRT_OK);
  float x[N];
  ck_assert_int_eq(mmrt_png_read_fmnist(path, x, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_str_eq(err, want);
  /* bad arguments */
  ck_assert_int_eq(mmrt_png_read_gray(path, 0, 28, out, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_int_eq(mmrt_png_write_gray(path, 28, -1, out, err, sizeof err), MMRT_ERR_ARG);
  remove_tmpdir();
}
END_TEST

/* Every proper prefix of the file at src, written to cut, is refused as a
 * format error naming cut. */
static void all_prefixes_fail(const char *src, const char *cut, int h, int w) {
  size_t len;
  unsigned char *buf = slurp(src, &len);
  uint8_t *out = malloc((size_t)h * w);
  char err[512];
  for (size_t n = 0; n < len; n++) {
    spit(cut, buf, n);
    err[0] = 0;
    int rc = mmrt_png_read_gray(cut, h, w, out, err, sizeof err);
    ck_assert_msg(rc == MMRT_ERR_FORMAT, "%s cut at %zu of %zu: rc %d (%s)", src, n, len, rc, err);
    ck_assert_msg(strncmp(err, cut, strlen(cut)) == 0, "cut at %zu: %s", n, err);
  }
  spit(cut, buf, len);
  ck_assert_int_eq(mmrt_png_read_gray(cut, h, w, out, err, sizeof err), MMRT_OK);
  free(out);
  free(buf);
}

START_TEST(truncated_and_corrupt) {
  make_tmpdir();
  rng_state = 5;
  char path[512], cut[512], err[512];
  uint8_t px[N], out[N];
  for (int k = 0; k < N; k++) px[k] = (uint8_t)rnd();
  tmp_path(path, sizeof path, "full.png");
  tmp_path(cut, sizeof cut, "cut.png");
  ck_assert_int_eq(mmrt_png_write_gray(path, H, W, px, err, sizeof err), MMRT_OK);
  size_t len;
  unsigned char *buf = slurp(path, &len);
  ck_assert_uint_gt(len, 200);

  /* every prefix, not just every 7th */
  for (size_t n = 0; n < len; n++) {
    spit(cut, buf, n);
    err[0] = 0;
    int rc = mmrt_png_read_gray(cut, H, W, out, err, sizeof err);
    ck_assert_msg(rc == MMRT_ERR_FORMAT, "cut at %zu of %zu: rc %d (%s)", n, len, rc, err);
    ck_assert_msg(strncmp(err, cut, strlen(cut)) == 0, "cut at %zu: %s", n, err);
    if (n == 0)
      ck_assert_msg(strstr(err, "empty file"), "%s", err);
    else if (n < 8)
      ck_assert_msg(strstr(err, "inside the 8-byte signature"), "%s", err);
    else
      ck_assert_msg(strstr(err, "truncated PNG: the file ends after"), "cut at %zu: %s", n, err);
  }
  spit(cut, buf, len);
  ck_assert_int_eq(mmrt_png_read_gray(cut, H, W, out, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(memcmp(out, px, N), 0);

  /* the same for the other decoding paths: interlaced 16-bit RGBA, and
   * 4-bit palette with tRNS */
  {
    char src[512];
    uint8_t rgba16[N * 8], idx4[H * (W / 2)];
    for (size_t k = 0; k < sizeof rgba16; k++) rgba16[k] = (uint8_t)rnd();
    for (size_t k = 0; k < sizeof idx4; k++) idx4[k] = (uint8_t)rnd();
    png_color pal[16];
    uint8_t palpha[16];
    for (int i = 0; i < 16; i++)
      pal[i] = (png_color){(png_byte)(i * 3), (png_byte)(i * 5), (png_byte)(i * 7)},
      palpha[i] = (uint8_t)(i * 16);
    TestPng t1 = {.w = W,
                  .h = H,
                  .depth = 16,
                  .ctype = PNG_COLOR_TYPE_RGB_ALPHA,
                  .rows = rgba16,
                  .interlace = 1,
                  .gamma = 1};
    tmp_path(src, sizeof src, "rgba16i.png");
    write_test_png(src, &t1);
    all_prefixes_fail(src, cut, H, W);
    TestPng t2 = {.w = W,
                  .h = H,
                  .depth = 4,
                  .ctype = PNG_COLOR_TYPE_PALETTE,
                  .rows = idx4,
                  .palette = pal,
                  .npalette = 16,
                  .trans_alpha = palpha,
                  .ntrans = 16};
    tmp_path(src, sizeof src, "pal4t.png");
    write_test_png(src, &t2);
    all_prefixes_fail(src, cut, H, W);
  }

  /* a flipped byte anywhere after the signature: an error (CRCs, zlib's
   * check), never a crash */
  for (size_t i = 8; i < len; i++) {
    buf[i] ^= 0x5a;
    spit(cut, buf, len);
    buf[i] ^= 0x5a;
    err[0] = 0;
    int rc = mmrt_png_read_gray(cut, H, W, out, err, sizeof err);
    ck_assert_msg(rc != MMRT_OK, "byte %zu flipped was accepted", i);
    ck_assert_msg(strncmp(err, cut, strlen(cut)) == 0, "byte %zu: %s", i, err);
  }

  /* corrupt compressed data under a correct CRC: zlib notices */
  ck_assert_int_eq(memcmp(buf + 37, "IDAT", 4), 0); /* after signature and IHDR */
  uint32_t idat_len = (uint32_t)buf[33] << 24 | buf[34] << 16 | buf[35] << 8 | buf[36];
  ck_assert_uint_gt(idat_len, 100);
  unsigned char *bad = malloc(len);
  memcpy(bad, buf, len);
  for (uint32_t k = 2; k < idat_len; k += 3) /* past the zlib header */
    bad[41 + k] ^= 0xff;
  uLong crc = crc32(0, bad + 37, 4 + idat_len);
  unsigned char *c = bad + 41 + idat_len;
  c[0] = (unsigned char)(crc >> 24), c[1] = (unsigned char)(crc >> 16);
  c[2] = (unsigned char)(crc >> 8), c[3] = (unsigned char)crc;
  spit(cut, bad, len);
  int rc = mmrt_png_read_gray(cut, H, W, out, err, sizeof err);
  ck_assert_msg(rc == MMRT_ERR_FORMAT, "rc %d: %s", rc, err);
  ck_assert_msg(strstr(err, "corrupt PNG: "), "%s", err);
  free(bad);

  /* bad signatures */
  char want[1024];
  snprintf(want, sizeof want,
           "%s: not a PNG file (bad signature: the first bytes are not "
           "89 50 4E 47 0D 0A 1A 0A)",
           cut);
  buf[1] = 'Q';
  spit(cut, buf, len);
  ck_assert_int_eq(mmrt_png_read_gray(cut, H, W, out, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_str_eq(err, want);
  spit(cut, "P5\n28 28\n255\n", 13); /* a PGM */
  ck_assert_int_eq(mmrt_png_read_gray(cut, H, W, out, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_str_eq(err, want);
  spit(cut, "x", 1);
  ck_assert_int_eq(mmrt_png_read_gray(cut, H, W, out, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_str_eq(err, want);
  free(buf);
  remove_tmpdir();
}
END_TEST

START_TEST(missing_and_unwritable) {
  make_tmpdir();
  char path[512], err[512], want[1024];
  uint8_t px[N] = {0};
  tmp_path(path, sizeof path, "nope.png");
  ck_assert_int_eq(mmrt_png_read_gray(path, H, W, px, err, sizeof err), MMRT_ERR_NOTFOUND);
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
  ck_assert_str_eq(err, want);
  /* a directory is not a PNG */
  ck_assert_int_ne(mmrt_png_read_gray(tmpdir, H, W, px, err, sizeof err), MMRT_OK);
  ck_assert_msg(strncmp(err, tmpdir, strlen(tmpdir)) == 0, "%s", err);

  /* writing into a missing directory */
  tmp_path(path, sizeof path, "no/such/dir.png");
  ck_assert_int_eq(mmrt_png_write_gray(path, H, W, px, err, sizeof err), MMRT_ERR_NOTFOUND);
  ck_assert_msg(strstr(err, path) && strstr(err, "No such file or directory"), "%s", err);
  /* over a directory: the rename fails, the temporary is removed */
  tmp_path(path, sizeof path, "adir");
  ck_assert_int_eq(mkdir(path, 0755), 0);
  ck_assert_int_eq(mmrt_png_write_gray(path, H, W, px, err, sizeof err), MMRT_ERR_IO);
  ck_assert_msg(strstr(err, path), "%s", err);
  /* over an existing PNG: replaced */
  tmp_path(path, sizeof path, "old.png");
  uint8_t one[N], two[N], back[N];
  memset(one, 1, N), memset(two, 2, N);
  ck_assert_int_eq(mmrt_png_write_gray(path, H, W, one, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_png_write_gray(path, H, W, two, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_png_read_gray(path, H, W, back, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(memcmp(back, two, N), 0);
  DIR *d = opendir(tmpdir);
  ck_assert_ptr_nonnull(d);
  for (struct dirent *e; (e = readdir(d));)
    ck_assert_msg(!strstr(e->d_name, ".tmp"), "temporary left behind: %s", e->d_name);
  closedir(d);
  remove_tmpdir();
}
END_TEST

START_TEST(fashion_mnist_png_equals_idx) {
  struct stat st;
  if (stat(MMRT_FMNIST_DEFAULT_DIR, &st) != 0) {
    fprintf(stderr, "skip: %s not installed\n", MMRT_FMNIST_DEFAULT_DIR);
    return;
  }
  make_tmpdir();
  MmrtImages te;
  char err[512], path[512];
  int rc = mmrt_fmnist_load(&te, NULL, MMRT_SPLIT_TEST, err, sizeof err);
  ck_assert_msg(rc == MMRT_OK, "%s", err);
  ck_assert_int_eq(te.rows, H);
  ck_assert_int_eq(te.cols, W);
  /* the IDX path: the evaluation iterator's first batch */
  enum { B = 32 };
  MmrtBatchIter it;
  ck_assert_int_eq(mmrt_iter_init(&it, &te, B, 0, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_iter_next(&it), B);
  float *x = malloc(sizeof(float) * B * N);
  int32_t y[B];
  mmrt_iter_fill(&it, 0, B, x, y);
  tmp_path(path, sizeof path, "fmnist.png");
  for (int i = 0; i < B; i++) {
    const uint8_t *px = te.pixels + (size_t)i * N;
    ck_assert_int_eq(mmrt_png_write_gray(path, H, W, px, err, sizeof err), MMRT_OK);
    uint8_t back[N];
    ck_assert_int_eq(mmrt_png_read_gray(path, H, W, back, err, sizeof err), MMRT_OK);
    ck_assert_int_eq(memcmp(back, px, N), 0);
    float xp[N];
    rc = mmrt_png_read_fmnist(path, xp, err, sizeof err);
    ck_assert_msg(rc == MMRT_OK, "%s", err);
    ck_assert_msg(memcmp(xp, x + (size_t)i * N, sizeof xp) == 0,
                  "test image %d: PNG input differs from the IDX input", i);
    /* and the formula, independently: (p / 255 - 0.2860) / 0.3530 */
    for (int k = 0; k < N; k++)
      ck_assert(fabsf(xp[k] - ((float)px[k] / 255.0f - 0.2860f) / 0.3530f) <= 1e-6f);
  }
  /* test image 0 is an ankle boot: not blank, background black */
  ck_assert_int_eq(y[0], 9);
  ck_assert_float_eq(x[0], mmrt_fmnist_normalize(0));
  free(x);
  mmrt_iter_free(&it);
  mmrt_images_free(&te);
  remove_tmpdir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_png");
  TCase *tc = tcase_create("png");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, round_trip);
  tcase_add_test(tc, rgb_to_gray);
  tcase_add_test(tc, sixteen_bit);
  tcase_add_test(tc, gray_alpha_palette_low_depth);
  tcase_add_test(tc, wrong_size);
  tcase_add_test(tc, truncated_and_corrupt);
  tcase_add_test(tc, missing_and_unwritable);
  tcase_add_test(tc, fashion_mnist_png_equals_idx);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
