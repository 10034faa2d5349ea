/* mmrt_buckets.h: tile buckets, the same model compiled at smaller tile
 * counts (mmc compile --tile-buckets; docs/architecture.md "Data").
 *
 * The generated object of a bucketed trainer defines mm_model (the largest,
 * the model's own K) and mm_model_b1 .. _bN (ascending K), listed in
 * mm_tile_buckets[mm_tile_nbuckets]; mmrt_entry.c hands the list here. A
 * bucket shares the trainer's parameter and optimizer arenas (the same
 * parameters at the same offsets: checked), runs on its act and grad
 * arenas (no larger than the model's: checked), and reads its inputs from
 * an input arena of its own, into which mmrt_bucket_run copies the
 * trainer's inputs by name, each the leading corner of the model's (the
 * first K slots of every row of pixels), or a tile pool's first tiles. */
#ifndef MMRT_BUCKETS_H
#define MMRT_BUCKETS_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_main.h"

/* mmrt_entry.c: the generated list (n = 0: none). */
void mmrt_tile_buckets_set(const MmrtModelDesc *const *b, int n);
/* The buckets (ascending K), *n of them. */
const MmrtModelDesc *const *mmrt_tile_buckets(int *n);
/* The bucket's size along dim 1 of its input `name` (its K). */
int64_t mmrt_bucket_dim(const MmrtModelDesc *b, const char *name, int dim);
/* 0 when bucket b may run on m's arenas, else 1 and err says why. */
int mmrt_bucket_check(const MmrtModelDesc *m, const MmrtModelDesc *b, char *err, size_t errlen);
/* Runs b's train step on the trainer's arenas (m's layout) with its own
 * input arena `inputs` (b->arena_bytes[MMRT_ARENA_INPUT] bytes): copies
 * every input of b from m's by name (the corner; the input named `pool`, if
 * any, its first elements: a tile pool), runs, copies the loss to m's loss
 * offset. The step's return value. */
int mmrt_bucket_run(const MmrtModelDesc *m, const MmrtModelDesc *b, char **arenas, char *inputs,
                    const char *pool, uint64_t seed, void *mesh);

#endif
