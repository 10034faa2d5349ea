/* mmrt_ckpt.h: safetensors files and checkpoint directories.
 *
 * safetensors: 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the data area; offsets are
 * relative to the data area, which the tensors cover exactly (no holes, no
 * overlap).  Written files sort tensors by element size, largest first, so
 * every tensor is aligned to its element size.  Assumes a little-endian host.
 *
 * Every write is atomic: the bytes go to "<path>.tmp.<pid>", are fsynced,
 * renamed over <path>, and the directory is fsynced; on any failure the
 * temporary is removed and an existing <path> is left as it was.
 *
 * A checkpoint directory holds one file per rank, rank-00000.safetensors,
 * ..., and manifest.json, written last, naming the files, the world size,
 * the step and a model fingerprint.  Rank files carry the same step,
 * world size and fingerprint in their metadata, so a directory left half
 * overwritten by a crash is detected on load instead of mixing steps.
 *
 * Dtype constants are MMRT_ST_* (mmrt_kernels.h owns MmrtDtype).
 */
#ifndef MMRT_CKPT_H
#define MMRT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_log.h"

typedef enum MmrtStDtype {
  MMRT_ST_F32,
  MMRT_ST_BF16,
  MMRT_ST_F16,
  MMRT_ST_I32,
  MMRT_ST_I64,
  MMRT_ST_U8,
  MMRT_ST_NDTYPES
} MmrtStDtype;

#define MMRT_ST_MAX_DIMS 8

/* "F32", "BF16", ...; element size in bytes. */
const char *mmrt_st_dtype_name(MmrtStDtype dt);
size_t mmrt_st_dtype_size(MmrtStDtype dt);

/* A named tensor: saved from `data`, or loaded into it. */
typedef struct MmrtTensorRef {
  const char *name;
  MmrtStDtype dtype;
  int ndim;
  int64_t shape[MMRT_ST_MAX_DIMS];
  void *data;
} MmrtTensorRef;

typedef struct MmrtKV {
  const char *key;
  const char *value;
} MmrtKV;

/* Bytes of a tensor (product of shape times element size). */
size_t mmrt_tensor_bytes(const MmrtTensorRef *t);

/* Write a safetensors file atomically.  Names must be unique, non-empty
 * and not "__metadata__". */
int mmrt_st_save(const char *path, const MmrtTensorRef *tensors, int ntensors, const MmrtKV *meta,
                 int nmeta, char *err, size_t errlen);

/* Write `len` bytes to path atomically (tmp, fsync, rename, fsync dir). */
int mmrt_write_file_atomic(const char *path, const void *data, size_t len, char *err,
                           size_t errlen);

/* ---- reading ---- */

typedef struct MmrtStFile MmrtStFile;

/* Open and validate the whole header; tensor data is read on demand. */
int mmrt_st_open(MmrtStFile **out, const char *path, char *err, size_t errlen);
void mmrt_st_close(MmrtStFile *f);

const char *mmrt_st_path(const MmrtStFile *f);
/* Tensors in data-area order: 0 .. count-1. */
int mmrt_st_count(const MmrtStFile *f);
const char *mmrt_st_name(const MmrtStFile *f, int i);
/* Index of a tensor by name, -1 if absent. */
int mmrt_st_find(const MmrtStFile *f, const char *name);
/* dtype, rank and shape (shape points into f) of tensor i. */
void mmrt_st_info(const MmrtStFile *f, int i, MmrtStDtype *dtype, int *ndim, const int64_t **shape);

/* Copy tensor t->name into t->data after checking it exists with dtype
 * t->dtype and shape t->shape[0..t->ndim). */
int mmrt_st_read(MmrtStFile *f, const MmrtTensorRef *t, char *err, size_t errlen);

/* mmrt_st_read for each of `n` tensors; with strict, a tensor in the file
 * that is not in the list is also an error. */
int mmrt_st_read_all(MmrtStFile *f, const MmrtTensorRef *t, int n, int strict, char *err,
                     size_t errlen);

/* Metadata value for key, NULL if absent; all pairs by index. */
const char *mmrt_st_meta(const MmrtStFile *f, const char *key);
int mmrt_st_meta_count(const MmrtStFile *f);
MmrtKV mmrt_st_meta_at(const MmrtStFile *f, int i);
/* Metadata value parsed as a decimal int64 (NOTFOUND / FORMAT otherwise). */
int mmrt_st_meta_int64(const MmrtStFile *f, const char *key, int64_t *out, char *err,
                       size_t errlen);

/* ---- checkpoint directories ---- */

/* Metadata keys the trainer stores in each rank file. */
#define MMRT_CKPT_STEP        "step"        /* written by mmrt_ckpt_save_rank */
#define MMRT_CKPT_RANK        "rank"        /* " */
#define MMRT_CKPT_WORLD       "world_size"  /* " */
#define MMRT_CKPT_FINGERPRINT "fingerprint" /* " */
#define MMRT_CKPT_SEED        "rng_seed"    /* the run's Philox seed */
#define MMRT_CKPT_DATA_ITER   "data_iter"   /* mmrt_iter_state() */
#define MMRT_CKPT_OPT_STEP    "opt_step"    /* optimizer step count */

typedef struct MmrtManifest {
  int world_size;
  int64_t step;
  char fingerprint[256]; /* e.g. a hash of the model and parallel plan */
} MmrtManifest;

/* "<dir>/rank-00003.safetensors"; returns what snprintf returns. */
int mmrt_ckpt_rank_path(char *buf, size_t len, const char *dir, int rank);

/* Create dir (and parents) if needed and write this rank's file, adding
 * step, rank, world_size and fingerprint from m to the metadata. */
int mmrt_ckpt_save_rank(const char *dir, int rank, const MmrtManifest *m,
                        const MmrtTensorRef *tensors, int ntensors, const MmrtKV *meta, int nmeta,
                        char *err, size_t errlen);

/* Write dir/manifest.json atomically.  Call once, on one rank, after every
 * rank's file is written (a barrier in between). */
int mmrt_ckpt_write_manifest(const char *dir, const MmrtManifest *m, char *err, size_t errlen);

/* Read dir/manifest.json.  MMRT_ERR_NOTFOUND when there is none (a fresh
 * run); any other failure is a damaged checkpoint. */
int mmrt_ckpt_read_manifest(const char *dir, MmrtManifest *m, char *err, size_t errlen);

/* Read the manifest, check its world size and fingerprint against
 * `expect` (expect->step is ignored), open this rank's file and check that
 * its step, rank, world size and fingerprint agree with the manifest.  On
 * success *found holds the manifest. */
int mmrt_ckpt_open_rank(MmrtStFile **out, const char *dir, int rank, const MmrtManifest *expect,
                        MmrtManifest *found, char *err, size_t errlen);

#endif
