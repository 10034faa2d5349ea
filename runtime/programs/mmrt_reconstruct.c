/* mmrt_reconstruct.c: the reconstruct executable of a video autoencoder
 * (mmc compile --task reconstruct; the model's forwards encode and decode,
 * lang/REFERENCE.md "Reconstruction").
 *
 *   reconstructor --weights PATH [--data DIR] [--clips N] [--first I]
 *                 [--out DIR] [--show K] [--no-chunks] [--dump FILE] [--quiet]
 *
 * Loads the parameters by name (the trainer's --save-weights file or a
 * checkpoint folder), then for held-out clips I .. I + N - 1 (the test
 * split under MMRT_VIDEO_HELDOUT_SEED: the clips the trainer evaluates on;
 * default N = 1000, I = 0), a batch of the compiled B at a time:
 *   - @encode then @decode: the PSNR of each clip (mmrt_video_psnr: the
 *     output clamped to [0, 1], peak 1), averaged over the clips;
 *   - the chunked encoder: the same clip as a first chunk of 1 + C frames
 *     (@encode_first) and chunks of C frames (@encode_next, each starting
 *     from the caches the chunk before returned), its latents joined along
 *     time, against @encode's latents of the whole clip: the largest
 *     absolute difference (--no-chunks skips it);
 *   - for the first K clips (--show, default 4) OUT/recon_<index>.png, the
 *     input frames side by side above the reconstructed ones (2H x F W),
 *     and OUT/recon_<index>.gif, every frame input | reconstruction
 *     (H x 2W) (--out, default "recon", created if missing).
 * --dump FILE writes every clip scored and its reconstruction as raw f32
 * (little-endian), clip after clip: [N, 2, F, H, W] (for checking the PSNR
 * elsewhere). Prints "reconstruct: N held-out clips, PSNR X dB (...)" and, unless
 * --no-chunks, "chunked encoding: ...". Runs on one rank. A progress line
 * with an ETA on stderr; SIGINT/SIGTERM stop it between batches (exit 130 /
 * 143, no --dump file: it is written beside and renamed when complete). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_data.h"
#include "mmrt_flags.h"
#include "mmrt_gif.h"
#include "mmrt_main.h"
#include "mmrt_png.h"
#include "mmrt_video.h"
#include "mmrt_mem.h"

#define ERRLEN 1024

typedef struct Rec {
  const MmrtModelDesc *m;
  const char *weights, *data, *out, *dump;
  int64_t clips, first, show;
  int no_chunks, quiet;
  char *arenas[MMRT_NARENAS];
  const MmrtTensorDesc *video, *t; /* t: m->vae_tensors */
  int64_t B, Cin, F, H, W;         /* the clips: [B, Cin, F, H, W] */
  int64_t F0, C, nnext;            /* chunks: 1 + C frames, then nnext of C */
  MmrtImages test;
  MmrtVideo heldout;
} Rec;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("reconstructor: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

#define AT(f)    offsetof(Rec, f)
#define COUNT    100000000
#define AT_LEAST "%F takes an integer >= %L, not '%V'"
static const MmrtFlag rec_flags[] = {
    MMRT_FLAG_S("--weights", "PATH", AT(weights),
                "the parameters by name: a safetensors file (the trainer's --save-weights)\n"
                "or a checkpoint folder"),
    MMRT_FLAG_S("--data", "DIR", AT(data),
                "Fashion-MNIST (default $MMRT_FMNIST_DIR, else " MMRT_FMNIST_DEFAULT_DIR ")"),
    MMRT_FLAG_I("--clips", "N", AT(clips), 1, COUNT, AT_LEAST,
                "held-out clips to score (default %D)"),
    MMRT_FLAG_I("--first", "I", AT(first), 0, COUNT, AT_LEAST, "the first of them (default %D)"),
    MMRT_FLAG_S("--out", "DIR", AT(out), "where the strips and GIFs go (default %D)"),
    MMRT_FLAG_I("--show", "K", AT(show), 0, COUNT, AT_LEAST,
                "write the first K clips (default %D; 0: none)"),
    MMRT_FLAG_B("--no-chunks", AT(no_chunks), "do not check the chunked encoder"),
    MMRT_FLAG_S("--dump", "FILE", AT(dump),
                "every clip and its reconstruction as raw f32 [N, 2, F, H, W]"),
    MMRT_FLAG_B("--quiet", AT(quiet), "no progress on stderr"),
    MMRT_FLAG_END,
};
#undef AT_LEAST
#undef COUNT
#undef AT

/* 0 ok, 1 error (printed), -1 --help. */
static int parse_args(Rec *r, int argc, char **argv) {
  r->clips = 1000, r->show = 4, r->out = "recon";
  static const MmrtFlagSet set = {.who = "reconstructor",
                                  .flags = rec_flags,
                                  .needs_value = "option %F needs a value",
                                  .col = 18};
  char head[512];
  snprintf(head, sizeof head,
           "usage: reconstructor --weights FILE|DIR [options]\n"
           "Reconstructs held-out video clips with model %s: PSNR, the chunked encoder against\n"
           "the whole-clip one, and input | reconstruction as PNG strips and animated GIFs.\n",
           r->m->name);
  int rc = mmrt_flags_parse(&set, argc, argv, r, head);
  if (rc) return rc;
  if (!r->weights)
    return fail("--weights FILE|DIR is required (the trainer writes them with --save-weights or "
                "--ckpt)");
  return 0;
}

int mmrt_reconstruct_parse(int argc, char **argv, const MmrtModelDesc *m) {
  Rec r;
  memset(&r, 0, sizeof r);
  r.m = m;
  return parse_args(&r, argc, argv);
}

static float *at(const Rec *r, const MmrtTensorDesc *d) {
  return (float *)(r->arenas[d->arena] + d->offset);
}

static int64_t numel(const MmrtTensorDesc *d) {
  int64_t n = 1;
  for (int64_t i = 0; i < d->ndim; i++) n *= d->shape[i];
  return n;
}

/* 1 when a and b are f32 of the same shape but perhaps dim `except`. */
static int same_shape(const MmrtTensorDesc *a, const MmrtTensorDesc *b, int except) {
  if (a->dtype != MMRT_ST_F32 || b->dtype != MMRT_ST_F32 || a->ndim != b->ndim) return 0;
  for (int64_t i = 0; i < a->ndim; i++)
    if (i != except && a->shape[i] != b->shape[i]) return 0;
  return 1;
}

static int bind(Rec *r) {
  const MmrtModelDesc *m = r->m;
  if (!m->vae_encode_step || !m->vae_decode_step || !m->vae_tensors)
    return fail("model %s was not compiled for reconstruction (mmc compile --task reconstruct)",
                m->name);
  r->t = m->vae_tensors;
  r->video = mmrt_desc_input(m, "video");
  const MmrtTensorDesc *v = r->video;
  if (!v || v->dtype != MMRT_ST_F32 || v->ndim != 5 || v->shape[3] != MMRT_VIDEO_SIDE ||
      v->shape[4] != MMRT_VIDEO_SIDE || v->shape[1] != 1)
    return fail("model %s: reconstruction reads clips as the input video f32[B, 1, F, %d, %d]",
                m->name, MMRT_VIDEO_SIDE, MMRT_VIDEO_SIDE);
  r->B = v->shape[0], r->Cin = v->shape[1], r->F = v->shape[2];
  r->H = v->shape[3], r->W = v->shape[4];
  if (!same_shape(&r->t[MMRT_VAE_CLIPS], v, -1))
    return fail("model %s: decode returns [%lld, %lld, %lld, %lld, %lld]-shaped clips? its result "
                "must have the shape of the input video",
                m->name, (long long)r->t[MMRT_VAE_CLIPS].shape[0],
                (long long)r->t[MMRT_VAE_CLIPS].shape[1], (long long)r->t[MMRT_VAE_CLIPS].shape[2],
                (long long)r->t[MMRT_VAE_CLIPS].shape[3], (long long)r->t[MMRT_VAE_CLIPS].shape[4]);
  if (!same_shape(&r->t[MMRT_VAE_LATENTS], &r->t[MMRT_VAE_DEC_IN], -1))
    return fail("model %s: encode's result and decode's input %s differ in shape or dtype", m->name,
                r->t[MMRT_VAE_DEC_IN].name);
  if (!m->vae_first_step || !m->vae_next_step)
    return fail("model %s has no chunked encoder", m->name);
  const MmrtTensorDesc *c0 = &r->t[MMRT_VAE_CHUNK0], *c = &r->t[MMRT_VAE_CHUNK];
  const MmrtTensorDesc *l = &r->t[MMRT_VAE_LATENTS], *l0 = &r->t[MMRT_VAE_FIRST_LAT],
                       *l1 = &r->t[MMRT_VAE_NEXT_LAT];
  r->F0 = c0->shape[2], r->C = c->shape[2];
  if (!same_shape(c0, v, 2) || !same_shape(c, v, 2) || r->F0 > r->F || (r->F - r->F0) % r->C)
    return fail("model %s: clips of %lld frames do not split into a first chunk of %lld frames "
                "and chunks of %lld (mmc compile --chunk-frames N with N dividing %lld)",
                m->name, (long long)r->F, (long long)r->F0, (long long)r->C, (long long)(r->F - 1));
  r->nnext = (r->F - r->F0) / r->C;
  if (l->ndim < 3 || !same_shape(l0, l, 2) || !same_shape(l1, l, 2) ||
      l0->shape[2] + r->nnext * l1->shape[2] != l->shape[2])
    return fail("model %s: the chunks' latents (%lld frames, then %lld x %lld) do not make the "
                "whole clip's %lld",
                m->name, (long long)l0->shape[2], (long long)r->nnext, (long long)l1->shape[2],
                (long long)(l->ndim >= 3 ? l->shape[2] : 0));
  for (int64_t k = 0; k < m->vae_ncaches; k++) {
    const MmrtTensorDesc *ck = &m->vae_caches[3 * k];
    if (!same_shape(ck, ck + 1, -1) || !same_shape(ck, ck + 2, -1))
      return fail("model %s: cache %s differs between the chunks", m->name, ck->name);
  }
  return 0;
}

static int step(Rec *r, MmrtStepFn fn, const char *what) {
  return fn(r->arenas, 0, NULL) == 0 ? 0 : fail("%s failed", what);
}

/* Frames [t0, t0 + n) of every (row, channel) of src [R, K, T, S] into dst
 * [R, K, n, S] (to = 0), or back from it (to = 1): S the elements per frame. */
static void frames(float *big, const MmrtTensorDesc *bd, float *small, int64_t t0, int64_t n,
                   int back) {
  int64_t rows = bd->shape[0] * bd->shape[1], T = bd->shape[2], S = numel(bd) / (rows * T);
  for (int64_t q = 0; q < rows; q++) {
    float *b = big + (q * T + t0) * S, *s = small + q * n * S;
    if (back)
      memcpy(b, s, sizeof *b * (size_t)(n * S));
    else
      memcpy(s, b, sizeof *b * (size_t)(n * S));
  }
}

/* The chunked encoder on the clips in the video input; the largest
 * difference of its latents from the whole clip's (@encode ran). */
static int chunked(Rec *r, float *whole, float *joined, double *maxdiff) {
  const MmrtModelDesc *m = r->m;
  const MmrtTensorDesc *l = &r->t[MMRT_VAE_LATENTS], *c0 = &r->t[MMRT_VAE_CHUNK0],
                       *c = &r->t[MMRT_VAE_CHUNK];
  float *video = at(r, r->video);
  frames(video, r->video, at(r, c0), 0, r->F0, 0);
  if (step(r, m->vae_first_step, "@encode_first (the first chunk)")) return 1;
  int64_t lt = r->t[MMRT_VAE_FIRST_LAT].shape[2], l1 = r->t[MMRT_VAE_NEXT_LAT].shape[2];
  frames(joined, l, at(r, &r->t[MMRT_VAE_FIRST_LAT]), 0, lt, 1);
  for (int64_t k = 0; k < r->nnext; k++) {
    for (int64_t j = 0; j < m->vae_ncaches; j++) {
      const MmrtTensorDesc *ck = &m->vae_caches[3 * j];
      memmove(at(r, ck), at(r, ck + (k ? 2 : 1)), sizeof(float) * (size_t)numel(ck));
    }
    frames(video, r->video, at(r, c), r->F0 + k * r->C, r->C, 0);
    if (step(r, m->vae_next_step, "@encode_next (a next chunk)")) return 1;
    frames(joined, l, at(r, &r->t[MMRT_VAE_NEXT_LAT]), lt, l1, 1);
    lt += l1;
  }
  for (int64_t i = 0; i < numel(l); i++) {
    double d = fabs((double)joined[i] - (double)whole[i]);
    if (!(d <= *maxdiff)) *maxdiff = d; /* a NaN sticks */
  }
  return 0;
}

/* Clip `index` (row b of the batch) as the PNG strip and the GIF. */
static int show(const Rec *r, uint64_t index, const float *in, const float *out) {
  const int64_t F = r->F, H = r->H, W = r->W, per = F * H * W;
  uint8_t *strip = malloc((size_t)(2 * per)), *gif = malloc((size_t)(2 * per));
  if (!strip || !gif) {
    free(strip), free(gif);
    return fail("out of memory");
  }
  for (int64_t t = 0; t < F; t++)
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++) {
        uint8_t a = mmrt_video_byte(in[(t * H + y) * W + x]),
                b = mmrt_video_byte(out[(t * H + y) * W + x]);
        strip[y * F * W + t * W + x] = a, strip[(H + y) * F * W + t * W + x] = b;
        gif[(t * H + y) * 2 * W + x] = a, gif[(t * H + y) * 2 * W + W + x] = b;
      }
  char path[4200], err[ERRLEN];
  snprintf(path, sizeof path, "%s/recon_%05llu.png", r->out, (unsigned long long)index);
  int rc = mmrt_png_write_gray(path, (int)(2 * H), (int)(F * W), strip, err, sizeof err);
  snprintf(path, sizeof path, "%s/recon_%05llu.gif", r->out, (unsigned long long)index);
  if (rc == MMRT_OK)
    rc = mmrt_gif_write_gray(path, (int)F, (int)H, (int)(2 * W), gif, err, sizeof err);
  free(strip), free(gif);
  return rc == MMRT_OK ? 0 : fail("%s", err);
}

static int run(Rec *r) {
  const MmrtModelDesc *m = r->m;
  const MmrtTensorDesc *l = &r->t[MMRT_VAE_LATENTS];
  const int64_t per = r->Cin * r->F * r->H * r->W;
  float *whole = malloc(sizeof(float) * (size_t)numel(l)),
        *joined = malloc(sizeof(float) * (size_t)numel(l));
  float *video = at(r, r->video), *recon = at(r, &r->t[MMRT_VAE_CLIPS]);
  double sum = 0, lo = INFINITY, hi = -INFINITY, maxdiff = 0, maxz = 0;
  int rc = whole && joined ? 0 : fail("out of memory");
  MmrtOut dout = {0};
  char derr[ERRLEN];
  if (!rc && r->dump && mmrt_out_begin(&dout, r->dump, derr, sizeof derr) != MMRT_OK)
    rc = fail("--dump %s", derr);
  FILE *dump = dout.f;
  if (!rc && r->show > 0 && mkdir(r->out, 0777) != 0 && errno != EEXIST)
    rc = fail("--out %s: cannot create: %s", r->out, strerror(errno));
  MmrtProgress pr;
  mmrt_progress_begin(&pr, "reconstructor: clip", 0, r->clips, "clips",
                      !r->quiet && r->clips > r->B);
  int64_t done = 0;
  for (; !rc && done < r->clips && !mmrt_stop_signal; done += r->B) {
    int64_t rows = r->clips - done < r->B ? r->clips - done : r->B;
    for (int64_t b = 0; b < r->B; b++) {
      if (b < rows)
        mmrt_video_clip(&r->heldout, (uint64_t)(r->first + done + b), video + b * per, NULL);
      else
        memset(video + b * per, 0, sizeof *video * (size_t)per);
    }
    if ((rc = step(r, m->vae_encode_step, "@encode"))) break;
    float *lat = at(r, l);
    memcpy(whole, lat, sizeof *whole * (size_t)numel(l));
    for (int64_t i = 0; i < numel(l); i++)
      if (fabs(lat[i]) > maxz) maxz = fabs(lat[i]);
    memcpy(at(r, &r->t[MMRT_VAE_DEC_IN]), whole, sizeof *whole * (size_t)numel(l));
    if ((rc = step(r, m->vae_decode_step, "@decode"))) break;
    for (int64_t b = 0; b < rows && !rc; b++) {
      double db = mmrt_video_psnr(video + b * per, recon + b * per, (size_t)per);
      sum += db, lo = db < lo ? db : lo, hi = db > hi ? db : hi;
      if (dump && (fwrite(video + b * per, sizeof(float), (size_t)per, dump) != (size_t)per ||
                   fwrite(recon + b * per, sizeof(float), (size_t)per, dump) != (size_t)per))
        rc = fail("--dump %s: cannot write: %s", r->dump, strerror(errno));
      if (done + b < r->show)
        rc = show(r, (uint64_t)(r->first + done + b), video + b * per, recon + b * per);
    }
    if (!rc && !r->no_chunks) rc = chunked(r, whole, joined, &maxdiff);
    mmrt_progress_tick(&pr, done + rows, (double)(done + rows), NULL);
  }
  mmrt_progress_break(&pr);
  if (!rc && mmrt_stop_signal) { /* exit 128 + the signal; no figure of part of the clips */
    fprintf(stderr, "reconstructor: stopped by %s after %lld of %lld clips%s\n",
            mmrt_stop_name(mmrt_stop_signal), (long long)(done < r->clips ? done : r->clips),
            (long long)r->clips, r->dump ? " (no --dump file written)" : "");
    rc = 128 + mmrt_stop_signal;
  }
  if (!rc) {
    printf("reconstruct: %lld held-out clips (test split, seed %u, from %lld), PSNR %.4f dB (mean "
           "over clips, output clamped to [0, 1], peak 1; min %.4f, max %.4f)\n",
           (long long)r->clips, MMRT_VIDEO_HELDOUT_SEED, (long long)r->first,
           sum / (double)r->clips, lo, hi);
    if (!r->no_chunks)
      printf("chunked encoding: %lld + %lld x %lld frames, %lld caches: max |latent difference| "
             "%.3g (max |latent| %.3g)\n",
             (long long)r->F0, (long long)r->nnext, (long long)r->C, (long long)m->vae_ncaches,
             maxdiff, maxz);
    if (r->show > 0)
      printf("wrote %s/recon_%05lld.png and .gif (%lld clips)\n", r->out, (long long)r->first,
             (long long)(r->show < r->clips ? r->show : r->clips));
  }
  if (mmrt_out_finish(&dout, !rc, derr, sizeof derr) != MMRT_OK) rc = fail("--dump %s", derr);
  free(whole), free(joined);
  return rc;
}

int mmrt_reconstruct_main(int argc, char **argv, const MmrtModelDesc *m) {
  Rec r;
  memset(&r, 0, sizeof r);
  r.m = m;
  int rc = parse_args(&r, argc, argv);
  if (rc) return rc < 0 ? 0 : rc;
  char err[ERRLEN];
  const char *in[] = {r.weights, r.data};
  if ((r.show > 0 && r.out &&
       mmrt_probe_output("--out", r.out, MMRT_OUT_DIR, in, 2, err, sizeof err) != MMRT_OK) ||
      (r.dump &&
       mmrt_probe_output("--dump", r.dump, MMRT_OUT_FILE, in, 2, err, sizeof err) != MMRT_OK))
    return fail("%s", err);
  int n = 0;
  mmrt_mem_start_threads();
  rc = bind(&r);
  if (!rc && mmrt_alloc_arenas(m, r.arenas, err, sizeof err) != MMRT_OK) rc = fail("%s", err);
  if (!rc && mmrt_load_params(m, r.arenas, r.weights, 0, &n, err, sizeof err) != MMRT_OK)
    rc = fail("--weights %s: %s", r.weights, err);
  if (!rc && !r.quiet)
    fprintf(stderr, "reconstructor: %d parameters loaded from %s\n", n, r.weights);
  const char *dir = r.data ? r.data : mmrt_fmnist_dir();
  if (!rc && mmrt_fmnist_load(&r.test, dir, MMRT_SPLIT_TEST, err, sizeof err) != MMRT_OK)
    rc = fail("%s %s: %s", mmrt_fmnist_dir_source(dir), dir, err);
  if (!rc && mmrt_video_init(&r.heldout, &r.test, (int)r.F, MMRT_VIDEO_HELDOUT_SEED, err,
                             sizeof err) != MMRT_OK)
    rc = fail("model %s: %s", m->name, err);
  mmrt_stop_install();
  if (!rc) rc = run(&r);
  for (int k = 0; k < MMRT_NARENAS; k++) free(r.arenas[k]);
  mmrt_video_free(&r.heldout);
  mmrt_images_free(&r.test);
  mmrt_kernels_shutdown();
  return rc;
}
