/* libFuzzer target: loading one safetensors file (mmrt_st_open, then every
 * tensor read back with the dtype and shape the header gives, and the
 * metadata) on arbitrary bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "mmrt_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[1024];
  MmrtStFile *f = NULL;
  if (mmrt_st_open(&f, fuzz_input_path(data, size), err, sizeof err) != MMRT_OK) return 0;
  int n = mmrt_st_count(f);
  for (int i = 0; i < n; i++) {
    MmrtTensorRef t = {.name = mmrt_st_name(f, i)};
    const int64_t *shape;
    mmrt_st_info(f, i, &t.dtype, &t.ndim, &shape);
    if (t.ndim < 0 || t.ndim > MMRT_ST_MAX_DIMS) abort(); /* open let a bad rank through */
    memcpy(t.shape, shape, sizeof *shape * (size_t)t.ndim);
    if (mmrt_st_find(f, t.name) != i) abort(); /* names are unique once open succeeds */
    size_t bytes = mmrt_tensor_bytes(&t);
    if (bytes > size) abort(); /* open accepted a tensor larger than the file */
    t.data = malloc(bytes ? bytes : 1);
    if (t.data) mmrt_st_read(f, &t, err, sizeof err);
    free(t.data);
  }
  for (int i = 0; i < mmrt_st_meta_count(f); i++) {
    MmrtKV kv = mmrt_st_meta_at(f, i);
    if (mmrt_st_meta(f, kv.key) == NULL) abort();
    int64_t v;
    mmrt_st_meta_int64(f, kv.key, &v, err, sizeof err);
  }
  mmrt_st_close(f);
  return 0;
}
