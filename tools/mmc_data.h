/* mmc_data.h: the driver's `mmc data` command (tools/mmc_data.c). */
#ifndef MMC_DATA_H
#define MMC_DATA_H

#include <stdio.h>

/* argv: the arguments after "data" (the subcommand first); args and help:
 * the command's usage line and text. Returns the exit status: 0 ok, 1 error,
 * 2 usage, 130/143 stopped by SIGINT/SIGTERM. */
int mmc_data(int argc, char **argv, const char *args, const char *help);

/* The usage text of `mmc data` on out; returns rc. */
int mmc_data_usage(FILE *out, const char *args, const char *help, int rc);

/* `mmc data conv FILE ...` (tools/mmc_data_conv.c); argv[0] is "conv". */
int mmc_data_conv(int argc, char **argv, const char *args, const char *help);

#endif
