/* libFuzzer target: the whole frontend (lex, parse, resolve, elaborate every
 * model, verify) on arbitrary bytes. Imports resolve against stdlib_models. */
#include <stdint.h>
#include <stdio.h>

#include "frontend/sema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Diag d;
  diag_init(&d);
  FILE *null = fopen("/dev/null", "w");
  if (null) d.out = null;
  FeOptions o = {0};
  FeProgram *p = fe_load_buffer(&d, MMC_STDLIB_DIR "/fuzz-input.mm", (const char *)data, size, &o);
  if (p) {
    fe_check_all(p);
    fe_free(p);
  }
  diag_free(&d);
  if (null) fclose(null);
  return 0;
}
