/* mmrt_png.h: PNG image input and output through libpng (8-bit grayscale,
 * the form of one Fashion-MNIST image).
 *
 * Reading accepts any PNG: gray, gray+alpha, RGB, RGBA or palette, at any
 * bit depth, interlaced or not, and converts it to 8-bit gray:
 *   - palette becomes RGB, a tRNS chunk an alpha channel, and every
 *     sample ends up 16 bits wide (png_set_expand_16: 8-bit v becomes
 *     v * 257, 1/2/4-bit gray 0..max spans 0..65535), so 16-bit input and
 *     alpha compositing keep full precision and round once, at the end;
 *   - colour becomes gray with the ITU-R BT.601 weights
 *     gray = 0.299 R + 0.587 G + 0.114 B (png_set_rgb_to_gray, weights in
 *     libpng's 15-bit fixed point) on the stored (gamma-encoded) values, as
 *     PIL's convert("L") and torchvision's Grayscale do; gAMA, sRGB and
 *     cHRM chunks are ignored (no gamma conversion), so a gray PNG reads
 *     back exactly as stored.  libpng does this step before widening, and
 *     for 8-bit colour it truncates, so 8-bit RGB/palette pixels can come
 *     out 1 below the rounded value (PIL rounds); 16-bit colour rounds;
 *   - alpha is composited onto black (not stripped):
 *     gray = gray * alpha / max, so a transparent pixel is background (0),
 *     as in Fashion-MNIST, where the garment is light on black;
 *   - the 16-bit result becomes 8 bits rounding to nearest (v / 257).
 * So an 8-bit gray file reads back exactly, and anything else is within 1
 * of the exact value rounded.
 * A corrupt or truncated file is an MMRT_ERR_FORMAT error naming the file
 * and what libpng (or the reader) found wrong; the reader never crashes
 * and frees everything on every path.
 */
#ifndef MMRT_PNG_H
#define MMRT_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_log.h"

/* Read the PNG at path as 8-bit gray into out (want_h * want_w bytes, row
 * major).  The image must be exactly want_w wide and want_h high, else
 * MMRT_ERR_MISMATCH with a message giving the file, its size and the size
 * expected.  Errors: MMRT_ERR_NOTFOUND / MMRT_ERR_IO (cannot open or read;
 * the message has strerror), MMRT_ERR_FORMAT (not a PNG, truncated,
 * corrupt), MMRT_ERR_ARG, MMRT_ERR_NOMEM.  On failure out's contents are
 * unspecified. */
int mmrt_png_read_gray(const char *path, int want_h, int want_w, uint8_t *out, char *err,
                       size_t errlen);

/* Write px (h * w bytes, row major) as an 8-bit grayscale PNG, atomically:
 * the file is encoded in memory, then written to a temporary beside path,
 * fsynced and renamed over path (mmrt_write_file_atomic); on failure the
 * temporary is removed and an existing path is left as it was. */
int mmrt_png_write_gray(const char *path, int h, int w, const uint8_t *px, char *err,
                        size_t errlen);

/* One Fashion-MNIST input from a 28x28 PNG: read as above and normalised
 * into x (784 floats) exactly as the IDX path (mmrt_iter_fill) does. */
int mmrt_png_read_fmnist(const char *path, float *x, char *err, size_t errlen);

#endif
