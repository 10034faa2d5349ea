/* support/att_tile.h: the attention kernels' unit of work, shared by the
 * runtime that runs it (runtime/kernels/mmrt_ops.c: a tile of
 * MM_ATT_TILE_Q queries of one batch row and head against the key tiles),
 * the cost model that charges a time per unit (passes/cost.c,
 * attention_item_us) and mmc calibrate that measures that time
 * (tools/mmc_calibrate.c). */
#ifndef MM_SUPPORT_ATT_TILE_H
#define MM_SUPPORT_ATT_TILE_H
#include <stdint.h>

enum { MM_ATT_TILE_Q = 64 };

/* The work items of an attention call over B batch rows, T queries and H
 * heads (the backward's are the same rows and heads). */
static inline double mm_att_items(int64_t B, int64_t T, int64_t H) {
  return (double)B * (double)H * (double)((T + MM_ATT_TILE_Q - 1) / MM_ATT_TILE_Q);
}

#endif
