/* mmrt_main.h: the ABI between a compiled trainer and the runtime.
 *
 * `mmc compile` emits one object holding the step functions and a constant
 * model descriptor `mm_model`, and links it with libmmrt, whose
 * mmrt_entry.c provides main(); the trainer (mmrt_main.c) does arguments,
 * arenas, initialisation, the step loop, the LR schedule, logging,
 * evaluation, checkpoints and resume, and its data feeders (mmrt_feed.h) the
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
 * file per feeder, mmrt_feed_*.c):
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
 *   - video (a video autoencoder): `video` f32[B, 1, F, 64, 64], F = 1 + 4k:
 *     moving Fashion-MNIST items in [0, 1] (mmrt_video.h); no labels, so
 *     evaluation (on held-out test-split clips) reports the loss alone.
 *   - text-to-video diffusion (a DiT): `latents` f32[B, 8, Fl, 8, 8] (the
 *     clips downsampled), `text` i32[B, L] (caption word ids), `noise`,
 *     `t_uniform` or `t_normal` (mmrt_feed_dit.c); the loss alone.
 *   Anything else is refused at start-up with the list of inputs found. */
#ifndef MMRT_MAIN_H
#define MMRT_MAIN_H

#include <stddef.h>
#include <stdint.h>

#include "../../support/mesh_axes.h"
#include "mmrt_ckpt.h"
#include "mmrt_kernels.h"
#include "mmrt_rng.h"

/* 14: data_flags; 13: pp_one0; 12: zero_node, predicted_step_s, predicted_device */
#define MMRT_ABI_VERSION 16

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
/* each a linear warm-up over `warmup` steps, then constant, half a cosine
 * to min_lr, or a straight line to min_lr at the last step */
enum { MMRT_LR_CONSTANT, MMRT_LR_COSINE, MMRT_LR_LINEAR };

#define MMRT_DESC_MAX_DIMS 8
#define MMRT_PP_MAXFN      96 /* pipeline step functions: 3 per stage */
#define MMRT_PP_MAXRANKS   32 /* pipeline ranks (a stage at least each) */
#define MMRT_PP_MAXSTAGES  32 /* = MMRT_PP_MAXFN / 3 */
/* a pipeline transfer's pp_xfer_how (mmrt_desc.def) */
enum { MMRT_XFER_LATE, MMRT_XFER_SLOT, MMRT_XFER_WS, MMRT_XFER_FWD, MMRT_XFER_SUM };

/* The descriptor structs, field by field from mmrt_desc.def (what each
 * field holds is written there). */
#define MMRT_DESC_C_i64                int64_t
#define MMRT_DESC_C_f64                double
#define MMRT_DESC_C_str                const char *
#define MMRT_DESC_C_tensors            const struct MmrtTensorDesc *
#define MMRT_DESC_C_step               MmrtStepFn
#define MMRT_DESC_C_i64s               const int64_t *
#define MMRT_DESC_C_pp_ranks           const struct MmrtPpRank *
#define MMRT_DESC_C_pp_actions         const struct MmrtPpAction *
#define MMRT_DESC_C_pp_routes          const struct MmrtPpRoute *
#define MMRT_DESC_FIELD(t, name, dims) MMRT_DESC_C_##t name dims;

typedef struct MmrtTensorDesc {
#define MMRT_TENSOR MMRT_DESC_FIELD
#include "mmrt_desc.def"
} MmrtTensorDesc;
typedef struct MmrtPpRank {
#define MMRT_PP_RANK MMRT_DESC_FIELD
#include "mmrt_desc.def"
} MmrtPpRank;
typedef struct MmrtPpAction {
#define MMRT_PP_ACTION MMRT_DESC_FIELD
#include "mmrt_desc.def"
} MmrtPpAction;
typedef struct MmrtPpRoute {
#define MMRT_PP_ROUTE MMRT_DESC_FIELD
#include "mmrt_desc.def"
} MmrtPpRoute;
/* MmrtPpAction.kind */
enum { MMRT_PP_F, MMRT_PP_B, MMRT_PP_I, MMRT_PP_W };

/* The mesh axes that split tensors (support/mesh_axes.def's IR axes, numbered
 * as the IR and MmrtAxis number them): the descriptor's mesh and split masks. */
enum {
#define MESH_AXIS(ID, name, nest, ir) MESH_IF_##ir(MMRT_DESC_AXIS_##ID = MESH_##ID, )
#include "../../support/mesh_axes.def"
  MMRT_DESC_NAXES = MESH_NIR
};

/* A step: runs one function of the model on the arenas. `seed` is the run
 * seed (dropout masks are Philox streams of it); `mesh` the MmrtMesh of a
 * multi-rank run, or NULL. Returns 0, or a negative value when a kernel
 * reported bad data (a label or id out of range; the kernel printed which)
 * or a collective failed (mesh->err says which). */
typedef int (*MmrtStepFn)(char *const *arenas, uint64_t seed, void *mesh);

typedef struct MmrtModelDesc {
#define MMRT_MODEL MMRT_DESC_FIELD
#include "mmrt_desc.def"
} MmrtModelDesc;

/* The sizes of every mesh axis of a model (MESH_NAXES, by MmrtAxis): the IR's
 * axes from mesh, pp from pp (0 or 1: no pipeline). */
static inline void mmrt_desc_mesh(const MmrtModelDesc *m, int size[MESH_NAXES]) {
  _Static_assert(MESH_NAXES == MESH_NIR + 1, "an axis outside the IR: say here where its size is");
  for (int a = 0; a < MESH_NIR; a++) size[a] = (int)m->mesh[a];
  size[MESH_PP] = m->pp > 1 ? (int)m->pp : 1;
}

/* The ranks of the first n axes of a model (MESH_NAXES: all of them; MESH_NIR:
 * those splitting tensors). */
static inline int64_t mmrt_desc_ranks(const MmrtModelDesc *m, int n) {
  int size[MESH_NAXES];
  mmrt_desc_mesh(m, size);
  return mesh_product(size, n);
}
/* The programs (MmrtModelDesc.task), a row each in mmrt_programs.def. */
enum {
#define MMRT_PROGRAM(id, name, who, steps, any_world, main, parse) MMRT_TASK_##id,
#include "mmrt_programs.def"
#undef MMRT_PROGRAM
  MMRT_NTASKS
};

/* MmrtModelDesc.sample_tensors: the sampler's values (mmrt_sample.c) */
enum {
  MMRT_SAMPLE_X,      /* @denoise's inputs: the noisy latents [B, C, T, H, W], */
  MMRT_SAMPLE_T,      /* the step as f32[B], */
  MMRT_SAMPLE_TEXT,   /* the caption ids i32[B, L] */
  MMRT_SAMPLE_PRED,   /* its result, the prediction (v), like X */
  MMRT_SAMPLE_TABLE,  /* @table's result [steps, >= 2]: row t sqrt(abar_t), sqrt(1 - abar_t) */
  MMRT_SAMPLE_DEC_IN, /* @decode's input, like X */
  MMRT_SAMPLE_CLIPS,  /* its result [B, 1, F, H', W'] */
  MMRT_SAMPLE_FRAMES, /* @classify's input [N, 1, H', W'] (with sample_classify_step) */
  MMRT_SAMPLE_LOGITS, /* its result [N, classes] */
  MMRT_SAMPLE_NTENSORS
};

/* MmrtModelDesc.vae_tensors: the video autoencoder's values */
enum {
  MMRT_VAE_LATENTS,   /* @encode's result (the latents of a whole clip) */
  MMRT_VAE_DEC_IN,    /* @decode's input */
  MMRT_VAE_CLIPS,     /* @decode's result (the reconstructed clips) */
  MMRT_VAE_CHUNK0,    /* @encode_first's input (1 + C frames) */
  MMRT_VAE_FIRST_LAT, /* its latents */
  MMRT_VAE_CHUNK,     /* @encode_next's input (C frames) */
  MMRT_VAE_NEXT_LAT,  /* its latents */
  MMRT_VAE_NTENSORS
};

/* MmrtModelDesc.feat_tensors: the frozen encoders' values */
enum {
  MMRT_FEAT_VIDEO,         /* @latents's input (the clips) */
  MMRT_FEAT_LATENTS,       /* its result */
  MMRT_FEAT_TEXT,          /* @text_features's input (the caption ids) */
  MMRT_FEAT_TEXT_FEATURES, /* its result */
  MMRT_FEAT_NTENSORS
};

/* The descriptor of the model, defined by the generated object. */
extern const MmrtModelDesc mm_model;

/* The executable: checks the ABI version, the world and the program's
 * step functions, and hands over by m->task to the program's main
 * (mmrt_entry.c); returns the exit status (0, or 1 with a message on
 * stderr naming the flag or file at fault). main() calls it with &mm_model. */
int mmrt_main(int argc, char **argv, const MmrtModelDesc *m);
/* "<who>: error: <message>" and a newline on stderr; returns 1. */
int mmrt_fail(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Each program's main and its argument parser alone (the parser parses argv
 * as the main does and frees what it kept; 0, 1 after a message on stderr,
 * -1 after --help), from mmrt_programs.def. */
#define MMRT_PROGRAM(id, name, who, steps, any_world, main, parse)                                 \
  int main(int argc, char **argv, const MmrtModelDesc *m);                                         \
  int parse(int argc, char **argv, const MmrtModelDesc *m);
#include "mmrt_programs.def"
#undef MMRT_PROGRAM
/* The eval program of a model of data format conversation (mmrt_conv_eval.c;
 * mmrt_generate_main and _parse hand such a model over). */
int mmrt_conv_eval_main(int argc, char **argv, const MmrtModelDesc *m);
int mmrt_conv_eval_parse(int argc, char **argv, const MmrtModelDesc *m);
/* A program's row of mmrt_programs.def (NULL for a task no row has). */
typedef struct MmrtProgram {
  const char *name, *who, *steps;
  int any_world;
  int (*main)(int argc, char **argv, const MmrtModelDesc *m);
  int (*parse)(int argc, char **argv, const MmrtModelDesc *m);
} MmrtProgram;
const MmrtProgram *mmrt_program(int64_t task);
/* The step function named `name` (a field of mmrt_desc.def, e.g.
 * "prefill_step"): 1 and *fn (NULL when the model has none), or 0 when no
 * field has the name (mmrt_model.c). */
int mmrt_desc_step(const MmrtModelDesc *m, const char *name, MmrtStepFn *fn);
/* The data section's keys as flags (the descriptor's data_flags, a word a
 * line) parsed with a program's flag table into args, before its command
 * line; the words are kept in static storage (the strings args points at).
 * 0, or 1 after a message naming the model. */
struct MmrtFlagSet;
int mmrt_desc_data_flags(const MmrtModelDesc *m, const struct MmrtFlagSet *s, void *args);
/* The descriptor of the input named `name`, or NULL (mmrt_model.c). */
const MmrtTensorDesc *mmrt_desc_input(const MmrtModelDesc *m, const char *name);
/* 1 when a parameter name is a LoRA adapter's (*.lora_a, *.lora_b). */
int mmrt_is_adapter(const char *name);
/* Elements [g, g + n) of a parameter's initial values (its init rule on
 * the Philox stream "init/<name>" under seed) into w (mmrt_model.c). */
void mmrt_init_values(const MmrtTensorDesc *p, uint64_t seed, float *w, uint64_t g, int64_t n);
/* The planned arenas, zeroed and 64-byte aligned, into arenas[MMRT_NARENAS]
 * (NULL for an empty one); MMRT_OK or MMRT_ERR_NOMEM. */
int mmrt_alloc_arenas(const MmrtModelDesc *m, char **arenas, char *err, size_t errlen);
/* Every parameter by name (adapters = 1: the LoRA adapters only; 0: all
 * but adapters missing from the file) from a safetensors file (the
 * trainer's --save-weights), a Hugging Face directory (config.json and its
 * safetensors, mapped by runtime/io/mmrt_hf_map.def) or a checkpoint folder of any plan (each
 * tensor assembled whole from the rank files of the checkpoint its pointer
 * names, mmrt_ckpt_read_slice); *loaded counts them. MMRT_OK, or an error
 * naming the file and the tensor (missing, wrong dtype or shape, corrupt). */
int mmrt_load_params(const MmrtModelDesc *m, char *const *arenas, const char *path, int adapters,
                     int *loaded, char *err, size_t errlen);
/* The parameters from several sources (files or checkpoint folders, at
 * most MMRT_MAX_WEIGHTS): each from the first that holds it; every one must
 * be found. On an error of one source *bad is its index (else -1). */
#define MMRT_MAX_WEIGHTS 8
int mmrt_load_params_any(const MmrtModelDesc *m, char *const *arenas, const char *const *paths,
                         int npaths, int *loaded, int *bad, char *err, size_t errlen);

/* The helpers and vocabulary-parallel kernels step functions call: mmrt_abi.def. */
#define MMRT_ABI_SECTION_MAIN
#include "mmrt_abi.h"

#endif
