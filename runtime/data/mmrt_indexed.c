/* mmrt_indexed.c: Megatron's indexed dataset (.bin/.idx), read through mmap
 * with every offset checked up front, and written atomically (temporary
 * files renamed into place). Layout: mmrt_indexed.h. Assumes a
 * little-endian host (x86-64, aarch64), as the format does. */
#include "mmrt_indexed.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t idx_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { HEADER_BYTES = 9 + 8 + 1 + 8 + 8 };

static bool fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

const char *mmrt_idx_dtype_name(int code) {
  static const char *const names[] = {NULL,    "uint8",   "int8",    "int16", "int32",
                                      "int64", "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? names[code] : NULL;
}

size_t mmrt_idx_dtype_size(int code) {
  static const size_t sizes[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
  return code >= 1 && code <= 8 ? sizes[code] : 0;
}

bool mmrt_idx_dtype_is_int(int code) {
  return code >= 1 && code <= 8 && code != MMRT_IDX_F32 && code != MMRT_IDX_F64;
}

MmrtIdxDtype mmrt_idx_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? MMRT_IDX_U16 : MMRT_IDX_I32;
}

static uint64_t rd_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* ---- reader ---- */

static bool map_file(const char *path, const uint8_t **data, size_t *size, char *err,
                     size_t errlen) {
  /* O_NONBLOCK: a FIFO in a dataset's place is refused, not waited on */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return fail(err, errlen, "%s: not a regular file", path);
  }
  *size = (size_t)st.st_size;
  *data = NULL;
  if (*size) {
    void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return fail(err, errlen, "%s: cannot map: %s", path, strerror(errno));
    }
    *data = m;
  }
  close(fd);
  return true;
}

int32_t mmrt_indexed_length(const MmrtIndexed *d, uint64_t i) {
  int32_t v;
  memcpy(&v, d->lengths_at + 4 * i, 4);
  return v;
}

int64_t mmrt_indexed_pointer(const MmrtIndexed *d, uint64_t i) {
  int64_t v;
  memcpy(&v, d->pointers_at + 8 * i, 8);
  return v;
}

int64_t mmrt_indexed_docidx(const MmrtIndexed *d, uint64_t j) {
  int64_t v;
  memcpy(&v, d->docs_at + 8 * j, 8);
  return v;
}

int8_t mmrt_indexed_mode(const MmrtIndexed *d, uint64_t i) {
  return d->modes_at ? (int8_t)d->modes_at[i] : 0;
}

static const uint8_t *elem_at(const MmrtIndexed *d, uint64_t i, uint64_t k) {
  return d->bin + mmrt_indexed_pointer(d, i) + k * d->elem;
}

int64_t mmrt_indexed_token(const MmrtIndexed *d, uint64_t i, uint64_t k) {
  const uint8_t *p = elem_at(d, i, k);
  switch (d->dtype) {
    case MMRT_IDX_U8: return *p;
    case MMRT_IDX_I8: return (int8_t)*p;
    case MMRT_IDX_I16: {
      int16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    case MMRT_IDX_U16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    case MMRT_IDX_I32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case MMRT_IDX_I64: {
      int64_t v;
      memcpy(&v, p, 8);
      return v;
    }
    default: { /* a float dtype: truncated, saturated (NaN is 0) */
      double v = mmrt_indexed_value(d, i, k);
      if (!(v == v)) return 0;
      if (v >= 9223372036854775807.0) return INT64_MAX;
      if (v <= -9223372036854775808.0) return INT64_MIN;
      return (int64_t)v;
    }
  }
}

double mmrt_indexed_value(const MmrtIndexed *d, uint64_t i, uint64_t k) {
  const uint8_t *p = elem_at(d, i, k);
  if (d->dtype == MMRT_IDX_F32) {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  if (d->dtype == MMRT_IDX_F64) {
    double v;
    memcpy(&v, p, 8);
    return v;
  }
  return (double)mmrt_indexed_token(d, i, k);
}

void mmrt_indexed_close(MmrtIndexed *d) {
  if (d->idx) munmap((void *)d->idx, d->idx_size);
  if (d->bin) munmap((void *)d->bin, d->bin_size);
  free(d->idx_path);
  free(d->bin_path);
  memset(d, 0, sizeof *d);
}

static char *path_with(const char *prefix, const char *ext) {
  size_t n = strlen(prefix);
  char *p = malloc(n + strlen(ext) + 1);
  if (p) {
    memcpy(p, prefix, n);
    strcpy(p + n, ext);
  }
  return p;
}

/* Header and sizes; the arrays' places in the .idx. */
static bool check_idx(MmrtIndexed *d, int multimodal, char *err, size_t errlen) {
  const char *ip = d->idx_path;
  if (d->idx_size < HEADER_BYTES)
    return fail(err, errlen, "%s: %zu bytes, shorter than the %d-byte header (truncated?)", ip,
                d->idx_size, HEADER_BYTES);
  if (memcmp(d->idx, idx_magic, 9) != 0)
    return fail(err, errlen, "%s: not a Megatron index: it does not start with \"MMIDIDX\\0\\0\"",
                ip);
  uint64_t version = rd_u64(d->idx + 9);
  if (version != 1) return fail(err, errlen, "%s: version %" PRIu64 ", expected 1", ip, version);
  int code = d->idx[17];
  if (!mmrt_idx_dtype_name(code))
    return fail(err, errlen,
                "%s: dtype code %d, expected 1-8 (uint8 int8 int16 int32 int64 float64 float32 "
                "uint16)",
                ip, code);
  d->dtype = (MmrtIdxDtype)code;
  d->elem = mmrt_idx_dtype_size(code);
  d->nseq = rd_u64(d->idx + 18);
  d->ndocidx = rd_u64(d->idx + 26);
  /* base = header + 12 S + 8 D; S and D are each bounded by the file size
   * first, so nothing below overflows */
  uint64_t S = d->nseq, D = d->ndocidx, size = d->idx_size;
  if (S > size / 12 || D > size / 8)
    return fail(err, errlen,
                "%s: %" PRIu64 " sequences and %" PRIu64
                " document indices cannot fit in its %zu bytes (truncated, or not an index)",
                ip, S, D, d->idx_size);
  uint64_t base = HEADER_BYTES + 12 * S + 8 * D;
  bool modes;
  if (multimodal == 0 || multimodal == 1) {
    modes = multimodal == 1;
    if (size != base + (modes ? S : 0))
      return fail(err, errlen,
                  "%s: %zu bytes; %" PRIu64 " sequences and %" PRIu64
                  " document indices%s need %" PRIu64 " (truncated or corrupt)",
                  ip, d->idx_size, S, D, modes ? " with modes" : "", base + (modes ? S : 0));
  } else {
    if (size != base && size != base + S)
      return fail(err, errlen,
                  "%s: %zu bytes; %" PRIu64 " sequences and %" PRIu64
                  " document indices need %" PRIu64 " (or %" PRIu64
                  " with modes) (truncated or corrupt)",
                  ip, d->idx_size, S, D, base, base + S);
    modes = size == base + S && S > 0;
  }
  d->multimodal = modes;
  d->lengths_at = d->idx + HEADER_BYTES;
  d->pointers_at = d->lengths_at + 4 * S;
  d->docs_at = d->pointers_at + 8 * S;
  d->modes_at = modes ? d->docs_at + 8 * D : NULL;
  return true;
}

/* Every sequence inside the .bin, back to back, and the .bin exactly covered;
 * the document indices from 0 up to S, never decreasing. */
static bool check_contents(MmrtIndexed *d, char *err, size_t errlen) {
  const char *ip = d->idx_path, *bp = d->bin_path;
  uint64_t end = 0; /* bytes so far; <= bin_size, so no overflow below */
  for (uint64_t i = 0; i < d->nseq; i++) {
    int32_t len = mmrt_indexed_length(d, i);
    int64_t ptr = mmrt_indexed_pointer(d, i);
    if (len < 0)
      return fail(err, errlen, "%s: sequence %" PRIu64 " has a negative length %" PRId32, ip, i,
                  len);
    if (ptr < 0 || (uint64_t)ptr != end)
      return fail(err, errlen,
                  "%s: sequence %" PRIu64 " starts at byte %" PRId64 " of %s, expected %" PRIu64
                  " (where sequence %" PRIu64
                  " ends): the .idx does not match the .bin or is corrupt",
                  ip, i, ptr, bp, end, i ? i - 1 : 0);
    uint64_t bytes = (uint64_t)len * d->elem;
    if (bytes > d->bin_size - end)
      return fail(err, errlen,
                  "%s: sequence %" PRIu64 " (%" PRId32 " elements at byte %" PRIu64
                  ") runs past the end of %s (%zu bytes): the .bin is truncated or does not "
                  "match the .idx",
                  ip, i, len, end, bp, d->bin_size);
    end += bytes;
    d->ntokens += (uint64_t)len;
  }
  if (end != d->bin_size)
    return fail(err, errlen,
                "%s: %zu bytes, but the %" PRIu64 " sequences of %s cover %" PRIu64
                ": the .bin does not match the .idx",
                bp, d->bin_size, d->nseq, ip, end);
  if (d->ndocidx == 0)
    return fail(err, errlen, "%s: no document indices (expected at least the leading 0)", ip);
  int64_t prev = 0;
  for (uint64_t j = 0; j < d->ndocidx; j++) {
    int64_t v = mmrt_indexed_docidx(d, j);
    if (j == 0 && v != 0)
      return fail(err, errlen, "%s: document index 0 is %" PRId64 ", expected 0", ip, v);
    if (v < prev || (uint64_t)v > d->nseq)
      return fail(err, errlen,
                  "%s: document index %" PRIu64 " is %" PRId64 ", expected %" PRId64 " to %" PRIu64
                  " (document indices never decrease and end at the sequence count)",
                  ip, j, v, prev, d->nseq);
    prev = v;
  }
  if ((uint64_t)prev != d->nseq)
    return fail(err, errlen,
                "%s: the last document index is %" PRId64 ", expected the sequence count %" PRIu64
                " (sequences after the last document)",
                ip, prev, d->nseq);
  return true;
}

bool mmrt_indexed_open_files(const char *idx_path, const char *bin_path, int multimodal,
                             MmrtIndexed *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  d->idx_path = strdup(idx_path);
  d->bin_path = strdup(bin_path);
  bool ok = d->idx_path && d->bin_path;
  if (!ok) fail(err, errlen, "%s: out of memory", idx_path);
  ok = ok && map_file(d->idx_path, &d->idx, &d->idx_size, err, errlen);
  ok = ok && check_idx(d, multimodal, err, errlen);
  ok = ok && map_file(d->bin_path, &d->bin, &d->bin_size, err, errlen);
  ok = ok && check_contents(d, err, errlen);
  if (!ok) mmrt_indexed_close(d);
  return ok;
}

bool mmrt_indexed_open(const char *prefix, int multimodal, MmrtIndexed *d, char *err,
                       size_t errlen) {
  char *ip = path_with(prefix, ".idx"), *bp = path_with(prefix, ".bin");
  bool ok = ip && bp;
  if (!ok) {
    memset(d, 0, sizeof *d);
    fail(err, errlen, "%s: out of memory", prefix);
  }
  ok = ok && mmrt_indexed_open_files(ip, bp, multimodal, d, err, errlen);
  free(ip);
  free(bp);
  return ok;
}

/* ---- writer ---- */

struct MmrtIndexedWriter {
  char *bin_path, *idx_path, *bin_tmp, *idx_tmp;
  FILE *bin;
  MmrtIdxDtype dtype;
  size_t elem;
  bool multimodal;
  int32_t *lengths;
  int8_t *modes;
  uint64_t nseq, cap_seq;
  int64_t *docs;
  uint64_t ndoc, cap_doc;
  uint64_t ntokens;
  uint8_t *buf; /* one sequence in the dtype */
  size_t buf_cap;
};

static char *temp_beside(const char *path) {
  size_t n = strlen(path);
  char *t = malloc(n + 16);
  if (!t) return NULL;
  memcpy(t, path, n);
  strcpy(t + n, ".tmp.XXXXXX");
  int fd = mkstemp(t);
  if (fd < 0) {
    free(t);
    return NULL;
  }
  close(fd);
  return t;
}

static void writer_free(MmrtIndexedWriter *w) {
  if (w->bin) fclose(w->bin);
  free(w->bin_path);
  free(w->idx_path);
  free(w->bin_tmp);
  free(w->idx_tmp);
  free(w->lengths);
  free(w->modes);
  free(w->docs);
  free(w->buf);
  free(w);
}

void mmrt_indexed_writer_abort(MmrtIndexedWriter *w) {
  if (!w) return;
  if (w->bin) fclose(w->bin);
  w->bin = NULL;
  if (w->bin_tmp) unlink(w->bin_tmp);
  if (w->idx_tmp) unlink(w->idx_tmp);
  writer_free(w);
}

static bool push_doc(MmrtIndexedWriter *w, int64_t v) {
  if (w->ndoc == w->cap_doc) {
    uint64_t cap = w->cap_doc ? 2 * w->cap_doc : 1024;
    int64_t *p = realloc(w->docs, cap * sizeof *p);
    if (!p) return false;
    w->docs = p;
    w->cap_doc = cap;
  }
  w->docs[w->ndoc++] = v;
  return true;
}

MmrtIndexedWriter *mmrt_indexed_writer_open(const char *prefix, MmrtIdxDtype dtype, bool multimodal,
                                            char *err, size_t errlen) {
  if (!mmrt_idx_dtype_name((int)dtype)) {
    fail(err, errlen, "%s: dtype code %d, expected 1-8", prefix, (int)dtype);
    return NULL;
  }
  MmrtIndexedWriter *w = calloc(1, sizeof *w);
  if (!w) {
    fail(err, errlen, "%s: out of memory", prefix);
    return NULL;
  }
  w->dtype = dtype;
  w->elem = mmrt_idx_dtype_size((int)dtype);
  w->multimodal = multimodal;
  w->bin_path = path_with(prefix, ".bin");
  w->idx_path = path_with(prefix, ".idx");
  if (!w->bin_path || !w->idx_path || !push_doc(w, 0)) {
    fail(err, errlen, "%s: out of memory", prefix);
    mmrt_indexed_writer_abort(w);
    return NULL;
  }
  w->bin_tmp = temp_beside(w->bin_path);
  if (w->bin_tmp) w->idx_tmp = temp_beside(w->idx_path);
  if (!w->bin_tmp || !w->idx_tmp) {
    fail(err, errlen, "%s: cannot create a temporary file beside it: %s",
         w->bin_tmp ? w->idx_path : w->bin_path, strerror(errno));
    mmrt_indexed_writer_abort(w);
    return NULL;
  }
  w->bin = fopen(w->bin_tmp, "wb");
  if (!w->bin) {
    fail(err, errlen, "%s: cannot write: %s", w->bin_tmp, strerror(errno));
    mmrt_indexed_writer_abort(w);
    return NULL;
  }
  setvbuf(w->bin, NULL, _IOFBF, 1 << 20);
  return w;
}

/* Stores v as element k of w->buf; false when the dtype cannot hold it. */
static bool put(MmrtIndexedWriter *w, size_t k, int64_t v) {
  uint8_t *p = w->buf + k * w->elem;
  switch (w->dtype) {
    case MMRT_IDX_U8:
      if (v < 0 || v > UINT8_MAX) return false;
      *p = (uint8_t)v;
      return true;
    case MMRT_IDX_I8:
      if (v < INT8_MIN || v > INT8_MAX) return false;
      *p = (uint8_t)(int8_t)v;
      return true;
    case MMRT_IDX_I16: {
      if (v < INT16_MIN || v > INT16_MAX) return false;
      int16_t x = (int16_t)v;
      memcpy(p, &x, 2);
      return true;
    }
    case MMRT_IDX_U16: {
      if (v < 0 || v > UINT16_MAX) return false;
      uint16_t x = (uint16_t)v;
      memcpy(p, &x, 2);
      return true;
    }
    case MMRT_IDX_I32: {
      if (v < INT32_MIN || v > INT32_MAX) return false;
      int32_t x = (int32_t)v;
      memcpy(p, &x, 4);
      return true;
    }
    case MMRT_IDX_I64: memcpy(p, &v, 8); return true;
    case MMRT_IDX_F32: {
      float x = (float)v;
      memcpy(p, &x, 4);
      return true;
    }
    case MMRT_IDX_F64: {
      double x = (double)v;
      memcpy(p, &x, 8);
      return true;
    }
  }
  return false;
}

static bool add_seq(MmrtIndexedWriter *w, const int64_t *ids64, const int32_t *ids32, size_t n,
                    int8_t mode, char *err, size_t errlen) {
  if (n > INT32_MAX)
    return fail(err, errlen, "%s: sequence %" PRIu64 " has %zu elements, more than 2^31-1",
                w->bin_path, w->nseq, n);
  if (w->nseq == w->cap_seq) {
    uint64_t cap = w->cap_seq ? 2 * w->cap_seq : 1024;
    int32_t *l = realloc(w->lengths, cap * sizeof *l);
    if (l) w->lengths = l;
    int8_t *m = w->multimodal ? realloc(w->modes, cap) : NULL;
    if (m) w->modes = m;
    if (!l || (w->multimodal && !m)) return fail(err, errlen, "%s: out of memory", w->idx_path);
    w->cap_seq = cap;
  }
  if (n * w->elem > w->buf_cap) {
    size_t cap = n * w->elem * 2;
    uint8_t *b = realloc(w->buf, cap);
    if (!b) return fail(err, errlen, "%s: out of memory", w->bin_path);
    w->buf = b;
    w->buf_cap = cap;
  }
  for (size_t k = 0; k < n; k++) {
    int64_t v = ids64 ? ids64[k] : ids32[k];
    if (!put(w, k, v))
      return fail(err, errlen,
                  "%s: sequence %" PRIu64 ", element %zu: %" PRId64
                  " does not fit the dataset's dtype %s",
                  w->bin_path, w->nseq, k, v, mmrt_idx_dtype_name((int)w->dtype));
  }
  if (n && fwrite(w->buf, w->elem, n, w->bin) != n)
    return fail(err, errlen, "%s: write failed: %s", w->bin_tmp, strerror(errno));
  w->lengths[w->nseq] = (int32_t)n;
  if (w->multimodal) w->modes[w->nseq] = mode;
  w->nseq++;
  w->ntokens += n;
  return true;
}

bool mmrt_indexed_writer_add(MmrtIndexedWriter *w, const int64_t *ids, size_t n, int8_t mode,
                             char *err, size_t errlen) {
  return add_seq(w, ids, NULL, n, mode, err, errlen);
}

bool mmrt_indexed_writer_add32(MmrtIndexedWriter *w, const int32_t *ids, size_t n, int8_t mode,
                               char *err, size_t errlen) {
  return add_seq(w, NULL, ids, n, mode, err, errlen);
}

bool mmrt_indexed_writer_end_document(MmrtIndexedWriter *w, char *err, size_t errlen) {
  if (!push_doc(w, (int64_t)w->nseq)) return fail(err, errlen, "%s: out of memory", w->idx_path);
  return true;
}

uint64_t mmrt_indexed_writer_sequences(const MmrtIndexedWriter *w) {
  return w->nseq;
}
uint64_t mmrt_indexed_writer_tokens(const MmrtIndexedWriter *w) {
  return w->ntokens;
}

static bool sync_close(FILE *f) {
  bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  return (fclose(f) == 0) && ok;
}

bool mmrt_indexed_writer_finish(MmrtIndexedWriter *w, char *err, size_t errlen) {
  bool ok = true;
  FILE *bin = w->bin;
  w->bin = NULL;
  if (!sync_close(bin)) ok = fail(err, errlen, "%s: write failed: %s", w->bin_tmp, strerror(errno));
  FILE *f = ok ? fopen(w->idx_tmp, "wb") : NULL;
  if (ok && !f) ok = fail(err, errlen, "%s: cannot write: %s", w->idx_tmp, strerror(errno));
  if (ok) {
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    uint8_t code = (uint8_t)w->dtype;
    uint64_t version = 1;
    fwrite(idx_magic, 1, 9, f);
    fwrite(&version, 8, 1, f);
    fwrite(&code, 1, 1, f);
    fwrite(&w->nseq, 8, 1, f);
    fwrite(&w->ndoc, 8, 1, f);
    if (w->nseq) fwrite(w->lengths, 4, w->nseq, f);
    int64_t ptr = 0;
    for (uint64_t i = 0; i < w->nseq; i++) {
      fwrite(&ptr, 8, 1, f);
      ptr += (int64_t)w->lengths[i] * (int64_t)w->elem;
    }
    fwrite(w->docs, 8, w->ndoc, f);
    if (w->multimodal && w->nseq) fwrite(w->modes, 1, w->nseq, f);
    if (ferror(f)) {
      fclose(f);
      ok = fail(err, errlen, "%s: write failed: %s", w->idx_tmp, strerror(errno));
    } else if (!sync_close(f)) {
      ok = fail(err, errlen, "%s: write failed: %s", w->idx_tmp, strerror(errno));
    }
  }
  /* mkstemp made them 0600; a dataset is as readable as any new file */
  mode_t um = umask(0);
  umask(um);
  if (ok) {
    chmod(w->bin_tmp, 0666 & ~um);
    chmod(w->idx_tmp, 0666 & ~um);
  }
  if (ok && rename(w->bin_tmp, w->bin_path) != 0)
    ok = fail(err, errlen, "%s: cannot rename into place: %s", w->bin_path, strerror(errno));
  else if (ok && rename(w->idx_tmp, w->idx_path) != 0) {
    ok = fail(err, errlen, "%s: cannot rename into place: %s", w->idx_path, strerror(errno));
    unlink(w->bin_path); /* no .bin without its .idx */
  }
  if (!ok) {
    mmrt_indexed_writer_abort(w);
    return false;
  }
  writer_free(w);
  return true;
}
