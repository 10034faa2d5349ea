/* mmc_lists.h: `mmc --list-passes`, `--list-ops` and `--version`, printed
 * from the tables themselves (passes/passes.def, ir/ops.def, CMake's
 * project version), so the docs' reference sections can be compared with
 * them (tests/docs_sync.sh). */
#ifndef MMC_LISTS_H
#define MMC_LISTS_H

#include <stdio.h>

void mmc_list_passes(FILE *out); /* the pipeline in order: name, summary */
void mmc_list_ops(FILE *out);    /* every op: mnemonic, inputs, outputs, builtin */
void mmc_version(FILE *out);     /* "mmc VERSION (git DESCRIBE)" or "mmc VERSION" */

#endif
