/* libFuzzer target: the IR text parser (ir_parse) on arbitrary bytes; a
 * module that parses is verified and printed, and the printed text must
 * parse again (the text form round-trips). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Diag d;
  diag_init(&d);
  FILE *null = fopen("/dev/null", "w");
  if (null) d.out = null;
  IrModule *m = ir_parse(&d, diag_add_buffer(&d, "fuzz.mmir", (const char *)data, size));
  if (m && ir_verify(m)) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem) {
      ir_print_module(mem, m);
      fclose(mem);
      IrModule *again = ir_parse(&d, diag_add_buffer(&d, "printed.mmir", text, len));
      if (!again) {
        fprintf(stderr, "printed IR does not parse again:\n%s", text);
        abort();
      }
      ir_module_free(again);
      free(text);
    }
  }
  if (m) ir_module_free(m);
  diag_free(&d);
  if (null) fclose(null);
  return 0;
}
