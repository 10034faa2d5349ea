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
 * says; but a forward node that reads parameters only (a bf16 cast of a
 * tied embedding for the head) runs on the first stage that reads it.
 * Backward nodes: the smallest of the stages of the backward values they
 * read and of their layer, so gradients only flow to earlier stages
 * (a staged parameter read does not pull one earlier: the head's input
 * gradient reads GPT-2's tied embedding of stage 0 and stays on the head's
 * stage); the node that makes a staged parameter's gradient goes to the
 * parameter's stage when that is no later; a backward node that reads no
 * backward value takes its layer's stage, its parameters' or the forward
 * rule. A node without operands
 * (full, iota) takes the first stage that reads it (forward) or the last
 * (backward). The update (norm, clipping, optimizer and what reads them)
 * is PPN_U; each rank runs the part of it over the parameters it holds
 * (pp_holders; codegen/cg_pp.c rank_update).
 * A backward node is PPN_I when a value of another stage depends on it (the
 * input gradient that goes back, transitively), else PPN_W (the weight
 * gradients ZB-H1 runs apart). */
#ifndef MMC_PP_STAGE_H
#define MMC_PP_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "../ir/ir.h"

typedef enum { PPN_F, PPN_I, PPN_W, PPN_U } PpPart;

typedef struct PpAssign {
  int nstages;  /* pp * vpp */
  int *stage;   /* per node of f (-1: PPN_U) */
  PpPart *part; /* per node */
} PpAssign;

/* The `pipeline` pass computes the stages once and writes them into the IR
 * as node facts (IrNode.pp_stage, .pp_part: pp(stage, F|I|W) or pp(U) in
 * the text form): @train's by the rules above, and the evaluation's
 * (@forward, run stage by stage on the ranks of its stages; codegen/cg_pp.c)
 * with every node PPN_F by the forward rule and the layers' stages of
 * @train's (the stage list's or @train's FLOP cut), so that each stage
 * reads the parameters its rank holds. The pass fails with a message when
 * the stages cannot be assigned (fewer layers than stages, a stage without
 * layers by the default cut).
 * pp_facts reads f's facts into *a (nstages = pp * vpp, stage and part per
 * node in f's order); false with a message when a node carries none (the
 * pipeline pass has not run) or a stage out of range. Free with
 * pp_assign_free. */
bool pp_facts(const IrModule *m, const IrFunc *f, PpAssign *a, char *err, size_t errlen);
void pp_assign_free(PpAssign *a);

/* Which pipeline ranks hold each of m->params (mask[i] for
 * m->params.items[i], bit r for pp rank r): the ranks of the stages whose
 * nodes read it or make its gradient, and an optimizer state its
 * parameter's; one no stage reads, rank 0. A parameter two ranks' stages
 * read (GPT-2's tied embedding and head) is held by both. The rank whose
 * stage makes a parameter's gradient sum is its maker (it counts the
 * gradient's norm; the other holders receive the sum). */
#include <stdint.h>
void pp_holders(const IrModule *m, const IrFunc *f, const PpAssign *a, uint64_t *mask);

/* The transfers summed over a step's micro-batches (docs/pp-memory.md):
 * a value v that a stage part makes whose one reader is an add of a W
 * part of a stage on another rank (v f32; or v bf16, cast to f32 in the
 * fused loop of the add) (GPT-2's head share of the tied embedding's
 * gradient, added there to the embedding's share) and whose
 * sum is a parameter's gradient the update reads, directly or through one
 * all_reduce over dp outside any bucket. Such a v is not sent every
 * micro-batch: its maker's rank adds it to a sum of its own, the reader
 * finds zeros in its place, and once a step, before the update, the sum
 * (all-reduced over dp when the gradient is) goes to the reader's rank and
 * joins the gradient's sum (runtime/comm/mmrt_pp.c); the sum is f32 of
 * v's elements. Into *out (an IrMap
 * by pointer, initialised here in a): v -> p the gradient the update
 * reads, i = 1 + whether the sum is all-reduced over dp. Returns how many. */
int pp_summed_xfers(const IrFunc *f, const PpAssign *a, int P, Arena *ar, IrMap *out);

/* Whether the trainer sends a transfer whose first reader on a rank is
 * part fn (3 s + q) of stage s without waiting for it before the sender's
 * next parts (runtime/comm/mmrt_pp.c): when fn is a W part, but for an
 * output gradient (made by an I part, `from`) read by a W that starts its
 * stage's backward action (no I nodes in the stage, and a schedule kind
 * `sched` that runs I and W as one action, not ZB-H1): that transfer sets
 * the action off as an output gradient does an I part. The
 * sender keeps such a transfer's room to the end of the micro-batch. */
bool pp_xfer_unwaited(const PpAssign *a, int nnodes, int sched, int from, int fn);

/* The byte range [lo, hi) of the param (k = 0) and opt (k = 1) arenas that
 * pipeline rank r allocates: from its first held value to the end of its
 * last (memplan lays the values out rank by rank, so that is what it holds;
 * a value inside the range that the rank does not hold is counted, never
 * hidden). lo = hi = 0 for an arena without values of the rank. */
void pp_rank_ranges(const IrModule *m, const uint64_t *mask, int P, int64_t (*lo)[2],
                    int64_t (*hi)[2]);

/* mmc plan: the stages (FLOPs of each part, the layers they hold), each
 * rank's actions with the transfers, and the schedule simulated with the
 * stages' FLOPs as costs (makespan, bubble, micro-batches in flight); with
 * svg, the timeline drawn there; each rank's actions only with detail.
 * Nothing without a pipeline. */
#include <stdio.h>
bool pp_plan_print(FILE *out, IrModule *m, const char *svg, bool detail, char *err, size_t errlen);

/* What one pipeline rank allocates (its planned peak: everything is
 * allocated before or at the first step and held), as the trainer does
 * (runtime/comm/mmrt_pp.h): its range of the param and opt arenas (the
 * parameters and optimizer state of its stages, pp_rank_ranges); its grad
 * arena, the working set of its stage parts and update that all its slots
 * share (memplan.h MpPpArenas); one act and input arena per micro-batch in
 * flight (the values of its stages that live from one part to a later
 * one: a forward's to its backward, an input gradient to a W run later),
 * slot 0's
 * act arena large enough for @forward too; the gradient sums of its
 * stages, one f32 tensor of elements + 1 per gradient the update reads
 * that a stage of the rank makes, but for the deferred dp reductions'
 * (passes/accum.h): their sums are in the grad arena (`homes`) but for a
 * reduce-scatter's whose operand a separate op makes (one of elements + 1
 * each), and their results hold the step's sum themselves. The evaluation adds nothing: it runs
 * @forward stage by stage (its pp facts) on the rank's own parameters
 * in slot 0's act and input arenas; `eval` is what of them it uses.
 * Kernel workspace is in the act arena (memplan.h). */
typedef struct PpRankMem {
  int slots;                            /* micro-batches in flight at most */
  int64_t param, grad, opt, act, input; /* param, opt: its range; grad: its working set;
                                         * act: one slot's */
  int64_t act0;                         /* slot 0's act arena (shared with @forward) */
  int64_t all_param, all_opt;           /* the whole param and opt arenas (one rank's) */
  int64_t set;                          /* one more in-flight slot: act + input */
  int64_t sums;                         /* the gradient sums beside the arenas */
  int64_t homes;    /* the gradient sums in the grad arena (of grad: the deferred dp reductions'
                     * sums, memplan's homes, docs/accumulation.md "Memory") */
  int64_t eval_act; /* the evaluation: the span of slot 0's act arena its stages' @forward
                     * values use */
  int64_t eval;     /* what it reads and writes: param (its own) + eval_act + input */
  int64_t peak;     /* param + opt + grad + act0 + input + (slots - 1) set + sums */
} PpRankMem;

/* out[r] for each of the pp ranks (at most nout); false with a message. */
bool pp_rank_memory(IrModule *m, PpRankMem *out, int nout, char *err, size_t errlen);

#endif
