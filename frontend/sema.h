/* The frontend's public face: load a .mm file with its imports, resolve
 * names, and elaborate a model into an IR module (the `lower` stage).
 *
 * fe_load parses the root file and every import (search path: the importing
 * file's folder, then the -I folders, then stdlib_models), checks import
 * cycles, duplicate declarations and names inside every module statically.
 * fe_elaborate instantiates one model (or a module with default
 * hyper-parameters): hyper-parameters are evaluated, sub-modules and stacks
 * instantiated, the forward symbolically executed into IR with every shape
 * checked, and the train/parallel sections read into a plan that is checked.
 * All errors go to the Diag, located; nothing here exits. */
#ifndef MM_FRONTEND_SEMA_H
#define MM_FRONTEND_SEMA_H

#include <stdbool.h>

#include "../ir/ir.h"
#include "../support/diag.h"
#include "ast.h"
#include "../ir/settings.h"

typedef struct FeOverride {
  const char *name;  /* a model-level let, e.g. "B" */
  const char *value; /* parsed as int, float or bool */
} FeOverride;

typedef struct FeOptions {
  const char **incdirs;
  int nincdirs;
  const char *stdlib_dir; /* NULL: the built-in default */
  FeOverride *overrides;
  int noverrides;
  MmPlanFlags flags; /* command-line plan overrides */
  /* how many parameters tp would split (passes/shard.c's shard_tp_splits),
   * passed in by the tool: the frontend includes no pass. NULL: a tp that
   * splits nothing is left to the shard pass to refuse */
  int (*tp_splits)(IrModule *m, int tp);
  /* the vocabulary size of a tokenizer.json (the tool reads it with its
   * tokenizer library: the frontend includes no runtime), or -1 with a
   * message in err. NULL: the data section's tokenizer is not checked */
  int64_t (*tok_vocab)(const char *path, char *err, size_t errn);
} FeOptions;

typedef struct FeProgram FeProgram;

/* Returns NULL only when the root file cannot be read; otherwise a program,
 * possibly with errors (check d->errors). */
FeProgram *fe_load(Diag *d, const char *path, const FeOptions *opts);
/* The same for source text in memory (fuzzing, tests); imports resolve
 * against the folder of `name`. */
FeProgram *fe_load_buffer(Diag *d, const char *name, const char *text, size_t len,
                          const FeOptions *opts);
void fe_free(FeProgram *p);

/* Names of the models (and modules) declared in the root file. */
int fe_model_count(const FeProgram *p);
const char *fe_model_name(const FeProgram *p, int i);
bool fe_has_decl(const FeProgram *p, const char *name, bool *is_model);

typedef struct FeResult {
  IrModule *ir;  /* the lowered forward graph, or NULL on error */
  MmPlan plan;   /* the checked parallel plan */
  MmTrain train; /* the train section */
} FeResult;

/* Elaborates `name` (a model, or a module of the root file whose
 * hyper-parameters all have defaults). Returns false on any error. */
bool fe_elaborate(FeProgram *p, const char *name, FeResult *out);

/* Incremental decoding with a KV cache.  FE_PREFILL and FE_DECODE elaborate
 * the model's forward again, into an existing module (reusing its
 * parameters by name), as a function of logits instead of the loss:
 *   - every causal `attention` keeps its keys and values in two inputs
 *     named <scope>.k_cache and <scope>.v_cache, [B, cache_len, KVH, D]:
 *     kv_write stores the new ones at positions pos[b].., and
 *     attention_cached attends to the cache up to each query's position;
 *   - `rope` rotates row b's tokens from position pos[b] (an input
 *     `pos` i32[B]);
 *   - the function returns the logits that went into the model's
 *     cross_entropy; the labels and everything that only fed the loss go.
 * FE_PREFILL takes the whole text (the model's sequence length): images are
 * placed, the caches filled from pos. FE_DECODE takes one token per row:
 * the size naming the text's dim 1 (text: i32[B, T]) is set to 1, `place`
 * leaves the text as it is (a generated token is never an image-context
 * token) and the image branch is dropped; the input is renamed `token`. */
typedef enum FeMode { FE_TRAIN, FE_PREFILL, FE_DECODE, FE_ENCODE, FE_ENCODE_NEXT } FeMode;
bool fe_elaborate_cached(FeProgram *p, const char *name, IrModule *into, const char *func,
                         FeMode mode, int64_t cache_len);

/* A reconstruction model's named forwards as functions of `into` (reusing
 * its parameters by name), for mmc compile (README "Reconstruction"):
 *   FE_TRAIN        forward `fwd` as function `func`, its inputs as
 *                   declared, its result a tensor of any shape (@decode);
 *   FE_ENCODE       the same; every causal_pad(x, n, keep) with keep > 0
 *                   also returns the last keep frames of its padded tensor
 *                   (results 1.. in call order: the caches a next chunk
 *                   starts from) (@encode, @encode_first);
 *   FE_ENCODE_NEXT  the same, but causal_pad puts the cache inputs
 *                   <scope>.cache (inputs 1.., the same order) in front
 *                   instead of copies of the first frame, and require() is
 *                   not checked (a chunk continues a clip) (@encode_next).
 * frames >= 1 sets the size naming dim 2 of the forward's first input (a
 * name: the frames) to that; rename renames that input (NULL: keep). */
bool fe_elaborate_named(FeProgram *p, const char *name, IrModule *into, const char *fwd,
                        const char *func, FeMode mode, int64_t frames, const char *rename);
/* 1 when model `name` of the root file declares a forward named fwd. */
bool fe_has_forward(FeProgram *p, const char *name, const char *fwd);

/* Elaborates every model of the root file (mmc check). */
bool fe_check_all(FeProgram *p);

#endif
