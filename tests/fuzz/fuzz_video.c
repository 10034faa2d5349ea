/* libFuzzer target: the video decoder (mmrt_vdec_decode_mem: our
 * AVIOContext over the input's bytes, libavformat's mov and matroska
 * demuxers, the allowed libavcodec decoders, libswscale to RGB, the crop
 * and mmrt_image_resize) on arbitrary bytes.  Byte 0 picks the request:
 * bits 0-2 the frame count (1-8), bits 3-4 the fps (the source's, 8, 30,
 * 0.5), bit 5 a fixed 6 x 10 size or three buckets; the rest is the file.
 * Sources above 1 Mpixel a frame are refused, so a declared size cannot
 * exhaust memory.  A clip that decodes must have the frame count and size
 * asked for and values in [0, 1]. */
#include <stdint.h>
#include <stdlib.h>

#include "mmrt_vdec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const double fps[4] = {0, 8, 30, 0.5};
  static const int buckets[6] = {4, 4, 3, 7, 9, 2};
  uint8_t b = data[0];
  MmrtVdecSpec spec = {.frames = 1 + (b & 7),
                       .fps = fps[(b >> 3) & 3],
                       .h = 6,
                       .w = 10,
                       .buckets = (b & 32) ? buckets : NULL,
                       .nbuckets = (b & 32) ? 3 : 0,
                       .max_pixels = 1 << 20};
  MmrtVdecClip c;
  char err[1024];
  if (mmrt_vdec_decode_mem("fuzz", data + 1, size - 1, &spec, &c, err, sizeof err) != MMRT_OK)
    return 0;
  if (c.frames != spec.frames || c.h < 1 || c.w < 1) abort();
  for (size_t i = 0; i < (size_t)3 * c.frames * c.h * c.w; i++)
    if (!(c.pix[i] >= 0 && c.pix[i] <= 1)) abort();
  mmrt_vdec_free(&c);
  return 0;
}
