/* libFuzzer target: the image readers (mmrt_image_read: JPEG through
 * libjpeg-turbo, PNG through libpng, WebP through libwebp, the EXIF
 * orientation parser) on arbitrary bytes, with a limit of 4 Mpixels so a
 * declared size cannot exhaust memory; an image that decodes is then
 * preprocessed both ways (CLIP's crop at 7 x 7, InternVL's tiles of 5 x 5,
 * up to 6) so the resizer meets every shape the decoders produce. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "mmrt_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_path(data, size);
  char err[1024];
  MmrtImage im;
  if (mmrt_image_read(path, 1 << 22, &im, err, sizeof err) != MMRT_OK) return 0;
  if ((int64_t)im.w * im.h <= 1 << 16) {
    float clip[3 * 7 * 7], *tiles = NULL;
    int n = 0;
    MmrtTileGrid g;
    mmrt_image_clip(&im, 7, mmrt_image_clip_mean, mmrt_image_clip_std, clip, err, sizeof err);
    if (mmrt_image_internvl(&im, 5, 6, mmrt_image_imagenet_mean, mmrt_image_imagenet_std, &tiles,
                            &n, &g, err, sizeof err) == MMRT_OK &&
        (n < 1 || n > 7))
      abort();
    free(tiles);
  }
  mmrt_image_free(&im);
  return 0;
}
