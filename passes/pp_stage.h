/* Pipeline stages of @train (issue 11): which stage runs each node, and in
 * which part of a micro-batch's work. Shared by the `pipeline` pass (which
 * orders @train stage by stage before memplan) and codegen (cg_pp.c, one
 * function per stage and part). With pp ranks and vpp virtual stages per
 * rank there are S = pp * vpp stages; stage s runs on pipeline rank s % pp.
 *
 * Parameters: a stage list (plan.stages) puts each parameter in one stage;
 * without one, the stack layers are cut into S runs of consecutive layers
 * of about equal forward FLOPs (ir_flops) and the other parameters belong
 * to no stage.
 * Forward nodes (before the gradient seed): the largest of the stage of
 * their layer, of the staged parameters they read and of the producers of
 * their operands (so activations only flow to later stages); 0 when none
 * says. Backward nodes: the smallest of the stages of the backward values
 * they read and of their layer, so gradients only flow to earlier stages
 * (a staged parameter read does not pull one earlier: the head's input
 * gradient reads GPT-2's tied embedding of stage 0 and stays on the head's
 * stage); the node that makes a staged parameter's gradient goes to the
 * parameter's stage when that is no later; a backward node that reads no
 * backward value takes its layer's stage, its parameters' or the forward
 * rule. A node without operands
 * (full, iota) takes the first stage that reads it (forward) or the last
 * (backward). The update (norm, clipping, optimizer and what reads them)
 * is PPN_U and runs on every rank.
 * A backward node is PPN_I when a value of another stage depends on it (the
 * input gradient that goes back, transitively), else PPN_W (the weight
 * gradients ZB-H1 runs apart). */
#ifndef MMC_PP_STAGE_H
#define MMC_PP_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "../ir/ir.h"

typedef enum { PPN_F, PPN_I, PPN_W, PPN_U } PpPart;

typedef struct {
  int nstages;  /* pp * vpp */
  int *stage;   /* per node of f (-1: PPN_U) */
  PpPart *part; /* per node */
} PpAssign;

/* false with a message when the stages cannot be assigned (fewer layers
 * than stages, a stage without layers by the default cut). */
bool pp_assign(const IrModule *m, const IrFunc *f, PpAssign *a, char *err, size_t errlen);
void pp_assign_free(PpAssign *a);

/* mmc plan: the stages (FLOPs of each part, the layers they hold), each
 * rank's actions with the transfers, and the schedule simulated with the
 * stages' FLOPs as costs (makespan, bubble, micro-batches in flight); with
 * svg, the timeline drawn there. Nothing without a pipeline. */
#include <stdio.h>
bool pp_plan_print(FILE *out, IrModule *m, const char *svg, char *err, size_t errlen);

/* What one pipeline rank allocates (its planned peak: everything is
 * allocated before or at the first step and held), as the trainer does
 * (runtime/mmrt_pp.h): the trainer's arenas (param, grad, opt, act,
 * input), slots - 1 further in-flight sets of the act, grad and input
 * arenas (each 64-byte aligned), and the gradient sums of its stages, one
 * f32 tensor of elements + 1 per gradient the update reads that a stage of
 * the rank makes. Kernel workspace is inside
 * the act arena (memplan.h). */
typedef struct PpRankMem {
  int slots;                            /* micro-batches in flight at most */
  int64_t param, grad, opt, act, input; /* the trainer's arenas */
  int64_t set;                          /* one in-flight set: act + grad + input */
  int64_t sums;                         /* the gradient sums */
  int64_t peak;                         /* param + opt + slots * set + sums */
} PpRankMem;

/* out[r] for each of the pp ranks (at most nout); false with a message. */
bool pp_rank_memory(IrModule *m, PpRankMem *out, int nout, char *err, size_t errlen);

#endif
