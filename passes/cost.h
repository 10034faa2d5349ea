/* The cost model (issue 32): a training step's time on a device described
 * by support/device.h, from what the compiled module already knows. Read by
 * `mmc plan --device` and compiled into the trainer's descriptor.
 *
 * - An op: max(FLOPs / rate, bytes / memory bandwidth) + the device's
 *   op_overhead_us, on the rank's own piece (the FLOPs of a node divided by
 *   the most any of its operands or results is split over the mesh). The
 *   rate is the matmul peak of the operands' dtype (bf16 or fp32) times
 *   matmul_efficiency for products and convolutions, times
 *   attention_efficiency more for attention, vector_tflops for the rest.
 *   Views cost nothing.
 * - A collective: alpha-beta over the link its group crosses. The group of
 *   axis a with stride s (tp 1, cp tp, dp tp*cp, pp tp*cp*dp) and size n
 *   stays inside a node when s*n <= devices_per_node; a ring all-reduce
 *   makes 2(n-1) steps, all-gather, reduce-scatter and all-to-all n-1, each
 *   step one latency; the bytes are ir_collective_elems's (ring).
 * - Overlap: gradient buckets and ZeRO-3 prefetched gathers are posted
 *   without blocking; their time is hidden behind the backward's (the
 *   forward's and backward's) compute, and only what exceeds it shows, plus
 *   the last bucket (it starts after the last gradient). Every other
 *   collective blocks.
 * - Micro-batches: the forward and backward M times, the update once.
 * - Pipeline: the schedule simulator (passes/pp_sched.h) with each stage's
 *   forward, input- and weight-gradient times per micro-batch and one
 *   transfer's alpha + bytes / bandwidth between stages (a tp-replicated
 *   value's bytes / tp per rank, plus the receivers' all-gather of its
 *   chunks over tp: pp_scatter); the bubble is the makespan less the
 *   busiest rank's work.
 * - Ring attention: each of the cp - 1 shifts of K and V (and dK, dV)
 *   shows where it outlasts the block computed meanwhile.
 * - Not modelled: the split-statistics norms' in-kernel communication, the
 *   data loader, the host. */
#ifndef MMC_COST_H
#define MMC_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/ir.h"
#include "../support/device.h"

typedef struct CostPrediction {
  int devices;           /* tp * cp * dp * pp */
  double step_s;         /* predicted time of one training step */
  double compute_s;      /* the critical rank's compute (forward and backward) */
  double exposed_comm_s; /* communication not hidden behind compute */
  double bubble_s;       /* pipeline idle time of the critical rank */
  double optimizer_s;    /* norm, clipping and update */
  double comm_s;         /* every collective's time, hidden or not */
  double flops_step;     /* executed FLOPs of a step, all devices (recompute included) */
  double model_flops;    /* the forward's FLOPs and the backward's gradient ops' (no recompute) */
  double tflops_per_device; /* executed FLOPs / step_s / devices, in TFLOP/s */
  double mfu;               /* model FLOPs / step_s / (devices * bf16 or fp32 peak) */
  int64_t samples, tokens;  /* per step (tokens 0: the inputs have no sequence) */
  double peak_tflops;       /* the peak MFU is counted against */
  /* pp > 1: a transfer between stages (the mean over the stage links): its
   * bytes, the bytes each rank sends of it (those of tp-replicated values
   * 1/tp, pp_scatter), the send's time and the receivers' all-gather of
   * the chunks over tp (docs/pp-transfers.md) */
  double pp_xfer_bytes, pp_xfer_rank_bytes, pp_xfer_send_s, pp_xfer_gather_s;
  /* optional, set by the caller before cost_predict (zeroed by it): each op
   * kind's predicted seconds a step, [op][0 forward, 1 backward, 2 update]
   * (computation only, as the trainer's --profile counts it; left zero
   * under pp > 1) */
  double (*by_kind)[3];
} CostPrediction;

/* Predicts m's step (after every pass, @train present). False with a
 * message when the module cannot be costed (no @train, a broken schedule). */
bool cost_predict(IrModule *m, const MmDevice *d, CostPrediction *out, char *err, size_t errn);

/* alpha-beta time of a collective of kind op (all_reduce, all_gather,
 * reduce_scatter, all_to_all; or a point-to-point send when op is
 * IR_OP_COUNT) that sends `bytes` per rank over a group of n members of
 * stride `stride` in the rank order. */
double cost_collective_s(const MmDevice *d, IrOp op, double bytes, int n, int stride);

/* Node i of f's time on its rank as the prediction charges it (0 for a
 * collective; uses: ir_use_counts of f, ir/ir_merge.h): mmc plan --search
 * weighs pipeline stages with it. Its operands are counted in cache and
 * its memory traffic at mem_bw_gbs: the cold and remote operands (cost.c op_misses)
 * and the last-level cache (cost_predict) need the whole step. */
double cost_op_s(const IrModule *m, const MmDevice *d, const IrFunc *f, int i, const IrMap *uses);

/* The float instructions one element of op takes in mmc's own kernel where
 * they are more than its model FLOPs, else 0 (passes/cost.c says how they
 * are counted; tests/unit/check_cg_elem_work.c counts codegen's). */
int cost_elem_work(IrOp op);

#endif
