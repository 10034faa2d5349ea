/* mmc plan --device: the predicted step (passes/cost.h) printed or added
 * to the plan's JSON; mmc calibrate. docs/planner.md. */
#ifndef MMC_PREDICT_H
#define MMC_PREDICT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "support/device.h"

/* Predicts m's step on d and prints it (root NULL) or adds "predicted" to
 * root. peak: one rank's planned bytes (the largest pipeline rank's).
 * detail (text) and the JSON add each op kind's predicted time, laid out
 * as the trainer's --profile table. False after a message on stderr. */
bool mmc_predict(IrModule *m, const MmDevice *d, int64_t peak, json_object *root, bool detail);

/* compile --device: the predicted step time into *step_s (0 for a program
 * without @train). False after a message. */
bool mmc_predict_step(IrModule *m, const MmDevice *d, double *step_s);

/* mmc plan --search: builds one candidate plan (flags over the model's own
 * section) with its diagnostics into err (first error's message), returns
 * the module or NULL; *handle is what release frees. */
typedef IrModule *(*MmcBuildFn)(void *user, const MmPlanFlags *flags, void **handle, char *err,
                                size_t errn);
typedef void (*MmcReleaseFn)(void *user, void *handle);
/* Ranks plans of `devices` devices by predicted step (docs/planner.md):
 * structures (tp in powers of 2 within a node, pp every divisor up to the
 * stack layers, dp the rest) built once at default knobs, then the best
 * three and the file's own plan refined one knob at a time (micro-batch
 * size with recompute, ZeRO, vpp, sp, cp taken from dp); a flag given fixes
 * its setting. Drops what the compiler refuses or what does not fit
 * (counted by reason), prints the best `top` as parallel sections and why
 * the first ranks above the file's own plan. Returns an exit code. */
int mmc_search(const MmDevice *d, int devices, const MmPlanFlags *given, MmcBuildFn build,
               MmcReleaseFn release, void *user, int top);

/* mmc calibrate [-o FILE]: runs mmc-calibrate beside argv0's mmc. */
int mmc_calibrate(int argc, char **argv);

#endif
