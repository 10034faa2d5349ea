/* mmc_cli.c: see mmc_cli.h. */
#include "mmc_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

void mmc_cli_refuse(const char *what, const char *fmt, const char *arg) {
  fprintf(stderr, "mmc: %s", what);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
}

bool mmc_cli_long(const char *s, long lo, long hi, long *v) {
  char *end;
  errno = 0;
  *v = strtol(s, &end, 10);
  return *s && !*end && !errno && *v >= lo && *v <= hi;
}
