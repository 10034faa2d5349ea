/* What a model's `train { }` and `parallel { }` sections say, after checking.
 * Read by the passes (autodiff, shard, pipeline, zero, optimizer). */
#ifndef MM_FRONTEND_PLAN_H
#define MM_FRONTEND_PLAN_H

#include <stdbool.h>

#include "../support/diag.h"

typedef enum MmSchedule {
  MM_SCHED_1F1B,
  MM_SCHED_GPIPE,
  MM_SCHED_INTERLEAVED,
  MM_SCHED_ZBH1
} MmSchedule;
/* context parallel (cp > 1): how the attention is split over the cp axis */
typedef enum MmCpKind {
  MM_CP_ULYSSES, /* all-to-all from a sequence split to a head split and back */
  MM_CP_RING     /* each rank keeps its query block, key/value blocks pass around the ring */
} MmCpKind;
typedef enum MmRecompute {
  MM_RECOMPUTE_NONE,
  MM_RECOMPUTE_SELECTIVE, /* the attention core (passes/recompute.c) */
  MM_RECOMPUTE_FULL,      /* every stack layer: keep its input, rerun it in the backward */
  MM_RECOMPUTE_BLOCK      /* full recompute of the first `block` layers of each stack */
} MmRecompute;

/* One pipeline stage: which parameter-name prefixes (instances or stack
 * layers, e.g. "vision", "llm.blocks.3") it holds. */
typedef struct MmStage {
  const char **units;
  int nunits;
} MmStage;

typedef struct MmPlan {
  int tp, pp, cp, dp, zero, micro_batches, vpp;
  bool sp;
  MmCpKind cp_kind;
  int cp_ulysses; /* USP: the Ulysses degree inside a ring of cp / cp_ulysses (0: not set) */
  MmSchedule schedule;
  MmRecompute recompute;
  int recompute_block; /* N of MM_RECOMPUTE_BLOCK */
  /* per sub-model policies, tried first: "vision=full", "llm=block:2" (the
   * text form keeps them as they are; passes/recompute.c reads them) */
  const char **recompute_by;
  int nrecompute_by;
  SrcLoc *recompute_by_loc; /* the frontend's, for its checks (not copied into modules) */
  MmStage *stages;          /* pp entries when given, else NULL */
  int nstages;
  /* data parallel: the gradients' dp all-reduces are grouped into buckets of
   * about this many MiB (a bucket closes once it holds at least that much);
   * 0: one all-reduce per gradient (the bucket pass) */
  double bucket_mb;
  /* the buckets reduced where they stand, blocking (--no-overlap); by
   * default they only start there and are waited for before their first
   * reader */
  bool no_overlap;
  SrcLoc loc_tp, loc_pp, loc_cp, loc_dp, loc_sp, loc_zero, loc_mb, loc_stages, loc_bucket, loc_vpp,
      loc_schedule, loc_cp_kind, loc_cp_ulysses, loc_recompute; /* where each was set */
} MmPlan;

/* The bucket size when neither the model nor --bucket-mb sets one. */
#define MM_BUCKET_MB_DEFAULT 0.25

/* Command-line overrides: -1 (or false for has_sp) means "not given". */
typedef struct MmPlanFlags {
  int tp, pp, cp, dp, zero, micro_batches, cp_ulysses;
  int sp; /* -1 not given, 0 off, 1 on */
  const char *schedule, *recompute, *cp_kind;
  bool bucket_set; /* --bucket-mb given (false in a zeroed struct) */
  double bucket_mb;
  bool no_overlap; /* --no-overlap */
  int precision;   /* --precision: 0 not given (a zeroed struct), else 1 + an MmPrecision */
} MmPlanFlags;
void mm_plan_flags_init(MmPlanFlags *f);

typedef enum MmOptim { MM_OPT_ADAMW, MM_OPT_SGD } MmOptim;
/* train { precision = bf16 } (or --precision bf16): the `precision` pass
 * (passes/precision.c) computes matmuls, convolutions and attention in
 * bf16; weights, gradients of the master copy and optimizer state stay f32. */
typedef enum MmPrecision { MM_PREC_FP32, MM_PREC_BF16 } MmPrecision;
/* The learning-rate schedule: a linear warm-up over `warmup` steps, then
 * constant, half a cosine down to min_lr, or a straight line down to min_lr
 * at the last step. */
typedef enum MmLrSched { MM_LR_CONSTANT, MM_LR_COSINE, MM_LR_LINEAR } MmLrSched;

/* LoRA (train { lora = lora(rank = 8, alpha = 16, targets = [llm],
 * layers = ["q_proj", "v_proj"]) }), checked by the frontend. `modules` are
 * the paths of the Linear instances the setting matched (e.g.
 * "llm.blocks.3.attn.q_proj"); the `lora` pass adapts every linear node
 * whose weight is `<module>.weight` and freezes every other parameter. */
typedef struct MmLora {
  int rank;             /* 0: no LoRA */
  double alpha;         /* the update is scaled by alpha / rank */
  const char **targets; /* sub-model paths, e.g. "llm" */
  int ntargets;
  const char **layers; /* Linear instance names, e.g. "q_proj" */
  int nlayers;
  const char **modules; /* the matched Linear instances' paths */
  int nmodules;
  SrcLoc loc; /* the setting (for the pass's messages and the adapters' loc) */
} MmLora;

/* gan = gan(discriminator = disc, weight = 0.5, start = 5): an adversarial
 * term as the reference's LPIPSWithDiscriminator3D (WF-VAE). The model's
 * training forward returns [loss, g, d]: the generator's loss, its
 * adversarial term (-mean(D(fake))) and the discriminator's loss (hinge, on
 * detached fakes). autodiff trains every other parameter on loss + weight *
 * g and the discriminator's on d, both only from step start + 1 (0 before);
 * the optimizer updates the two sets with their own norm, clip and AdamW
 * state, the discriminator's counting its steps from its first. */
typedef struct MmGan {
  const char **disc; /* [ndisc]: the discriminator's instance path */
  int ndisc;         /* 0: no gan, else 1 */
  double weight;
  int start; /* steps trained without the discriminator */
  SrcLoc loc;
} MmGan;

typedef struct MmTrain {
  const char **freeze; /* instance paths whose parameters get no gradient */
  int nfreeze;
  MmOptim optim;
  double lr, beta1, beta2, eps, weight_decay, momentum, clip;
  MmLrSched lr_sched;
  int warmup, steps; /* steps 0: set by the trainer */
  double min_lr;
  int batch;   /* samples per step if the model says (else 0) */
  MmLora lora; /* rank 0: none */
  MmPrecision precision;
  MmGan gan;
} MmTrain;

#endif
