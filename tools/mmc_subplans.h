/* mmc_subplans.h: what `mmc plan` and `mmc dump-ir --rank R` say of
 * per-sub-model plans (parallel { vision { dp = 2 } llm { tp = 2 } },
 * docs/subplans.md): each sub-model's mesh and per-rank bytes, and the
 * transfers at the sub-model boundaries with their bytes per step. */
#ifndef MMC_SUBPLANS_H
#define MMC_SUBPLANS_H

#include <json-c/json.h>
#include <stdio.h>

#include "ir/ir.h"

/* The plan's sub-models and boundary transfers: printed (root NULL) or
 * added to root as "subplans" and "boundary_transfers". Nothing without
 * sub-plans. */
void mmc_plan_subplans(const IrModule *m, json_object *root);
/* One rank's place in each sub-model's mesh, as comment lines. */
void mmc_rank_subplans(FILE *out, const IrModule *m, int rank);

#endif
