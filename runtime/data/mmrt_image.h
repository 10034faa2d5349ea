/* mmrt_image.h: image files in (JPEG through libjpeg-turbo, PNG through
 * libpng, WebP through libwebp) as 8-bit RGB, and the vision processors'
 * preprocessing: PIL-exact antialiased bicubic resizing, the CLIP/LLaVA
 * steps (shortest edge, center crop, rescale, normalize) and InternVL2's
 * dynamic tiling.  docs/images.md describes the rules and their sources.
 *
 * Decoding, whatever the file holds, gives 8-bit RGB, row major, 3 bytes a
 * pixel:
 *   - the format is chosen by magic bytes (FF D8 FF, 89 "PNG" 0D 0A 1A 0A,
 *     "RIFF" .... "WEBP"), never by the file name;
 *   - grey becomes R = G = B; palette becomes its colours;
 *   - alpha (RGBA, grey+alpha, a palette's or a colour key's tRNS, WebP
 *     alpha) is DROPPED: the stored colour is kept, as PIL's
 *     convert("RGB") does, which both references use (transformers 4.49's
 *     convert_to_rgb and InternVL's load_image);
 *   - 16-bit PNG samples become 8 bits by their high byte (v >> 8), as
 *     PIL's PNG reader does for 16-bit colour;
 *   - CMYK and YCCK JPEG (Adobe's inverted CMYK when the Adobe marker is
 *     there) become RGB as PIL's CMYK->RGB does:
 *     R = (255 - K) - round(C * (255 - K) / 255), likewise G from M, B from Y;
 *   - the EXIF orientation (IFD0 tag 0x0112, values 1-8) of a JPEG (APP1
 *     "Exif") or a PNG (an eXIf chunk before the image data) is applied,
 *     as PIL's ImageOps.exif_transpose does; the value found is reported
 *     (1 when none; a WebP's EXIF chunk is not read);
 *   - anything else is refused with MMRT_ERR_FORMAT and a message naming
 *     the file and what was expected: unknown magic, truncated or corrupt
 *     data, a zero size, an animated WebP, more pixels than max_pixels.
 */
#ifndef MMRT_IMAGE_H
#define MMRT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_log.h"

/* PIL's MAX_IMAGE_PIXELS (its decompression-bomb warning): the default limit. */
#define MMRT_IMAGE_MAX_PIXELS_DEFAULT 89478485LL

typedef struct MmrtImage {
  int w, h;
  uint8_t *rgb;     /* h * w * 3 bytes */
  int orientation;  /* EXIF orientation applied (1: none) */
  const char *kind; /* "JPEG", "PNG" or "WebP" (static) */
  char detail[64];  /* what the file held, e.g. "CMYK", "grey+alpha 16-bit" */
} MmrtImage;

/* Decode the len bytes at data; name is the file's name for messages.
 * max_pixels <= 0 means MMRT_IMAGE_MAX_PIXELS_DEFAULT.  On failure *out
 * holds nothing to free. */
int mmrt_image_decode(const char *name, const uint8_t *data, size_t len, int64_t max_pixels,
                      MmrtImage *out, char *err, size_t errlen);

/* Read the file at path (a regular file, at most 1 GiB) and decode it. */
int mmrt_image_read(const char *path, int64_t max_pixels, MmrtImage *out, char *err, size_t errlen);

void mmrt_image_free(MmrtImage *im);

/* ---- preprocessing ---- */

/* Resize 8-bit RGB (iw x ih) to ow x oh into out (oh * ow * 3 bytes) as
 * PIL's Image.resize(BICUBIC) does, to the byte: the cubic kernel with
 * a = -0.5, support 2 scaled by the downscale factor (antialiasing),
 * weights normalised per output pixel and rounded to 22-bit fixed point,
 * the horizontal pass first, each pass rounding and clipping to 8 bits; a
 * pass whose size does not change is skipped.  MMRT_ERR_NOMEM or OK. */
int mmrt_image_resize(const uint8_t *in, int iw, int ih, uint8_t *out, int ow, int oh);

/* InternVL2's tile grid for a w x h image: cols x rows tiles of the tile
 * size (cols * rows between min_tiles and max_tiles), the grid whose
 * aspect ratio cols / rows is closest to w / h; of grids equally close,
 * the later in order of area wins when w * h > 0.5 * size^2 * cols * rows
 * (InternVL's find_closest_aspect_ratio).  thumbnail: 1 when more than one
 * tile (a whole-image tile follows them). */
typedef struct MmrtTileGrid {
  int cols, rows, thumbnail;
} MmrtTileGrid;
MmrtTileGrid mmrt_image_tile_grid(int w, int h, int size, int min_tiles, int max_tiles);

/* The mean and std of the two processors' defaults. */
extern const float mmrt_image_clip_mean[3], mmrt_image_clip_std[3];
extern const float mmrt_image_imagenet_mean[3], mmrt_image_imagenet_std[3];

/* The whole image, normalised as below: 3 * w * h floats. */
void mmrt_image_normalise(const MmrtImage *im, const float mean[3], const float std[3], float *out);

/* CLIPImageProcessor's steps: the shortest edge resized to size (the other
 * to floor(size * long / short)), bicubic; the center size x size crop
 * (top = (h - size) / 2, left likewise); v / 255; (v - mean) / std.  out:
 * 3 * size * size floats, channel planes R, G, B, each row major. */
int mmrt_image_clip(const MmrtImage *im, int size, const float mean[3], const float std[3],
                    float *out, char *err, size_t errlen);

/* InternVL2's: the image resized bicubic to (cols * size) x (rows * size)
 * and cut into the grid's tiles row by row, then, when more than one tile,
 * the whole image resized to size x size; each tile normalised as above.
 * *out (allocated, free()) holds ntiles * 3 * size * size floats, each
 * tile as in mmrt_image_clip; *ntiles = cols * rows + thumbnail. */
int mmrt_image_internvl(const MmrtImage *im, int size, int max_tiles, const float mean[3],
                        const float std[3], float **out, int *ntiles, MmrtTileGrid *grid, char *err,
                        size_t errlen);

/* The tiles of images paths[0, n) (InternVL2's, as above, with ImageNet's
 * mean and std) one after another into px, from tile *at on and up to tile
 * lim (an image's tiles past it dropped); *at ends after the last. A file
 * that does not decode or tile leaves its tiles zero, with a warning on
 * stderr from `who` naming it. */
void mmrt_image_tiles_into(char *const *paths, int n, int size, int max_tiles, float *px,
                           int64_t *at, int64_t lim, const char *who);

#endif
