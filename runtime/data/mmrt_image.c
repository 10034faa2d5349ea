/* mmrt_image.c: JPEG, PNG and WebP to 8-bit RGB, and the processors'
 * resizing, cropping, tiling and normalisation (mmrt_image.h). */
#include "mmrt_image.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* jpeglib.h needs size_t and FILE first */
#include <jerror.h>
#include <jpeglib.h>
#include <webp/decode.h>

const float mmrt_image_clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
const float mmrt_image_clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
const float mmrt_image_imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
const float mmrt_image_imagenet_std[3] = {0.229f, 0.224f, 0.225f};

#define MAX_FILE_BYTES (1LL << 30)

/* The size checks every decoder makes before it allocates. */
static int check_size(const char *name, const char *kind, int64_t w, int64_t h, int64_t maxpx,
                      char *err, size_t errlen) {
  if (w <= 0 || h <= 0)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: %s of size %lldx%lld; expected a width and height of at least 1", name,
                     kind, (long long)w, (long long)h);
  if (w > maxpx || h > maxpx || w * h > maxpx)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: %s of %lldx%lld = %lld pixels; expected at most %lld pixels (the limit)",
                     name, kind, (long long)w, (long long)h, (long long)(w * h), (long long)maxpx);
  return MMRT_OK;
}

/* ---- EXIF orientation ---- */

static unsigned rd16(const uint8_t *p, int le) {
  return le ? (unsigned)p[0] | (unsigned)p[1] << 8 : (unsigned)p[0] << 8 | p[1];
}
static uint32_t rd32(const uint8_t *p, int le) {
  return le ? (uint32_t)rd16(p, 1) | (uint32_t)rd16(p + 2, 1) << 16
            : (uint32_t)rd16(p, 0) << 16 | rd16(p + 2, 0);
}

/* Tag 0x0112 of IFD0 in TIFF data (a JPEG's APP1 after "Exif\0\0", a
 * PNG's eXIf chunk); 1 when absent or odd. */
static int tiff_orientation(const uint8_t *p, size_t n) {
  if (n < 8) return 1;
  int le;
  if (p[0] == 'I' && p[1] == 'I')
    le = 1;
  else if (p[0] == 'M' && p[1] == 'M')
    le = 0;
  else
    return 1;
  if (rd16(p + 2, le) != 42) return 1;
  uint32_t off = rd32(p + 4, le);
  if (off > n - 2) return 1;
  unsigned cnt = rd16(p + off, le);
  for (unsigned k = 0; k < cnt; k++) {
    size_t e = (size_t)off + 2 + 12 * (size_t)k;
    if (e + 12 > n) break;
    if (rd16(p + e, le) == 0x0112) {
      unsigned v = rd16(p + e + 8, le);
      return rd16(p + e + 2, le) == 3 && v >= 1 && v <= 8 ? (int)v : 1;
    }
  }
  return 1;
}

static int exif_orientation(const uint8_t *p, size_t n) {
  return n >= 6 && memcmp(p, "Exif\0\0", 6) == 0 ? tiff_orientation(p + 6, n - 6) : 1;
}

/* The image turned upright as PIL's exif_transpose does for orientation o:
 * output pixel (x, y) is source pixel (sx, sy). */
static int apply_orientation(MmrtImage *im, int o) {
  if (o <= 1 || o > 8) return MMRT_OK;
  int w = im->w, h = im->h, swap = o >= 5;
  int ow = swap ? h : w, oh = swap ? w : h;
  uint8_t *d = malloc((size_t)w * h * 3);
  if (!d) return MMRT_ERR_NOMEM;
  for (int y = 0; y < oh; y++)
    for (int x = 0; x < ow; x++) {
      int sx, sy;
      switch (o) {
        case 2: sx = w - 1 - x, sy = y; break;
        case 3: sx = w - 1 - x, sy = h - 1 - y; break;
        case 4: sx = x, sy = h - 1 - y; break;
        case 5: sx = y, sy = x; break;
        case 6: sx = y, sy = h - 1 - x; break;
        case 7: sx = w - 1 - y, sy = h - 1 - x; break;
        default: sx = w - 1 - y, sy = x; break; /* 8 */
      }
      memcpy(d + ((size_t)y * ow + x) * 3, im->rgb + ((size_t)sy * w + sx) * 3, 3);
    }
  free(im->rgb);
  im->rgb = d, im->w = ow, im->h = oh;
  return MMRT_OK;
}

/* ---- JPEG (libjpeg-turbo) ---- */

typedef struct JErr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} JErr;

static void jpeg_fail(j_common_ptr c) {
  JErr *e = (JErr *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jb, 1);
}

/* Warnings pass, except the end of the data before the image's end: a
 * truncated file is refused (PIL: "image file is truncated"). */
static void jpeg_note(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(c);
}

/* PIL's CMYK -> RGB for one channel: nk - round(c * nk / 255). */
static uint8_t cmyk1(unsigned c, unsigned nk) {
  unsigned t = c * nk + 128;
  int v = (int)nk - (int)(((t >> 8) + t) >> 8);
  return (uint8_t)(v < 0 ? 0 : v);
}

static int decode_jpeg(const char *name, const uint8_t *d, size_t n, int64_t maxpx, MmrtImage *out,
                       char *err, size_t errlen) {
  struct jpeg_decompress_struct ci;
  JErr je;
  uint8_t *volatile px = NULL, *volatile row = NULL;
  volatile int limit_rc = MMRT_OK;
  memset(&ci, 0, sizeof ci);
  ci.err = jpeg_std_error(&je.pub);
  je.pub.error_exit = jpeg_fail;
  je.pub.emit_message = jpeg_note;
  je.msg[0] = 0;
  if (setjmp(je.jb)) {
    jpeg_destroy_decompress(&ci);
    free(px);
    free(row);
    if (limit_rc != MMRT_OK) return limit_rc;
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: corrupt or truncated JPEG (libjpeg: %s); expected a complete baseline or "
                     "progressive JPEG",
                     name, je.msg);
  }
  jpeg_create_decompress(&ci);
  ci.mem->max_memory_to_use = 1L << 30;
  jpeg_mem_src(&ci, d, (unsigned long)n);
  jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&ci, TRUE);
  int rc = check_size(name, "JPEG", ci.image_width, ci.image_height, maxpx, err, errlen);
  if (rc != MMRT_OK) {
    limit_rc = rc;
    longjmp(je.jb, 1);
  }
  const char *space = "YCbCr";
  switch (ci.jpeg_color_space) {
    case JCS_GRAYSCALE: ci.out_color_space = JCS_GRAYSCALE, space = "grey"; break;
    case JCS_CMYK: ci.out_color_space = JCS_CMYK, space = "CMYK"; break;
    case JCS_YCCK: ci.out_color_space = JCS_CMYK, space = "YCCK"; break;
    case JCS_RGB: ci.out_color_space = JCS_RGB, space = "RGB"; break;
    default: ci.out_color_space = JCS_RGB; break;
  }
  int adobe_inverted = ci.saw_Adobe_marker;
  int orient = 1;
  for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && (orient = exif_orientation(m->data, m->data_length)) != 1)
      break;
  jpeg_start_decompress(&ci);
  int w = (int)ci.output_width, h = (int)ci.output_height, nc = ci.output_components;
  px = malloc((size_t)w * h * 3);
  row = malloc((size_t)w * nc);
  if (!px || !row) {
    limit_rc =
        mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for a %dx%d JPEG", name, w, h);
    longjmp(je.jb, 1);
  }
  while (ci.output_scanline < ci.output_height) {
    JSAMPROW r = row;
    uint8_t *o = px + (size_t)ci.output_scanline * w * 3;
    if (jpeg_read_scanlines(&ci, &r, 1) != 1) {
      snprintf(je.msg, sizeof je.msg, "no scanline %u", ci.output_scanline);
      longjmp(je.jb, 1);
    }
    for (int x = 0; x < w; x++) {
      const uint8_t *s = row + (size_t)x * nc;
      if (nc == 1)
        o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = s[0];
      else if (nc == 3)
        memcpy(o + 3 * x, s, 3);
      else {
        unsigned c = s[0], m = s[1], y = s[2], k = s[3];
        if (adobe_inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
        o[3 * x] = cmyk1(c, 255 - k), o[3 * x + 1] = cmyk1(m, 255 - k),
              o[3 * x + 2] = cmyk1(y, 255 - k);
      }
    }
  }
  jpeg_finish_decompress(&ci);
  jpeg_destroy_decompress(&ci);
  free(row);
  *out = (MmrtImage){.w = w, .h = h, .rgb = px, .orientation = orient, .kind = "JPEG"};
  snprintf(out->detail, sizeof out->detail, "%s", space);
  if (apply_orientation(out, orient) != MMRT_OK) {
    mmrt_image_free(out);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory turning a %dx%d JPEG", name, w,
                     h);
  }
  return MMRT_OK;
}

/* ---- PNG (libpng) ---- */

typedef struct PngIo {
  const uint8_t *d;
  size_t n, pos;
  char msg[256];
} PngIo;

static void png_fail(png_structp p, png_const_charp msg) {
  PngIo *io = png_get_error_ptr(p);
  snprintf(io->msg, sizeof io->msg, "%s", msg);
  png_longjmp(p, 1);
}
static void png_quiet(png_structp p, png_const_charp msg) {
  (void)p, (void)msg;
}
static void png_mem_read(png_structp p, png_bytep out, size_t len) {
  PngIo *io = png_get_io_ptr(p);
  if (len > io->n - io->pos) png_error(p, "the file ends early (truncated)");
  memcpy(out, io->d + io->pos, len);
  io->pos += len;
}

static int decode_png(const char *name, const uint8_t *d, size_t n, int64_t maxpx, MmrtImage *out,
                      char *err, size_t errlen) {
  PngIo io = {.d = d, .n = n};
  png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_fail, png_quiet);
  png_infop info = p ? png_create_info_struct(p) : NULL;
  if (!info) {
    png_destroy_read_struct(&p, NULL, NULL);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for libpng", name);
  }
  uint8_t *volatile px = NULL;
  png_bytep *volatile rows = NULL;
  volatile int limit_rc = MMRT_OK;
  if (setjmp(png_jmpbuf(p))) {
    png_destroy_read_struct(&p, &info, NULL);
    free(px);
    free(rows);
    if (limit_rc != MMRT_OK) return limit_rc;
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: corrupt or truncated PNG (libpng: %s); expected a complete PNG", name,
                     io.msg);
  }
  png_set_read_fn(p, &io, png_mem_read);
  png_read_info(p, info);
  png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
  int depth = png_get_bit_depth(p, info), ct = png_get_color_type(p, info);
  int rc = check_size(name, "PNG", w, h, maxpx, err, errlen);
  if (rc != MMRT_OK) {
    limit_rc = rc;
    png_longjmp(p, 1);
  }
  const char *cname = ct == PNG_COLOR_TYPE_GRAY         ? "grey"
                      : ct == PNG_COLOR_TYPE_GRAY_ALPHA ? "grey+alpha"
                      : ct == PNG_COLOR_TYPE_PALETTE    ? "palette"
                      : ct == PNG_COLOR_TYPE_RGB        ? "RGB"
                                                        : "RGBA";
  snprintf(out->detail, sizeof out->detail, "%s %d-bit%s", cname, depth,
           png_get_valid(p, info, PNG_INFO_tRNS) ? " tRNS" : "");
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
  if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
  if (depth == 16) png_set_strip_16(p); /* the high byte */
  if ((ct & PNG_COLOR_MASK_ALPHA) || png_get_valid(p, info, PNG_INFO_tRNS)) png_set_strip_alpha(p);
  if (!(ct & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(p);
  png_set_interlace_handling(p);
  png_read_update_info(p, info);
  if (png_get_rowbytes(p, info) != (size_t)w * 3) png_error(p, "unexpected row size");
  px = malloc((size_t)w * h * 3);
  rows = malloc(sizeof(png_bytep) * h);
  if (!px || !rows) {
    limit_rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for a %ux%u PNG", name,
                         (unsigned)w, (unsigned)h);
    png_longjmp(p, 1);
  }
  for (png_uint_32 y = 0; y < h; y++) rows[y] = px + (size_t)y * w * 3;
  png_read_image(p, rows);
  png_read_end(p, NULL);
  /* an eXIf chunk before the image data (where PIL reads it) */
  png_bytep exif = NULL;
  png_uint_32 nexif = 0;
  int orient = png_get_eXIf_1(p, info, &nexif, &exif) ? tiff_orientation(exif, nexif) : 1;
  png_destroy_read_struct(&p, &info, NULL);
  free(rows);
  out->w = (int)w, out->h = (int)h, out->rgb = px, out->orientation = orient, out->kind = "PNG";
  if (apply_orientation(out, orient) != MMRT_OK) {
    mmrt_image_free(out);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory turning a %ux%u PNG", name,
                     (unsigned)w, (unsigned)h);
  }
  return MMRT_OK;
}

/* ---- WebP (libwebp) ---- */

static int decode_webp(const char *name, const uint8_t *d, size_t n, int64_t maxpx, MmrtImage *out,
                       char *err, size_t errlen) {
  WebPBitstreamFeatures f;
  VP8StatusCode st = WebPGetFeatures(d, n, &f);
  if (st != VP8_STATUS_OK)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: corrupt or truncated WebP (libwebp status %d); expected a complete "
                     "still WebP",
                     name, (int)st);
  if (f.has_animation)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: an animated WebP; expected a still image",
                     name);
  int rc = check_size(name, "WebP", f.width, f.height, maxpx, err, errlen);
  if (rc != MMRT_OK) return rc;
  size_t npx = (size_t)f.width * f.height;
  uint8_t *px = malloc(npx * 3), *rgba = f.has_alpha ? malloc(npx * 4) : NULL;
  if (!px || (f.has_alpha && !rgba)) {
    free(px);
    free(rgba);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for a %dx%d WebP", name,
                     f.width, f.height);
  }
  int ok = f.has_alpha ? WebPDecodeRGBAInto(d, n, rgba, npx * 4, f.width * 4) != NULL
                       : WebPDecodeRGBInto(d, n, px, npx * 3, f.width * 3) != NULL;
  if (ok && rgba)
    for (size_t i = 0; i < npx; i++) memcpy(px + 3 * i, rgba + 4 * i, 3);
  free(rgba);
  if (!ok) {
    free(px);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: corrupt or truncated WebP (libwebp cannot decode its %dx%d %s data); "
                     "expected a complete WebP",
                     name, f.width, f.height, f.format == 2 ? "lossless" : "lossy");
  }
  *out = (MmrtImage){.w = f.width, .h = f.height, .rgb = px, .orientation = 1, .kind = "WebP"};
  snprintf(out->detail, sizeof out->detail, "%s%s", f.format == 2 ? "lossless" : "lossy",
           f.has_alpha ? " alpha" : "");
  return MMRT_OK;
}

/* ---- entry points ---- */

int mmrt_image_decode(const char *name, const uint8_t *data, size_t len, int64_t max_pixels,
                      MmrtImage *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (max_pixels <= 0) max_pixels = MMRT_IMAGE_MAX_PIXELS_DEFAULT;
  if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
    return decode_jpeg(name, data, len, max_pixels, out, err, errlen);
  if (len >= 8 && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0)
    return decode_png(name, data, len, max_pixels, out, err, errlen);
  if (len >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0)
    return decode_webp(name, data, len, max_pixels, out, err, errlen);
  if (len == 0)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: an empty file (0 bytes); expected a JPEG, PNG or WebP image", name);
  return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: not an image mmc reads (%zu bytes, starting %02x %02x %02x %02x); expected "
                   "JPEG (FF D8 FF), PNG (89 50 4E 47) or WebP (RIFF....WEBP)",
                   name, len, len > 0 ? data[0] : 0, len > 1 ? data[1] : 0, len > 2 ? data[2] : 0,
                   len > 3 ? data[3] : 0);
}

int mmrt_image_read(const char *path, int64_t max_pixels, MmrtImage *out, char *err,
                    size_t errlen) {
  int fd, rc = mmrt_open_read(path, &fd, err, errlen);
  memset(out, 0, sizeof *out);
  if (rc != MMRT_OK) return rc;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size > MAX_FILE_BYTES) {
    close(fd);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: %lld bytes; expected at most %lld", path,
                     (long long)st.st_size, MAX_FILE_BYTES);
  }
  size_t n = (size_t)st.st_size, got = 0;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for %zu bytes", path, n);
  }
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      free(buf);
      close(fd);
      return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot read: %s", path,
                       r < 0 ? strerror(e) : "the file shrank while read");
    }
    got += (size_t)r;
  }
  close(fd);
  rc = mmrt_image_decode(path, buf, n, max_pixels, out, err, errlen);
  free(buf);
  return rc;
}

void mmrt_image_free(MmrtImage *im) {
  free(im->rgb);
  im->rgb = NULL;
}

/* ---- resizing: PIL's bicubic, to the byte ---- */

#define PREC_BITS 22 /* PIL's fixed point for 8-bit images: 32 - 8 - 2 */

static double cubic(double x) {
  const double a = -0.5;
  x = fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

/* The taps of each output position along one axis: output o reads inputs
 * lo[o] .. lo[o] + cnt[o] - 1 with weights k[o * ksize + t]. */
typedef struct Taps {
  int *lo, *cnt, ksize;
  int32_t *k;
} Taps;

static void taps_free(Taps *t) {
  free(t->lo), free(t->cnt), free(t->k);
}

static int taps_make(int in, int out, Taps *t) {
  double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale, support = 2.0 * fs;
  double inv = 1.0 / fs;
  t->ksize = (int)ceil(support) * 2 + 1;
  t->lo = malloc(sizeof(int) * out), t->cnt = malloc(sizeof(int) * out);
  t->k = calloc((size_t)out * t->ksize, sizeof(int32_t));
  double *w = malloc(sizeof(double) * t->ksize);
  if (!t->lo || !t->cnt || !t->k || !w) {
    taps_free(t), free(w);
    return MMRT_ERR_NOMEM;
  }
  for (int o = 0; o < out; o++) {
    double center = (o + 0.5) * scale, sum = 0.0;
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
    if (lo < 0) lo = 0;
    if (hi > in) hi = in;
    int cnt = hi - lo;
    if (cnt > t->ksize) cnt = t->ksize;
    for (int i = 0; i < cnt; i++) sum += w[i] = cubic((i + lo - center + 0.5) * inv);
    for (int i = 0; i < cnt; i++) {
      double v = (sum != 0.0 ? w[i] / sum : w[i]) * (1 << PREC_BITS);
      t->k[(size_t)o * t->ksize + i] = (int32_t)(v < 0 ? v - 0.5 : v + 0.5);
    }
    t->lo[o] = lo, t->cnt[o] = cnt;
  }
  free(w);
  return MMRT_OK;
}

static uint8_t clip_fixed(int64_t acc) {
  int64_t v = acc >> PREC_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int mmrt_image_resize(const uint8_t *in, int iw, int ih, uint8_t *out, int ow, int oh) {
  if (iw == ow && ih == oh) {
    memcpy(out, in, (size_t)iw * ih * 3);
    return MMRT_OK;
  }
  Taps tx = {0}, ty = {0};
  uint8_t *mid = NULL;
  int rc = MMRT_OK, y0 = 0, y1 = ih;
  if (ih != oh) {
    if ((rc = taps_make(ih, oh, &ty)) != MMRT_OK) return rc;
    y0 = ty.lo[0], y1 = ty.lo[oh - 1] + ty.cnt[oh - 1]; /* the rows the vertical pass reads */
  }
  const uint8_t *src = in;
  int srow0 = 0;
  if (iw != ow) {
    if ((rc = taps_make(iw, ow, &tx)) != MMRT_OK) goto done;
    uint8_t *dst = ih == oh ? out : (mid = malloc((size_t)(y1 - y0) * ow * 3));
    if (!dst) {
      rc = MMRT_ERR_NOMEM;
      goto done;
    }
    for (int y = y0; y < y1; y++) {
      const uint8_t *r = in + (size_t)y * iw * 3;
      uint8_t *o = dst + (size_t)(y - y0) * ow * 3;
      for (int x = 0; x < ow; x++) {
        const int32_t *k = tx.k + (size_t)x * tx.ksize;
        for (int c = 0; c < 3; c++) {
          int64_t acc = 1 << (PREC_BITS - 1);
          for (int i = 0; i < tx.cnt[x]; i++) acc += (int64_t)r[(tx.lo[x] + i) * 3 + c] * k[i];
          o[x * 3 + c] = clip_fixed(acc);
        }
      }
    }
    src = dst, srow0 = y0;
  }
  if (ih != oh) {
    for (int y = 0; y < oh; y++) {
      const int32_t *k = ty.k + (size_t)y * ty.ksize;
      uint8_t *o = out + (size_t)y * ow * 3;
      for (int x = 0; x < ow * 3; x++) {
        int64_t acc = 1 << (PREC_BITS - 1);
        for (int i = 0; i < ty.cnt[y]; i++)
          acc += (int64_t)src[(size_t)(ty.lo[y] + i - srow0) * ow * 3 + x] * k[i];
        o[x] = clip_fixed(acc);
      }
    }
  }
done:
  free(mid);
  taps_free(&tx), taps_free(&ty);
  return rc;
}

/* ---- tiling ---- */

MmrtTileGrid mmrt_image_tile_grid(int w, int h, int size, int min_tiles, int max_tiles) {
  MmrtTileGrid g = {1, 1, 0};
  double ar = (double)w / h, best = INFINITY, area = (double)w * h;
  /* InternVL orders the grids by area; equally close grids of one area
   * cannot both be the closest (a grid of smaller area lies between) */
  for (int a = min_tiles; a <= max_tiles; a++)
    for (int c = 1; c <= a; c++) {
      if (a % c) continue;
      int r = a / c;
      double diff = fabs(ar - (double)c / r);
      if (diff < best)
        best = diff, g.cols = c, g.rows = r;
      else if (diff == best && area > 0.5 * size * size * c * r)
        g.cols = c, g.rows = r;
    }
  g.thumbnail = g.cols * g.rows > 1;
  return g;
}

/* ---- normalisation ---- */

/* The tw x th tile at (x0, y0) of an RGB image w wide, as CHW floats. */
static void normalise_box(const uint8_t *rgb, int w, int x0, int y0, int tw, int th,
                          const float mean[3], const float std[3], float *out) {
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < th; y++)
      for (int x = 0; x < tw; x++) {
        float v = (float)(rgb[((size_t)(y0 + y) * w + x0 + x) * 3 + c] * (1.0 / 255.0));
        out[((size_t)c * th + y) * tw + x] = (v - mean[c]) / std[c];
      }
}

static void normalise(const uint8_t *rgb, int w, int x0, int y0, int size, const float mean[3],
                      const float std[3], float *out) {
  normalise_box(rgb, w, x0, y0, size, size, mean, std, out);
}

void mmrt_image_normalise(const MmrtImage *im, const float mean[3], const float std[3],
                          float *out) {
  normalise_box(im->rgb, im->w, 0, 0, im->w, im->h, mean, std, out);
}

int mmrt_image_clip(const MmrtImage *im, int size, const float mean[3], const float std[3],
                    float *out, char *err, size_t errlen) {
  int nw, nh;
  if (im->w <= im->h)
    nw = size, nh = (int)((double)((int64_t)size * im->h) / im->w);
  else
    nh = size, nw = (int)((double)((int64_t)size * im->w) / im->h);
  uint8_t *r = malloc((size_t)nw * nh * 3);
  if (!r || mmrt_image_resize(im->rgb, im->w, im->h, r, nw, nh) != MMRT_OK) {
    free(r);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory resizing to %dx%d", nw, nh);
  }
  normalise(r, nw, (nw - size) / 2, (nh - size) / 2, size, mean, std, out);
  free(r);
  return MMRT_OK;
}

int mmrt_image_internvl(const MmrtImage *im, int size, int max_tiles, const float mean[3],
                        const float std[3], float **out, int *ntiles, MmrtTileGrid *grid, char *err,
                        size_t errlen) {
  MmrtTileGrid g = mmrt_image_tile_grid(im->w, im->h, size, 1, max_tiles);
  int n = g.cols * g.rows + g.thumbnail, W = g.cols * size, H = g.rows * size;
  size_t per = (size_t)3 * size * size;
  float *f = malloc(sizeof(float) * per * n);
  uint8_t *r = malloc((size_t)W * H * 3);
  if (!f || !r || mmrt_image_resize(im->rgb, im->w, im->h, r, W, H) != MMRT_OK) {
    free(f), free(r);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory resizing to %dx%d", W, H);
  }
  for (int t = 0; t < g.cols * g.rows; t++)
    normalise(r, W, t % g.cols * size, t / g.cols * size, size, mean, std, f + per * t);
  if (g.thumbnail) {
    if (mmrt_image_resize(im->rgb, im->w, im->h, r, size, size) != MMRT_OK) {
      free(f), free(r);
      return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory for the thumbnail");
    }
    normalise(r, size, 0, 0, size, mean, std, f + per * (n - 1));
  }
  free(r);
  *out = f, *ntiles = n, *grid = g;
  return MMRT_OK;
}

void mmrt_image_tiles_into(char *const *paths, int n, int size, int max_tiles, float *px,
                           int64_t *at, int64_t lim, const char *who) {
  size_t tile = 3 * (size_t)size * (size_t)size;
  for (int k = 0; k < n; k++) {
    MmrtImage im;
    float *t = NULL;
    int nt = 0;
    MmrtTileGrid g;
    char e[1024];
    if (mmrt_image_read(paths[k], 0, &im, e, sizeof e) != 0) {
      fprintf(stderr, "%s: warning: %s: its tiles left zero\n", who, e);
      continue;
    }
    if (mmrt_image_internvl(&im, size, max_tiles, mmrt_image_imagenet_mean, mmrt_image_imagenet_std,
                            &t, &nt, &g, e, sizeof e) == 0) {
      if (*at + nt > lim) nt = (int)(lim - *at);
      memcpy(px + (size_t)*at * tile, t, (size_t)nt * tile * sizeof *px);
      *at += nt;
    } else
      fprintf(stderr, "%s: warning: %s: its tiles left zero\n", who, e);
    free(t);
    mmrt_image_free(&im);
  }
}
