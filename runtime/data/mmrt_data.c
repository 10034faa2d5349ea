/* mmrt_data.c: IDX reading through zlib, Fashion-MNIST loading, and the
 * batch iterator.  zlib's gzread passes uncompressed files through, so one
 * reader serves both forms. */
#include "mmrt_data.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mmrt_rng.h"

/* Read up to n bytes; returns bytes read, or -1 on a zlib error (msg set). */
static int64_t gz_read_full(gzFile gz, uint8_t *buf, size_t n, const char **msg) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got > (1u << 20) ? (1u << 20) : n - got;
    int r = gzread(gz, buf + got, (unsigned)want);
    if (r < 0) {
      int errnum;
      *msg = gzerror(gz, &errnum);
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const char *magic_desc(uint32_t magic) {
  if (magic == MMRT_IDX_MAGIC_IMAGES) return "IDX images: unsigned bytes, 3 dims";
  if (magic == MMRT_IDX_MAGIC_LABELS) return "IDX labels: unsigned bytes, 1 dim";
  return "IDX";
}

int mmrt_idx_read(const char *path, uint32_t magic, MmrtIdx *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if ((magic >> 8) != 0x08 || (magic & 0xff) < 1 || (magic & 0xff) > 3)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: unsupported IDX magic 0x%08x requested", path,
                     magic);
  int fd, orc = mmrt_open_read(path, &fd, err, errlen);
  if (orc != MMRT_OK) return orc;
  gzFile gz = gzdopen(fd, "rb"); /* gzclose closes fd */
  if (!gz) {
    close(fd);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: cannot open: out of memory for zlib", path);
  }
  gzbuffer(gz, 1u << 17);

  int rc = MMRT_OK;
  const char *zmsg = NULL;
  uint8_t hdr[16];
  int ndim = (int)(magic & 0xff);
  int64_t got = gz_read_full(gz, hdr, 4, &zmsg);
  if (got < 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: corrupt gzip data: %s", path, zmsg);
    goto done;
  }
  if (got < 4) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: truncated: %" PRId64 " bytes, expected at least a 4-byte IDX magic", path,
                   got);
    goto done;
  }
  uint32_t found = be32(hdr);
  if (found != magic) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: bad magic 0x%08x, expected 0x%08x (%s)", path,
                   found, magic, magic_desc(magic));
    goto done;
  }
  got = gz_read_full(gz, hdr + 4, (size_t)ndim * 4, &zmsg);
  if (got < 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: corrupt gzip data: %s", path, zmsg);
    goto done;
  }
  if (got < ndim * 4) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: truncated header: expected %d dimension sizes (%d bytes) after "
                   "the magic, found %" PRId64 " bytes",
                   path, ndim, 4 * ndim, got);
    goto done;
  }
  size_t size = 1;
  out->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    out->dims[d] = be32(hdr + 4 + 4 * d);
    if (out->dims[d] && size > SIZE_MAX / out->dims[d]) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: dimension sizes overflow", path);
      goto done;
    }
    size *= out->dims[d];
  }
  out->size = size;

  /* Grow as data arrives, so a header promising more than the file holds
   * reports truncation instead of a huge allocation. */
  size_t cap = size < (16u << 20) ? size : (16u << 20), have = 0;
  out->data = malloc(cap ? cap : 1);
  if (!out->data) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for %zu bytes", path, cap);
    goto done;
  }
  while (have < size) {
    if (have == cap) {
      cap = cap > size / 2 ? size : cap * 2;
      uint8_t *p = realloc(out->data, cap);
      if (!p) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for %zu bytes", path, cap);
        goto done;
      }
      out->data = p;
    }
    got = gz_read_full(gz, out->data + have, cap - have, &zmsg);
    if (got < 0) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: corrupt gzip data after %zu of %zu data bytes: %s", path, have, size,
                     zmsg);
      goto done;
    }
    have += (size_t)got;
    if (have < cap) break;
  }
  if (have < size) {
    int errnum = Z_OK;
    const char *why = gzerror(gz, &errnum);
    size_t plen = strlen(path); /* zlib prefixes its message with the path */
    if (strncmp(why, path, plen) == 0 && strncmp(why + plen, ": ", 2) == 0) why += plen + 2;
    char dims[48];
    if (ndim == 3)
      snprintf(dims, sizeof dims, "%u x %u x %u", out->dims[0], out->dims[1], out->dims[2]);
    else if (ndim == 2)
      snprintf(dims, sizeof dims, "%u x %u", out->dims[0], out->dims[1]);
    else
      snprintf(dims, sizeof dims, "%u", out->dims[0]);
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: truncated: header promises %zu data bytes (%s), file holds %zu%s%s", path,
                   size, dims, have, errnum != Z_OK ? ": " : "", errnum != Z_OK ? why : "");
    goto done;
  }
  uint8_t extra;
  got = gz_read_full(gz, &extra, 1, &zmsg);
  if (got != 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   got < 0 ? "%s: corrupt gzip data after the %zu data bytes"
                           : "%s: more data than the header promises (%zu data bytes)",
                   path, size);
    goto done;
  }
done:
  gzclose(gz);
  if (rc != MMRT_OK) mmrt_idx_free(out);
  return rc;
}

void mmrt_idx_free(MmrtIdx *idx) {
  free(idx->data);
  memset(idx, 0, sizeof *idx);
}

/* dir/name.gz if it exists, else dir/name if it exists; NOTFOUND naming
 * both (and the directory, when that is what is missing). */
enum { PATH_LEN = 4200 };

static int resolve(char path[PATH_LEN], const char *dir, const char *name, char *err,
                   size_t errlen) {
  struct stat st;
  char gz[PATH_LEN];
  if (snprintf(gz, sizeof gz, "%s/%s.gz", dir, name) >= PATH_LEN)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: data directory path too long", dir);
  if (stat(gz, &st) == 0) {
    memcpy(path, gz, PATH_LEN);
    return MMRT_OK;
  }
  memcpy(path, gz, PATH_LEN);
  path[strlen(path) - 3] = 0; /* without ".gz" */
  if (stat(path, &st) == 0) return MMRT_OK;
  if (stat(dir, &st) != 0)
    return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND,
                     "%s: Fashion-MNIST directory does not exist (install "
                     "dataset-fashion-mnist, or point the trainer at a directory "
                     "holding %s.gz)",
                     dir, name);
  if (!S_ISDIR(st.st_mode))
    return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "%s: Fashion-MNIST path is not a directory",
                     dir);
  return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND,
                   "%s/%s.gz: no such file (nor uncompressed %s/%s)", dir, name, dir, name);
}

const char *mmrt_fmnist_dir(void) {
  const char *e = getenv("MMRT_FMNIST_DIR");
  return e && *e ? e : MMRT_FMNIST_DEFAULT_DIR;
}

const char *mmrt_fmnist_dir_source(const char *dir) {
  const char *e = getenv("MMRT_FMNIST_DIR");
  return e && dir == e ? "MMRT_FMNIST_DIR" : "--data";
}

int mmrt_fmnist_load(MmrtImages *ds, const char *dir, MmrtSplit split, char *err, size_t errlen) {
  memset(ds, 0, sizeof *ds);
  if (!dir) dir = mmrt_fmnist_dir();
  const char *pre = split == MMRT_SPLIT_TRAIN ? "train" : "t10k";
  char iname[64], lname[64], ipath[PATH_LEN], lpath[PATH_LEN];
  snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", pre);
  snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", pre);
  int rc;
  if ((rc = resolve(ipath, dir, iname, err, errlen)) != MMRT_OK ||
      (rc = resolve(lpath, dir, lname, err, errlen)) != MMRT_OK)
    return rc;

  MmrtIdx im, lb;
  if ((rc = mmrt_idx_read(ipath, MMRT_IDX_MAGIC_IMAGES, &im, err, errlen)) != MMRT_OK) return rc;
  if (im.dims[1] != MMRT_FMNIST_SIDE || im.dims[2] != MMRT_FMNIST_SIDE) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: images are %ux%u, expected %dx%d", ipath,
                   im.dims[1], im.dims[2], MMRT_FMNIST_SIDE, MMRT_FMNIST_SIDE);
    mmrt_idx_free(&im);
    return rc;
  }
  if ((rc = mmrt_idx_read(lpath, MMRT_IDX_MAGIC_LABELS, &lb, err, errlen)) != MMRT_OK) {
    mmrt_idx_free(&im);
    return rc;
  }
  if (lb.dims[0] != im.dims[0]) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: %u labels, expected %u to match the images in %s", lpath, lb.dims[0],
                   im.dims[0], ipath);
    goto fail;
  }
  for (size_t i = 0; i < lb.size; i++)
    if (lb.data[i] >= MMRT_FMNIST_CLASSES) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: label %u at index %zu, expected 0..%d",
                     lpath, lb.data[i], i, MMRT_FMNIST_CLASSES - 1);
      goto fail;
    }
  ds->n = im.dims[0];
  ds->rows = (int)im.dims[1];
  ds->cols = (int)im.dims[2];
  ds->pixels = im.data;
  ds->labels = lb.data;
  return MMRT_OK;
fail:
  mmrt_idx_free(&im);
  mmrt_idx_free(&lb);
  return rc;
}

void mmrt_images_free(MmrtImages *ds) {
  free(ds->pixels);
  free(ds->labels);
  memset(ds, 0, sizeof *ds);
}

const char *mmrt_fmnist_class_name(int label) {
  static const char *const names[MMRT_FMNIST_CLASSES] = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot",
  };
  return label >= 0 && label < MMRT_FMNIST_CLASSES ? names[label] : NULL;
}

float mmrt_fmnist_normalize(uint8_t p) {
  return ((float)p / 255.0f - MMRT_FMNIST_MEAN) / MMRT_FMNIST_STD;
}

void mmrt_fmnist_normalize_image(const uint8_t *px, size_t n, float *out) {
  for (size_t k = 0; k < n; k++) out[k] = mmrt_fmnist_normalize(px[k]);
}

void mmrt_batch_slice(int64_t B, int nranks, int rank, int64_t *lo, int64_t *hi) {
  *lo = B * rank / nranks;
  *hi = B * (rank + 1) / nranks;
}

/* ---- iterator ---- */

static void ensure_order(MmrtBatchIter *it) {
  if (it->order_epoch == it->epoch) return;
  if (it->shuffle)
    mmrt_rng_permutation(it->order, (uint32_t)it->ds->n, it->seed, (uint64_t)it->epoch);
  else
    for (int64_t i = 0; i < it->ds->n; i++) it->order[i] = (uint32_t)i;
  it->order_epoch = it->epoch;
}

int mmrt_iter_init(MmrtBatchIter *it, const MmrtImages *ds, int64_t batch, int shuffle,
                   uint64_t seed, char *err, size_t errlen) {
  memset(it, 0, sizeof *it);
  if (batch <= 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "batch size %" PRId64 ", expected > 0", batch);
  if (ds->n <= 0 || ds->n > UINT32_MAX)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "dataset of %" PRId64 " images, expected "
                     "1..%u",
                     ds->n, UINT32_MAX);
  if (shuffle && batch > ds->n)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "batch size %" PRId64 " exceeds the %" PRId64 " images of the split", batch,
                     ds->n);
  it->order = malloc((size_t)ds->n * sizeof *it->order);
  if (!it->order)
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory for the batch order");
  it->ds = ds;
  it->batch = batch;
  it->shuffle = shuffle != 0;
  it->seed = seed;
  it->order_epoch = -1;
  ensure_order(it);
  return MMRT_OK;
}

void mmrt_iter_free(MmrtBatchIter *it) {
  free(it->order);
  memset(it, 0, sizeof *it);
}

int64_t mmrt_iter_next(MmrtBatchIter *it) {
  int64_t n = it->ds->n;
  if (it->shuffle) {
    if (it->pos + it->batch > n) {
      it->epoch++;
      it->pos = 0;
    }
    it->cur_rows = it->batch;
  } else {
    if (it->pos >= n) {
      it->epoch++;
      it->pos = 0;
      it->cur_start = 0;
      it->cur_rows = 0;
      return 0;
    }
    it->cur_rows = n - it->pos < it->batch ? n - it->pos : it->batch;
  }
  ensure_order(it);
  it->cur_start = it->pos;
  it->pos += it->cur_rows;
  return it->cur_rows;
}

int64_t mmrt_iter_index(const MmrtBatchIter *it, int64_t k) {
  if (k < 0 || k >= it->cur_rows) return -1;
  return it->order[it->cur_start + k];
}

void mmrt_iter_fill(const MmrtBatchIter *it, int64_t lo, int64_t hi, float *x, int32_t *y) {
  const MmrtImages *ds = it->ds;
  size_t hw = (size_t)ds->rows * (size_t)ds->cols;
  float lut[256];
  for (int p = 0; p < 256; p++) lut[p] = mmrt_fmnist_normalize((uint8_t)p);
  for (int64_t r = lo; r < hi; r++) {
    int64_t idx = mmrt_iter_index(it, r);
    float *xr = x ? x + (size_t)(r - lo) * hw : NULL;
    if (idx < 0) {
      if (xr) memset(xr, 0, hw * sizeof *xr);
      if (y) y[r - lo] = -1;
      continue;
    }
    if (xr) {
      const uint8_t *px = ds->pixels + (size_t)idx * hw;
      for (size_t k = 0; k < hw; k++) xr[k] = lut[px[k]];
    }
    if (y) y[r - lo] = ds->labels[idx];
  }
}

int mmrt_iter_state(const MmrtBatchIter *it, char *buf, size_t len) {
  return snprintf(buf, len,
                  "mmrt-iter v1 n=%" PRId64 " batch=%" PRId64 " shuffle=%d seed=%" PRIu64
                  " epoch=%" PRId64 " pos=%" PRId64,
                  it->ds->n, it->batch, it->shuffle, it->seed, it->epoch, it->pos);
}

int mmrt_iter_restore(MmrtBatchIter *it, const char *state, char *err, size_t errlen) {
  int64_t n, batch, epoch, pos;
  int shuffle, used = 0;
  uint64_t seed;
  if (sscanf(state,
             "mmrt-iter v1 n=%" SCNd64 " batch=%" SCNd64 " shuffle=%d seed=%" SCNu64
             " epoch=%" SCNd64 " pos=%" SCNd64 "%n",
             &n, &batch, &shuffle, &seed, &epoch, &pos, &used) != 6 ||
      state[used] != 0)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "data iterator state '%s': expected 'mmrt-iter v1 n=N batch=B "
                     "shuffle=0|1 seed=S epoch=E pos=P'",
                     state);
  if (n != it->ds->n || batch != it->batch || shuffle != it->shuffle || seed != it->seed)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "data iterator state was saved with n=%" PRId64 " batch=%" PRId64
                     " shuffle=%d seed=%" PRIu64 ", this run has n=%" PRId64 " batch=%" PRId64
                     " shuffle=%d seed=%" PRIu64,
                     n, batch, shuffle, seed, it->ds->n, it->batch, it->shuffle, it->seed);
  if (epoch < 0 || pos < 0 || pos > n)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "data iterator state '%s': epoch=%" PRId64 " pos=%" PRId64
                     ", expected epoch >= 0 and 0 <= pos <= %" PRId64,
                     state, epoch, pos, n);
  it->epoch = epoch;
  it->pos = pos;
  it->cur_start = 0;
  it->cur_rows = 0;
  ensure_order(it);
  return MMRT_OK;
}
