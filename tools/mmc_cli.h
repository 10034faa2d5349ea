/* mmc_cli.h: what the driver's commands share to read their arguments
 * (tools/mmc_cli.c): a refusal printed in one form, and whole numbers in a
 * range. */
#ifndef MMC_CLI_H
#define MMC_CLI_H

#include <stdbool.h>

/* Prints "mmc: <what><fmt with arg>\n" on stderr; what is "" or a command
 * name with its trailing ": " ("data: conv: "). */
void mmc_cli_refuse(const char *what, const char *fmt, const char *arg);

/* s is a whole decimal number in [lo, hi], in *v; false otherwise. */
bool mmc_cli_long(const char *s, long lo, long hi, long *v);

#endif
