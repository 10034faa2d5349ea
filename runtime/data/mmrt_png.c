/* mmrt_png.c: PNG reading (any PNG to 8-bit gray) and writing (8-bit gray)
 * with libpng.
 *
 * libpng reports errors by calling our error function, which records the
 * message and longjmps back to the setjmp in read_image / encode.  Those
 * functions keep everything they own (FILE, libpng structs, buffers) in a
 * struct owned by their caller, so nothing the error path needs lives in
 * a local variable changed between setjmp and longjmp, and the caller
 * frees it all on every path. */
#include "mmrt_png.h"

#include <errno.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_ckpt.h"
#include "mmrt_data.h"

/* ITU-R BT.601 luma weights in libpng's fixed point (100000 = 1.0); blue
 * is 1 - red - green = 0.114. */
#define GRAY_RED_FP   29900
#define GRAY_GREEN_FP 58700

/* ---- reading ---- */

typedef struct PngRead {
  const char *path;
  FILE *f;
  png_structp png;
  png_infop info;
  uint8_t *buf;  /* the image as libpng gives it: 16-bit gray (+ alpha) */
  size_t offset; /* bytes of the file consumed so far */
  int code;      /* status to report after a longjmp */
  char msg[320]; /* what went wrong, without the path */
} PngRead;

static void read_error_fn(png_structp png, png_const_charp msg) {
  PngRead *r = png_get_error_ptr(png);
  if (msg != r->msg) /* read_data_fn formats into r->msg itself */
    snprintf(r->msg, sizeof r->msg, "corrupt PNG: %s", msg);
  png_longjmp(png, 1);
}

static void warning_fn(png_structp png, png_const_charp msg) {
  (void)png, (void)msg; /* benign (e.g. a bad ancillary chunk, skipped) */
}

static void read_data_fn(png_structp png, png_bytep data, size_t len) {
  PngRead *r = png_get_io_ptr(png);
  size_t got = fread(data, 1, len, r->f);
  r->offset += got;
  if (got == len) return;
  if (ferror(r->f)) {
    r->code = MMRT_ERR_IO;
    snprintf(r->msg, sizeof r->msg, "read error at byte %zu: %s", r->offset, strerror(errno));
  } else {
    snprintf(r->msg, sizeof r->msg,
             "truncated PNG: the file ends after %zu bytes, libpng needed %zu more "
             "byte%s",
             r->offset, len - got, len - got == 1 ? "" : "s");
  }
  png_error(png, r->msg);
}

/* Everything from the signature check to png_read_end.  Returns a status;
 * on a libpng error it returns through the setjmp with r->msg set. */
static int read_image(PngRead *r, int want_h, int want_w, uint8_t *out, char *err, size_t errlen) {
  if (setjmp(png_jmpbuf(r->png))) return mmrt_errf(err, errlen, r->code, "%s: %s", r->path, r->msg);

  png_set_read_fn(r->png, r, read_data_fn);
  png_set_sig_bytes(r->png, 8);
  png_read_info(r->png, r->info);

  png_uint_32 w = png_get_image_width(r->png, r->info);
  png_uint_32 h = png_get_image_height(r->png, r->info);
  if (w != (png_uint_32)want_w || h != (png_uint_32)want_h)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s: image is %lu x %lu pixels (width x height), expected %d x %d", r->path,
                     (unsigned long)w, (unsigned long)h, want_w, want_h);

  int ctype = png_get_color_type(r->png, r->info);
  int depth = png_get_bit_depth(r->png, r->info);
  /* palette -> RGB, tRNS -> alpha, every depth -> 16 (8-bit v becomes
   * v * 257); we round to 8 bits once, at the end. */
  png_set_expand_16(r->png);
  /* RGB, RGBA, palette.  libpng converts before widening: 8-bit colour
   * is truncated to 8-bit gray, 16-bit colour rounded to 16-bit gray. */
  if (ctype & PNG_COLOR_MASK_COLOR)
    png_set_rgb_to_gray_fixed(r->png, PNG_ERROR_ACTION_NONE, GRAY_RED_FP, GRAY_GREEN_FP);
  /* File and screen gamma both 1: no gamma tables, so the weights apply
   * to the stored values whatever gAMA/sRGB/iCCP chunk the file has. */
  png_set_gamma_fixed(r->png, PNG_FP_1, PNG_FP_1);
  int passes = png_set_interlace_handling(r->png);
  png_read_update_info(r->png, r->info);

  int channels = png_get_channels(r->png, r->info);
  int got_depth = png_get_bit_depth(r->png, r->info);
  size_t rowbytes = png_get_rowbytes(r->png, r->info);
  if (got_depth != 16 || (channels != 1 && channels != 2) ||
      rowbytes != (size_t)w * (size_t)channels * 2)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: libpng converted the image (colour type %d, bit depth %d) to "
                     "%d channels of %d bits, %zu bytes a row; expected 16-bit gray",
                     r->path, ctype, depth, channels, got_depth, rowbytes);

  r->buf = malloc((size_t)h * rowbytes);
  if (!r->buf) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", r->path);
  /* Interlaced images: each pass fills in its pixels of every row. */
  for (int pass = 0; pass < passes; pass++)
    for (png_uint_32 y = 0; y < h; y++) png_read_row(r->png, r->buf + (size_t)y * rowbytes, NULL);
  png_read_end(r->png, NULL); /* the rest of the file, through IEND and its CRC */

  /* 16-bit big-endian samples to 8 bits, rounding: round(g / 257), or
   * with alpha round(g / 257 * a / 65535) (composited onto black). */
  const uint8_t *s = r->buf;
  size_t npx = (size_t)h * w;
  if (channels == 1) {
    for (size_t k = 0; k < npx; k++, s += 2) {
      uint32_t g = (uint32_t)s[0] << 8 | s[1];
      out[k] = (uint8_t)((g * 255u + 32767u) / 65535u);
    }
  } else {
    const uint64_t den = 65535ull * 257ull;
    for (size_t k = 0; k < npx; k++, s += 4) {
      uint64_t g = (uint64_t)s[0] << 8 | s[1], a = (uint64_t)s[2] << 8 | s[3];
      out[k] = (uint8_t)((g * a + den / 2) / den);
    }
  }
  return MMRT_OK;
}

int mmrt_png_read_gray(const char *path, int want_h, int want_w, uint8_t *out, char *err,
                       size_t errlen) {
  if (!path || !out || want_h <= 0 || want_w <= 0 || want_h > INT_MAX / want_w)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "%s: bad arguments to mmrt_png_read_gray (size %d x %d)",
                     path ? path : "(null)", want_w, want_h);
  PngRead r = {.path = path, .code = MMRT_ERR_FORMAT};
  int orc = mmrt_fopen_read(path, &r.f, err, errlen);
  if (orc != MMRT_OK) return orc;

  int rc;
  uint8_t sig[8];
  size_t n = fread(sig, 1, sizeof sig, r.f);
  if (n < sizeof sig && ferror(r.f)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  } else if (n == 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: empty file, expected a PNG", path);
  } else if (png_sig_cmp(sig, 0, n) != 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: not a PNG file (bad signature: the first bytes are not "
                   "89 50 4E 47 0D 0A 1A 0A)",
                   path);
  } else if (n < sizeof sig) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: truncated PNG: the file ends after %zu bytes, inside the 8-byte "
                   "signature",
                   path, n);
  } else {
    r.offset = n;
    r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, read_error_fn, warning_fn);
    if (r.png) r.info = png_create_info_struct(r.png);
    if (!r.png || !r.info)
      rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for the libpng reader", path);
    else
      rc = read_image(&r, want_h, want_w, out, err, errlen);
  }
  if (r.png) png_destroy_read_struct(&r.png, r.info ? &r.info : NULL, NULL);
  free(r.buf);
  fclose(r.f);
  return rc;
}

int mmrt_png_read_fmnist(const char *path, float *x, char *err, size_t errlen) {
  uint8_t px[MMRT_FMNIST_SIDE * MMRT_FMNIST_SIDE];
  int rc = mmrt_png_read_gray(path, MMRT_FMNIST_SIDE, MMRT_FMNIST_SIDE, px, err, errlen);
  if (rc == MMRT_OK) mmrt_fmnist_normalize_image(px, sizeof px, x);
  return rc;
}

/* ---- writing: encode into memory, then write the file atomically ---- */

typedef struct PngWrite {
  png_structp png;
  png_infop info;
  uint8_t *data;
  size_t len, cap;
  int code;
  char msg[320];
} PngWrite;

static void write_error_fn(png_structp png, png_const_charp msg) {
  PngWrite *wr = png_get_error_ptr(png);
  if (msg != wr->msg) snprintf(wr->msg, sizeof wr->msg, "libpng: %s", msg);
  png_longjmp(png, 1);
}

static void write_data_fn(png_structp png, png_bytep data, size_t len) {
  PngWrite *wr = png_get_io_ptr(png);
  if (len > wr->cap - wr->len) {
    size_t cap = wr->cap ? wr->cap : 4096;
    while (cap - wr->len < len) {
      if (cap > SIZE_MAX / 2) {
        cap = 0;
        break;
      }
      cap *= 2;
    }
    uint8_t *p = cap ? realloc(wr->data, cap) : NULL;
    if (!p) {
      wr->code = MMRT_ERR_NOMEM;
      snprintf(wr->msg, sizeof wr->msg, "out of memory encoding the PNG (%zu bytes)",
               wr->len + len);
      png_error(png, wr->msg);
    }
    wr->data = p;
    wr->cap = cap;
  }
  memcpy(wr->data + wr->len, data, len);
  wr->len += len;
}

static void flush_fn(png_structp png) {
  (void)png;
}

static int encode(PngWrite *wr, int h, int w, const uint8_t *px, const char *path, char *err,
                  size_t errlen) {
  if (setjmp(png_jmpbuf(wr->png)))
    return mmrt_errf(err, errlen, wr->code, "%s: cannot encode PNG: %s", path, wr->msg);
  png_set_write_fn(wr->png, wr, write_data_fn, flush_fn);
  png_set_IHDR(wr->png, wr->info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(wr->png, wr->info);
  for (int y = 0; y < h; y++) png_write_row(wr->png, px + (size_t)y * (size_t)w);
  png_write_end(wr->png, NULL);
  return MMRT_OK;
}

int mmrt_png_write_gray(const char *path, int h, int w, const uint8_t *px, char *err,
                        size_t errlen) {
  if (!path || !px || h <= 0 || w <= 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "%s: bad arguments to mmrt_png_write_gray (size %d x %d)",
                     path ? path : "(null)", w, h);
  PngWrite wr = {.code = MMRT_ERR_FORMAT};
  int rc;
  wr.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &wr, write_error_fn, warning_fn);
  if (wr.png) wr.info = png_create_info_struct(wr.png);
  if (!wr.png || !wr.info)
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for the libpng writer", path);
  else
    rc = encode(&wr, h, w, px, path, err, errlen);
  if (wr.png) png_destroy_write_struct(&wr.png, wr.info ? &wr.info : NULL);
  if (rc == MMRT_OK) rc = mmrt_write_file_atomic(path, wr.data, wr.len, err, errlen);
  free(wr.data);
  return rc;
}
