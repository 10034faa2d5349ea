/* mmrt_stage.h: a loader thread that lays out the rows of the next
 * training batch while the step runs, for the feeders whose rows cost
 * (mmrt_feed_text.c: documents into rows; mmrt_feed_conv.c: images decoded
 * and tiled).
 *
 * The thread follows the trainer's iterator with a shadow of it (the same
 * seed and position, one batch ahead) and lays out, for each block of rows
 * the trainer filled for this batch (one, or one per micro-batch: the same
 * lo and count), the same rows of the next batch into staging buffers.
 * mmrt_stage_fill copies a block when its samples are the ones asked for,
 * and lays the rows out itself otherwise, so what the step reads never
 * depends on the thread's timing. */
#ifndef MMRT_STAGE_H
#define MMRT_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_data.h"

#define MMRT_STAGE_BUFS 4 /* buffers a row (ids, labels, ...) */

/* Lays rows [lo, lo + n) of the iterator's batch (of `rows` samples: rows
 * at or past it are padding) into buf[i] (row r at buf[i] + r *
 * row_bytes[i]; NULL when absent), the sample of each in sample[r] (-1:
 * padding). */
typedef void (*MmrtStageLay)(void *priv, const MmrtBatchIter *it, int64_t rows, int64_t lo,
                             int64_t n, int64_t *sample, void *const *buf);

typedef struct MmrtStage MmrtStage;

/* nbuf buffers of row_bytes[i] bytes a row (0: absent); NULL when out of
 * memory. lay and priv must outlive the stage. */
MmrtStage *mmrt_stage_new(int nbuf, const size_t *row_bytes, int64_t rows, MmrtStageLay lay,
                          void *priv);
/* Starts the thread at the trainer's iterator's seed (after a resume):
 * 0, or 1 with err set. */
int mmrt_stage_start(MmrtStage *s, const MmrtImages *train, int64_t batch, uint64_t seed, char *err,
                     size_t errlen);
/* Rows [lo, lo + n) of the trainer's current batch into dst[i]. */
void mmrt_stage_fill(MmrtStage *s, const MmrtBatchIter *it, int64_t rows, int64_t lo, int64_t n,
                     void *const *dst);
void mmrt_stage_free(MmrtStage *s);

#endif
