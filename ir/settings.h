/* A model's settings: what its `train { }` and `parallel { }` sections
 * say, after mmc's flags. The fields, their defaults, ranges, `.mm` keys,
 * flags and help are the rows of settings.def; the structs, the section
 * reader's keys (frontend/plan.c), mmc's flags and --list-settings
 * (tools/mmc.c) and the IR text's plan(...) / train(...) lines
 * (ir_settings.c) are made from them. Where each setting was given travels
 * with it: loc[MM_SET_<ID>] (file 0: a default or a flag). */
#ifndef MM_IR_SETTINGS_H
#define MM_IR_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../support/diag.h"

/* ---- the named values of the ENUM settings: (enumerator, name) ---- */
#define MM_ENUM_ID(id, name)   id,
#define MM_ENUM_NAME(id, name) name,

#define MM_SCHEDULE_VALUES(X)                                                                      \
  X(MM_SCHED_1F1B, "1f1b")                                                                         \
  X(MM_SCHED_GPIPE, "gpipe")                                                                       \
  X(MM_SCHED_INTERLEAVED, "interleaved")                                                           \
  X(MM_SCHED_ZBH1, "zbh1")
/* context parallel (cp > 1): how the attention is split over the cp axis:
 * ulysses: all-to-all from a sequence split to a head split and back;
 * ring: each rank keeps its query block, key/value blocks pass around */
#define MM_CP_KIND_VALUES(X)                                                                       \
  X(MM_CP_ULYSSES, "ulysses")                                                                      \
  X(MM_CP_RING, "ring")
/* selective: the attention core (passes/recompute.c); full: every stack
 * layer keeps its input and reruns in the backward; block: full recompute
 * of the first recompute_block layers of each stack */
#define MM_RECOMPUTE_VALUES(X)                                                                     \
  X(MM_RECOMPUTE_NONE, "none")                                                                     \
  X(MM_RECOMPUTE_SELECTIVE, "selective")                                                           \
  X(MM_RECOMPUTE_FULL, "full")                                                                     \
  X(MM_RECOMPUTE_BLOCK, "block")
#define MM_OPTIM_VALUES(X)                                                                         \
  X(MM_OPT_ADAMW, "adamw")                                                                         \
  X(MM_OPT_SGD, "sgd")
/* precision = bf16: the `precision` pass (passes/precision.c) computes
 * matmuls, convolutions and attention in bf16; weights, gradients of the
 * master copy and optimizer state stay f32 */
#define MM_PRECISION_VALUES(X)                                                                     \
  X(MM_PREC_FP32, "fp32")                                                                          \
  X(MM_PREC_BF16, "bf16")
/* a linear warm-up over `warmup` steps, then constant, half a cosine down
 * to min_lr, or a straight line down to min_lr at the last step */
#define MM_LR_SCHED_VALUES(X)                                                                      \
  X(MM_LR_CONSTANT, "constant")                                                                    \
  X(MM_LR_COSINE, "cosine")                                                                        \
  X(MM_LR_LINEAR, "linear")

/* where per-sub-model plans run (docs/subplans.md): every block's mesh over
 * all ranks, or each block on its own group of ranks, pipelined */
#define MM_PLACEMENT_VALUES(X)                                                                     \
  X(MM_PLACE_COLOCATED, "colocated")                                                               \
  X(MM_PLACE_SEPARATE, "separate")

/* the data section's policies (the trainer's --too-long, --bad-samples) */
/* too_long auto: the reader's own default (truncate for text, fail for
 * conversations: docs/conversations.md) */
#define MM_TOO_LONG_VALUES(X)                                                                      \
  X(MM_TOO_LONG_AUTO, "auto")                                                                      \
  X(MM_TOO_LONG_TRUNCATE, "truncate")                                                              \
  X(MM_TOO_LONG_DROP, "drop")
#define MM_BAD_SAMPLES_VALUES(X)                                                                   \
  X(MM_BAD_FAIL, "fail")                                                                           \
  X(MM_BAD_SKIP, "skip")
/* a conversation's chat format (runtime/data/mmrt_tok_chat.c's families;
 * the first, the trainer's default, is the enum's default) */
#define MM_CHAT_VALUES(X)                                                                          \
  X(MM_CHAT_INTERNVL2, "internvl2")                                                                \
  X(MM_CHAT_CHATML, "chatml")                                                                      \
  X(MM_CHAT_QWEN2, "qwen2")                                                                        \
  X(MM_CHAT_LLAMA2, "llama2")                                                                      \
  X(MM_CHAT_VICUNA, "vicuna")

typedef enum MmSchedule { MM_SCHEDULE_VALUES(MM_ENUM_ID) MM_SCHED_COUNT } MmSchedule;
typedef enum MmCpKind { MM_CP_KIND_VALUES(MM_ENUM_ID) MM_CP_COUNT } MmCpKind;
typedef enum MmRecompute { MM_RECOMPUTE_VALUES(MM_ENUM_ID) MM_RECOMPUTE_COUNT } MmRecompute;
typedef enum MmOptim { MM_OPTIM_VALUES(MM_ENUM_ID) MM_OPT_COUNT } MmOptim;
typedef enum MmPrecision { MM_PRECISION_VALUES(MM_ENUM_ID) MM_PREC_COUNT } MmPrecision;
typedef enum MmLrSched { MM_LR_SCHED_VALUES(MM_ENUM_ID) MM_LR_COUNT } MmLrSched;
typedef enum MmPlacement { MM_PLACEMENT_VALUES(MM_ENUM_ID) MM_PLACE_COUNT } MmPlacement;
typedef enum MmTooLong { MM_TOO_LONG_VALUES(MM_ENUM_ID) MM_TOO_LONG_COUNT } MmTooLong;
typedef enum MmBadSamples { MM_BAD_SAMPLES_VALUES(MM_ENUM_ID) MM_BAD_COUNT } MmBadSamples;
typedef enum MmChat { MM_CHAT_VALUES(MM_ENUM_ID) MM_CHAT_COUNT } MmChat;
/* the data section's format (ir/data_formats.def; docs/data.md "Data
 * formats"): auto, the default without a data section, lets the trainer try
 * its feeders in order */
typedef enum MmDataFormat {
  MM_FMT_AUTO,
#define DATA_FORMAT(ID, ...) MM_FMT_##ID,
#include "data_formats.def"
  MM_FMT_COUNT
} MmDataFormat;
extern const char *const mm_data_format_names[];
/* NULL-terminated, in the enums' order */
extern const char *const mm_schedule_names[],
    *const mm_cp_kind_names[], *const mm_recompute_names[],
                                   *const mm_optim_names[],
                                       *const mm_precision_names[],
                                           *const mm_lr_sched_names[],
                                               *const mm_too_long_names[],
                                                   *const mm_placement_names[],
                                                       *const mm_bad_samples_names[];
extern const char *const mm_chat_names[];

/* The index of a schedule's name in mm_schedule_names (the language's,
 * mmc's --schedule and the IR text's spelling), -1 when it is none. */
int mm_schedule_parse(const char *name);

/* The bucket size when neither the model nor --bucket-mb sets one. */
#define MM_BUCKET_MB_DEFAULT 0.25

/* ---- the ids: MM_SET_TP, ..., one per row ---- */
#define MM_SET_ID_ROW(ID, ...) MM_SET_##ID,
typedef enum MmSetId {
#define SET_PLAN      MM_SET_ID_ROW
#define SET_PLAN_MOD  MM_SET_ID_ROW
#define SET_TRAIN     MM_SET_ID_ROW
#define SET_LORA      MM_SET_ID_ROW
#define SET_GAN       MM_SET_ID_ROW
#define SET_TRAIN_MOD MM_SET_ID_ROW
#define SET_DATA      MM_SET_ID_ROW
#include "settings.def"
  MM_SET_COUNT
} MmSetId;

/* One pipeline stage: which parameter-name prefixes (instances or stack
 * layers, e.g. "vision", "llm.blocks.3") it holds. */
typedef struct MmStage {
  const char **units;
  int nunits;
} MmStage;

/* a row's field: STRS and STAGES carry their count n<field> */
#define MM_SET_DECL_INT(T, F)    T F;
#define MM_SET_DECL_BOOL(T, F)   T F;
#define MM_SET_DECL_FLOAT(T, F)  T F;
#define MM_SET_DECL_ENUM(T, F)   T F;
#define MM_SET_DECL_LOC(T, F)    T F;
#define MM_SET_DECL_SUB(T, F)    T F;
#define MM_SET_DECL_STRS(T, F)   T F;
#define MM_SET_DECL_STAGES(T, F) T F;
#define MM_SET_DECL_STR(T, F)    T F;
#define MM_SET_DECL_COUNT_INT(F)
#define MM_SET_DECL_COUNT_BOOL(F)
#define MM_SET_DECL_COUNT_FLOAT(F)
#define MM_SET_DECL_COUNT_ENUM(F)
#define MM_SET_DECL_COUNT_LOC(F)
#define MM_SET_DECL_COUNT_SUB(F)
#define MM_SET_DECL_COUNT_STR(F)
#define MM_SET_DECL_COUNT_STRS(F)   int n##F;
#define MM_SET_DECL_COUNT_STAGES(F) int n##F;
#define MM_SET_DECL(ID, KIND, CTYPE, FIELD, ...)                                                   \
  MM_SET_DECL_##KIND(CTYPE, FIELD) MM_SET_DECL_COUNT_##KIND(FIELD)

/* LoRA (train { lora = lora(rank = 8, alpha = 16, targets = [llm],
 * layers = ["q_proj", "v_proj"]) }), checked by the frontend. `modules` are
 * the paths of the Linear instances the setting matched (e.g.
 * "llm.blocks.3.attn.q_proj"); the `lora` pass adapts every linear node
 * whose weight is `<module>.weight` and freezes every other parameter. */
typedef struct MmLora {
#define SET_LORA MM_SET_DECL
#include "settings.def"
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
#define SET_GAN MM_SET_DECL
#include "settings.def"
} MmGan;

/* The parallel section (settings.def's SET_PLAN rows). */
typedef struct MmPlan {
#define SET_PLAN MM_SET_DECL
#include "settings.def"
  SrcLoc *recompute_by_loc; /* the frontend's, for its checks (not copied into modules) */
  SrcLoc *subplan_loc;      /* the frontend's: per sub-plan its name, tp, dp and sp (not copied) */
  SrcLoc loc[MM_SET_COUNT]; /* where each setting was given (file 0: not in the source) */
} MmPlan;

/* The data section (settings.def's SET_DATA rows; docs/data.md): the
 * trainer's defaults for --data, --tokenizer, --seq-len, --pack, --too-long
 * and --bad-samples. The paths are resolved against the .mm file's folder. */
typedef struct MmData {
#define SET_DATA MM_SET_DECL
#include "settings.def"
} MmData;

/* The train section (settings.def's SET_TRAIN rows), and the data section. */
typedef struct MmTrain {
#define SET_TRAIN MM_SET_DECL
#include "settings.def"
  MmData data;
  SrcLoc loc[MM_SET_COUNT];
} MmTrain;

/* ---- the table as data ---- */
typedef enum IrSetKind {
  IR_SK_INT,    /* int (enums too), in [lo, hi] */
  IR_SK_BOOL,   /* bool */
  IR_SK_FLOAT,  /* double, in [lo, hi] */
  IR_SK_ENUM,   /* an int written by name (names[]) */
  IR_SK_STRS,   /* const char ** with its int count at count_off: ["a", "b"] */
  IR_SK_STAGES, /* MmStage * with its count: [["a", "b"], ["c"]] */
  IR_SK_LOC,    /* SrcLoc: loc("file":line:col), written without "name =" */
  IR_SK_SUB,    /* a nested group, name(...) (lora) */
  IR_SK_STR,    /* const char * (NULL: not set): "text" */
} IrSetKind;

/* whose field a row is: off is from the start of that struct */
typedef enum MmSetOwner {
  MM_OWN_PLAN,      /* MmPlan */
  MM_OWN_PLAN_MOD,  /* IrModule, on the IR's plan line */
  MM_OWN_TRAIN,     /* MmTrain */
  MM_OWN_LORA,      /* MmTrain (train.lora.<field>) */
  MM_OWN_GAN,       /* MmTrain (train.gan.<field>) */
  MM_OWN_TRAIN_MOD, /* IrModule, on the IR's train line */
  MM_OWN_DATA,      /* MmTrain (train.data.<field>): the data section, the IR's data line */
} MmSetOwner;

typedef struct MmSetDesc {
  MmSetId id;
  MmSetOwner owner;
  IrSetKind kind;
  const char *field, *name; /* the C field, the IR text's name */
  size_t off, count_off;    /* in the owner's struct (count: STRS, STAGES) */
  const char *const *names; /* ENUM */
  double def, lo, hi;
  const char *key, *flag, *what, *help; /* "" when none */
} MmSetDesc;
extern const MmSetDesc mm_settings[MM_SET_COUNT];

/* The mesh's axes (support/mesh_axes.def), each the setting of its name (a
 * row of settings.def: key, flag, range): the ranks of a plan are their
 * product; *size (MESH_NAXES ints) gets the sizes. */
void mm_plan_mesh(const MmPlan *pl, int *size);
int64_t mm_plan_ranks(const MmPlan *pl);

/* A sub-model's own plan (parallel { vision { dp = 2 } llm { tp = 2 } },
 * docs/subplans.md), kept in the plan's `subplans` strings as
 * "NAME:tp=T,dp=D,sp=S". Colocated: every sub-model's tp * dp is the world,
 * and the module's mesh is the largest tp by the world over it. */
typedef struct MmSubPlan {
  const char *name; /* the sub-model's instance name (not terminated: namelen) */
  int namelen;
  int tp, dp;
  bool sp;
} MmSubPlan;
/* One "NAME:tp=T,dp=D,sp=S" string; false when it is not one. */
bool mm_subplan_parse(const char *text, MmSubPlan *out);
/* The sub-plan of the sub-model a scope or parameter path lies in (its
 * first component names it); false when none does. */
bool mm_subplan_for(const MmPlan *pl, const char *path, MmSubPlan *out);

/* placement = separate with the first block on one rank (tp = dp = 1)
 * before a second of tp = T, dp = 1: the pipeline's first stage is one
 * rank that plays each of its T logical tp ranks, which hold the block
 * whole and compute the same (docs/subplans.md "One rank for a group"). */
bool mm_subplan_one_rank(const MmPlan *pl, const MmSubPlan *sub);

/* The settings of empty sections. */
void mm_settings_default(MmPlan *plan, MmTrain *train);
/* The struct a row's off counts from: plan or train (NULL for the IrModule rows). */
void *mm_setting_base(const MmSetDesc *s, MmPlan *plan, MmTrain *train);
/* An INT, BOOL, FLOAT or ENUM value as a double, and back. */
double mm_setting_get(const MmSetDesc *s, const void *base);
void mm_setting_put(const MmSetDesc *s, void *base, double v);
/* The index of name in a NULL-terminated names list, or -1. */
int mm_enum_index(const char *const *names, const char *name);
/* "a, b or c" into buf. */
const char *mm_enum_list(const char *const *names, char *buf, size_t n);

/* A recompute policy as text: none, selective, full or block:N (N >= 1).
 * The flag, the per-sub-model policies and the IR read it here. */
bool mm_recompute_parse(const char *s, MmRecompute *pol, int *block);

/* Whether a schedule can order pp stages of vpp virtual stages over m
 * micro-batches (the arithmetic; passes/pp_sched.c builds it); else a
 * message in err. */
bool mm_schedule_check(MmSchedule k, int pp, int vpp, int m, char *err, size_t errn);

/* Why a tp splits nothing (the frontend's and the shard pass's message). */
#define TP_NOTHING                                                                                 \
  "no column/row-parallel pair of linears or convolutions (each column-parallel result must "      \
  "reach its row-parallel reader through ops that keep the split), no vocabulary-parallel "        \
  "loss head or embedding; every parameter and activation would stay replicated"

/* Command-line overrides: given[id] says which; their values in plan / train. */
typedef struct MmPlanFlags {
  bool given[MM_SET_COUNT];
  MmPlan plan;
  MmTrain train;
  /* a parallel section's body as text ("tp = 2; pp = 4; stages = [5, 10,
   * 10, 7]", or sub-model blocks) over the file's own (mmc plan --search's
   * candidates; frontend/plan.c flag_section); NULL: none */
  const char *section;
} MmPlanFlags;
void mm_plan_flags_init(MmPlanFlags *f);

#endif
