/* `mmc plan`: what the frozen parameters (train { freeze = [...] }) do not
 * take on each rank (tools/mmc_frozen.c). */
#ifndef MM_TOOLS_MMC_FROZEN_H
#define MM_TOOLS_MMC_FROZEN_H

#include <json-c/json.h>

#include "ir/ir.h"

/* With frozen parameters: their count, what they would take per rank as
 * trainable parameters of this plan (a gradient, the optimizer's state,
 * the gradient's data-parallel traffic each step) and the nodes of
 * @train's backward in the frozen modules.  As a "frozen" object of root,
 * or (root NULL) one line on stdout; nothing without frozen parameters. */
void mmc_plan_frozen(const IrModule *m, json_object *root);

#endif
