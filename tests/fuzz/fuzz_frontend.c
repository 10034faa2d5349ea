/* libFuzzer target: the whole frontend (lex, parse, resolve, elaborate every
 * model, verify) on arbitrary bytes. Imports resolve against stdlib_models.
 *
 * Size and nesting extremes: an input whose first byte is 0xC0..0xFF is
 * expanded before it is parsed. The rest is PREFIX \1 BODY \1 SUFFIX \1 TAIL
 * (a missing \1 leaves the later parts empty), and the text handed to the
 * frontend is PREFIX, BODY repeated k times, SUFFIX repeated k times, TAIL,
 * with k = 1 + 25 j^2 for j = byte & 0x3F (mostly small, up to 99,226), at most
 * 4 MiB in all:
 * "model M { let a = " "(" "1)" makes 100k open parentheses, "x." or
 * "model M{i} extends ..." long chains, "if true {" deep blocks. The
 * frontend must answer each with located errors, never a crash or a stack
 * overflow. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/sema.h"

static void run(const char *text, size_t size) {
  Diag d;
  diag_init(&d);
  FILE *null = fopen("/dev/null", "w");
  if (null) d.out = null;
  FeOptions o = {0};
  FeProgram *p = fe_load_buffer(&d, MMC_STDLIB_DIR "/fuzz-input.mm", text, size, &o);
  if (p) {
    fe_check_all(p);
    fe_free(p);
  }
  diag_free(&d);
  if (null) fclose(null);
}

/* The expanded text of an input that starts with 0xC0..0xFF, or NULL. */
static char *expand(const uint8_t *data, size_t size, size_t *len) {
  size_t j = data[0] & 0x3F, k = 1 + 25 * j * j, max = (size_t)4 << 20;
  const char *s = (const char *)data + 1, *end = (const char *)data + size;
  const char *a = memchr(s, 1, (size_t)(end - s));
  const char *b = a ? memchr(a + 1, 1, (size_t)(end - a - 1)) : NULL;
  const char *c = b ? memchr(b + 1, 1, (size_t)(end - b - 1)) : NULL;
  size_t np = (size_t)((a ? a : end) - s);
  size_t nb = a ? (size_t)((b ? b : end) - (a + 1)) : 0;
  size_t ns = b ? (size_t)((c ? c : end) - (b + 1)) : 0;
  size_t nt = c ? (size_t)(end - (c + 1)) : 0;
  if (nb + ns > 0 && k > (max - np - nt) / (nb + ns)) k = (max - np - nt) / (nb + ns);
  size_t n = np + k * (nb + ns) + nt;
  char *t = malloc(n + 1);
  if (!t) return NULL;
  memcpy(t, s, np);
  char *w = t + np;
  for (size_t i = 0; nb && i < k; i++, w += nb) memcpy(w, a + 1, nb);
  for (size_t i = 0; ns && i < k; i++, w += ns) memcpy(w, b + 1, ns);
  if (nt) memcpy(w, c + 1, nt);
  *len = n;
  return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 0 && data[0] >= 0xC0) {
    size_t n = 0;
    char *t = expand(data, size, &n);
    if (t) run(t, n);
    free(t);
    return 0;
  }
  run((const char *)data, size);
  return 0;
}
