/* mmc_tokenize.h: the driver's `mmc tokenize` command (tools/mmc_tokenize.c). */
#ifndef MMC_TOKENIZE_H
#define MMC_TOKENIZE_H

/* argv: the arguments after "tokenize"; args and help: the command's usage
 * line and text. Returns the exit status: 0 ok, 1 error, 2 usage. */
int mmc_tokenize(int argc, char **argv, const char *args, const char *help);

#endif
