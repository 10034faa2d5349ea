/* `mmc plan`: hierarchical ZeRO's collectives per level and its node
 * copies (tools/mmc_hzero.c, docs/hzero.md). */
#ifndef MM_TOOLS_MMC_HZERO_H
#define MM_TOOLS_MMC_HZERO_H

#include <json-c/json.h>
#include <stdbool.h>

#include "ir/ir.h"

/* Under zero_across: @train's dp all-gathers and reduce-scatters as the
 * runtime runs them, per level (dp_node, dp_cross), calls and elements a
 * step, and the node copies' bytes a rank.  As an "hzero" object of root,
 * or (root NULL) lines on stdout; nothing without zero_across. */
void mmc_plan_hzero(const IrModule *m, json_object *root);

/* Under zero >= 1 and dp > 1: the trainable parameters ZeRO leaves whole
 * on every dp rank because dp (times tp's split of the dim) divides none
 * of their dims and another axis splits dim 0, which ZeRO would pad
 * (passes/zero.c), or they are scalars: their tensors, elements and bytes a rank
 * (each with its gradient and optimizer state, its gradient all-reduced).
 * As a "zero_replicated" object of root, or (root NULL) a line on stdout;
 * nothing when ZeRO splits every one. */
void mmc_plan_zero_replicated(const IrModule *m, json_object *root);

/* Whether ZeRO padded p along dim 0 (passes/zero.c), not (only) vocabpad:
 * it has real rows and its rows are no multiple of 128 tp. */
bool mmc_zero_padded(const IrModule *m, const IrValue *p);

#endif
