/* mmrt_vfiles.c: a dataset of video files (see mmrt_vfiles.h). */
#include "mmrt_vfiles.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_rng.h"

/* One sample's result. */
typedef struct Slot {
  int rc;
  int64_t used;
  int skips;
  char err[MMRT_VFILES_ERR];
} Slot;

struct MmrtVfilesAhead {
  MmrtVfiles *v;
  pthread_t th;
  int running;
  int64_t n;
  int64_t *entries;
  uint64_t *samples;
  float *out;
  Slot *slot;
};

int mmrt_vfiles_open(MmrtVfiles *v, const char *json, int C, int T, int H, int W, double fps,
                     int skip, char *err, size_t errlen) {
  memset(v, 0, sizeof *v);
  if (C != 1 && C != 3)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "video files give 1 (grey) or 3 (RGB) channels, not %d", C);
  v->spec = (MmrtVdecSpec){.frames = T, .fps = fps, .h = H, .w = W};
  v->C = C, v->skip = skip, v->perm_epoch = -1;
  v->per = (size_t)C * (size_t)T * (size_t)H * (size_t)W;
  int rc = mmrt_vdec_json_read_ex(json, &v->spec, skip, &v->e, &v->n, err, errlen);
  if (rc != MMRT_OK) return rc;
  v->json = strdup(json);
  v->perm = malloc(sizeof *v->perm * (size_t)v->n);
  if (!v->json || !v->perm) {
    mmrt_vfiles_close(v);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  }
  for (int i = 0; i < v->n; i++)
    if (v->e[i].bad) v->bad_at_read++;
  if (v->bad_at_read == v->n) {
    int64_t k = v->bad_at_read;
    mmrt_vfiles_close(v);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: all %lld entries are bad", json,
                     (long long)k);
  }
  return MMRT_OK;
}

static void ahead_wait(MmrtVfiles *v);

static void ahead_free(MmrtVfilesAhead *a) {
  if (!a) return;
  free(a->entries), free(a->samples), free(a->out), free(a->slot);
  free(a);
}

void mmrt_vfiles_close(MmrtVfiles *v) {
  ahead_wait(v);
  ahead_free(v->ahead);
  mmrt_vdec_json_free(v->e, v->n);
  free(v->json), free(v->perm);
  memset(v, 0, sizeof *v);
}

int64_t mmrt_vfiles_entry(MmrtVfiles *v, uint64_t seed, uint64_t i) {
  int64_t epoch = (int64_t)(i / (uint64_t)v->n);
  if (epoch != v->perm_epoch) {
    mmrt_rng_permutation(v->perm, (uint32_t)v->n, seed ^ MMRT_VFILES_SALT, (uint64_t)epoch);
    v->perm_epoch = epoch;
  }
  return v->perm[i % (uint64_t)v->n];
}

/* The frames of a decoded clip as the model's C channels. */
static void to_channels(const MmrtVfiles *v, const MmrtVdecClip *c, float *out) {
  size_t plane = v->per / (size_t)v->C;
  if (v->C == 3) {
    memcpy(out, c->pix, sizeof *out * v->per);
    return;
  }
  for (size_t p = 0; p < plane; p++) {
    long r = lrintf(c->pix[p] * 255.0f), g = lrintf(c->pix[plane + p] * 255.0f),
         b = lrintf(c->pix[2 * plane + p] * 255.0f);
    out[p] = (float)((299 * r + 587 * g + 114 * b + 500) / 1000) / 255.0f;
  }
}

/* Entry e decoded into out, or why not (err, without the sample). Reads
 * only v's constant fields: safe on the loader thread. */
static int decode_entry(const MmrtVfiles *v, int64_t e, float *out, char *err, size_t errlen) {
  const MmrtVdecEntry *x = &v->e[e];
  if (x->bad) return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s", x->bad);
  MmrtVdecClip c;
  char why[MMRT_VFILES_ERR];
  int rc = mmrt_vdec_read(x->path, &v->spec, &c, why, sizeof why);
  if (rc != MMRT_OK)
    return mmrt_errf(err, errlen, rc, "%s: entry %lld: %s", v->json, (long long)e, why);
  if (c.src_w != x->width || c.src_h != x->height)
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: entry %lld: %s: the frames are %dx%d (width x height), the entry's "
                   "\"resolution\" says %dx%d",
                   v->json, (long long)e, x->path, c.src_w, c.src_h, x->width, x->height);
  else if (c.src_w < v->spec.w || c.src_h < v->spec.h)
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: entry %lld: %s: %dx%d frames are smaller than the model's %dx%d (width x "
                   "height; videos are cropped and shrunk, never enlarged)",
                   v->json, (long long)e, x->path, c.src_w, c.src_h, v->spec.w, v->spec.h);
  else
    to_channels(v, &c, out);
  mmrt_vdec_free(&c);
  return rc;
}

/* One sample: entry e, or with skip the next good one in file order. */
static void one(const MmrtVfiles *v, int64_t e, uint64_t sample, float *out, Slot *s) {
  s->skips = 0, s->used = e;
  for (int64_t k = 0; k < v->n; k++) {
    int64_t j = (e + k) % v->n;
    s->rc = decode_entry(v, j, out, s->err, sizeof s->err);
    if (s->rc == MMRT_OK) {
      s->used = j;
      return;
    }
    if (k == 0) { /* the sample's own entry: its message names the sample */
      char m[MMRT_VFILES_ERR];
      const char *tail = strstr(s->err, ": entry ");
      size_t head = tail ? (size_t)(tail - s->err) : 0;
      const char *rest = tail ? strchr(tail + 8, ':') : NULL;
      if (rest)
        snprintf(m, sizeof m, "%.*s: entry %lld (sample %llu)%.560s",
                 (int)(head > 400 ? 400 : head), s->err, (long long)j, (unsigned long long)sample,
                 rest);
      else
        snprintf(m, sizeof m, "%.960s (sample %llu)", s->err, (unsigned long long)sample);
      memcpy(s->err, m, sizeof m);
    }
    if (!v->skip) return;
    s->skips++;
  }
  snprintf(s->err, sizeof s->err, "%s: every entry is bad (--bad-samples skip)", v->json);
  s->rc = MMRT_ERR_FORMAT;
}

static void *ahead_run(void *p) {
  MmrtVfilesAhead *a = p;
  for (int64_t k = 0; k < a->n; k++)
    one(a->v, a->entries[k], a->samples[k], a->out + (size_t)k * a->v->per, &a->slot[k]);
  return NULL;
}

static void ahead_wait(MmrtVfiles *v) {
  if (v->ahead && v->ahead->running) pthread_join(v->ahead->th, NULL), v->ahead->running = 0;
}

/* The slots' results into the caller's (the marks and counts on this thread). */
static int take(MmrtVfiles *v, const Slot *s, int64_t n, int64_t *used, char *err, size_t errlen) {
  for (int64_t k = 0; k < n; k++) {
    if (s[k].rc != MMRT_OK) return mmrt_errf(err, errlen, s[k].rc, "%s", s[k].err);
    if (s[k].skips) v->skipped++;
    if (used) used[k] = s[k].used;
  }
  return MMRT_OK;
}

int mmrt_vfiles_batch(MmrtVfiles *v, const int64_t *entries, const uint64_t *samples, int64_t n,
                      float *out, int64_t *used, char *err, size_t errlen) {
  MmrtVfilesAhead *a = v->ahead;
  if (a && a->n == n && !memcmp(a->entries, entries, sizeof *entries * (size_t)n) &&
      !memcmp(a->samples, samples, sizeof *samples * (size_t)n)) {
    ahead_wait(v);
    memcpy(out, a->out, sizeof *out * v->per * (size_t)n);
    int rc = take(v, a->slot, n, used, err, errlen);
    ahead_free(a), v->ahead = NULL;
    return rc;
  }
  Slot *s = calloc((size_t)(n > 0 ? n : 1), sizeof *s);
  if (!s) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  for (int64_t k = 0; k < n; k++) one(v, entries[k], samples[k], out + (size_t)k * v->per, &s[k]);
  int rc = take(v, s, n, used, err, errlen);
  free(s);
  return rc;
}

void mmrt_vfiles_ahead(MmrtVfiles *v, const int64_t *entries, const uint64_t *samples, int64_t n) {
  ahead_wait(v);
  ahead_free(v->ahead), v->ahead = NULL;
  MmrtVfilesAhead *a = calloc(1, sizeof *a);
  if (!a || n < 1) return free(a);
  a->v = v, a->n = n;
  a->entries = malloc(sizeof *a->entries * (size_t)n);
  a->samples = malloc(sizeof *a->samples * (size_t)n);
  a->out = malloc(sizeof *a->out * v->per * (size_t)n);
  a->slot = calloc((size_t)n, sizeof *a->slot);
  if (!a->entries || !a->samples || !a->out || !a->slot) return ahead_free(a);
  memcpy(a->entries, entries, sizeof *entries * (size_t)n);
  memcpy(a->samples, samples, sizeof *samples * (size_t)n);
  if (pthread_create(&a->th, NULL, ahead_run, a) != 0)
    return ahead_free(a); /* decoded when asked */
  a->running = 1;
  v->ahead = a;
}
