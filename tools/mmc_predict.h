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
 * False after a message on stderr. */
bool mmc_predict(IrModule *m, const MmDevice *d, int64_t peak, json_object *root);

/* compile --device: the predicted step time into *step_s (0 for a program
 * without @train). False after a message. */
bool mmc_predict_step(IrModule *m, const MmDevice *d, double *step_s);

/* mmc calibrate [-o FILE]: runs mmc-calibrate beside argv0's mmc. */
int mmc_calibrate(int argc, char **argv);

#endif
