/* mmrt_feed_dit.c: text-to-video diffusion training data (VideoDiT).
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
 * labels: evaluation reports the loss.
 *
 * A composed text-to-video model (stdlib_models/t2v.mm: forwards latents
 * and text_features, its frozen encoders) takes instead
 *   latents       f32[B, C, T, H, W]  from @latents (the WF-VAE encoder's
 *                 posterior mean) of clip i, F = the frames of its input
 *                 video f32[B, 1, F, 64, 64];
 *   text_features f32[B, L, D]  from @text_features (T5) of the caption ids
 *                 (the null caption's when dropped);
 *   text          i32[B, L] (optional): the ids themselves;
 *   noise, t_uniform / t_normal as above.
 * Online (no --features), fill runs @latents and @text_features on the
 * batch's clips and captions (one-rank trainers: mmc compiles them only
 * there). With --features DIR (mmrt_features.h) it copies row i mod N of
 * the N stored training clips (the same clip i while i < N, its features
 * from the same batch of B: the same numbers as online), the null
 * caption's stored features when dropped, and held-out row i at
 * evaluation; the encoders never run.
 *
 * With --data a JSON or JSONL list of video files (mmrt_vfiles.h,
 * docs/video.md "Training from video files"), online or with the fixed
 * downsample, the clips are those videos (training sample i the list's
 * entry of i under the run seed; evaluation row i entry i), decoded to the
 * clip the model takes (1 x F x 64 x 64), and the caption ids are the
 * entry's "cap" over the same vocabulary (mmrt_dit_text_ids: its words
 * that are in it); the draws (drop, noise, t) stay functions of (seed, i). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_features.h"
#include "mmrt_feed.h"
#include "mmrt_vfiles.h"
#include "mmrt_video.h"

#define MMRT_DIT_TEXT_DROP 0.1f
#define MMRT_DIT_LATENT    8 /* latent channels, height and width (64 / 8) */

typedef struct Dit {
  MmrtVideo train, heldout;
  const MmrtTensorDesc *lat, *text, *noise, *tu, *tn;
  const MmrtTensorDesc *tf; /* text_features (a composed model), or NULL */
  int frames;               /* clip frames */
  int online;               /* tf: run @latents and @text_features (else: feat) */
  MmrtTokenizer tok;
  MmrtFeatures feat;
  float *clip;
  int files; /* clips from video files (vf): this rank's rows in clips, their entries in used */
  MmrtVfiles vf;
  float *clips;
  int64_t *used;
} Dit;

/* A composed model's inputs latents and text_features: 1, 0 (not such a
 * model) or -1 (err says why). */
static int bind_features(MmrtFeedCtx *c, Dit *d, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *lat = d->lat, *tf = mmrt_desc_input(m, MMRT_IN(DIT_TEXT_FEAT)),
                       *text = d->text;
  const int64_t ls[5] = {c->B, -1, -1, -1, -1}, fs[3] = {c->B, -1, -1};
  if (!mmrt_feed_is(lat, MMRT_ST_F32, 5, ls) || !mmrt_feed_is(tf, MMRT_ST_F32, 3, fs)) return 0;
  const int64_t ts[2] = {c->B, tf->shape[1]};
  if (text && !mmrt_feed_is(text, MMRT_ST_I32, 2, ts))
    return snprintf(err, errlen, "model %s: input text must be i32[%lld, %lld] (text_features' L)",
                    m->name, (long long)c->B, (long long)tf->shape[1]),
           -1;
  if (tf->shape[1] < 7)
    return snprintf(err, errlen,
                    "model %s: input text_features has %lld positions; captions need 7 (6 words "
                    "+ EOS)",
                    m->name, (long long)tf->shape[1]),
           -1;
  d->tf = tf;
  d->feat.lat = 1, d->feat.L = tf->shape[1], d->feat.D = tf->shape[2];
  for (int k = 0; k < 4; k++)
    d->feat.lat_shape[k] = lat->shape[1 + k], d->feat.lat *= lat->shape[1 + k];
  if (c->features) {
    c->features_used = 1;
    return 1;
  }
  const MmrtTensorDesc *ft = m->feat_tensors;
  if (!ft || !m->feat_latents_step || !m->feat_text_step)
    return snprintf(err, errlen,
                    "model %s: no --features DIR, and this trainer has no online encoding "
                    "(@latents, @text_features are compiled into one-rank trainers only): give "
                    "--features DIR (mmc compile --task extract writes it)",
                    m->name),
           -1;
  const MmrtTensorDesc *v = &ft[MMRT_FEAT_VIDEO];
  if (v->ndim != 5 || v->dtype != MMRT_ST_F32 || v->shape[0] != c->B || v->shape[1] != 1 ||
      v->shape[3] != MMRT_VIDEO_SIDE || v->shape[4] != MMRT_VIDEO_SIDE ||
      ft[MMRT_FEAT_TEXT].ndim != 2 || ft[MMRT_FEAT_TEXT].dtype != MMRT_ST_I32 ||
      ft[MMRT_FEAT_TEXT].shape[1] != tf->shape[1] || ft[MMRT_FEAT_LATENTS].ndim != 5 ||
      ft[MMRT_FEAT_TEXT_FEATURES].ndim != 3 || ft[MMRT_FEAT_LATENTS].shape[1] != lat->shape[1])
    return snprintf(err, errlen,
                    "model %s: forward latents must take video f32[%lld, 1, F, 64, 64] and give "
                    "the latents; text_features take text i32[%lld, %lld]",
                    m->name, (long long)c->B, (long long)c->B, (long long)tf->shape[1]),
           -1;
  d->online = 1;
  d->frames = (int)v->shape[2];
  return 1;
}

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *lat = mmrt_desc_input(m, MMRT_IN(DIT_LATENTS)),
                       *text = mmrt_desc_input(m, MMRT_IN(DIT_TEXT)),
                       *noise = mmrt_desc_input(m, MMRT_IN(DIT_NOISE)),
                       *tu = mmrt_desc_input(m, MMRT_IN(DIT_T_UNIFORM)),
                       *tn = mmrt_desc_input(m, MMRT_IN(DIT_T_NORMAL)), *t = tu ? tu : tn;
  const int64_t ls[5] = {c->B, MMRT_DIT_LATENT, -1, MMRT_DIT_LATENT, MMRT_DIT_LATENT},
                ts[2] = {c->B, -1}, us[1] = {c->B};
  Dit probe = {.lat = lat, .text = text};
  int composed = bind_features(c, &probe, err, errlen);
  if (composed < 0) return -1;
  if (!composed &&
      (!mmrt_feed_is(lat, MMRT_ST_F32, 5, ls) || !mmrt_feed_is(text, MMRT_ST_I32, 2, ts)))
    return 0;
  if (!composed && c->features)
    return snprintf(err, errlen,
                    "--features %s: model %s takes caption ids (input text), not text_features; "
                    "stored features are for a model with forwards latents and text_features",
                    c->features, m->name),
           -1;
  if (noise && !mmrt_feed_is(noise, MMRT_ST_F32, 5, lat->shape))
    return snprintf(err, errlen, "model %s: input noise must have the shape and type of latents",
                    m->name),
           -1;
  if (tu && tn)
    return snprintf(err, errlen,
                    "model %s: inputs t_uniform and t_normal both given; a model takes one",
                    m->name),
           -1;
  if (t && !mmrt_feed_is(t, MMRT_ST_F32, 1, us))
    return snprintf(err, errlen, "model %s: input %s must be f32[%lld]", m->name, t->name,
                    (long long)c->B),
           -1;
  if (!composed && text->shape[1] < 7)
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
             .tf = probe.tf,
             .online = probe.online,
             .feat = probe.feat,
             .frames = probe.online ? probe.frames : 1 + 4 * ((int)lat->shape[2] - 1)};
  c->nbatch = 0, c->labels = NULL;
  c->batch[c->nbatch++] = lat;
  if (d->tf) c->batch[c->nbatch++] = d->tf;
  if (text) c->batch[c->nbatch++] = text;
  if (noise) c->batch[c->nbatch++] = noise;
  if (t) c->batch[c->nbatch++] = t;
  mmrt_dit_vocab(&d->tok);
  d->clip = malloc(sizeof *d->clip * (size_t)d->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE);
  if (!d->clip) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory"), -1;
  return 1;
}

/* --features DIR: read it; the held-out rows must cover the evaluation. */
static int start_features(MmrtFeedCtx *c, Dit *d, char *err, size_t errlen) {
  mmrt_features_free(&d->feat);
  int rc = mmrt_features_read(c->features, &d->feat, c->m, err, errlen);
  if (rc != MMRT_OK) return rc;
  if (d->feat.train.clips < 1)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "--features %s: no training clips (manifest.json: \"train\" \"clips\": 0)",
                     c->features);
  int64_t need = c->test.n;
  if (c->eval_batches >= 0 && c->eval_batches * c->B < need) need = c->eval_batches * c->B;
  if (need > d->feat.heldout.clips)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "--features %s: %lld held-out clips stored, the evaluation takes %lld (fewer "
                     "with --eval-batches N, or extract more with --heldout N)",
                     c->features, (long long)d->feat.heldout.clips, (long long)need);
  return MMRT_OK;
}

static int open_data(MmrtFeedCtx *c, const char *dir, char *err, size_t errlen) {
  Dit *d = c->priv;
  if (!mmrt_vfiles_is(dir) || (d->tf && !d->online))
    return mmrt_feed_open_fmnist(c, dir, err, errlen);
  if (!mmrt_feed_vfiles_open)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "%s: a list of video files, but this program was linked without the video "
                     "decoder (its model takes no 5-D video input)",
                     dir);
  const int64_t cthw[4] = {1, d->frames, MMRT_VIDEO_SIDE, MMRT_VIDEO_SIDE};
  size_t per = (size_t)d->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE;
  d->files = 1;
  d->clips = malloc(sizeof *d->clips * per * (size_t)(c->rows > 0 ? c->rows : 1));
  d->used = malloc(sizeof *d->used * (size_t)(c->rows > 0 ? c->rows : 1));
  if (!d->clips || !d->used) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  return mmrt_feed_vfiles_open(c, &d->vf, dir, cthw, err, errlen);
}

static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Dit *d = c->priv;
  if (d->tf && !d->online) return start_features(c, d, err, errlen);
  if (d->files) return MMRT_OK;
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

static int64_t numel_of(const MmrtTensorDesc *t) {
  int64_t n = 1;
  for (int64_t k = 0; k < t->ndim; k++) n *= t->shape[k];
  return n;
}

/* Online encoding: @latents and @text_features on the batch the rows were
 * put in, their results into the inputs latents and text_features (padding
 * rows from `rows` on: zero latents). A failed step printed its message;
 * fill cannot return one, so the run ends. */
static void encode(MmrtFeedCtx *c, Dit *d, int64_t rows) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *ft = m->feat_tensors;
  float *lat = mmrt_feed_at(c, d->lat);
  if (c->step(c, m->feat_latents_step, "@latents (online encoding)")) exit(1);
  memcpy(lat, mmrt_feed_at(c, &ft[MMRT_FEAT_LATENTS]), sizeof(float) * (size_t)numel_of(d->lat));
  if (c->step(c, m->feat_text_step, "@text_features (online encoding)")) exit(1);
  memcpy(mmrt_feed_at(c, d->tf), mmrt_feed_at(c, &ft[MMRT_FEAT_TEXT_FEATURES]),
         sizeof(float) * (size_t)numel_of(d->tf));
  if (d->text && mmrt_feed_at(c, d->text) != mmrt_feed_at(c, &ft[MMRT_FEAT_TEXT]))
    memcpy(mmrt_feed_at(c, d->text), mmrt_feed_at(c, &ft[MMRT_FEAT_TEXT]),
           sizeof(int32_t) * (size_t)numel_of(d->text));
  for (int64_t r = rows; r < c->B; r++)
    memset(lat + r * d->feat.lat, 0, sizeof(float) * (size_t)d->feat.lat);
}

/* A composed model's row k: latents and features of stored row j of sp,
 * or (online, sp NULL) nothing yet: the clip and ids into the encoders'
 * inputs (run once per batch in fill). */
static void fill_features(MmrtFeedCtx *c, Dit *d, int64_t k, const MmrtFeatSplit *sp, int64_t j,
                          int drop) {
  const MmrtModelDesc *m = c->m;
  int64_t per = d->feat.lat, L = d->feat.L, LD = L * d->feat.D;
  float *lat = mmrt_feed_at(c, d->lat), *tf = mmrt_feed_at(c, d->tf);
  int32_t *text = d->text ? mmrt_feed_at(c, d->text) : NULL;
  if (d->online) { /* the clip into row k of @latents's input */
    const MmrtTensorDesc *vd = &m->feat_tensors[MMRT_FEAT_VIDEO];
    int64_t n = numel_of(vd) / vd->shape[0];
    memcpy((float *)mmrt_feed_at(c, vd) + k * n, d->clip, sizeof(float) * (size_t)n);
    return;
  }
  if (!sp) { /* a padding row */
    memset(lat + k * per, 0, sizeof *lat * (size_t)per);
    memcpy(tf + k * LD, d->feat.null_features, sizeof *tf * (size_t)LD);
    if (text) memcpy(text + k * L, d->feat.null_text, sizeof *text * (size_t)L);
    return;
  }
  memcpy(lat + k * per, sp->latents + j * per, sizeof *lat * (size_t)per);
  memcpy(tf + k * LD, drop ? d->feat.null_features : sp->text_features + j * LD,
         sizeof *tf * (size_t)LD);
  if (text)
    memcpy(text + k * L, drop ? d->feat.null_text : sp->text + j * L, sizeof *text * (size_t)L);
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  Dit *d = c->priv;
  const MmrtModelDesc *m = c->m;
  MmrtVideo *v = eval ? &d->heldout : &d->train;
  uint64_t seed = eval ? MMRT_VIDEO_HELDOUT_SEED : c->seed;
  int Fl = (int)d->lat->shape[2];
  size_t per = (size_t)numel_of(d->lat) / (size_t)c->B,
         L = (size_t)(d->tf ? d->feat.L : d->text->shape[1]);
  float *lat = mmrt_feed_at(c, d->lat), *noise = d->noise ? mmrt_feed_at(c, d->noise) : NULL;
  int offline = d->tf && !d->online;
  const MmrtTensorDesc *idd = d->online ? &m->feat_tensors[MMRT_FEAT_TEXT] : d->text;
  int32_t *text = idd ? mmrt_feed_at(c, idd) : NULL;
  const MmrtTensorDesc *td = d->tu ? d->tu : d->tn;
  float *t = td ? mmrt_feed_at(c, td) : NULL;
  const MmrtFeatSplit *sp = eval ? &d->feat.heldout : &d->feat.train;
  size_t cper = (size_t)d->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE;
  if (d->files) mmrt_feed_vfiles_rows(c, &d->vf, it, rows, eval, sample0, d->clips, d->used);
  for (int64_t r = c->lo; r < c->lo + c->rows; r++) {
    int64_t k = r - c->lo;
    uint64_t i = eval ? (uint64_t)mmrt_iter_index(it, r) : sample0 + (uint64_t)r;
    if (r >= rows) { /* padding rows: zeros, the null caption */
      if (offline)
        fill_features(c, d, k, NULL, 0, 1);
      else {
        memset(d->clip, 0, sizeof *d->clip * (size_t)d->frames * MMRT_VIDEO_SIDE * MMRT_VIDEO_SIDE);
        if (d->online)
          fill_features(c, d, k, NULL, 0, 1);
        else
          memset(lat + k * per, 0, sizeof *lat * per);
        for (size_t j = 0; j < L; j++) text[k * L + j] = j ? MMRT_DIT_PAD : MMRT_DIT_EOS;
      }
      if (noise) memset(noise + k * per, 0, sizeof *noise * per);
      if (t) t[k] = 0;
      continue;
    }
    int drop =
        !eval && mmrt_rng_uniform_at(seed, mmrt_rng_stream("dit/drop", 0), i) < MMRT_DIT_TEXT_DROP;
    if (offline) {
      fill_features(c, d, k, sp, eval ? (int64_t)i : (int64_t)(i % (uint64_t)sp->clips), drop);
    } else {
      MmrtClipInfo ci;
      if (d->files)
        memcpy(d->clip, d->clips + (size_t)k * cper, sizeof *d->clip * cper);
      else
        mmrt_video_clip(v, i, d->clip, &ci);
      if (d->online)
        fill_features(c, d, k, NULL, 0, drop);
      else
        downsample(d->clip, Fl, lat + k * per);
      if (d->files)
        mmrt_dit_text_ids(&d->tok, d->vf.e[d->used[k]].cap, drop, text + k * L, (int64_t)L);
      else
        mmrt_dit_caption_ids(&d->tok, &ci, drop, text + k * L, (int64_t)L);
    }
    if (noise)
      mmrt_rng_normal(noise + k * per, seed, mmrt_rng_stream("dit/noise", 0), i * per,
                      (i + 1) * per, 0, 1);
    if (d->tu) mmrt_rng_uniform(t + k, seed, mmrt_rng_stream("dit/t_uniform", 0), i, i + 1);
    if (d->tn) mmrt_rng_normal(t + k, seed, mmrt_rng_stream("dit/t_normal", 0), i, i + 1, 0, 1);
  }
  if (d->online) encode(c, d, rows);
}

static void close_dit(MmrtFeedCtx *c) {
  Dit *d = c->priv;
  if (!d) return;
  mmrt_video_free(&d->train), mmrt_video_free(&d->heldout);
  mmrt_features_free(&d->feat);
  if (d->files) mmrt_vfiles_close(&d->vf);
  free(d->clip), free(d->clips), free(d->used);
  free(d);
  c->priv = NULL;
}

const MmrtFeeder mmrt_feed_dit = {
    .name = "text-to-video diffusion",
    .format = MMRT_FMT_T2V_DIFFUSION,
    .inputs = "latents F32[B, 8, Fl, 8, 8], text I32[B, L] (or text_features F32[B, L, D] with "
              "forwards latents and text_features), noise (like latents), t_uniform or "
              "t_normal F32[B]",
    .bind = bind,
    .open = open_data,
    .start = start,
    .fill = fill,
    .close = close_dit,
};
