/* libFuzzer target: the text loader on a JSONL file (runtime/data/mmrt_loader.c:
 * the JSONL reader, the chat messages, the pool of loader threads, the
 * layout, the held-out split), with tests/fuzz/jsonl_tok.json (a BPE of 120
 * ids with ChatML's tokens, tests/text_data/make.py's) as the tokenizer.
 * Byte 0 gives the options: bit 0 packed, bit 1 --too-long drop, bit 2
 * --bad-samples skip, bits 3-4 the loader threads (0-3), bit 5 --eval-split
 * 0.3, bits 6-7 the row length T = 4 + 8 k; the rest is the file. A loader
 * that opens must keep its promises: every row's ids inside the vocabulary,
 * labels the ignore index or an id, segments from 0 never decreasing, the
 * same rows as the loader opened with no thread (the rows may not depend on
 * the threads), the same message when it fails. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "mmrt_loader.h"

#define V 256

static void rows(const MmrtLoader *a, const MmrtLoader *b, int split, int64_t T) {
  int64_t n = mmrt_loader_samples(a, split);
  if (n != mmrt_loader_samples(b, split) || n <= 0) abort();
  int32_t *x = malloc((size_t)(8 * T) * sizeof *x);
  if (!x) abort();
  for (int64_t i = 0; i < n && i < 64; i++) {
    mmrt_loader_row(a, split, i, x, x + T, x + 2 * T, x + 3 * T);
    mmrt_loader_row(b, split, i, x + 4 * T, x + 5 * T, x + 6 * T, x + 7 * T);
    if (memcmp(x, x + 4 * T, (size_t)(4 * T) * sizeof *x)) abort();
    for (int64_t j = 0; j < T; j++) {
      if (x[j] < 0 || x[j] >= V) abort();
      if (x[T + j] != -100 && (x[T + j] < 0 || x[T + j] >= V)) abort();
      if (x[2 * T + j] < (j ? x[2 * T + j - 1] : 0) ||
          x[2 * T + j] > (j ? x[2 * T + j - 1] + 1 : 0))
        abort();
    }
    char where[600];
    mmrt_loader_where(a, split, i, T - 1, where, sizeof where);
  }
  free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 16)) return 0;
  unsigned o = data[0];
  int64_t T = 4 + 8 * (o >> 6);
  MmrtTextOpts opt = {0};
  opt.tokenizer = FUZZ_TOK;
  opt.pack = o & 1 ? 1 : -1;
  opt.too_long = o & 2 ? "drop" : "truncate";
  opt.bad_samples = o & 4 ? "skip" : "fail";
  opt.threads = (o >> 3) & 3;
  opt.eval_split = o & 32 ? 0.3 : 0;
  const char *path = fuzz_input_path(data + 1, size - 1);
  char e1[1024] = "", e2[1024] = "";
  MmrtLoader *a = mmrt_loader_open(path, &opt, T, V, -100, e1, sizeof e1);
  opt.threads = 0;
  MmrtLoader *b = mmrt_loader_open(path, &opt, T, V, -100, e2, sizeof e2);
  if (!a != !b) abort();
  if (!a) {
    if (!e1[0] || strcmp(e1, e2)) abort(); /* a failure says why, whatever the threads */
    return 0;
  }
  if (mmrt_loader_skipped(a) != mmrt_loader_skipped(b) ||
      mmrt_loader_tokens(a) != mmrt_loader_tokens(b))
    abort();
  rows(a, b, MMRT_TEXT_TRAIN, T);
  rows(a, b, MMRT_TEXT_EVAL, T);
  char d1[600], d2[600];
  mmrt_loader_describe(a, d1, sizeof d1), mmrt_loader_describe(b, d2, sizeof d2);
  if (strcmp(d1, d2)) abort();
  mmrt_loader_close(a);
  mmrt_loader_close(b);
  return 0;
}
