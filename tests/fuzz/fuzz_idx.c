/* libFuzzer target: the IDX reader (mmrt_idx_read, gzip or raw) on
 * arbitrary bytes, as an image file and as a label file. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "mmrt_data.h"

static void read_as(const char *path, uint32_t magic) {
  char err[1024];
  MmrtIdx idx;
  if (mmrt_idx_read(path, magic, &idx, err, sizeof err) == MMRT_OK) {
    size_t want = 1;
    for (int d = 0; d < idx.ndim; d++) want *= idx.dims[d];
    if (want != idx.size || (idx.size && !idx.data)) abort();
    volatile uint8_t sum = 0; /* touch every byte the header promised */
    for (size_t k = 0; k < idx.size; k++) sum += idx.data[k];
    (void)sum;
  }
  mmrt_idx_free(&idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_path(data, size);
  read_as(path, MMRT_IDX_MAGIC_IMAGES);
  read_as(path, MMRT_IDX_MAGIC_LABELS);
  return 0;
}
