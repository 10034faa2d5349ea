/* libFuzzer target: the text-data readers. The first byte picks the reader:
 *   even: Megatron's indexed dataset. Bytes 1-2 (little-endian) are the
 *         .idx's length n; the .idx is the next n bytes (fewer if the input
 *         is shorter), the .bin the rest. Bits 1-2 of the first byte give
 *         the layout asked for: 0 or 3 tells from the size, 1 plain,
 *         2 multimodal. A dataset that opens must keep the reader's promises:
 *         every element of every sequence readable inside the .bin, the
 *         lengths summing to its token count, document indices from 0 to the
 *         sequence count, never decreasing.
 *   odd:  a JSONL file (the rest of the input), read to its end; every
 *         sample given out must be valid UTF-8 of the length given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "mmrt_indexed.h"
#include "mmrt_jsonl.h"

/* A second memfd for the .bin (fuzz_input.h holds one). */
static const char *second_path(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz-input-2", 0);
    if (fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) abort();
  return path;
}

static void indexed(const uint8_t *data, size_t size, int layout) {
  size_t n = size >= 3 ? (size_t)data[1] | (size_t)data[2] << 8 : 0;
  data += size >= 3 ? 3 : size;
  size -= size >= 3 ? 3 : size;
  if (n > size) n = size;
  const char *ip = fuzz_input_path(data, n), *bp = second_path(data + n, size - n);
  int mm = layout == 1 ? 0 : layout == 2 ? 1 : -1;
  char err[1024];
  MmrtIndexed d;
  if (!mmrt_indexed_open_files(ip, bp, mm, &d, err, sizeof err)) return;
  uint64_t total = 0;
  volatile uint64_t sum = 0; /* wraps: the values only have to be read */
  for (uint64_t i = 0; i < d.nseq; i++) {
    int32_t len = mmrt_indexed_length(&d, i);
    if (len < 0) abort();
    total += (uint64_t)len;
    sum += (uint64_t)mmrt_indexed_mode(&d, i);
    for (int32_t k = 0; k < len; k++) sum += (uint64_t)mmrt_indexed_token(&d, i, (uint64_t)k);
  }
  if (total != d.ntokens || total * d.elem != d.bin_size || d.ndocidx < 1) abort();
  if (mmrt_indexed_docidx(&d, 0) != 0 || (uint64_t)mmrt_indexed_docidx(&d, d.ndocidx - 1) != d.nseq)
    abort();
  for (uint64_t j = 1; j < d.ndocidx; j++)
    if (mmrt_indexed_docidx(&d, j) < mmrt_indexed_docidx(&d, j - 1)) abort();
  mmrt_indexed_close(&d);
}

static void jsonl(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_path(data, size);
  char err[1024];
  MmrtJsonl r;
  if (!mmrt_jsonl_open(&r, path, "text", err, sizeof err)) abort(); /* a memfd always opens */
  for (;;) {
    const char *text;
    size_t len;
    MmrtJsonlStatus st = mmrt_jsonl_next(&r, &text, &len, err, sizeof err);
    if (st == MMRT_JSONL_EOF || st == MMRT_JSONL_IO || st == MMRT_JSONL_UNSUPPORTED) break;
    if (st == MMRT_JSONL_OK && mmrt_utf8_valid_prefix(text, len) != len) abort();
    if (st == MMRT_JSONL_BAD && !strstr(err, ":")) abort(); /* names the file and line */
  }
  mmrt_jsonl_close(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1)
    jsonl(data + 1, size - 1);
  else
    indexed(data, size, (data[0] >> 1) & 3);
  return 0;
}
