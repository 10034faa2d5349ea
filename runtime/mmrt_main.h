/* mmrt_main.h: the ABI between a compiled trainer and the runtime.
 *
 * `mmc compile` emits one object holding the step functions and a constant
 * model descriptor `mm_model`, and links it with libmmrt, whose
 * mmrt_entry.c provides main(); the trainer (mmrt_main.c) does arguments,
 * arenas, initialisation, the step loop, the LR schedule, logging,
 * evaluation, checkpoints and resume, and its data tasks (mmrt_task.h) the
 * binding of inputs to data described below. This header
 * is all the compiler knows of the runtime: codegen includes it for the
 * descriptor layout, the arena numbering and (through mmrt_kernels.h and
 * mmrt_rng.h) the kernel ABI the step functions call.
 *
 * Memory: five arenas, one per role, each one malloc of exactly the bytes
 * the memory plan gives (`mmc plan` prints the same numbers). A step
 * function gets the five bases and touches nothing else but the kernels'
 * own caches.
 *
 * Ranks: a model compiled for a mesh of more than one rank (dp x cp x tp)
 * runs under mpirun on exactly that many ranks; one compiled for one rank
 * refuses a launcher's larger world (mmrt_entry.c). Every rank runs the same
 * step functions on its pieces (the local shapes of the plan); the step
 * functions call the collectives of mmrt_comm.h on the MmrtMesh they are
 * given (NULL on one rank). Tensor descriptors give global shapes and, per
 * dim, the mesh axes that split it; a rank holds part `coord` of each split
 * dim (mmrt_split_range).
 *
 * Descriptor layout: every field is 8 bytes wide (int64_t, double or a
 * pointer), so the struct has no padding and codegen builds the same layout
 * as an LLVM struct of i64/double/ptr, field by field.
 *
 * Data binding (by input name, after the step inputs `lr` and `step`; one
 * file per task, mmrt_task_*.c):
 *   - classification: `pixels` f32[B, 1, 28, 28] and `labels` i32[B]:
 *     Fashion-MNIST images, normalised ((p / 255 - mean) / std), and their
 *     classes; evaluation reports top-1 accuracy from the logits' argmax.
 *   - language model: `ids` and `labels` i32[B, T] with a vocabulary of at
 *     least 256: each row is T + 1 consecutive pixel bytes of one image in
 *     raster order, starting at a per-sample offset drawn from Philox
 *     (seed, "data/offset", sample index) in [0, 784 - T - 1]; ids are the
 *     first T bytes, labels the next T (next-pixel prediction). Evaluation
 *     reports next-byte accuracy.
 *   - captioning (a VLM): `pixels` f32[B, 1, 28, 28], `text` and `labels`
 *     i32[B, T]: the image, then "<bos> <img> x n prompt answer <eos>"
 *     with the loss on the answer (mmrt_caption.h; n is image_tokens, the
 *     rows the model's `place` puts at the <img> tokens). Evaluation
 *     reports teacher-forced answer-token accuracy and, at the end, the
 *     exact-match rate of greedy captions.
 *   Anything else is refused at start-up with the list of inputs found. */
#ifndef MMRT_MAIN_H
#define MMRT_MAIN_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_ckpt.h"
#include "mmrt_kernels.h"
#include "mmrt_rng.h"

#define MMRT_ABI_VERSION 3

/* Arenas, in this order in MmrtModelDesc.arena_bytes and in the array of
 * bases a step function receives. */
enum {
  MMRT_ARENA_PARAM,
  MMRT_ARENA_GRAD,
  MMRT_ARENA_OPT,
  MMRT_ARENA_ACT,
  MMRT_ARENA_INPUT,
  MMRT_NARENAS
};

/* Parameter initialisation (a, b are MmrtTensorDesc.init_a, init_b):
 * zeros, ones, fill(a), normal(0, std = a), uniform(a, b), and fan_in:
 * uniform(-a / sqrt(fan_in), a / sqrt(fan_in)) with fan_in = numel / dim 0
 * (rank >= 2; numel for vectors). Each parameter draws from its own Philox
 * stream, mmrt_rng_stream("init/<name>", 0), under the run seed. */
enum {
  MMRT_INIT_NONE,
  MMRT_INIT_ZEROS,
  MMRT_INIT_ONES,
  MMRT_INIT_FILL,
  MMRT_INIT_NORMAL,
  MMRT_INIT_UNIFORM,
  MMRT_INIT_FAN_IN
};

enum { MMRT_OPTIM_ADAMW, MMRT_OPTIM_SGD };
enum { MMRT_LR_CONSTANT, MMRT_LR_COSINE }; /* cosine: linear warm-up, then cosine to min_lr */

#define MMRT_DESC_MAX_DIMS 8

/* A parameter, a piece of optimizer state, or an input. */
typedef struct MmrtTensorDesc {
  const char *name;
  int64_t dtype; /* MmrtStDtype */
  int64_t ndim;
  int64_t shape[MMRT_DESC_MAX_DIMS];
  int64_t arena;  /* MMRT_ARENA_* */
  int64_t offset; /* bytes from the arena's base */
  int64_t init;   /* MMRT_INIT_* */
  double init_a, init_b;
  int64_t frozen; /* 1: trained by nobody (no gradient, no state) */
  int64_t
      split[MMRT_DESC_MAX_DIMS]; /* per dim: bit a set when mesh axis a (MMRT_AXIS_*) splits it */
} MmrtTensorDesc;

/* Mesh axes, as mmrt_comm.h numbers them (MmrtAxis). */
enum { MMRT_DESC_AXIS_DP = 0, MMRT_DESC_AXIS_CP = 1, MMRT_DESC_AXIS_TP = 2, MMRT_DESC_NAXES = 3 };

/* A step: runs one function of the model on the arenas. `seed` is the run
 * seed (dropout masks are Philox streams of it); `mesh` the MmrtMesh of a
 * multi-rank run, or NULL. Returns 0, or a negative value when a kernel
 * reported bad data (a label or id out of range; the kernel printed which)
 * or a collective failed (mesh->err says which). */
typedef int (*MmrtStepFn)(char *const *arenas, uint64_t seed, void *mesh);

typedef struct MmrtModelDesc {
  int64_t abi_version; /* MMRT_ABI_VERSION */
  const char *name;
  const char *fingerprint; /* of the parameters and inputs: checkpoints must match it */
  int64_t arena_bytes[MMRT_NARENAS];
  int64_t nparams;
  const MmrtTensorDesc *params; /* params (arena param) and optimizer state (arena opt) */
  int64_t ninputs;
  const MmrtTensorDesc *inputs; /* every input of every function, once by name */
  int64_t train_loss_offset;    /* act arena, f32[]: the loss of the last train step (-1: none) */
  int64_t eval_loss_offset;     /* act arena, f32[]: the loss of the last eval step */
  int64_t eval_logits_offset;   /* act arena, f32[rows, cols]: the logits of the loss (-1: none) */
  int64_t logits_rows, logits_cols; /* this rank's piece */
  int64_t logits_vocab_axis;        /* the mesh axis splitting the classes, or -1 */
  int64_t ignore_index;             /* of that cross entropy */
  /* the train section */
  int64_t optim; /* MMRT_OPTIM_* */
  double lr, beta1, beta2, eps, weight_decay, momentum, clip;
  int64_t lr_sched;      /* MMRT_LR_* */
  int64_t warmup, steps; /* steps 0: given by --steps */
  double min_lr;
  int64_t batch;                 /* the compiled (global) batch size (B) */
  int64_t mesh[MMRT_DESC_NAXES]; /* ranks per axis: dp, cp, tp */
  int64_t lora_rank;     /* LoRA: adapters are the params named *.lora_a / *.lora_b (0: none) */
  double lora_alpha;     /* their update is scaled by alpha / rank */
  MmrtStepFn train_step; /* @train: forward, backward, optimizer (NULL: none) */
  MmrtStepFn eval_step;  /* @forward */
  /* what the executable does (mmc compile --task) */
  int64_t task; /* MMRT_TASK_* */
  /* images in the text: the rows `place` puts where the image-context
   * token stands (0: the model places none) and that token's id */
  int64_t image_tokens, image_token;
  /* incremental decoding (generate and eval tasks; NULL / -1 otherwise):
   * @prefill runs the whole text [B, T] from positions `pos` and fills the
   * KV caches (inputs named *.k_cache, *.v_cache); @decode runs one token
   * per row (input `token` [B, 1]) at positions `pos`. Their logits,
   * f32[B, T, vocab] and f32[B, 1, vocab], are at these act offsets. */
  MmrtStepFn prefill_step, decode_step;
  int64_t prefill_logits_offset, decode_logits_offset;
  int64_t cache_len, vocab;
} MmrtModelDesc;
enum { MMRT_TASK_TRAIN, MMRT_TASK_GENERATE, MMRT_TASK_EVAL };

#define MMRT_DESC_FIELDS   48 /* 8-byte slots in MmrtModelDesc */
#define MMRT_TENSOR_FIELDS 25 /* 8-byte slots in MmrtTensorDesc */

/* The descriptor of the model, defined by the generated object. */
extern const MmrtModelDesc mm_model;

/* The executable: checks the ABI version and hands over by m->task to the
 * trainer or to the generator/evaluator (mmrt_entry.c); returns the exit
 * status (0, or 1 with a message on stderr naming the flag or file at
 * fault). main() calls it with &mm_model. */
int mmrt_main(int argc, char **argv, const MmrtModelDesc *m);
/* The trainer (task MMRT_TASK_TRAIN): parses argv, trains (mmrt_main.c). */
int mmrt_train_main(int argc, char **argv, const MmrtModelDesc *m);
/* The generate and eval executables (mmrt_generate.c). */
int mmrt_generate_main(int argc, char **argv, const MmrtModelDesc *m);
/* The descriptor of the input named `name`, or NULL (mmrt_model.c). */
const MmrtTensorDesc *mmrt_desc_input(const MmrtModelDesc *m, const char *name);
/* 1 when a parameter name is a LoRA adapter's (*.lora_a, *.lora_b). */
int mmrt_is_adapter(const char *name);

/* The helpers and vocabulary-parallel kernels step functions call: mmrt_abi.def. */
#define MMRT_ABI_SECTION_MAIN
#include "mmrt_abi.h"

#endif
