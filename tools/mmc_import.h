/* mmc_import.h: `mmc import HF_DIR` and the header check of a Hugging Face
 * directory against a model (mmc check --init-from, the import itself). */
#ifndef MMC_IMPORT_H
#define MMC_IMPORT_H

#include <stddef.h>

#include "ir/ir.h"

/* Write the .mm file declaring the model of HF_DIR (config.json checked
 * against runtime/io/mmrt_hf_map.def) to `out` (NULL: stdout); the model's name
 * into model[len].  0, or 1 after a message naming the file and key. */
int mmc_import_write(const char *dir, const char *out, char *model, size_t len);

/* spec: "[PREFIX=]DIR".  Every parameter of m under PREFIX (default: the
 * architecture's instance name) has a tensor of the right shape and dtype
 * and every tensor is used, from the headers alone.  0, or 1 after a
 * message naming the tensor and both shapes. */
int mmc_import_verify(const IrModule *m, const char *spec);

#endif
