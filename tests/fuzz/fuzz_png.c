/* libFuzzer target: the PNG reader (mmrt_png_read_gray) on arbitrary
 * bytes.  It is asked for 28 x 28 (the Fashion-MNIST size) and, when the
 * IHDR chunk in its usual place names another small size, for that size
 * too, so images of any shape reach the decoder. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "mmrt_png.h"

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void read_as(const char *path, int h, int w) {
  char err[1024];
  uint8_t *out = malloc((size_t)h * (size_t)w);
  if (!out) return;
  mmrt_png_read_gray(path, h, w, out, err, sizeof err);
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_path(data, size);
  read_as(path, 28, 28);
  if (size >= 24) { /* signature (8), IHDR length and type (8), width, height */
    uint32_t w = be32(data + 16), h = be32(data + 20);
    if (w && h && w <= 4096 && h <= 4096 && (uint64_t)w * h <= (1u << 20) && (w != 28 || h != 28))
      read_as(path, (int)h, (int)w);
  }
  return 0;
}
