/* mmrt_features.c: caption ids and the features directory (mmrt_features.h). */
#include "mmrt_features.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FEAT_FORMAT "mmc-features"

static int cmp_word(const void *a, const void *b) {
  return strcmp(a, b);
}

void mmrt_dit_vocab(MmrtTokenizer *tok) {
  memset(tok, 0, sizeof *tok);
  strcpy(tok->words[MMRT_DIT_PAD], "<pad>"), strcpy(tok->words[MMRT_DIT_EOS], "<eos>");
  int n = 2;
  for (int label = 0; label < 10; label++)
    for (int dir = 0; dir < MMRT_VIDEO_NDIRS; dir++) {
      char buf[96];
      MmrtClipInfo ci = {.label = label, .dir = dir};
      mmrt_video_caption(&ci, buf, sizeof buf);
      for (char *w = strtok(buf, " "); w; w = strtok(NULL, " ")) {
        int k = 2;
        while (k < n && strcmp(tok->words[k], w) != 0) k++;
        if (k == n && n < MMRT_TOK_MAX) snprintf(tok->words[n++], MMRT_TOK_WORD, "%s", w);
      }
    }
  qsort(tok->words[2], (size_t)n - 2, MMRT_TOK_WORD, cmp_word);
  tok->size = n;
}

void mmrt_dit_caption_ids(const MmrtTokenizer *tok, const MmrtClipInfo *ci, int drop, int32_t *ids,
                          int64_t L) {
  char buf[96];
  mmrt_video_caption(ci, buf, sizeof buf);
  mmrt_dit_text_ids(tok, buf, drop, ids, L);
}

int mmrt_dit_text_ids(const MmrtTokenizer *tok, const char *text, int drop, int32_t *ids,
                      int64_t L) {
  int n = 0, unknown = 0;
  for (int64_t i = 0; i < L; i++) ids[i] = MMRT_DIT_PAD;
  for (const char *p = text; !drop && *p && n < L - 1;) {
    while (*p == ' ') p++;
    size_t len = strcspn(p, " ");
    if (!len) break;
    int found = 0;
    for (int k = 2; k < tok->size && !found; k++)
      if (strlen(tok->words[k]) == len && !strncmp(tok->words[k], p, len)) ids[n++] = k, found = 1;
    unknown += !found;
    p += len;
  }
  ids[n] = MMRT_DIT_EOS;
  return unknown;
}

/* ---- the model's fingerprint for features ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static uint64_t fnv_tensor(const MmrtTensorDesc *t) {
  uint64_t h = fnv(1469598103934665603ull, t->name, strlen(t->name) + 1);
  int64_t v[3 + MMRT_DESC_MAX_DIMS] = {t->dtype, t->ndim, t->frozen};
  for (int64_t d = 0; d < t->ndim; d++) v[3 + d] = d == 0 ? t->rows : t->shape[d];
  return fnv(h, v, sizeof v);
}

void mmrt_features_fingerprint(const MmrtModelDesc *m, char *out, size_t n) {
  uint64_t h = fnv(1469598103934665603ull, m->name, strlen(m->name) + 1), ps = 0;
  for (int64_t i = 0; i < m->nparams; i++) /* in any order: a plan may list them otherwise */
    if (m->params[i].arena == MMRT_ARENA_PARAM) ps += fnv_tensor(&m->params[i]);
  h = fnv(h, &ps, sizeof ps);
  static const char *const in[2] = {"latents", "text_features"};
  for (int k = 0; k < 2; k++) {
    const MmrtTensorDesc *t = mmrt_desc_input(m, in[k]);
    uint64_t x = t ? fnv_tensor(t) : 0;
    h = fnv(h, &x, sizeof x);
  }
  snprintf(out, n, "%s-%016llx", m->name, (unsigned long long)h);
}

/* ---- memory ---- */

static int split_alloc(MmrtFeatSplit *s, const MmrtFeatures *f, int64_t n) {
  size_t k = (size_t)(n > 0 ? n : 1);
  s->clips = n;
  s->latents = malloc(sizeof(float) * k * (size_t)f->lat);
  s->text_features = malloc(sizeof(float) * k * (size_t)(f->L * f->D));
  s->text = malloc(sizeof(int32_t) * k * (size_t)f->L);
  s->label = malloc(sizeof(int32_t) * k);
  return s->latents && s->text_features && s->text && s->label;
}

static void split_free(MmrtFeatSplit *s) {
  free(s->latents), free(s->text_features), free(s->text), free(s->label);
  memset(s, 0, sizeof *s);
}

int mmrt_features_alloc(MmrtFeatures *f, int64_t train, int64_t heldout, char *err, size_t errlen) {
  f->null_features = calloc((size_t)(f->L * f->D), sizeof(float));
  f->null_text = calloc((size_t)f->L, sizeof(int32_t));
  if (!split_alloc(&f->train, f, train) || !split_alloc(&f->heldout, f, heldout) ||
      !f->null_features || !f->null_text)
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory for the features of %lld clips",
                     (long long)(train + heldout));
  return MMRT_OK;
}

void mmrt_features_free(MmrtFeatures *f) {
  split_free(&f->train), split_free(&f->heldout);
  free(f->null_features), free(f->null_text);
  f->null_features = NULL, f->null_text = NULL;
}

/* ---- the shards' tensors ---- */

enum { T_LATENTS, T_TEXT_FEATURES, T_TEXT, T_LABEL, T_N };
static const char *const tname[T_N] = {"latents", "text_features", "text", "label"};

/* The tensors of rows [first, first + n) of s (null: the null caption, n = 1). */
static int shard_refs(const MmrtFeatures *f, const MmrtFeatSplit *s, int64_t first, int64_t n,
                      MmrtTensorRef *r) {
  memset(r, 0, sizeof *r * T_N);
  for (int k = 0; k < T_N; k++) r[k].name = tname[k], r[k].shape[0] = n;
  r[T_LATENTS].dtype = r[T_TEXT_FEATURES].dtype = MMRT_ST_F32;
  r[T_TEXT].dtype = r[T_LABEL].dtype = MMRT_ST_I32;
  r[T_LATENTS].ndim = 5;
  for (int d = 0; d < 4; d++) r[T_LATENTS].shape[1 + d] = f->lat_shape[d];
  r[T_TEXT_FEATURES].ndim = 3, r[T_TEXT_FEATURES].shape[1] = f->L,
  r[T_TEXT_FEATURES].shape[2] = f->D;
  r[T_TEXT].ndim = 2, r[T_TEXT].shape[1] = f->L;
  r[T_LABEL].ndim = 1;
  if (!s) { /* the null caption: text_features and text only (null_refs) */
    r[T_TEXT_FEATURES].data = f->null_features, r[T_TEXT].data = f->null_text;
    return T_N;
  }
  r[T_LATENTS].data = s->latents + first * f->lat;
  r[T_TEXT_FEATURES].data = s->text_features + first * f->L * f->D;
  r[T_TEXT].data = s->text + first * f->L;
  r[T_LABEL].data = s->label + first;
  return T_N;
}

static int null_refs(const MmrtFeatures *f, MmrtTensorRef *r) {
  MmrtTensorRef all[T_N];
  shard_refs(f, NULL, 0, 1, all);
  r[0] = all[T_TEXT_FEATURES], r[1] = all[T_TEXT];
  return 2;
}

static json_object *crcs_of(const MmrtTensorRef *r, int n) {
  json_object *o = json_object_new_object();
  char hex[16];
  for (int k = 0; k < n; k++) {
    size_t bytes = mmrt_tensor_bytes(&r[k]);
    snprintf(hex, sizeof hex, "%08x", bytes ? (unsigned)crc32_z(0, r[k].data, bytes) : 0u);
    json_object_object_add(o, r[k].name, json_object_new_string(hex));
  }
  return o;
}

static int write_split(const char *dir, const char *prefix, const MmrtFeatures *f,
                       const MmrtFeatSplit *s, int64_t shard, json_object *out, char *err,
                       size_t errlen) {
  json_object *shards = json_object_new_array();
  json_object_object_add(out, "clips", json_object_new_int64(s->clips));
  json_object_object_add(out, "shards", shards);
  for (int64_t first = 0, k = 0; first < s->clips; first += shard, k++) {
    int64_t n = s->clips - first < shard ? s->clips - first : shard;
    char file[64], path[PATH_MAX];
    snprintf(file, sizeof file, "%s-%05lld.safetensors", prefix, (long long)k);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
    MmrtTensorRef r[T_N];
    int nt = shard_refs(f, s, first, n, r);
    int rc = mmrt_st_save_crc(path, r, nt, NULL, 0, err, errlen);
    if (rc != MMRT_OK) return rc;
    json_object *e = json_object_new_object();
    json_object_object_add(e, "file", json_object_new_string(file));
    json_object_object_add(e, "first", json_object_new_int64(first));
    json_object_object_add(e, "clips", json_object_new_int64(n));
    json_object_object_add(e, "crc32", crcs_of(r, nt));
    json_object_array_add(shards, e);
  }
  return MMRT_OK;
}

static json_object *shape_json(const MmrtTensorRef *r) {
  json_object *o = json_object_new_object(), *sh = json_object_new_array();
  json_object_object_add(o, "dtype", json_object_new_string(mmrt_st_dtype_name(r->dtype)));
  for (int d = 1; d < r->ndim; d++) json_object_array_add(sh, json_object_new_int64(r->shape[d]));
  json_object_object_add(o, "shape", sh);
  return o;
}

int mmrt_features_write(const char *dir, const MmrtFeatures *f, const MmrtModelDesc *m,
                        const char *init_from, uint32_t encoder_crc, int64_t shard, char *err,
                        size_t errlen) {
  char path[PATH_MAX], hex[16];
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
  if ((size_t)snprintf(path, sizeof path, "%s/manifest.json", dir) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  remove(path); /* a half-rewritten directory is no features directory */
  json_object *o = json_object_new_object(), *tensors = json_object_new_object(),
              *train = json_object_new_object(), *held = json_object_new_object(),
              *null = json_object_new_object();
  json_object_object_add(o, "format", json_object_new_string(FEAT_FORMAT));
  json_object_object_add(o, "version", json_object_new_int(1));
  json_object_object_add(o, "model", json_object_new_string(m->name));
  char fpr[160];
  mmrt_features_fingerprint(m, fpr, sizeof fpr);
  json_object_object_add(o, "fingerprint", json_object_new_string(fpr));
  json_object_object_add(o, "seed", json_object_new_int64((int64_t)f->seed));
  json_object_object_add(o, "heldout_seed", json_object_new_int64(MMRT_VIDEO_HELDOUT_SEED));
  json_object_object_add(o, "frames", json_object_new_int(f->frames));
  json_object_object_add(o, "init_from",
                         init_from ? json_object_new_string(init_from) : json_object_new_null());
  snprintf(hex, sizeof hex, "%08x", (unsigned)encoder_crc);
  json_object_object_add(o, "encoder_crc32", json_object_new_string(hex));
  MmrtTensorRef r[T_N];
  shard_refs(f, &f->train, 0, 1, r);
  for (int k = 0; k < T_N; k++) json_object_object_add(tensors, tname[k], shape_json(&r[k]));
  json_object_object_add(o, "tensors", tensors);
  json_object_object_add(o, "train", train);
  json_object_object_add(o, "heldout", held);
  json_object_object_add(o, "null", null);
  int rc = write_split(dir, "train", f, &f->train, shard, train, err, errlen);
  if (rc == MMRT_OK) rc = write_split(dir, "heldout", f, &f->heldout, shard, held, err, errlen);
  if (rc == MMRT_OK) {
    char np[PATH_MAX];
    snprintf(np, sizeof np, "%s/null.safetensors", dir);
    int nt = null_refs(f, r);
    rc = mmrt_st_save_crc(np, r, nt, NULL, 0, err, errlen);
    json_object_object_add(null, "file", json_object_new_string("null.safetensors"));
    json_object_object_add(null, "crc32", crcs_of(r, nt));
  }
  if (rc == MMRT_OK) {
    const char *js = json_object_to_json_string_ext(
        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    rc = mmrt_write_file_atomic(path, js, strlen(js), err, errlen);
  }
  json_object_put(o);
  return rc;
}

/* ---- reading ---- */

static json_object *field(json_object *o, const char *key, json_type t) {
  json_object *v = NULL;
  return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, t) ? v : NULL;
}

/* A shard's tensors into r (sizes set), checked against the manifest's CRCs. */
static int read_shard(const char *dir, json_object *e, MmrtTensorRef *r, int nt, char *err,
                      size_t errlen) {
  json_object *file = field(e, "file", json_type_string),
              *crc = field(e, "crc32", json_type_object);
  char path[PATH_MAX];
  if (!file || !crc || strchr(json_object_get_string(file), '/'))
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s/manifest.json: a shard without a plain \"file\" or its \"crc32\"", dir);
  snprintf(path, sizeof path, "%s/%s", dir, json_object_get_string(file));
  MmrtStFile *f = NULL;
  int rc = mmrt_st_open(&f, path, err, errlen);
  if (rc == MMRT_ERR_NOTFOUND)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: missing (%s/manifest.json names it): the features directory is "
                     "damaged; extract it again",
                     path, dir);
  for (int k = 0; k < nt && rc == MMRT_OK; k++) {
    json_object *want = field(crc, r[k].name, json_type_string);
    char key[64];
    snprintf(key, sizeof key, MMRT_ST_CRC_PREFIX "%s", r[k].name);
    const char *have = mmrt_st_meta(f, key);
    if (!want || !have || strcmp(json_object_get_string(want), have) != 0)
      rc = mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "%s: tensor '%s' has CRC32 %s, %s/manifest.json says %s (a shard of "
                     "another extraction?)",
                     path, r[k].name, have ? have : "(none)", dir,
                     want ? json_object_get_string(want) : "(none)");
    else
      rc = mmrt_st_read(f, &r[k], err, errlen);
  }
  mmrt_st_close(f);
  return rc;
}

/* Before anything is allocated for a split: its shards continue one another
 * up to `total` clips, and each file is large enough for its clips (so a
 * damaged manifest cannot size a huge allocation). */
static int check_shards(const char *dir, const char *key, const MmrtFeatures *f,
                        json_object *shards, int64_t total, char *err, size_t errlen) {
  int64_t next = 0, per = 4 * (f->lat + f->L * f->D + f->L + 1); /* bytes of one clip */
  for (size_t i = 0; i < json_object_array_length(shards); i++) {
    json_object *e = json_object_array_get_idx(shards, i);
    json_object *first = field(e, "first", json_type_int), *n = field(e, "clips", json_type_int),
                *file = field(e, "file", json_type_string);
    int64_t k = n ? json_object_get_int64(n) : 0;
    if (!first || json_object_get_int64(first) != next || k < 1 || k > total - next)
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s/manifest.json: shard %zu of \"%s\" does not continue at clip %lld "
                       "within its %lld clips",
                       dir, i, key, (long long)next, (long long)total);
    char path[PATH_MAX];
    struct stat st;
    if (!file || strchr(json_object_get_string(file), '/'))
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s/manifest.json: a shard without a plain \"file\" or its \"crc32\"", dir);
    snprintf(path, sizeof path, "%s/%s", dir, json_object_get_string(file));
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s: missing or not a file (%s/manifest.json names it): the features "
                       "directory is damaged; extract it again",
                       path, dir);
    if (st.st_size / per < k)
      return mmrt_errf(
          err, errlen, MMRT_ERR_FORMAT,
          "%s: truncated: %lld bytes hold fewer than the %lld clips %s/manifest.json gives it",
          path, (long long)st.st_size, (long long)k, dir);
    next += k;
  }
  if (next != total)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s/manifest.json: the shards of \"%s\" hold %lld clips, not %lld", dir, key,
                     (long long)next, (long long)total);
  return MMRT_OK;
}

static int read_split(const char *dir, const char *key, MmrtFeatures *f, MmrtFeatSplit *s,
                      json_object *o, char *err, size_t errlen) {
  json_object *sp = field(o, key, json_type_object), *clips = field(sp, "clips", json_type_int),
              *shards = field(sp, "shards", json_type_array);
  if (!clips || !shards || json_object_get_int64(clips) < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s/manifest.json: \"%s\" needs \"clips\" (>= 0) and \"shards\"", dir, key);
  int rc = check_shards(dir, key, f, shards, json_object_get_int64(clips), err, errlen);
  if (rc != MMRT_OK) return rc;
  if (!split_alloc(s, f, json_object_get_int64(clips)))
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  int64_t next = 0;
  for (size_t i = 0; i < json_object_array_length(shards) && rc == MMRT_OK; i++) {
    json_object *e = json_object_array_get_idx(shards, i);
    int64_t n = json_object_get_int64(field(e, "clips", json_type_int));
    MmrtTensorRef r[T_N];
    int nt = shard_refs(f, s, next, n, r);
    rc = read_shard(dir, e, r, nt, err, errlen);
    next += n;
  }
  return rc;
}

/* 1 when the manifest's one-clip entry `name` is dtype with the dims of r[1..]. */
static int entry_is(json_object *tensors, const MmrtTensorRef *r) {
  json_object *e = field(tensors, r->name, json_type_object),
              *dt = field(e, "dtype", json_type_string), *sh = field(e, "shape", json_type_array);
  if (!dt || !sh || strcmp(json_object_get_string(dt), mmrt_st_dtype_name(r->dtype)) ||
      json_object_array_length(sh) != (size_t)(r->ndim - 1))
    return 0;
  for (int d = 1; d < r->ndim; d++)
    if (json_object_get_int64(json_object_array_get_idx(sh, (size_t)d - 1)) != r->shape[d])
      return 0;
  return 1;
}

int mmrt_features_read(const char *dir, MmrtFeatures *f, const MmrtModelDesc *m, char *err,
                       size_t errlen) {
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/manifest.json", dir) >= sizeof path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: path too long", dir);
  int fd, orc = mmrt_open_read(path, &fd, err, errlen);
  if (orc == MMRT_ERR_NOTFOUND)
    return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND,
                     "%s: cannot open: %s (a features directory has one; mmc compile --task "
                     "extract builds the program that writes it)",
                     path, strerror(ENOENT));
  if (orc != MMRT_OK) return orc;
  json_object *o = json_object_from_fd(fd);
  close(fd);
  json_object *fmt = field(o, "format", json_type_string),
              *ver = field(o, "version", json_type_int),
              *fp = field(o, "fingerprint", json_type_string),
              *tensors = field(o, "tensors", json_type_object),
              *seed = field(o, "seed", json_type_int), *frames = field(o, "frames", json_type_int);
  int rc = MMRT_OK;
  char mine[160];
  mmrt_features_fingerprint(m, mine, sizeof mine);
  if (!o || !fmt || strcmp(json_object_get_string(fmt), FEAT_FORMAT) || !ver ||
      json_object_get_int(ver) != 1 || !fp || !tensors || !seed || !frames)
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: expected a JSON object with \"format\": \"" FEAT_FORMAT
                   "\", \"version\": 1, \"fingerprint\", \"seed\", \"frames\" and \"tensors\"",
                   path);
  else if (strcmp(json_object_get_string(fp), mine) != 0)
    rc = mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                   "%s: features of model fingerprint '%s', this model's is '%s' (extract them "
                   "with this model: mmc compile --model %s --task extract)",
                   path, json_object_get_string(fp), mine, m->name);
  MmrtTensorRef r[T_N];
  if (rc == MMRT_OK) {
    f->seed = (uint64_t)json_object_get_int64(seed);
    f->frames = json_object_get_int(frames);
    shard_refs(f, NULL, 0, 1, r); /* the one-clip shapes (no split is allocated yet) */
    for (int k = 0; k < T_N && rc == MMRT_OK; k++)
      if (!entry_is(tensors, &r[k]))
        rc = mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: tensor '%s' per clip is not what model %s takes (%s with the shape of "
                       "its input less the batch)",
                       path, r[k].name, m->name, mmrt_st_dtype_name(r[k].dtype));
  }
  if (rc == MMRT_OK) rc = read_split(dir, "train", f, &f->train, o, err, errlen);
  if (rc == MMRT_OK) rc = read_split(dir, "heldout", f, &f->heldout, o, err, errlen);
  if (rc == MMRT_OK) {
    f->null_features = calloc((size_t)(f->L * f->D), sizeof(float));
    f->null_text = calloc((size_t)f->L, sizeof(int32_t));
    int nt = null_refs(f, r);
    rc = !f->null_features || !f->null_text
             ? mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory")
             : read_shard(dir, field(o, "null", json_type_object), r, nt, err, errlen);
  }
  json_object_put(o);
  return rc;
}
