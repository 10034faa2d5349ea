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
 * temporary is removed and an existing <path> is left as it was.  A <path>
 * that exists and is not a regular file (a device, a FIFO, a directory) is
 * refused, not replaced.
 *
 * Checkpoints.  A checkpoint root DIR holds one directory per step and a
 * pointer to the newest complete one (DeepSpeed's `latest`, Megatron's
 * latest_checkpointed_iteration.txt):
 *
 *     DIR/latest                        "step-000105\n"
 *     DIR/step-000105/rank-00000.safetensors ... rank-<world-1>.safetensors
 *     DIR/step-000105/manifest.json     step, world size, fingerprint, files
 *
 * Writing step N: every rank writes its file into the step directory (each
 * file atomic, with a CRC32 of every tensor in its metadata); after a
 * barrier rank 0 writes the manifest and then replaces DIR/latest (tmp,
 * fsync, rename, fsync DIR), the one step that makes the checkpoint
 * visible; after a second barrier, step directories beyond the newest K
 * complete ones are removed.  A crash or a full disk at any point leaves
 * DIR/latest naming the previous checkpoint, whole.  A step directory is
 * never written while the pointer names it: the new checkpoint of the same
 * step goes to "step-000105.1" (and back), see mmrt_ckpt_target().
 * Loading follows the pointer and checks the manifest, each rank file's
 * step, rank, world size and fingerprint, and every tensor's CRC32.
 *
 * Across plans (Megatron's distributed checkpoints): each rank file records
 * for every tensor where its piece sits in the logical tensor (the whole,
 * unpadded one: MmrtSlice, metadata "slice:<name>"), and the fingerprint is
 * of the model, not of the plan (tp, sp, dp, ZeRO, world size).  A run
 * under another plan opens every rank file (mmrt_ckpt_open_all) and
 * assembles each of its pieces from whichever files hold parts of it, by
 * name (mmrt_ckpt_read_slice): a file need not hold every tensor (a
 * pipeline stage's), and replicas are read once.
 *
 * Dtype constants are MMRT_ST_* (mmrt_kernels.h owns MmrtDtype).
 */
#ifndef MMRT_CKPT_H
#define MMRT_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* The order the writers put the tensors' bytes in the file: by element
 * size, larger first, then by index.  Fills order[] with indices into
 * tensors and returns how many it placed (fewer than ntensors when a dtype
 * is not a MMRT_ST_* one). */
int mmrt_st_file_order(const MmrtTensorRef *tensors, int ntensors, int *order);

/* mmrt_st_save with the tensors' bytes made one at a time, in file order:
 * the tensors' data are not read (NULL is fine); fill(ctx, i, &bytes, ...)
 * points bytes at tensor i's mmrt_tensor_bytes() bytes, valid until the
 * next call, or returns an error (the file is then not written). */
typedef int (*MmrtStFill)(void *ctx, int i, const void **bytes, char *err, size_t errlen);
int mmrt_st_save_stream(const char *path, const MmrtTensorRef *tensors, int ntensors,
                        const MmrtKV *meta, int nmeta, MmrtStFill fill, void *ctx, char *err,
                        size_t errlen);

/* mmrt_st_save plus the CRC32 (zlib) of each tensor's bytes in the
 * metadata: key "crc32:<name>", value 8 lowercase hex digits.  mmrt_st_read
 * checks the CRC of every tensor that has one. */
#define MMRT_ST_CRC_PREFIX "crc32:"
int mmrt_st_save_crc(const char *path, const MmrtTensorRef *tensors, int ntensors,
                     const MmrtKV *meta, int nmeta, char *err, size_t errlen);

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
 * t->dtype and shape t->shape[0..t->ndim), and that the bytes match the
 * tensor's CRC32 if the file has one (MMRT_ERR_FORMAT naming the file and
 * the tensor otherwise). */
int mmrt_st_read(MmrtStFile *f, const MmrtTensorRef *t, char *err, size_t errlen);

/* The bytes of tensor i, as stored (any dtype), into buf (its
 * data_offsets span), checking its CRC32 if the file has one. */
int mmrt_st_read_raw(MmrtStFile *f, int i, void *buf, char *err, size_t errlen);

/* Bytes [off, off + n) of tensor i's data as stored, into buf: a rank's rows
 * of a tensor without reading the rest. A tensor with a CRC32 is read whole
 * (into a scratch buffer) and checked first. */
int mmrt_st_read_part(MmrtStFile *f, int i, uint64_t off, size_t n, void *buf, char *err,
                      size_t errlen);

/* mmrt_st_read for each of `n` tensors; with strict, a tensor in the file
 * that is not in the list is also an error. */
int mmrt_st_read_all(MmrtStFile *f, const MmrtTensorRef *t, int n, int strict, char *err,
                     size_t errlen);

/* 1 if every tensor of f has a CRC32 in its metadata; else 0 and the
 * first tensor without one in *missing. */
int mmrt_st_has_crcs(const MmrtStFile *f, const char **missing);

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

#define MMRT_CKPT_POINTER      "latest"
#define MMRT_CKPT_KEEP_DEFAULT 2

/* "<dir>/rank-00003.safetensors"; returns what snprintf returns. */
int mmrt_ckpt_rank_path(char *buf, size_t len, const char *dir, int rank);

/* The step directory that a new checkpoint of `step` under `root` goes to:
 * "<root>/step-000105", or "<root>/step-000105.1" when root/latest names
 * step-000105 (and the other way round), so that the live checkpoint is
 * never written into.  Every rank gets the same answer as long as the
 * pointer does not change (it changes only in mmrt_ckpt_commit, between
 * two barriers). */
int mmrt_ckpt_target(const char *root, int64_t step, char *buf, size_t len, char *err,
                     size_t errlen);

/* The live step directory of root: the one root/latest names, or root
 * itself when it holds a manifest.json (a step directory given directly).
 * MMRT_ERR_NOTFOUND when neither exists (no checkpoint yet); a pointer that
 * is damaged or names a missing directory is MMRT_ERR_FORMAT. */
int mmrt_ckpt_resolve(const char *root, char *buf, size_t len, char *err, size_t errlen);

/* Create dir (a step directory, and parents) if needed and write this
 * rank's file, adding step, rank, world_size, fingerprint and the CRC32 of
 * every tensor to the metadata. */
int mmrt_ckpt_save_rank(const char *dir, int rank, const MmrtManifest *m,
                        const MmrtTensorRef *tensors, int ntensors, const MmrtKV *meta, int nmeta,
                        char *err, size_t errlen);

/* Write dir/manifest.json atomically (dir: a step directory). */
int mmrt_ckpt_write_manifest(const char *dir, const MmrtManifest *m, char *err, size_t errlen);

/* Make the checkpoint in stepdir (a directory of root from
 * mmrt_ckpt_target) the live one: write its manifest, then replace
 * root/latest atomically.  Call on one rank, after every rank's file is
 * written (a barrier in between), and put a barrier after it. */
int mmrt_ckpt_commit(const char *root, const char *stepdir, const MmrtManifest *m, char *err,
                     size_t errlen);

/* Remove the step directories of root other than the live one, the
 * newest keep - 1 complete ones (with a manifest) of a lower step, and the
 * complete ones of a later step (another run's, which this one resumed
 * before: they go once the live step passes them); keep >= 1.  Leftovers
 * of failed writes (no manifest) go too, and the temporary pointer files of
 * killed writers.  Call after mmrt_ckpt_commit. */
int mmrt_ckpt_prune(const char *root, int keep, char *err, size_t errlen);

/* DIR/lock: "<host> <pid>\n" of the process writing checkpoints there. */
#define MMRT_CKPT_LOCK "lock"

/* Take root's lock (root exists): created exclusively; a lock of this host
 * whose process is gone is taken over (*stale = its pid, else 0); a live
 * holder (or another host's) is an error naming it. */
int mmrt_ckpt_lock(const char *root, long *stale, char *err, size_t errlen);
/* Remove root's lock if this process holds it. */
void mmrt_ckpt_unlock(const char *root);
/* 1 with the first entry's name when root holds something besides its lock,
 * temporary pointer files and step directories without a manifest (writes
 * cut off by a kill); 0: nothing of value, or root is absent. */
int mmrt_ckpt_leftover(const char *root, char *name, size_t len);

/* ---- output paths ---- */

enum {
  MMRT_OUT_FILE,   /* a file written whole (through a temporary, renamed over it) */
  MMRT_OUT_DIR,    /* a directory files go into (created with its parents if missing) */
  MMRT_OUT_STREAM, /* a file written as a stream (a log, text): an existing FIFO or terminal will do
                    */
};
/* Checks before a program's work that `path` (the value of flag, named in
 * every message) can be written: a FILE's directory exists and takes a new
 * file (a temporary is created there and removed), the path itself is
 * absent or a regular file (not a directory, device, FIFO); a DIR is
 * created if missing and must take a new file; neither may be one of the
 * `inputs` (same device and inode; NULL entries are skipped).  MMRT_OK, or
 * an error naming the flag, the path and what is wrong. */
int mmrt_probe_output(const char *flag, const char *path, int kind, const char *const *inputs,
                      int ninputs, char *err, size_t errlen);
/* A file written as a stream but made visible whole: the bytes go to
 * "<path>.tmp.<pid>" (a path that exists and is not a regular file is
 * refused); mmrt_out_finish closes it and, with ok, renames it over path
 * (else, or on a write error, removes it). */
typedef struct MmrtOut {
  FILE *f;
  const char *path;
  char tmp[4200];
} MmrtOut;
int mmrt_out_begin(MmrtOut *o, const char *path, char *err, size_t errlen);
int mmrt_out_finish(MmrtOut *o, int ok, char *err, size_t errlen);
/* "a directory", "a character device", "a FIFO", ... of a stat mode. */

/* Remove stepdir unless root/latest names it (the leftovers of a failed
 * write). */
int mmrt_ckpt_discard(const char *root, const char *stepdir, char *err, size_t errlen);

/* Read dir/manifest.json (dir: a step directory).  MMRT_ERR_NOTFOUND when
 * there is none; any other failure is a damaged checkpoint. */
int mmrt_ckpt_read_manifest(const char *dir, MmrtManifest *m, char *err, size_t errlen);

/* Resolve root (mmrt_ckpt_resolve), read the manifest, check its world
 * size and fingerprint against `expect` (expect->step is ignored), open
 * this rank's file and check that its step, rank, world size and
 * fingerprint agree with the manifest and that every tensor has a CRC32
 * (checked as it is read).  MMRT_ERR_NOTFOUND only when root has no
 * checkpoint at all.  On success *found holds the manifest. */
int mmrt_ckpt_open_rank(MmrtStFile **out, const char *root, int rank, const MmrtManifest *expect,
                        MmrtManifest *found, char *err, size_t errlen);

/* ---- pieces of logical tensors (resuming under another plan) ---- */

/* Where a piece sits in its logical tensor: per dim the tensor's global
 * size, the piece's first element and its length.  A length of 0 in some
 * dim: the piece holds none of the tensor (a rank holding vocabulary
 * padding alone, which stores one zero row). */
typedef struct MmrtSlice {
  int ndim;
  int64_t global[MMRT_ST_MAX_DIMS], first[MMRT_ST_MAX_DIMS], len[MMRT_ST_MAX_DIMS];
} MmrtSlice;

/* Metadata key "slice:<name>", value "global=[4,64] first=[2,0] len=[2,64]"
 * (a scalar: "global=[] first=[] len=[]").  A tensor without one is whole. */
#define MMRT_CKPT_SLICE_PREFIX "slice:"
/* The value for s; returns what snprintf returns. */
int mmrt_slice_format(char *buf, size_t len, const MmrtSlice *s);
/* The slice of tensor i of f: its metadata, or the whole tensor; checks the
 * piece's stored shape against it (MMRT_ERR_FORMAT naming the file). */
int mmrt_st_slice(const MmrtStFile *f, int i, MmrtSlice *out, char *err, size_t errlen);

typedef struct MmrtCkpt MmrtCkpt;

/* Every rank file of the live checkpoint of root, whatever plan wrote it:
 * resolve root, read the manifest, compare its fingerprint with
 * `fingerprint` (NULL: not compared; world size and step are not compared
 * either), open every rank file it names and check its step, rank, world
 * size and fingerprint against the manifest and that every tensor has a
 * CRC32.  MMRT_ERR_NOTFOUND only when root has no checkpoint at all; a
 * different model is MMRT_ERR_MISMATCH naming manifest.json and both
 * fingerprints.  On success *found (if not NULL) holds the manifest. */
int mmrt_ckpt_open_all(MmrtCkpt **out, const char *root, const char *fingerprint,
                       MmrtManifest *found, char *err, size_t errlen);
void mmrt_ckpt_close(MmrtCkpt *c);
int mmrt_ckpt_nfiles(const MmrtCkpt *c);
MmrtStFile *mmrt_ckpt_file(const MmrtCkpt *c, int rank);
/* The step directory opened. */
const char *mmrt_ckpt_dir(const MmrtCkpt *c);

/* Fill t->data, laid out as t->shape (= want->len), with the elements of the
 * logical tensor t->name that `want` selects, from the pieces the rank
 * files hold: the file of rank `first` first (under the same plan, this
 * rank's own piece: one read), then the others in rank order, each piece
 * read (and its CRC32 checked) only if it holds elements not yet filled.
 * Every piece's dtype and global shape must be t->dtype and want->global,
 * and every wanted element must be in some piece: otherwise
 * MMRT_ERR_MISMATCH naming the file (or the directory) and the tensor;
 * MMRT_ERR_NOTFOUND when no file has the tensor. */
int mmrt_ckpt_read_slice(MmrtCkpt *c, const MmrtTensorRef *t, const MmrtSlice *want, int first,
                         char *err, size_t errlen);

#endif
