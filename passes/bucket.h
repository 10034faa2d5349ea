/* Gradient buckets (the `bucket` pass, passes/bucket.c), as the backend and
 * `mmc plan` read them: a bucket is a run of consecutive all_reduce nodes
 * with the same `bucket` attribute on the same mesh axis, reduced in one
 * collective call. */
#ifndef MM_PASSES_BUCKET_H
#define MM_PASSES_BUCKET_H

#include "../ir/ir.h"

/* The `bucket` attribute of an all_reduce node, or -1 (any other node, or
 * an all_reduce outside buckets). */
int64_t bucket_id(const IrNode *n);

/* How many nodes, from index i of f, one collective call covers: the run of
 * consecutive all_reduce nodes of node i's bucket and mesh axis that starts
 * at i; 1 for a node outside buckets, 0 when node i continues a run that
 * started before it. */
int bucket_run(const IrFunc *f, int i);

/* The parameter whose gradient node i of f (an all_reduce of a bucket)
 * reduces: its result's grad(@p), or that of the collectives after it that
 * finish the gradient (a dp all-reduce followed by a tp one). NULL if none. */
const IrValue *bucket_grad_param(const IrFunc *f, int i);

/* Index in f of the bucket_wait of bucket id, or -1: a bucket with a wait
 * only starts its reduction where it stands (non-blocking), and its
 * results are complete from the wait on. */
int bucket_wait_index(const IrFunc *f, int64_t id);

/* The `prefetch` attribute of an all_gather (a ZeRO-3 parameter gather
 * posted one layer ahead, whose bucket_wait carries the same number), or
 * -1. */
int64_t prefetch_id(const IrNode *n);

/* The runtime slot of a node that starts a non-blocking collective waited
 * for by a later bucket_wait: bucket_id(n), else prefetch_id(n); -1 if
 * none. */
int64_t async_slot(const IrNode *n);

#endif
