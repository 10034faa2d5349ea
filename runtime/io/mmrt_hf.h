/* mmrt_hf.h: Hugging Face model directories, read by header.
 *
 * A directory holds config.json and either model.safetensors or shards
 * (model-00001-of-00003.safetensors, ...) listed by
 * model.safetensors.index.json ({"weight_map": {tensor: file}}).  Opening
 * one reads config.json, finds its `architectures` entry in the mapping
 * (mmrt_hf_map.def), checks every config key against it (a key that changes
 * the math and that mmc does not support, or a key it does not know, is
 * refused by name), resolves the stdlib hyper-parameters, and opens every
 * shard with mmrt_st_open (so every header is validated: offsets that lie,
 * overlap or exceed a truncated file are errors naming the file and the
 * tensor); the index must name exactly the tensors its shards hold.
 * Tensors are F32, BF16 or F16; data is read one tensor at a time, converted
 * to float32, when loading (mmrt_hf_read).
 *
 * Mapping (mmrt_hf_match): every parameter of the model under `prefix`
 * (the sub-model the checkpoint loads into) gets its source tensor and
 * transform, and every tensor of the directory must be used (a rule's
 * source, a tie or a declared buffer); a missing or extra tensor, or a
 * shape that does not fit, is an error naming the tensor, both shapes and
 * the parameter. */
#ifndef MMRT_HF_H
#define MMRT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_ckpt.h"

typedef struct MmrtHf MmrtHf;

/* 1 if path is a directory holding config.json. */
int mmrt_hf_is_dir(const char *path);

int mmrt_hf_open(MmrtHf **out, const char *dir, char *err, size_t errlen);
void mmrt_hf_close(MmrtHf *h);

const char *mmrt_hf_dir(const MmrtHf *h);
const char *mmrt_hf_arch(const MmrtHf *h);     /* "Qwen2ForCausalLM" */
const char *mmrt_hf_stdlib(const MmrtHf *h);   /* "llm.mm" */
const char *mmrt_hf_module(const MmrtHf *h);   /* "LLM" */
const char *mmrt_hf_instance(const MmrtHf *h); /* "llm": the imported model's sub-model */
const char *mmrt_hf_model(const MmrtHf *h);    /* "HfQwen2": the imported model's name */

/* The module's hyper-parameters from config.json, as .mm literals. */
int mmrt_hf_nhparams(const MmrtHf *h);
const char *mmrt_hf_hparam(const MmrtHf *h, int i, const char **value);
/* A composed architecture's parts (LLaVA: the vision tower and the LLM):
 * part k (1 .. nparts) is the stdlib module `module` of file `stdlib`,
 * declared as instance (the return value) with part k's hyper-parameters;
 * part 0 is the family's own module (mmrt_hf_nhparams). */
int mmrt_hf_nparts(const MmrtHf *h);
const char *mmrt_hf_part(const MmrtHf *h, int k, const char **stdlib, const char **module);
int mmrt_hf_part_nhparams(const MmrtHf *h, int k);
const char *mmrt_hf_part_hparam(const MmrtHf *h, int k, int i, const char **value);
/* An int-valued config entry (e.g. max positions); 0 if absent. */
int mmrt_hf_config_int(const MmrtHf *h, const char *key, int64_t *out);
/* The id of `token` in the directory's added_tokens.json (InternVL2's <IMG_CONTEXT>);
 * an error naming the file when it or the token is absent. */
int mmrt_hf_added_token(const MmrtHf *h, const char *token, int64_t *out, char *err, size_t errlen);

/* The tensors of every shard, in index order. */
int mmrt_hf_ntensors(const MmrtHf *h);
const char *mmrt_hf_tensor(const MmrtHf *h, int i, MmrtStDtype *dtype, int *ndim,
                           const int64_t **shape);
/* The shard holding tensor i (its path). */
const char *mmrt_hf_tensor_file(const MmrtHf *h, int i);

/* A parameter of the model, by its logical (whole, unpadded) shape. */
typedef struct MmrtHfParam {
  const char *name;
  int ndim;
  int64_t shape[MMRT_ST_MAX_DIMS];
} MmrtHfParam;

/* Where a parameter comes from. tensor: the directory's tensor, -1 none
 * (the parameter is outside prefix); row0: its first row in the tensor
 * (after the transpose: a part of a fused tensor); transpose: 1 for a 2-D
 * tensor stored [in, out]. */
typedef struct MmrtHfSrc {
  int tensor;
  int64_t row0;
  int transpose;
} MmrtHfSrc;

/* Match the n parameters against the directory: those whose name starts
 * with prefix + "." (prefix NULL or "": every parameter) get a source; the
 * rest get tensor = -1.  Errors as described above. */
int mmrt_hf_match(MmrtHf *h, const char *prefix, const MmrtHfParam *p, int n, MmrtHfSrc *src,
                  char *err, size_t errlen);

/* Parameter p's elements that `want` selects (want->global = p->shape),
 * laid out as want->len, as float32. A part of a parameter (a tp or ZeRO
 * slice) stored in the parameter's own layout reads only its own elements,
 * each stretch of adjacent ones in one read (rows split: one read; columns
 * split: one a row); a whole parameter, or one stored transposed, reads its
 * source tensor whole (one at a time: the last one is kept for the next
 * parts of a fused tensor), converted, transposed and cut. */
int mmrt_hf_read(MmrtHf *h, const MmrtHfParam *p, const MmrtHfSrc *s, const MmrtSlice *want,
                 float *dst, char *err, size_t errlen);

/* The tied tensors the directory has (e.g. lm_head.weight of a tied head)
 * must equal the tensor they are tied to, element for element: mmc keeps
 * one.  Reads both. */
int mmrt_hf_check_ties(MmrtHf *h, char *err, size_t errlen);

/* Export (--save-hf): the n parameters' whole values (get(ctx, j, &data):
 * p[j] as float32, valid until the next call; called once per part of each
 * tensor, tensor by tensor, so one parameter is held at a time) written
 * back as h's tensors, same names, shapes and set (the inverse of
 * each rule: transposed back, fused parts concatenated, a tied tensor the
 * file had written again, a buffer copied from h), float32 or (bf16) bf16
 * rounded to nearest even, in files of at most shard_bytes each (a larger
 * tensor alone): out/model.safetensors, or out/model-0000k-of-0000n.safetensors
 * and model.safetensors.index.json; each file atomic, the index last; h's
 * config.json and its tokenizer and generation files copied.  The folder is
 * created if needed; the weight files of an earlier export are removed.
 * Each file is written from one buffer the size of the largest tensor.
 * out NULL: nothing written, the same get calls in the same order (the
 * ranks that gather with the writing one); after an error the remaining
 * calls are still made. */
typedef int (*MmrtHfGet)(void *ctx, int j, const float **data, char *err, size_t errlen);
int mmrt_hf_export(MmrtHf *h, const char *prefix, const MmrtHfParam *p, int n, MmrtHfGet get,
                   void *ctx, const char *out, int bf16, int64_t shard_bytes, char *err,
                   size_t errlen);

/* bf16 / fp16 bits to float32. */
float mmrt_hf_bf16(uint16_t b);
float mmrt_hf_f16(uint16_t b);

#endif
