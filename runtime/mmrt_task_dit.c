/* mmrt_task_dit.c: text-to-video diffusion training data (VideoDiT).
 *
 * Inputs (by name):
 *   latents   f32[B, 8, Fl, 8, 8]  the latents of a moving-item clip of
 *             F = 1 + 4 (Fl - 1) frames (mmrt_video.h) by a fixed
 *             downsample standing in for the WFVAE encoder (4x8x8, as its
 *             compression): latent frame 0 is clip frame 0, latent frame
 *             k >= 1 clip frames 4k-3 .. 4k; channel c = 4 h + 2 sy + sx is
 *             the mean over the frames of half h of that group (frame 0 for
 *             both halves at k = 0) and over the 4x4 pixels at sub-block
 *             (sy, sx) of each 8x8 block, mapped to 2 mean - 1;
 *   text      i32[B, L]  the clip's caption ("a sneaker moving left") as
 *             word ids (mmrt_dit_vocab: PAD 0, EOS 1, the caption words
 *             sorted from 2), then EOS, then PAD; in training, with
 *             probability MMRT_DIT_TEXT_DROP the null caption [EOS, PAD...]
 *             instead (classifier-free guidance);
 *   noise     f32 like latents (optional): N(0, 1);
 *   t_uniform f32[B] (optional): U[0, 1) in steps of 2^-24 (a DDPM step is
 *             floor(u * steps));
 *   t_normal  f32[B] (optional): N(0, 1) (flow matching's logit-normal t).
 * Every draw is a pure function of (seed, sample index): element k of
 * sample i is element i * n + k of Philox stream "dit/<input>" under the
 * run seed (the text drop: element i of "dit/drop"), so ranks fill their
 * rows alone and a resumed run draws what the straight run drew. Training
 * sample (s - 1) * B + r fills row r of step s (train-split clips under the
 * run seed); evaluation rows are held-out clips (test split,
 * MMRT_VIDEO_HELDOUT_SEED, drawn under that seed too, never dropped). No
 * labels: evaluation reports the loss. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_caption.h"
#include "mmrt_task.h"
#include "mmrt_video.h"

#define MMRT_DIT_TEXT_DROP 0.1f
#define MMRT_DIT_LATENT    8 /* latent channels, height and width (64 / 8) */

typedef struct Dit {
  MmrtVideo train, heldout;
  const MmrtTensorDesc *lat, *text, *noise, *tu, *tn;
  int frames; /* clip frames */
  MmrtTokenizer tok;
} Dit;

static int cmp_word(const void *a, const void *b) {
  return strcmp(a, b);
}

/* PAD, EOS, then every word of every clip caption, sorted, once each */
void mmrt_dit_vocab(MmrtTokenizer *tok) {
  memset(tok, 0, sizeof *tok);
  strcpy(tok->words[0], "<pad>"), strcpy(tok->words[1], "<eos>");
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

static int bind(MmrtTaskCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *lat = mmrt_desc_input(m, "latents"), *text = mmrt_desc_input(m, "text"),
                       *noise = mmrt_desc_input(m, "noise"), *tu = mmrt_desc_input(m, "t_uniform"),
                       *tn = mmrt_desc_input(m, "t_normal"), *t = tu ? tu : tn;
  const int64_t ls[5] = {c->B, MMRT_DIT_LATENT, -1, MMRT_DIT_LATENT, MMRT_DIT_LATENT},
                ts[2] = {c->B, -1}, us[1] = {c->B};
  if (!mmrt_task_is(lat, MMRT_ST_F32, 5, ls) || !mmrt_task_is(text, MMRT_ST_I32, 2, ts)) return 0;
  if (noise && !mmrt_task_is(noise, MMRT_ST_F32, 5, lat->shape))
    return snprintf(err, errlen, "model %s: input noise must have the shape and type of latents",
                    m->name),
           -1;
  if (tu && tn)
    return snprintf(err, errlen,
                    "model %s: inputs t_uniform and t_normal both given; a model takes one",
                    m->name),
           -1;
  if (t && !mmrt_task_is(t, MMRT_ST_F32, 1, us))
    return snprintf(err, errlen, "model %s: input %s must be f32[%lld]", m->name, t->name,
                    (long long)c->B),
           -1;
  if (text->shape[1] < 7)
    return snprintf(err, errlen,
                    "model %s: input text has %lld positions; captions need 7 (6 words + EOS)",
                    m->name, (long long)text->shape[1]),
           -1;
  Dit *d = calloc(1, sizeof *d);
  if (!d) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory"), -1;
  c->priv = d;
  *d = (Dit){.lat = lat,
             .text = text,
             .noise = noise,
             .tu = tu,
             .tn = tn,
             .frames = 1 + 4 * ((int)lat->shape[2] - 1)};
  c->batch[0] = lat, c->batch[1] = text, c->nbatch = 2, c->labels = NULL;
  if (noise) c->batch[c->nbatch++] = noise;
  if (t) c->batch[c->nbatch++] = t;
  mmrt_dit_vocab(&d->tok);
  return 1;
}

static int start(MmrtTaskCtx *c, char *err, size_t errlen) {
  Dit *d = c->priv;
  mmrt_video_free(&d->train), mmrt_video_free(&d->heldout); /* again after a resume */
  int rc = mmrt_video_init(&d->train, &c->train, d->frames, c->seed, err, errlen);
  return rc != MMRT_OK ? rc
                       : mmrt_video_init(&d->heldout, &c->test, d->frames, MMRT_VIDEO_HELDOUT_SEED,
                                         err, errlen);
}

/* clip (F, 64, 64) -> latents (8, Fl, 8, 8), the module comment's downsample */
static void downsample(const float *clip, int Fl, float *lat) {
  const int S = MMRT_VIDEO_SIDE, L = MMRT_DIT_LATENT;
  for (int c = 0; c < 8; c++)
    for (int k = 0; k < Fl; k++) {
      int half = c / 4, sy = c / 2 % 2, sx = c % 2;
      int f0 = k == 0 ? 0 : 4 * k - 3 + 2 * half, nf = k == 0 ? 1 : 2;
      for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
          double s = 0;
          for (int f = f0; f < f0 + nf; f++)
            for (int y = 0; y < 4; y++)
              for (int x = 0; x < 4; x++)
                s += clip[((size_t)f * S + 8 * i + 4 * sy + y) * S + 8 * j + 4 * sx + x];
          lat[(((size_t)c * Fl + k) * L + i) * L + j] = (float)(2 * s / (16 * nf) - 1);
        }
    }
}

static void caption_ids(const Dit *d, const MmrtClipInfo *ci, int drop, int32_t *ids, int64_t L) {
  char buf[96];
  int n = 0;
  mmrt_video_caption(ci, buf, sizeof buf);
  for (int64_t i = 0; i < L; i++) ids[i] = MMRT_TOK_PAD;
  if (!drop)
    for (char *w = strtok(buf, " "); w && n < L - 1; w = strtok(NULL, " "))
      for (int k = 2; k < d->tok.size; k++)
        if (strcmp(d->tok.words[k], w) == 0) ids[n++] = k;
  ids[n] = 1; /* EOS */
}

static void fill(MmrtTaskCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  Dit *d = c->priv;
  MmrtVideo *v = eval ? &d->heldout : &d->train;
  uint64_t seed = eval ? MMRT_VIDEO_HELDOUT_SEED : c->seed;
  int Fl = (int)d->lat->shape[2];
  size_t per = (size_t)8 * Fl * 64, L = (size_t)d->text->shape[1];
  float *lat = mmrt_task_at(c, d->lat), *noise = d->noise ? mmrt_task_at(c, d->noise) : NULL;
  int32_t *text = mmrt_task_at(c, d->text);
  const MmrtTensorDesc *td = d->tu ? d->tu : d->tn;
  float *t = td ? mmrt_task_at(c, td) : NULL;
  float *clip = malloc(sizeof *clip * (size_t)d->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE);
  if (!clip) abort(); /* a few hundred kB, once per batch */
  for (int64_t r = c->lo; r < c->lo + c->rows; r++) {
    int64_t k = r - c->lo;
    uint64_t i = eval ? (uint64_t)mmrt_iter_index(it, r) : sample0 + (uint64_t)r;
    if (r >= rows) { /* padding rows: zeros, the null caption */
      memset(lat + k * per, 0, sizeof *lat * per);
      if (noise) memset(noise + k * per, 0, sizeof *noise * per);
      for (size_t j = 0; j < L; j++) text[k * L + j] = j ? MMRT_TOK_PAD : 1;
      if (t) t[k] = 0;
      continue;
    }
    MmrtClipInfo ci;
    mmrt_video_clip(v, i, clip, &ci);
    downsample(clip, Fl, lat + k * per);
    int drop =
        !eval && mmrt_rng_uniform_at(seed, mmrt_rng_stream("dit/drop", 0), i) < MMRT_DIT_TEXT_DROP;
    caption_ids(d, &ci, drop, text + k * L, (int64_t)L);
    if (noise)
      mmrt_rng_normal(noise + k * per, seed, mmrt_rng_stream("dit/noise", 0), i * per,
                      (i + 1) * per, 0, 1);
    if (d->tu) mmrt_rng_uniform(t + k, seed, mmrt_rng_stream("dit/t_uniform", 0), i, i + 1);
    if (d->tn) mmrt_rng_normal(t + k, seed, mmrt_rng_stream("dit/t_normal", 0), i, i + 1, 0, 1);
  }
  free(clip);
}

static void close_dit(MmrtTaskCtx *c) {
  Dit *d = c->priv;
  if (!d) return;
  mmrt_video_free(&d->train), mmrt_video_free(&d->heldout);
  free(d);
  c->priv = NULL;
}

const MmrtTask mmrt_task_dit = {
    .name = "text-to-video diffusion",
    .inputs = "latents F32[B, 8, Fl, 8, 8], text I32[B, L], noise (like latents), t_uniform or "
              "t_normal F32[B]",
    .bind = bind,
    .open = mmrt_task_open_fmnist,
    .start = start,
    .fill = fill,
    .close = close_dit,
};
