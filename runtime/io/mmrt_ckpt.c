/* mmrt_ckpt.c: safetensors reading and atomic writing (json-c for the
 * header, zlib's CRC32 per tensor), and checkpoint directories: one per
 * step, made visible by an atomic pointer file. */
#include "mmrt_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian; mmrt_ckpt assumes a little-endian host");

#define MAX_HEADER (100u << 20) /* the reference implementation's limit */

static const struct {
  const char *name;
  size_t size;
} dtypes[MMRT_ST_NDTYPES] = {
    [MMRT_ST_F32] = {"F32", 4}, [MMRT_ST_BF16] = {"BF16", 2}, [MMRT_ST_F16] = {"F16", 2},
    [MMRT_ST_I32] = {"I32", 4}, [MMRT_ST_I64] = {"I64", 8},   [MMRT_ST_U8] = {"U8", 1},
};

const char *mmrt_st_dtype_name(MmrtStDtype dt) {
  return (unsigned)dt < MMRT_ST_NDTYPES ? dtypes[dt].name : "?";
}

size_t mmrt_st_dtype_size(MmrtStDtype dt) {
  return (unsigned)dt < MMRT_ST_NDTYPES ? dtypes[dt].size : 0;
}

static int dtype_parse(const char *s, MmrtStDtype *out) {
  for (int i = 0; i < MMRT_ST_NDTYPES; i++)
    if (strcmp(s, dtypes[i].name) == 0) {
      *out = (MmrtStDtype)i;
      return 1;
    }
  return 0;
}

/* Product of shape times element size; 0 with *ok = 0 on overflow. */
static uint64_t span_bytes(MmrtStDtype dt, int ndim, const int64_t *shape, int *ok) {
  uint64_t n = mmrt_st_dtype_size(dt);
  *ok = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] && n > UINT64_MAX / (uint64_t)shape[d])) {
      *ok = 0;
      return 0;
    }
    n *= (uint64_t)shape[d];
  }
  return n;
}

size_t mmrt_tensor_bytes(const MmrtTensorRef *t) {
  int ok;
  uint64_t n = span_bytes(t->dtype, t->ndim, t->shape, &ok);
  return ok ? (size_t)n : 0;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t pos = 0;
  pos += (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && pos < len; d++)
    pos += (size_t)snprintf(buf + pos, len - pos, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (pos < len) snprintf(buf + pos, len - pos, "]");
}

/* ---- atomic files ---- */

typedef struct Atomic {
  const char *path;
  char tmp[PATH_MAX + 32];
  int fd;
} Atomic;

static int atomic_fail(Atomic *a, char *err, size_t errlen, const char *what, int e) {
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
  unlink(a->tmp);
  return mmrt_errf(err, errlen, e == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                   "%s: %s %s: %s; any existing %s is unchanged", a->path, what, a->tmp,
                   strerror(e), a->path);
}

static int atomic_begin(Atomic *a, const char *path, char *err, size_t errlen) {
  a->path = path;
  a->fd = -1;
  a->tmp[0] = 0;
  if ((size_t)snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof a->tmp)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", path);
  struct stat st; /* a device, a FIFO or a directory is refused, never replaced by a file */
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return mmrt_errf(err, errlen, MMRT_ERR_IO,
                     "%s: is %s, not a regular file; refusing to replace it", path,
                     mmrt_file_kind(st.st_mode));
  a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (a->fd < 0) {
    int e = errno;
    return mmrt_errf(err, errlen, e == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                     "%s: cannot create temporary file %s: %s", path, a->tmp, strerror(e));
  }
  return MMRT_OK;
}

static int atomic_write(Atomic *a, const void *buf, size_t n, char *err, size_t errlen) {
  const char *p = buf;
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t w = write(a->fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return atomic_fail(a, err, errlen, "writing", w < 0 ? errno : EIO);
    p += w;
    n -= (size_t)w;
  }
  return MMRT_OK;
}

static int fsync_dir_of(const char *path) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static int atomic_commit(Atomic *a, char *err, size_t errlen) {
  if (fsync(a->fd) != 0) return atomic_fail(a, err, errlen, "fsync of", errno);
  int rc = close(a->fd);
  a->fd = -1;
  if (rc != 0) return atomic_fail(a, err, errlen, "closing", errno);
  if (rename(a->tmp, a->path) != 0)
    return atomic_fail(a, err, errlen, "renaming into place", errno);
  if (fsync_dir_of(a->path) != 0)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: written, but fsync of its directory failed: %s",
                     a->path, strerror(errno));
  return MMRT_OK;
}

int mmrt_write_file_atomic(const char *path, const void *data, size_t len, char *err,
                           size_t errlen) {
  Atomic a;
  int rc;
  if ((rc = atomic_begin(&a, path, err, errlen)) != MMRT_OK ||
      (rc = atomic_write(&a, data, len, err, errlen)) != MMRT_OK)
    return rc;
  return atomic_commit(&a, err, errlen);
}

/* ---- writing safetensors ---- */

int mmrt_st_file_order(const MmrtTensorRef *tensors, int ntensors, int *order) {
  int k = 0;
  /* one pass a size, the largest first; every dtype's size is 1..8 bytes */
  for (size_t es = 8; es; es--)
    for (int i = 0; i < ntensors; i++)
      if (mmrt_st_dtype_size(tensors[i].dtype) == es) order[k++] = i;
  return k;
}

static int st_save(const char *path, const MmrtTensorRef *tensors, int ntensors, const MmrtKV *meta,
                   int nmeta, MmrtStFill fill, void *ctx, char *err, size_t errlen) {
  if (ntensors < 0 || nmeta < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: negative tensor or metadata count", path);
  /* validate everything before touching the disk */
  for (int i = 0; i < ntensors; i++) {
    const MmrtTensorRef *t = &tensors[i];
    if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "%s: tensor %d has name '%s', expected a non-empty name other "
                       "than __metadata__",
                       path, i, t->name ? t->name : "(null)");
    if ((unsigned)t->dtype >= MMRT_ST_NDTYPES || t->ndim < 0 || t->ndim > MMRT_ST_MAX_DIMS)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "%s: tensor '%s' has dtype %d and %d dims, expected a MMRT_ST_* "
                       "dtype and 0..%d dims",
                       path, t->name, (int)t->dtype, t->ndim, MMRT_ST_MAX_DIMS);
    int ok;
    uint64_t n = span_bytes(t->dtype, t->ndim, t->shape, &ok);
    if (!ok)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "%s: tensor '%s' has a negative or overflowing shape", path, t->name);
    if (n && !t->data && !fill)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: tensor '%s' has no data", path, t->name);
    for (int j = 0; j < i; j++)
      if (strcmp(tensors[j].name, t->name) == 0)
        return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                         "%s: tensor name '%s' appears twice (entries %d and %d)", path, t->name, j,
                         i);
  }
  for (int i = 0; i < nmeta; i++)
    if (!meta[i].key || !meta[i].value)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: metadata entry %d is NULL", path, i);

  int *ord = malloc(((size_t)ntensors + 1) * sizeof *ord);
  json_object *hdr = json_object_new_object();
  char *blob = NULL;
  int rc = MMRT_OK;
  if (!ord || !hdr) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
    goto done;
  }
  mmrt_st_file_order(tensors, ntensors, ord); /* every dtype was checked above */

  if (nmeta > 0) {
    json_object *m = json_object_new_object();
    for (int i = 0; i < nmeta; i++)
      json_object_object_add(m, meta[i].key, json_object_new_string(meta[i].value));
    json_object_object_add(hdr, "__metadata__", m);
  }
  uint64_t off = 0;
  for (int i = 0; i < ntensors; i++) {
    const MmrtTensorRef *t = &tensors[ord[i]];
    int ok;
    uint64_t n = span_bytes(t->dtype, t->ndim, t->shape, &ok);
    json_object *e = json_object_new_object(), *shape = json_object_new_array(),
                *offs = json_object_new_array();
    for (int d = 0; d < t->ndim; d++)
      json_object_array_add(shape, json_object_new_int64(t->shape[d]));
    json_object_array_add(offs, json_object_new_int64((int64_t)off));
    json_object_array_add(offs, json_object_new_int64((int64_t)(off + n)));
    json_object_object_add(e, "dtype", json_object_new_string(dtypes[t->dtype].name));
    json_object_object_add(e, "shape", shape);
    json_object_object_add(e, "data_offsets", offs);
    json_object_object_add(hdr, t->name, e);
    off += n;
  }
  const char *js =
      json_object_to_json_string_ext(hdr, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
  size_t jlen = strlen(js), padded = (jlen + 7) / 8 * 8;
  blob = malloc(8 + padded);
  if (!blob) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
    goto done;
  }
  for (int k = 0; k < 8; k++) blob[k] = (char)((uint64_t)padded >> (8 * k));
  memcpy(blob + 8, js, jlen);
  memset(blob + 8 + jlen, ' ', padded - jlen);

  Atomic a;
  if ((rc = atomic_begin(&a, path, err, errlen)) != MMRT_OK) goto done;
  if ((rc = atomic_write(&a, blob, 8 + padded, err, errlen)) != MMRT_OK) goto done;
  for (int i = 0; i < ntensors; i++) {
    const void *bytes = tensors[ord[i]].data;
    if (fill && (rc = fill(ctx, ord[i], &bytes, err, errlen)) != MMRT_OK) {
      close(a.fd);
      unlink(a.tmp);
      goto done;
    }
    if ((rc = atomic_write(&a, bytes, mmrt_tensor_bytes(&tensors[ord[i]]), err, errlen)) != MMRT_OK)
      goto done;
  }
  rc = atomic_commit(&a, err, errlen);
done:
  free(blob);
  free(ord);
  json_object_put(hdr);
  return rc;
}

int mmrt_st_save(const char *path, const MmrtTensorRef *tensors, int ntensors, const MmrtKV *meta,
                 int nmeta, char *err, size_t errlen) {
  return st_save(path, tensors, ntensors, meta, nmeta, NULL, NULL, err, errlen);
}

int mmrt_st_save_stream(const char *path, const MmrtTensorRef *tensors, int ntensors,
                        const MmrtKV *meta, int nmeta, MmrtStFill fill, void *ctx, char *err,
                        size_t errlen) {
  return st_save(path, tensors, ntensors, meta, nmeta, fill, ctx, err, errlen);
}

static uint32_t crc_of(const void *data, size_t n) {
  return n ? (uint32_t)crc32_z(0, data, n) : 0;
}

int mmrt_st_save_crc(const char *path, const MmrtTensorRef *tensors, int ntensors,
                     const MmrtKV *meta, int nmeta, char *err, size_t errlen) {
  if (ntensors < 0 || nmeta < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: negative tensor or metadata count", path);
  size_t np = strlen(MMRT_ST_CRC_PREFIX);
  for (int i = 0; i < nmeta; i++)
    if (meta[i].key && strncmp(meta[i].key, MMRT_ST_CRC_PREFIX, np) == 0)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: metadata key '%s' is reserved for CRCs",
                       path, meta[i].key);
  MmrtKV *all = malloc(((size_t)nmeta + (size_t)ntensors + 1) * sizeof *all);
  char *text = malloc((size_t)ntensors * 9 + 1);
  char **keys = calloc((size_t)ntensors + 1, sizeof *keys);
  int rc = MMRT_OK, n = nmeta;
  if (!all || !text || !keys)
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < nmeta && rc == MMRT_OK; i++) all[i] = meta[i];
  for (int i = 0; i < ntensors && rc == MMRT_OK; i++) {
    const MmrtTensorRef *t = &tensors[i];
    if (!t->name) continue; /* mmrt_st_save names the problem */
    size_t bytes = mmrt_tensor_bytes(t);
    snprintf(text + 9 * i, 9, "%08x", (unsigned)crc_of(t->data, t->data ? bytes : 0));
    keys[i] = malloc(np + strlen(t->name) + 1);
    if (!keys[i]) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
      break;
    }
    sprintf(keys[i], "%s%s", MMRT_ST_CRC_PREFIX, t->name);
    all[n++] = (MmrtKV){keys[i], text + 9 * i};
  }
  if (rc == MMRT_OK) rc = mmrt_st_save(path, tensors, ntensors, all, n, err, errlen);
  for (int i = 0; keys && i < ntensors; i++) free(keys[i]);
  free(keys);
  free(text);
  free(all);
  return rc;
}

/* ---- reading safetensors ---- */

typedef struct Entry {
  char *name;
  MmrtStDtype dtype;
  int ndim;
  int64_t shape[MMRT_ST_MAX_DIMS];
  uint64_t begin, end;
  int has_crc;
  uint32_t crc;
} Entry;

struct MmrtStFile {
  int fd;
  char *path;
  uint64_t data_start, data_size;
  int n, nmeta;
  Entry *e;
  MmrtKV *meta;
};

void mmrt_st_close(MmrtStFile *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->n; i++) free(f->e[i].name);
  for (int i = 0; i < f->nmeta; i++) {
    free((char *)f->meta[i].key);
    free((char *)f->meta[i].value);
  }
  free(f->e);
  free(f->meta);
  free(f->path);
  free(f);
}

static int read_at(int fd, void *buf, size_t n, uint64_t off) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? errno : EIO;
    p += r, n -= (size_t)r, off += (uint64_t)r;
  }
  return 0;
}

/* A non-negative integer JSON value. */
static int get_u64(json_object *v, uint64_t *out) {
  if (!json_object_is_type(v, json_type_int)) return 0;
  errno = 0;
  int64_t x = json_object_get_int64(v);
  if (x < 0 || (x == INT64_MAX && errno == ERANGE)) return 0;
  *out = (uint64_t)x;
  return 1;
}

static int parse_entry(MmrtStFile *f, const char *name, json_object *v, Entry *e, char *err,
                       size_t errlen) {
  const char *p = f->path;
  json_object *dt, *shape, *offs;
  if (!json_object_is_type(v, json_type_object))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': expected an object with dtype, shape, data_offsets", p,
                     name);
  if (!json_object_object_get_ex(v, "dtype", &dt) || !json_object_is_type(dt, json_type_string))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': missing string field "
                     "'dtype'",
                     p, name);
  if (!dtype_parse(json_object_get_string(dt), &e->dtype))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': dtype '%s' not supported, expected one of F32, BF16, "
                     "F16, I32, I64, U8",
                     p, name, json_object_get_string(dt));
  if (!json_object_object_get_ex(v, "shape", &shape) ||
      !json_object_is_type(shape, json_type_array))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': missing array field "
                     "'shape'",
                     p, name);
  size_t nd = json_object_array_length(shape);
  if (nd > MMRT_ST_MAX_DIMS)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': %zu dims, at most %d "
                     "supported",
                     p, name, nd, MMRT_ST_MAX_DIMS);
  e->ndim = (int)nd;
  for (size_t d = 0; d < nd; d++) {
    uint64_t x;
    if (!get_u64(json_object_array_get_idx(shape, d), &x))
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s: tensor '%s': shape[%zu] is not "
                       "a non-negative integer",
                       p, name, d);
    e->shape[d] = (int64_t)x;
  }
  if (!json_object_object_get_ex(v, "data_offsets", &offs) ||
      !json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
      !get_u64(json_object_array_get_idx(offs, 0), &e->begin) ||
      !get_u64(json_object_array_get_idx(offs, 1), &e->end))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': expected "
                     "'data_offsets': [begin, end] of non-negative integers",
                     p, name);
  char sh[160];
  shape_str(sh, sizeof sh, e->ndim, e->shape);
  if (e->begin > e->end)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     ") end before they begin",
                     p, name, e->begin, e->end);
  int ok;
  uint64_t want = span_bytes(e->dtype, e->ndim, e->shape, &ok);
  if (!ok || want != e->end - e->begin)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': %s %s needs %" PRIu64 " bytes, data_offsets [%" PRIu64
                     ", %" PRIu64 ") span %" PRIu64,
                     p, name, dtypes[e->dtype].name, sh, want, e->begin, e->end, e->end - e->begin);
  if (e->end > f->data_size)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 ") extend past "
                     "the %" PRIu64 "-byte data area (file truncated?)",
                     p, name, e->begin, e->end, f->data_size);
  return MMRT_OK;
}

static int by_begin(const void *pa, const void *pb) {
  const Entry *a = pa, *b = pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  return (a->end > b->end) - (a->end < b->end);
}

/* The "crc32:<name>" metadata onto the tensors they name. */
static int attach_crcs(MmrtStFile *f, char *err, size_t errlen) {
  size_t np = strlen(MMRT_ST_CRC_PREFIX);
  for (int k = 0; k < f->nmeta; k++) {
    const char *key = f->meta[k].key, *v = f->meta[k].value;
    if (strncmp(key, MMRT_ST_CRC_PREFIX, np) != 0) continue;
    int i = mmrt_st_find(f, key + np);
    if (i < 0)
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s: metadata '%s' is the CRC of tensor '%s', which the file does not have",
                       f->path, key, key + np);
    char *end;
    unsigned long x = strtoul(v, &end, 16);
    if (strlen(v) != 8 || *end || strspn(v, "0123456789abcdef") != 8)
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s: metadata '%s' is '%s', expected 8 lowercase hex digits (a CRC32)",
                       f->path, key, v);
    f->e[i].has_crc = 1;
    f->e[i].crc = (uint32_t)x;
  }
  return MMRT_OK;
}

static int parse_header(MmrtStFile *f, const char *js, size_t len, char *err, size_t errlen) {
  const char *p = f->path;
  if (len == 0 || js[0] != '{')
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: header does not start with '{' (not a safetensors file?)", p);
  json_tokener *tok = json_tokener_new();
  if (!tok) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", p);
  json_object *root = json_tokener_parse_ex(tok, js, (int)len);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  int rc = MMRT_OK;
  if (!root || jerr != json_tokener_success) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: header JSON does not parse: %s", p,
                   jerr == json_tokener_continue ? "unexpected end of header"
                                                 : json_tokener_error_desc(jerr));
    goto done;
  }
  for (size_t i = end; i < len; i++)
    if (js[i] != ' ' && js[i] != '\t' && js[i] != '\n' && js[i] != '\r' && js[i] != 0) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: header has bytes after its JSON object at offset %zu, expected "
                     "only space padding",
                     p, i);
      goto done;
    }
  if (!json_object_is_type(root, json_type_object)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: header is not a JSON object", p);
    goto done;
  }
  int count = json_object_object_length(root);
  f->e = calloc((size_t)count + 1, sizeof *f->e);
  if (!f->e) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", p);
    goto done;
  }
  json_object_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!json_object_is_type(val, json_type_object)) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: __metadata__ is not an object of strings",
                       p);
        goto done;
      }
      f->meta = calloc((size_t)json_object_object_length(val) + 1, sizeof *f->meta);
      if (!f->meta) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", p);
        goto done;
      }
      json_object_object_foreach(val, mk, mv) {
        if (!json_object_is_type(mv, json_type_string)) {
          rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: __metadata__ key '%s' is not a string",
                         p, mk);
          goto done;
        }
        f->meta[f->nmeta].key = strdup(mk);
        f->meta[f->nmeta].value = strdup(json_object_get_string(mv));
        f->nmeta++;
      }
      continue;
    }
    Entry *e = &f->e[f->n];
    if ((rc = parse_entry(f, key, val, e, err, errlen)) != MMRT_OK) goto done;
    e->name = strdup(key);
    f->n++;
  }
  /* the tensors tile the data area exactly */
  qsort(f->e, (size_t)f->n, sizeof *f->e, by_begin);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    Entry *e = &f->e[i];
    if (e->begin < at) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s' [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64
                     ", %" PRIu64 ")",
                     p, e->name, e->begin, e->end, f->e[i - 1].name, f->e[i - 1].begin,
                     f->e[i - 1].end);
      goto done;
    }
    if (e->begin > at) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: data bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor "
                     "(next is '%s')",
                     p, at, e->begin, e->name);
      goto done;
    }
    at = e->end;
  }
  if (at != f->data_size) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: data area is %" PRIu64 " bytes but the tensors cover %" PRIu64, p,
                   f->data_size, at);
    goto done;
  }
  rc = attach_crcs(f, err, errlen);
done:
  json_object_put(root);
  return rc;
}

int mmrt_st_open(MmrtStFile **out, const char *path, char *err, size_t errlen) {
  *out = NULL;
  MmrtStFile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
  }
  char *js = NULL;
  int rc = MMRT_OK;
  if ((rc = mmrt_open_read(path, &f->fd, err, errlen)) != MMRT_OK) goto done; /* no FIFO */
  struct stat st;
  if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: not a regular file", path);
    goto done;
  }
  uint64_t size = (uint64_t)st.st_size;
  uint8_t lenb[8];
  if (size < 8) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length", path,
                   size);
    goto done;
  }
  int e = read_at(f->fd, lenb, 8, 0);
  if (e) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: reading: %s", path, strerror(e));
    goto done;
  }
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | lenb[k];
  if (n > size - 8) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: header length %" PRIu64 " exceeds the %" PRIu64
                   " bytes after the length field (file truncated or not safetensors?)",
                   path, n, size - 8);
    goto done;
  }
  if (n > MAX_HEADER) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: header length %" PRIu64 " exceeds "
                   "the %u-byte limit",
                   path, n, MAX_HEADER);
    goto done;
  }
  js = malloc(n + 1);
  if (!js) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
    goto done;
  }
  if ((e = read_at(f->fd, js, n, 8)) != 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: reading header: %s", path, strerror(e));
    goto done;
  }
  js[n] = 0;
  f->data_start = 8 + n;
  f->data_size = size - 8 - n;
  rc = parse_header(f, js, n, err, errlen);
done:
  free(js);
  if (rc != MMRT_OK)
    mmrt_st_close(f);
  else
    *out = f;
  return rc;
}

const char *mmrt_st_path(const MmrtStFile *f) {
  return f->path;
}
int mmrt_st_count(const MmrtStFile *f) {
  return f->n;
}

const char *mmrt_st_name(const MmrtStFile *f, int i) {
  return i >= 0 && i < f->n ? f->e[i].name : NULL;
}

int mmrt_st_find(const MmrtStFile *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->e[i].name, name) == 0) return i;
  return -1;
}

void mmrt_st_info(const MmrtStFile *f, int i, MmrtStDtype *dtype, int *ndim,
                  const int64_t **shape) {
  if (dtype) *dtype = f->e[i].dtype;
  if (ndim) *ndim = f->e[i].ndim;
  if (shape) *shape = f->e[i].shape;
}

int mmrt_st_read(MmrtStFile *f, const MmrtTensorRef *t, char *err, size_t errlen) {
  int i = mmrt_st_find(f, t->name);
  if (i < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s: tensor '%s' is missing (the file has %d tensors)", f->path, t->name,
                     f->n);
  const Entry *e = &f->e[i];
  char want[160], have[160];
  shape_str(want, sizeof want, t->ndim, t->shape);
  shape_str(have, sizeof have, e->ndim, e->shape);
  int same = e->dtype == t->dtype && e->ndim == t->ndim;
  for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == t->shape[d];
  if (!same)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH, "%s: tensor '%s' is %s %s, expected %s %s",
                     f->path, t->name, dtypes[e->dtype].name, have, mmrt_st_dtype_name(t->dtype),
                     want);
  int er = read_at(f->fd, t->data, (size_t)(e->end - e->begin), f->data_start + e->begin);
  if (er)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: reading tensor '%s': %s", f->path, t->name,
                     er == EIO ? "file shorter than its header says" : strerror(er));
  uint32_t crc = e->has_crc ? crc_of(t->data, (size_t)(e->end - e->begin)) : 0;
  if (e->has_crc && crc != e->crc)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': the data's CRC32 is %08x, the file's metadata says %08x "
                     "(the data is damaged)",
                     f->path, t->name, (unsigned)crc, (unsigned)e->crc);
  return MMRT_OK;
}

int mmrt_st_read_raw(MmrtStFile *f, int i, void *buf, char *err, size_t errlen) {
  const Entry *e = &f->e[i];
  int er = read_at(f->fd, buf, (size_t)(e->end - e->begin), f->data_start + e->begin);
  if (er)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: reading tensor '%s': %s", f->path, e->name,
                     er == EIO ? "file shorter than its header says" : strerror(er));
  if (e->has_crc && crc_of(buf, (size_t)(e->end - e->begin)) != e->crc)
    return mmrt_errf(
        err, errlen, MMRT_ERR_FORMAT,
        "%s: tensor '%s': the data's CRC32 differs from the metadata's (the data is damaged)",
        f->path, e->name);
  return MMRT_OK;
}

int mmrt_st_read_part(MmrtStFile *f, int i, uint64_t off, size_t n, void *buf, char *err,
                      size_t errlen) {
  const Entry *e = &f->e[i];
  uint64_t size = e->end - e->begin;
  if (off > size || n > size - off)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s': bytes [%llu, %llu) asked of its %llu", f->path, e->name,
                     (unsigned long long)off, (unsigned long long)(off + n),
                     (unsigned long long)size);
  if (e->has_crc) {
    char *all = malloc((size_t)size + 1);
    if (!all)
      return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory reading tensor '%s'", e->name);
    int rc = mmrt_st_read_raw(f, i, all, err, errlen);
    if (rc == MMRT_OK) memcpy(buf, all + off, n);
    free(all);
    return rc;
  }
  int er = read_at(f->fd, buf, n, f->data_start + e->begin + off);
  if (er)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: reading tensor '%s': %s", f->path, e->name,
                     er == EIO ? "file shorter than its header says" : strerror(er));
  return MMRT_OK;
}

int mmrt_st_has_crcs(const MmrtStFile *f, const char **missing) {
  for (int i = 0; i < f->n; i++)
    if (!f->e[i].has_crc) {
      if (missing) *missing = f->e[i].name;
      return 0;
    }
  return 1;
}

int mmrt_st_read_all(MmrtStFile *f, const MmrtTensorRef *t, int n, int strict, char *err,
                     size_t errlen) {
  for (int i = 0; i < n; i++) {
    int rc = mmrt_st_read(f, &t[i], err, errlen);
    if (rc != MMRT_OK) return rc;
  }
  if (strict)
    for (int i = 0; i < f->n; i++) {
      int known = 0;
      for (int j = 0; j < n && !known; j++) known = strcmp(f->e[i].name, t[j].name) == 0;
      if (!known)
        return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                         "%s: holds tensor '%s' that the model does not have", f->path,
                         f->e[i].name);
    }
  return MMRT_OK;
}

const char *mmrt_st_meta(const MmrtStFile *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
  return NULL;
}

int mmrt_st_meta_count(const MmrtStFile *f) {
  return f->nmeta;
}

MmrtKV mmrt_st_meta_at(const MmrtStFile *f, int i) {
  return i >= 0 && i < f->nmeta ? f->meta[i] : (MmrtKV){NULL, NULL};
}

static int parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return 0;
  *out = v;
  return 1;
}

int mmrt_st_meta_int64(const MmrtStFile *f, const char *key, int64_t *out, char *err,
                       size_t errlen) {
  const char *v = mmrt_st_meta(f, key);
  if (!v)
    return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "%s: metadata key '%s' is missing", f->path,
                     key);
  if (!parse_i64(v, out))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: metadata '%s' is '%s', expected a decimal integer", f->path, key, v);
  return MMRT_OK;
}

/* ---- checkpoint directories ---- */

int mmrt_ckpt_rank_path(char *buf, size_t len, const char *dir, int rank) {
  return snprintf(buf, len, "%s/rank-%05d.safetensors", dir, rank);
}

static int mkdir_p(const char *dir, char *err, size_t errlen) {
  char tmp[PATH_MAX];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s", dir) >= sizeof tmp)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  for (char *p = tmp + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      struct stat st;
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot create directory %s: %s", dir, tmp,
                         strerror(errno));
      if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: %s exists and is not a directory", dir,
                         tmp);
      *p = c;
      if (!c) break;
    }
  }
  return MMRT_OK;
}

int mmrt_ckpt_save_rank(const char *dir, int rank, const MmrtManifest *m,
                        const MmrtTensorRef *tensors, int ntensors, const MmrtKV *meta, int nmeta,
                        char *err, size_t errlen) {
  if (rank < 0 || rank >= m->world_size)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: rank %d outside world size %d", dir, rank,
                     m->world_size);
  int rc = mkdir_p(dir, err, errlen);
  if (rc != MMRT_OK) return rc;
  if (fsync_dir_of(dir) != 0) /* the directory's own entry, before the pointer names it */
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: fsync of its parent directory failed: %s", dir,
                     strerror(errno));
  char path[PATH_MAX], step[32], rk[16], ws[16];
  if ((size_t)mmrt_ckpt_rank_path(path, sizeof path, dir, rank) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  snprintf(step, sizeof step, "%" PRId64, m->step);
  snprintf(rk, sizeof rk, "%d", rank);
  snprintf(ws, sizeof ws, "%d", m->world_size);
  MmrtKV *all = malloc(((size_t)nmeta + 4) * sizeof *all);
  if (!all) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
  all[0] = (MmrtKV){MMRT_CKPT_STEP, step};
  all[1] = (MmrtKV){MMRT_CKPT_RANK, rk};
  all[2] = (MmrtKV){MMRT_CKPT_WORLD, ws};
  all[3] = (MmrtKV){MMRT_CKPT_FINGERPRINT, m->fingerprint};
  int n = 4;
  for (int i = 0; i < nmeta; i++) {
    int reserved = 0;
    for (int j = 0; j < 4; j++) reserved |= strcmp(meta[i].key, all[j].key) == 0;
    if (reserved) {
      free(all);
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "%s: metadata key '%s' is set by mmrt_ckpt_save_rank", path, meta[i].key);
    }
    all[n++] = meta[i];
  }
  rc = mmrt_st_save_crc(path, tensors, ntensors, all, n, err, errlen);
  free(all);
  return rc;
}

/* "step-000105" or "step-000105.1": the step and 0 / 1; -1 otherwise. */
static int64_t step_name(const char *name, int *alt) {
  int n = 0;
  long long step;
  if (strncmp(name, "step-", 5) != 0 || strspn(name + 5, "0123456789") < 6 ||
      sscanf(name + 5, "%lld%n", &step, &n) != 1 || step < 0)
    return -1;
  const char *rest = name + 5 + n;
  *alt = strcmp(rest, ".1") == 0;
  return *alt || !*rest ? (int64_t)step : -1;
}

/* The step directory name root/latest holds, in name (NAME_MAX + 1 bytes). */
static int read_pointer(const char *root, char *name, char *err, size_t errlen) {
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", root, MMRT_CKPT_POINTER) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", root);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return mmrt_errf(err, errlen, e == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                     "%s: cannot open the checkpoint pointer: %s", path, strerror(e));
  }
  char buf[NAME_MAX + 2];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int e = errno;
  close(fd);
  if (n < 0) return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: read error: %s", path, strerror(e));
  buf[n] = 0;
  if (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
  int alt;
  if (step_name(buf, &alt) < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: holds '%.40s', expected the name of a step directory (step-NNNNNN)", path,
                     buf);
  snprintf(name, NAME_MAX + 1, "%.*s", NAME_MAX, buf);
  return MMRT_OK;
}

int mmrt_ckpt_resolve(const char *root, char *buf, size_t len, char *err, size_t errlen) {
  char name[NAME_MAX + 1];
  struct stat st;
  int rc = read_pointer(root, name, err, errlen);
  if (rc == MMRT_ERR_NOTFOUND) {
    char m[PATH_MAX];
    snprintf(m, sizeof m, "%s/manifest.json", root);
    if (stat(m, &st) != 0)
      return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND,
                       "%s: no checkpoint (no %s, no manifest.json)", root, MMRT_CKPT_POINTER);
    if ((size_t)snprintf(buf, len, "%s", root) >= len)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", root);
    return MMRT_OK;
  }
  if (rc != MMRT_OK) return rc;
  if ((size_t)snprintf(buf, len, "%s/%s", root, name) >= len)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", root);
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s/%s names %s, which is not a directory (checkpoint removed by hand?)", root,
                     MMRT_CKPT_POINTER, buf);
  return MMRT_OK;
}

int mmrt_ckpt_target(const char *root, int64_t step, char *buf, size_t len, char *err,
                     size_t errlen) {
  if (step < 0) return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: negative step", root);
  char live[NAME_MAX + 1] = "", name[64];
  int rc = read_pointer(root, live, err, errlen);
  if (rc != MMRT_OK && rc != MMRT_ERR_NOTFOUND) return rc;
  snprintf(name, sizeof name, "step-%06lld", (long long)step);
  if (strcmp(live, name) == 0) strcat(name, ".1");
  if ((size_t)snprintf(buf, len, "%s/%s", root, name) >= len)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", root);
  return MMRT_OK;
}

/* The last path component of stepdir if stepdir is "<root>/<name>". */
static const char *name_in(const char *root, const char *stepdir) {
  size_t n = strlen(root);
  if (strncmp(stepdir, root, n) != 0 || stepdir[n] != '/' || strchr(stepdir + n + 1, '/'))
    return NULL;
  return stepdir + n + 1;
}

/* Remove a directory of plain files. */
static int remove_dir(const char *dir, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return MMRT_OK;
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
  }
  struct dirent *e;
  int rc = MMRT_OK;
  while ((e = readdir(d)) && rc == MMRT_OK) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0)
      rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s/%s: cannot remove: %s", dir, e->d_name,
                     strerror(errno));
  }
  closedir(d);
  if (rc == MMRT_OK && rmdir(dir) != 0)
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
  return rc;
}

int mmrt_ckpt_commit(const char *root, const char *stepdir, const MmrtManifest *m, char *err,
                     size_t errlen) {
  const char *name = name_in(root, stepdir);
  int alt;
  if (!name || step_name(name, &alt) < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: not a step directory of %s", stepdir, root);
  int rc = mmrt_ckpt_write_manifest(stepdir, m, err, errlen);
  if (rc != MMRT_OK) return rc;
  char path[PATH_MAX], line[NAME_MAX + 2];
  snprintf(path, sizeof path, "%s/%s", root, MMRT_CKPT_POINTER);
  int n = snprintf(line, sizeof line, "%s\n", name);
  return mmrt_write_file_atomic(path, line, (size_t)n, err, errlen);
}

typedef struct StepDir {
  char name[NAME_MAX + 1];
  int64_t step;
  int complete;
} StepDir;

int mmrt_ckpt_prune(const char *root, int keep, char *err, size_t errlen) {
  if (keep < 1)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: keep %d, expected >= 1", root, keep);
  char live[NAME_MAX + 1];
  int rc = read_pointer(root, live, err, errlen), alt;
  if (rc != MMRT_OK) return rc;
  int64_t live_step = step_name(live, &alt);
  DIR *d = opendir(root);
  if (!d) return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot open: %s", root, strerror(errno));
  StepDir *v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, MMRT_CKPT_POINTER ".tmp.", strlen(MMRT_CKPT_POINTER ".tmp.")) == 0) {
      unlinkat(dirfd(d), e->d_name, 0); /* a killed writer's; ours is renamed already */
      continue;
    }
    int64_t st = step_name(e->d_name, &alt);
    if (st < 0 || strcmp(e->d_name, live) == 0) continue;
    if (n == cap) {
      StepDir *nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
      if (!nv) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", root);
        break;
      }
      v = nv;
    }
    char m[PATH_MAX];
    struct stat sb;
    snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
    snprintf(m, sizeof m, "%s/%s/manifest.json", root, e->d_name);
    v[n].step = st;
    v[n].complete = stat(m, &sb) == 0;
    n++;
  }
  closedir(d);
  /* a complete checkpoint of a later step than the live one is not this run's (it resumed from
   * an earlier one): kept, never removed by a run that has not passed it */
  for (size_t i = 0; i < n; i++)
    if (v[i].complete == 1 && v[i].step > live_step) v[i].complete = 2;
  /* keep the newest keep - 1 complete ones below the live step */
  for (int k = 1; k < keep && rc == MMRT_OK; k++) {
    size_t best = n;
    for (size_t i = 0; i < n; i++)
      if (v[i].complete == 1 && v[i].step < live_step && (best == n || v[i].step > v[best].step))
        best = i;
    if (best < n) v[best].complete = 2; /* kept */
  }
  for (size_t i = 0; i < n && rc == MMRT_OK; i++) {
    if (v[i].complete == 2) continue;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", root, v[i].name);
    rc = remove_dir(path, err, errlen);
  }
  free(v);
  return rc;
}

int mmrt_ckpt_discard(const char *root, const char *stepdir, char *err, size_t errlen) {
  const char *name = name_in(root, stepdir);
  int alt;
  if (!name || step_name(name, &alt) < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: not a step directory of %s", stepdir, root);
  char live[NAME_MAX + 1] = "";
  int rc = read_pointer(root, live, err, errlen);
  if (rc != MMRT_OK && rc != MMRT_ERR_NOTFOUND) return rc;
  if (strcmp(live, name) == 0) return MMRT_OK;
  return remove_dir(stepdir, err, errlen);
}

int mmrt_ckpt_write_manifest(const char *dir, const MmrtManifest *m, char *err, size_t errlen) {
  if (m->world_size < 1)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: world size %d, expected >= 1", dir,
                     m->world_size);
  char path[PATH_MAX], name[64];
  if ((size_t)snprintf(path, sizeof path, "%s/manifest.json", dir) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  json_object *o = json_object_new_object(), *files = json_object_new_array();
  json_object_object_add(o, "format", json_object_new_string("mmrt-checkpoint"));
  json_object_object_add(o, "version", json_object_new_int(1));
  json_object_object_add(o, "step", json_object_new_int64(m->step));
  json_object_object_add(o, "world_size", json_object_new_int(m->world_size));
  json_object_object_add(o, "fingerprint", json_object_new_string(m->fingerprint));
  for (int r = 0; r < m->world_size; r++) {
    snprintf(name, sizeof name, "rank-%05d.safetensors", r);
    json_object_array_add(files, json_object_new_string(name));
  }
  json_object_object_add(o, "files", files);
  const char *js = json_object_to_json_string_ext(
      o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
  size_t len = strlen(js);
  char *buf = malloc(len + 2);
  int rc;
  if (!buf) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
  } else {
    memcpy(buf, js, len);
    buf[len] = '\n';
    rc = mmrt_write_file_atomic(path, buf, len + 1, err, errlen);
    free(buf);
  }
  json_object_put(o);
  return rc;
}

int mmrt_ckpt_read_manifest(const char *dir, MmrtManifest *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/manifest.json", dir) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    int e = errno;
    return mmrt_errf(err, errlen, e == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                     "%s: cannot open checkpoint manifest: %s", path, strerror(e));
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = MMRT_OK;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      char *nb = cap <= (16u << 20) ? realloc(buf, cap + 1) : NULL;
      if (!nb) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: manifest too large", path);
        goto done;
      }
      buf = nb;
    }
    size_t r = fread(buf + len, 1, cap - len, fp);
    len += r;
    if (r == 0) break;
  }
  if (ferror(fp)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: read error", path);
    goto done;
  }
  buf[len] = 0;
  json_tokener *tok = json_tokener_new();
  if (!tok) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
    goto done;
  }
  json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  json_tokener_free(tok);
  if (!o || jerr != json_tokener_success || !json_object_is_type(o, json_type_object)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: manifest is not a JSON object: %s", path,
                   jerr == json_tokener_continue ? "unexpected end of file"
                                                 : json_tokener_error_desc(jerr));
    json_object_put(o);
    goto done;
  }
  json_object *v;
  if (!json_object_object_get_ex(o, "format", &v) ||
      strcmp(json_object_get_string(v), "mmrt-checkpoint") != 0 ||
      !json_object_object_get_ex(o, "version", &v) || json_object_get_int(v) != 1) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: expected \"format\": \"mmrt-checkpoint\", \"version\": 1", path);
  } else if (!json_object_object_get_ex(o, "step", &v) || !json_object_is_type(v, json_type_int) ||
             (m->step = json_object_get_int64(v)) < 0) {
    rc =
        mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: field 'step': expected an integer >= 0", path);
  } else if (!json_object_object_get_ex(o, "world_size", &v) ||
             !json_object_is_type(v, json_type_int) ||
             (m->world_size = json_object_get_int(v)) < 1) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: field 'world_size': expected an integer >= 1",
                   path);
  } else if (!json_object_object_get_ex(o, "fingerprint", &v) ||
             !json_object_is_type(v, json_type_string) ||
             strlen(json_object_get_string(v)) >= sizeof m->fingerprint) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: field 'fingerprint': expected a string shorter than %zu bytes", path,
                   sizeof m->fingerprint);
  } else {
    strcpy(m->fingerprint, json_object_get_string(v));
    json_object *files;
    if (!json_object_object_get_ex(o, "files", &files) ||
        !json_object_is_type(files, json_type_array) ||
        json_object_array_length(files) != (size_t)m->world_size) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: field 'files': expected an array of %d file names (world_size)", path,
                     m->world_size);
    } else {
      for (int r = 0; r < m->world_size && rc == MMRT_OK; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank-%05d.safetensors", r);
        const char *got = json_object_get_string(json_object_array_get_idx(files, r));
        if (!got || strcmp(got, want) != 0)
          rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: files[%d] is '%s', expected '%s'", path,
                         r, got ? got : "(not a string)", want);
      }
    }
  }
  json_object_put(o);
done:
  free(buf);
  fclose(fp);
  return rc;
}

/* Open the file of `rank` in dir and check it against manifest m: step,
 * rank, world size, fingerprint, a CRC32 for every tensor. */
static int open_rank_file(MmrtStFile **out, const char *dir, int rank, const MmrtManifest *m,
                          char *err, size_t errlen) {
  *out = NULL;
  char path[PATH_MAX];
  if ((size_t)mmrt_ckpt_rank_path(path, sizeof path, dir, rank) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  MmrtStFile *f;
  int rc;
  if ((rc = mmrt_st_open(&f, path, err, errlen)) != MMRT_OK) {
    /* a rank file named by the manifest is missing: damaged, not fresh */
    return rc == MMRT_ERR_NOTFOUND ? MMRT_ERR_FORMAT : rc;
  }
  int64_t step, rk, ws;
  if ((rc = mmrt_st_meta_int64(f, MMRT_CKPT_STEP, &step, err, errlen)) != MMRT_OK ||
      (rc = mmrt_st_meta_int64(f, MMRT_CKPT_RANK, &rk, err, errlen)) != MMRT_OK ||
      (rc = mmrt_st_meta_int64(f, MMRT_CKPT_WORLD, &ws, err, errlen)) != MMRT_OK) {
    mmrt_st_close(f);
    return rc == MMRT_ERR_NOTFOUND ? MMRT_ERR_FORMAT : rc;
  }
  const char *fp = mmrt_st_meta(f, MMRT_CKPT_FINGERPRINT);
  if (step != m->step || rk != rank || ws != m->world_size || !fp ||
      strcmp(fp, m->fingerprint) != 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                   "%s: metadata says step %" PRId64 ", rank %" PRId64 ", world size %" PRId64
                   ", fingerprint '%s'; expected step %" PRId64 ", rank %d, world "
                   "size %d, fingerprint '%s' from manifest.json (checkpoint left half "
                   "written?)",
                   path, step, rk, ws, fp ? fp : "(missing)", m->step, rank, m->world_size,
                   m->fingerprint);
    mmrt_st_close(f);
    return rc;
  }
  const char *bare;
  if (!mmrt_st_has_crcs(f, &bare)) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: tensor '%s' has no CRC32 in the metadata (key '%s%s'); a checkpoint "
                   "file has one for every tensor",
                   path, bare, MMRT_ST_CRC_PREFIX, bare);
    mmrt_st_close(f);
    return rc;
  }
  *out = f;
  return MMRT_OK;
}

/* Whether two fingerprints are of the same model: "<name>-<hash>" compares
 * by the hash alone (codegen hashes the parameters and inputs, not the
 * model's name: a model that extends another with another plan alone, a
 * stage list, takes its checkpoints); one without '-' as a whole. */
static int same_model(const char *a, const char *b) {
  const char *x = strrchr(a, '-'), *y = strrchr(b, '-');
  return x && y ? strcmp(x, y) == 0 : strcmp(a, b) == 0;
}

/* Resolve root, read its manifest and compare the fingerprint (NULL: not
 * compared). */
static int open_manifest(const char *root, const char *fingerprint, char *dir, size_t dirlen,
                         MmrtManifest *m, char *err, size_t errlen) {
  int rc = mmrt_ckpt_resolve(root, dir, dirlen, err, errlen);
  if (rc != MMRT_OK) return rc;
  if ((rc = mmrt_ckpt_read_manifest(dir, m, err, errlen)) != MMRT_OK)
    return rc == MMRT_ERR_NOTFOUND ? MMRT_ERR_FORMAT : rc; /* the pointer names it */
  if (fingerprint && !same_model(m->fingerprint, fingerprint))
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s/manifest.json: model fingerprint is '%s', expected '%s' (the "
                     "checkpoint is of another model: other parameters, shapes or inputs)",
                     dir, m->fingerprint, fingerprint);
  return MMRT_OK;
}

int mmrt_ckpt_open_rank(MmrtStFile **out, const char *root, int rank, const MmrtManifest *expect,
                        MmrtManifest *found, char *err, size_t errlen) {
  *out = NULL;
  MmrtManifest m;
  char dir[PATH_MAX];
  int rc = open_manifest(root, expect->fingerprint, dir, sizeof dir, &m, err, errlen);
  if (found && (rc == MMRT_OK || rc == MMRT_ERR_MISMATCH)) *found = m;
  if (rc != MMRT_OK) return rc;
  if (m.world_size != expect->world_size)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s/manifest.json: world size is %d, expected %d (this run's ranks)", dir,
                     m.world_size, expect->world_size);
  if (rank < 0 || rank >= m.world_size)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: rank %d outside world size %d", dir, rank,
                     m.world_size);
  return open_rank_file(out, dir, rank, &m, err, errlen);
}

/* ---- pieces of logical tensors ---- */

int mmrt_slice_format(char *buf, size_t len, const MmrtSlice *s) {
  const int64_t *v[3] = {s->global, s->first, s->len};
  static const char *key[3] = {"global", "first", "len"};
  size_t pos = 0;
  for (int k = 0; k < 3; k++) {
    pos += (size_t)snprintf(buf + (pos < len ? pos : len), pos < len ? len - pos : 0, "%s%s=[",
                            k ? " " : "", key[k]);
    for (int d = 0; d < s->ndim; d++)
      pos += (size_t)snprintf(buf + (pos < len ? pos : len), pos < len ? len - pos : 0,
                              "%s%" PRId64, d ? "," : "", v[k][d]);
    pos += (size_t)snprintf(buf + (pos < len ? pos : len), pos < len ? len - pos : 0, "]");
  }
  return (int)pos;
}

/* "key=[a,b,...]" at *p, ndim numbers; advances *p.  0 on a mismatch. */
static int parse_dims(const char **p, const char *key, int ndim, int64_t *out) {
  size_t k = strlen(key);
  while (**p == ' ') (*p)++;
  if (strncmp(*p, key, k) != 0 || (*p)[k] != '=' || (*p)[k + 1] != '[') return 0;
  const char *q = *p + k + 2;
  for (int d = 0; d < ndim; d++) {
    if (d && *q++ != ',') return 0;
    char *end;
    errno = 0;
    long long x = strtoll(q, &end, 10);
    if (end == q || errno || x < 0 || *q == '-' || *q == '+') return 0;
    out[d] = x;
    q = end;
  }
  if (*q++ != ']') return 0;
  *p = q;
  return 1;
}

int mmrt_st_slice(const MmrtStFile *f, int i, MmrtSlice *out, char *err, size_t errlen) {
  const Entry *e = &f->e[i];
  char key[600];
  snprintf(key, sizeof key, "%s%s", MMRT_CKPT_SLICE_PREFIX, e->name);
  const char *v = mmrt_st_meta(f, key);
  out->ndim = e->ndim;
  if (!v) { /* whole */
    for (int d = 0; d < e->ndim; d++) out->global[d] = out->len[d] = e->shape[d], out->first[d] = 0;
    return MMRT_OK;
  }
  const char *p = v;
  if (!parse_dims(&p, "global", e->ndim, out->global) ||
      !parse_dims(&p, "first", e->ndim, out->first) || !parse_dims(&p, "len", e->ndim, out->len) ||
      *p)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: metadata '%s' is '%s', expected 'global=[..] first=[..] len=[..]' with "
                     "%d numbers each",
                     f->path, key, v, e->ndim);
  int empty = 0;
  for (int d = 0; d < e->ndim; d++) empty |= out->len[d] == 0;
  for (int d = 0; d < e->ndim; d++)
    if (out->first[d] + out->len[d] > out->global[d] || (!empty && out->len[d] != e->shape[d]))
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s: metadata '%s' is '%s': dim %d does not fit the global shape or the "
                       "stored piece (%" PRId64 " elements)",
                       f->path, key, v, d, e->shape[d]);
  return MMRT_OK;
}

struct MmrtCkpt {
  char dir[PATH_MAX];
  int n;
  MmrtStFile **f;
};

void mmrt_ckpt_close(MmrtCkpt *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) mmrt_st_close(c->f[i]);
  free(c->f);
  free(c);
}

int mmrt_ckpt_nfiles(const MmrtCkpt *c) {
  return c->n;
}

MmrtStFile *mmrt_ckpt_file(const MmrtCkpt *c, int rank) {
  return rank >= 0 && rank < c->n ? c->f[rank] : NULL;
}

const char *mmrt_ckpt_dir(const MmrtCkpt *c) {
  return c->dir;
}

int mmrt_ckpt_open_all(MmrtCkpt **out, const char *root, const char *fingerprint,
                       MmrtManifest *found, char *err, size_t errlen) {
  *out = NULL;
  MmrtCkpt *c = calloc(1, sizeof *c);
  if (!c) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", root);
  MmrtManifest m;
  int rc = open_manifest(root, fingerprint, c->dir, sizeof c->dir, &m, err, errlen);
  if (rc == MMRT_OK && !(c->f = calloc((size_t)m.world_size, sizeof *c->f)))
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", root);
  for (int r = 0; rc == MMRT_OK && r < m.world_size; r++, c->n++)
    rc = open_rank_file(&c->f[r], c->dir, r, &m, err, errlen);
  if (rc != MMRT_OK) {
    mmrt_ckpt_close(c);
    return rc;
  }
  if (found) *found = m;
  *out = c;
  return MMRT_OK;
}

/* Copies the elements of box [lo, hi) from a piece (src, at slice s) into
 * the wanted slice (dst, at w) that are not filled yet (got), marking them;
 * returns how many it copied. */
static int64_t copy_box(const MmrtSlice *s, const uint8_t *src, const MmrtSlice *w, uint8_t *dst,
                        uint8_t *got, const int64_t *lo, const int64_t *hi, size_t es) {
  int r = w->ndim;
  int64_t sstr[MMRT_ST_MAX_DIMS], dstr[MMRT_ST_MAX_DIMS], idx[MMRT_ST_MAX_DIMS], n = 0;
  for (int d = r - 1, a = 1, b = 1; d >= 0; d--)
    sstr[d] = a, dstr[d] = b, a *= s->len[d], b *= w->len[d];
  for (int d = 0; d < r; d++) idx[d] = lo[d];
  int64_t run = r ? hi[r - 1] - lo[r - 1] : 1;
  for (;;) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < r; d++)
      so += (idx[d] - s->first[d]) * sstr[d], dof += (idx[d] - w->first[d]) * dstr[d];
    for (int64_t j = 0; j < run; j++)
      if (!got[dof + j]) {
        memcpy(dst + (size_t)(dof + j) * es, src + (size_t)(so + j) * es, es);
        got[dof + j] = 1, n++;
      }
    int d = r - 2;
    for (; d >= 0 && ++idx[d] == hi[d]; d--) idx[d] = lo[d];
    if (d < 0) break;
  }
  return n;
}

int mmrt_ckpt_read_slice(MmrtCkpt *c, const MmrtTensorRef *t, const MmrtSlice *want, int first,
                         char *err, size_t errlen) {
  int r = t->ndim;
  size_t es = mmrt_st_dtype_size(t->dtype);
  int64_t need = 1;
  for (int d = 0; d < r; d++) need *= want->len[d];
  if (need == 0) return MMRT_OK; /* this rank holds none of it (padding alone) */
  for (int d = 0; d < r; d++)
    if (t->shape[d] != want->len[d] || want->ndim != r)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: tensor '%s': the buffer is not the slice",
                       c->dir, t->name);
  uint8_t *got = calloc((size_t)need, 1);
  if (!got) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", c->dir);
  int64_t have = 0, holders = 0;
  int rc = MMRT_OK;
  if (first < 0 || first >= c->n) first = 0;
  for (int k = 0; k < c->n && have < need && rc == MMRT_OK; k++) {
    MmrtStFile *f = c->f[(first + k) % c->n];
    int i = mmrt_st_find(f, t->name);
    if (i < 0) continue;
    holders++;
    MmrtSlice s;
    if ((rc = mmrt_st_slice(f, i, &s, err, errlen)) != MMRT_OK) break;
    int same = f->e[i].dtype == t->dtype && s.ndim == r;
    for (int d = 0; same && d < r; d++) same = s.global[d] == want->global[d];
    if (!same) {
      char a[160], b[160];
      shape_str(a, sizeof a, s.ndim, s.global);
      shape_str(b, sizeof b, r, want->global);
      rc = mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s: tensor '%s' is a piece of %s %s, expected %s %s", f->path, t->name,
                     dtypes[f->e[i].dtype].name, a, mmrt_st_dtype_name(t->dtype), b);
      break;
    }
    int64_t lo[MMRT_ST_MAX_DIMS], hi[MMRT_ST_MAX_DIMS], box = 1;
    for (int d = 0; d < r; d++) {
      lo[d] = s.first[d] > want->first[d] ? s.first[d] : want->first[d];
      int64_t e1 = s.first[d] + s.len[d], e2 = want->first[d] + want->len[d];
      hi[d] = e1 < e2 ? e1 : e2;
      box *= hi[d] > lo[d] ? hi[d] - lo[d] : 0;
    }
    if (!box) continue;
    int exact = have == 0;
    for (int d = 0; exact && d < r; d++)
      exact = s.first[d] == want->first[d] && s.len[d] == want->len[d];
    if (exact) { /* the piece is the slice (the same plan): read it in place */
      rc = mmrt_st_read(f, t, err, errlen);
      have = need;
      break;
    }
    MmrtTensorRef piece = {.name = t->name, .dtype = t->dtype, .ndim = r};
    for (int d = 0; d < r; d++) piece.shape[d] = s.len[d];
    void *buf = malloc(mmrt_tensor_bytes(&piece) ? mmrt_tensor_bytes(&piece) : 1);
    if (!buf) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", c->dir);
      break;
    }
    piece.data = buf;
    rc = mmrt_st_read(f, &piece, err, errlen); /* checks the CRC32 */
    if (rc == MMRT_OK) have += copy_box(&s, buf, want, t->data, got, lo, hi, es);
    free(buf);
  }
  free(got);
  if (rc != MMRT_OK) return rc;
  if (!holders)
    return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "%s: no rank file holds tensor '%s'", c->dir,
                     t->name);
  if (have < need)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s: tensor '%s': %" PRId64 " of the %" PRId64
                     " elements this rank needs are in no rank file",
                     c->dir, t->name, need - have, need);
  return MMRT_OK;
}

/* ---- output paths, checked before a run's work ---- */

/* A file can be created in dir: a temporary created there and removed. */
static int probe_dir(const char *flag, const char *path, const char *dir, char *err,
                     size_t errlen) {
  char tmp[PATH_MAX];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/.mmrt-probe.%ld", dir, (long)getpid()) >= sizeof tmp)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s %s: path too long", flag, path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s %s: cannot create a file in %s: %s", flag, path,
                     dir, strerror(errno));
  close(fd);
  unlink(tmp);
  return MMRT_OK;
}

int mmrt_probe_output(const char *flag, const char *path, int kind, const char *const *inputs,
                      int ninputs, char *err, size_t errlen) {
  struct stat st;
  if (!path || !*path) return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: an empty path", flag);
  int exists = stat(path, &st) == 0;
  if (!exists && errno != ENOENT)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s %s: %s", flag, path, strerror(errno));
  for (int i = 0; exists && i < ninputs; i++) {
    struct stat in;
    if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "%s %s: is the input %s too; write the output somewhere else", flag, path,
                       inputs[i]);
  }
  if (kind == MMRT_OUT_DIR) {
    if (exists && !S_ISDIR(st.st_mode))
      return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s %s: is %s, expected a directory", flag, path,
                       mmrt_file_kind(st.st_mode));
    if (!exists) {
      int rc = mkdir_p(path, err, errlen);
      if (rc != MMRT_OK) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", err);
        return mmrt_errf(err, errlen, rc, "%s %s", flag, inner);
      }
    }
    return probe_dir(flag, path, path, err, errlen);
  }
  if (exists && S_ISDIR(st.st_mode))
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s %s: is a directory, expected a file", flag,
                     path);
  if (exists && !S_ISREG(st.st_mode) &&
      !(kind == MMRT_OUT_STREAM && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))))
    return mmrt_errf(err, errlen, MMRT_ERR_IO,
                     "%s %s: is %s, not a regular file (the output replaces the file whole)", flag,
                     path, mmrt_file_kind(st.st_mode));
  if (exists && !S_ISREG(st.st_mode)) return MMRT_OK; /* a FIFO or a terminal, appended to */
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  int dl = !slash ? 0 : slash == path ? 1 : (int)(slash - path);
  if ((size_t)snprintf(dir, sizeof dir, "%.*s", slash ? dl : 1, slash ? path : ".") >= sizeof dir)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s %s: path too long", flag, path);
  if (slash && !slash[1])
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s %s: ends in '/', expected a file name", flag,
                     path);
  struct stat ds;
  if (stat(dir, &ds) != 0)
    return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND, "%s %s: the directory %s does not exist", flag,
                     path, dir);
  if (!S_ISDIR(ds.st_mode))
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s %s: %s is %s, not a directory", flag, path, dir,
                     mmrt_file_kind(ds.st_mode));
  if (kind == MMRT_OUT_STREAM && exists) { /* written in place */
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
      return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s %s: cannot append: %s", flag, path,
                       strerror(errno));
    close(fd);
    return MMRT_OK;
  }
  return probe_dir(flag, path, dir, err, errlen);
}

/* ---- the lock of a checkpoint directory ---- */

/* Whether process pid of this host runs (a zombie does not). */
static int alive(long pid) {
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return !(p && p[1] == ' ' && p[2] == 'Z');
}

int mmrt_ckpt_lock(const char *root, long *stale, char *err, size_t errlen) {
  char path[PATH_MAX], host[256] = "", line[400];
  *stale = 0;
  if ((size_t)snprintf(path, sizeof path, "%s/%s", root, MMRT_CKPT_LOCK) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", root);
  gethostname(host, sizeof host - 1);
  int n = snprintf(line, sizeof line, "%s %ld\n", host, (long)getpid());
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      int ok = write(fd, line, (size_t)n) == n;
      ok &= close(fd) == 0;
      if (!ok) {
        unlink(path);
        return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot write the lock: %s", path,
                         strerror(errno));
      }
      return MMRT_OK;
    }
    if (errno != EEXIST)
      return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot create the lock: %s", path,
                       strerror(errno));
    char buf[400] = "", who[256] = "";
    long pid = 0;
    FILE *f = fopen(path, "r");
    if (f) {
      if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
      fclose(f);
    }
    if (sscanf(buf, "%255s %ld", who, &pid) != 2 || pid <= 0)
      return mmrt_errf(err, errlen, MMRT_ERR_IO,
                       "%s: a lock that does not name its holder ('host pid'); another trainer "
                       "may be writing there (remove the file if none is)",
                       path);
    int dead = strcmp(who, host) == 0 && !alive(pid);
    if (!dead)
      return mmrt_errf(err, errlen, MMRT_ERR_IO,
                       "%s: held by process %ld on host %s: another trainer is writing "
                       "checkpoints there (remove the file if it is not running)",
                       path, pid, who);
    *stale = pid; /* its holder died without removing it: take it over */
    if (unlink(path) != 0 && errno != ENOENT)
      return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot remove the stale lock: %s", path,
                       strerror(errno));
  }
  return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: another process took the lock", path);
}

void mmrt_ckpt_unlock(const char *root) {
  char path[PATH_MAX], buf[400] = "", host[256] = "", who[256] = "";
  long pid = 0;
  snprintf(path, sizeof path, "%s/%s", root, MMRT_CKPT_LOCK);
  gethostname(host, sizeof host - 1);
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  fclose(f);
  if (sscanf(buf, "%255s %ld", who, &pid) == 2 && pid == (long)getpid() && !strcmp(who, host))
    unlink(path);
}

int mmrt_ckpt_leftover(const char *root, char *name, size_t len) {
  DIR *d = opendir(root);
  if (!d) return 0;
  struct dirent *e;
  int found = 0;
  while (!found && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, MMRT_CKPT_LOCK) ||
        !strncmp(e->d_name, ".mmrt-probe.", 12) ||
        !strncmp(e->d_name, MMRT_CKPT_POINTER ".tmp.", strlen(MMRT_CKPT_POINTER ".tmp.")))
      continue;
    /* a step directory without its manifest is a write that was cut off
     * (a run killed during its first checkpoint): nothing to resume, and
     * the next checkpoint's pruning removes it */
    int alt;
    char m[PATH_MAX];
    struct stat sb;
    snprintf(m, sizeof m, "%s/%s/manifest.json", root, e->d_name);
    if (step_name(e->d_name, &alt) >= 0 && stat(m, &sb) != 0) continue;
    snprintf(name, len, "%s", e->d_name);
    found = 1;
  }
  closedir(d);
  return found;
}

int mmrt_out_begin(MmrtOut *o, const char *path, char *err, size_t errlen) {
  o->f = NULL;
  o->path = path;
  if ((size_t)snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof o->tmp)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", path);
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return mmrt_errf(err, errlen, MMRT_ERR_IO,
                     "%s: is %s, not a regular file; refusing to replace it", path,
                     mmrt_file_kind(st.st_mode));
  if (!(o->f = fopen(o->tmp, "wb")))
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot create temporary file %s: %s", path,
                     o->tmp, strerror(errno));
  return MMRT_OK;
}

int mmrt_out_finish(MmrtOut *o, int ok, char *err, size_t errlen) {
  if (!o->f) return MMRT_OK;
  int e = 0;
  if (ferror(o->f)) e = EIO;
  if (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0) e = e ? e : errno;
  if (fclose(o->f) != 0) e = e ? e : errno;
  o->f = NULL;
  if (ok && !e && rename(o->tmp, o->path) != 0) e = errno;
  if (!ok || e) unlink(o->tmp);
  if (ok && e)
    return mmrt_errf(err, errlen, MMRT_ERR_IO,
                     "%s: writing %s failed: %s; any existing %s is "
                     "unchanged",
                     o->path, o->tmp, strerror(e), o->path);
  if (ok) fsync_dir_of(o->path);
  return MMRT_OK;
}
