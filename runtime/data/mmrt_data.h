/* mmrt_data.h: IDX files (Fashion-MNIST) and the batch iterator.
 *
 * Files are Debian's dataset-fashion-mnist: gzip IDX under
 * /usr/share/datasets/fashion-mnist; an uncompressed file of the same name
 * without ".gz" is used when the .gz is absent.  Everything is validated
 * (magic, dims, counts, truncation, label range) and every failure names
 * the file and says what was expected and what was found.
 *
 * The iterator hands out global batches; each data-parallel rank fills only
 * its rows [lo, hi) of the batch (mmrt_batch_slice), so all ranks see the
 * same global order.  Its state is a short string saved in checkpoints.
 */
#ifndef MMRT_DATA_H
#define MMRT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_log.h"

#define MMRT_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define MMRT_FMNIST_MEAN        0.2860f
#define MMRT_FMNIST_STD         0.3530f
#define MMRT_FMNIST_CLASSES     10
#define MMRT_FMNIST_SIDE        28

/* The split sizes of Debian's files.  A trainer holds both splits (pixels
 * and labels) and one visiting order (uint32) per split's iterator: the
 * data `mmc plan` counts beside the arenas (the loader itself takes any
 * count the files agree on). */
#define MMRT_FMNIST_TRAIN_N 60000
#define MMRT_FMNIST_TEST_N  10000
#define MMRT_FMNIST_RESIDENT_BYTES                                                                 \
  ((int64_t)(MMRT_FMNIST_TRAIN_N + MMRT_FMNIST_TEST_N) *                                           \
   (MMRT_FMNIST_SIDE * MMRT_FMNIST_SIDE + 1 + (int64_t)sizeof(uint32_t)))

#define MMRT_IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dims */
#define MMRT_IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dim */

/* One IDX file of unsigned bytes. */
typedef struct MmrtIdx {
  int ndim;
  uint32_t dims[3];
  uint8_t *data; /* (dims[0], ..., dims[ndim-1]) */
  size_t size;   /* product of dims */
} MmrtIdx;

/* Read `path` (gzip or raw; zlib reads both), requiring `magic`
 * (MMRT_IDX_MAGIC_IMAGES or _LABELS).  Fails on a short file, and on
 * bytes beyond what the header promises. */
int mmrt_idx_read(const char *path, uint32_t magic, MmrtIdx *out, char *err, size_t errlen);
void mmrt_idx_free(MmrtIdx *idx);

typedef enum MmrtSplit { MMRT_SPLIT_TRAIN, MMRT_SPLIT_TEST } MmrtSplit;

/* A labelled image split held as bytes. */
typedef struct MmrtImages {
  int64_t n;       /* images */
  int rows, cols;  /* 28, 28 */
  uint8_t *pixels; /* (n, rows, cols) */
  uint8_t *labels; /* (n), each in [0, 10) */
} MmrtImages;

/* The Fashion-MNIST directory a program reads when not given one: the
 * environment's MMRT_FMNIST_DIR when set and not empty (an uncompressed copy
 * starts a trainer about 0.3 s sooner: inflating Debian's 30 MB of gzip is
 * most of a small trainer's start), else MMRT_FMNIST_DEFAULT_DIR. */
const char *mmrt_fmnist_dir(void);

/* What named dir, for an error: "MMRT_FMNIST_DIR" when it is the string
 * mmrt_fmnist_dir() took from the environment, else "--data". */
const char *mmrt_fmnist_dir_source(const char *dir);

/* Load train (60000) or test (10000) from dir (NULL: mmrt_fmnist_dir()). */
int mmrt_fmnist_load(MmrtImages *ds, const char *dir, MmrtSplit split, char *err, size_t errlen);
void mmrt_images_free(MmrtImages *ds);

/* "T-shirt/top", "Trouser", ..., "Ankle boot"; NULL outside [0, 10). */
const char *mmrt_fmnist_class_name(int label);

/* Normalised pixel value (p / 255 - mean) / std. */
float mmrt_fmnist_normalize(uint8_t p);

/* n pixels (e.g. one 28x28 image from mmrt_png_read_gray) normalised as
 * above into out: exactly the floats mmrt_iter_fill gives that image. */
void mmrt_fmnist_normalize_image(const uint8_t *px, size_t n, float *out);

/* Rows [lo, hi) of rank `rank` out of `nranks` for a global batch of B:
 * contiguous, sizes differing by at most one. */
void mmrt_batch_slice(int64_t B, int nranks, int rank, int64_t *lo, int64_t *hi);

/* ---- batch iterator ----
 * shuffle = 1 (training): each epoch visits the images in the order of
 *   mmrt_rng_permutation(seed, epoch); every batch has exactly B rows and a
 *   tail shorter than B is skipped; it runs forever.
 * shuffle = 0 (evaluation): images in file order; the last batch may be
 *   short; after it mmrt_iter_next returns 0 once (end of the pass) and the
 *   next call starts the pass again. */
typedef struct MmrtBatchIter {
  const MmrtImages *ds;
  int64_t batch; /* B */
  int shuffle;
  uint64_t seed;
  int64_t epoch;     /* current epoch */
  int64_t pos;       /* position in the epoch order after the current batch */
  int64_t cur_start; /* current batch: order[cur_start .. cur_start + cur_rows) */
  int64_t cur_rows;
  uint32_t *order; /* (n) visiting order of `order_epoch` */
  int64_t order_epoch;
} MmrtBatchIter;

int mmrt_iter_init(MmrtBatchIter *it, const MmrtImages *ds, int64_t batch, int shuffle,
                   uint64_t seed, char *err, size_t errlen);
void mmrt_iter_free(MmrtBatchIter *it);

/* Advance to the next global batch; returns its row count (0 only at the
 * end of an evaluation pass). */
int64_t mmrt_iter_next(MmrtBatchIter *it);

/* Dataset index of row k of the current batch. */
int64_t mmrt_iter_index(const MmrtBatchIter *it, int64_t k);

/* Rows [lo, hi) of the current batch, normalised:
 *   x (hi - lo, 1, rows, cols), y (hi - lo).
 * Rows at or past the batch's row count are zero images with label -1.
 * Either pointer may be NULL. */
void mmrt_iter_fill(const MmrtBatchIter *it, int64_t lo, int64_t hi, float *x, int32_t *y);

/* Serialise/restore the position, e.g.
 * "mmrt-iter v1 n=60000 batch=64 shuffle=1 seed=42 epoch=3 pos=1280".
 * After restore, mmrt_iter_next returns the batch that followed the one
 * current when the state was taken.  Restore checks that n, batch, shuffle
 * and seed match the iterator it is applied to. */
int mmrt_iter_state(const MmrtBatchIter *it, char *buf, size_t len);
int mmrt_iter_restore(MmrtBatchIter *it, const char *state, char *err, size_t errlen);

#endif
