/* mmrt_extract.c: the feature extractor (mmc compile --task extract) of a
 * model with forwards latents and text_features (its frozen encoders,
 * docs/design/t2v.md "Offline features"):
 *
 *   extractor --out DIR [--init-from PATH] [--seed S] [--clips N]
 *             [--heldout N] [--shard N] [--data DIR|LIST.json] [--quiet]
 *             [--video-fps F] [--bad-samples fail|skip]
 *
 * Initialises every parameter as the trainer does (its init stream under
 * --seed), loads by name what PATH holds (a WF-VAE checkpoint directory or
 * weights file: the encoder's tensors), runs @latents and @text_features
 * over training clips 0 .. N-1 under the seed (the trainer's samples, in
 * its batches of B) and held-out clips 0 .. H-1, and writes DIR as
 * mmrt_features.h describes. Under a launcher (mpirun -np R) each rank
 * runs a contiguous share of each split's batches of B (the batches the
 * one-rank run makes, so the same numbers) and sends its rows to rank 0,
 * which writes the one directory and manifest. Rank 0 prints progress with
 * an ETA; SIGINT/SIGTERM stop every rank at its next batch: nothing is
 * written, exit 130 / 143 (under mpirun the job is aborted: a rank that
 * stopped would leave the others waiting for its rows).
 *
 * --data LIST.json (or .jsonl): video files (mmrt_vfiles.h) instead of
 * the generated clips: training row i and held-out row i are entry i of
 * the list (file order; N and H at most the entries), decoded to the
 * encoder's input (C, F, H, W), each row's caption its entry's "cap" as
 * caption ids (mmrt_dit_text_ids), its label -1 (none). A bad entry
 * stops the run naming the file, entry and row, or with --bad-samples skip
 * the row takes the next good entry (counted). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "mmrt_comm.h"
#include "mmrt_features.h"
#include "mmrt_flags.h"
#include "mmrt_mem.h"
#include "mmrt_vfiles.h"

#define ERRLEN 1024

typedef struct Ext {
  const MmrtModelDesc *m;
  const char *out, *init_from, *data, *bad_samples;
  double video_fps;
  int64_t clips, heldout, shard;
  uint64_t seed;
  int quiet;
  char *arenas[MMRT_NARENAS];
  const MmrtTensorDesc *t[MMRT_FEAT_NTENSORS];
  MmrtTokenizer tok;
  MmrtImages train, test;
  MmrtFeatures f;
  int rank, world; /* under a launcher; world 1 without one */
  MmrtMesh mesh;   /* dp = world, when world > 1 */
  int files;       /* --data names a video list */
  MmrtVfiles vf;
} Ext;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  char msg[ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "extractor: error: %s\n", msg);
  return 1;
}

#define AT(f) offsetof(Ext, f)
#define WHOLE "%F takes a whole number >= %L, not '%V'"
static const MmrtFlag ext_flags[] = {
    MMRT_FLAG_S("--out", "DIR", AT(out), "the features directory (created if missing)"),
    MMRT_FLAG_S("--init-from", "PATH", AT(init_from),
                "load parameters by name (a WF-VAE checkpoint directory or weights\n"
                "file); the others keep their init under --seed, as in the trainer"),
    MMRT_FLAG_I("--seed", "S", AT(seed), 0, INT64_MAX, WHOLE,
                "the run seed: initialisation and the training clips (default %D)"),
    MMRT_FLAG_I("--clips", "N", AT(clips), 1, INT64_MAX, WHOLE,
                "training clips 0 .. N-1 (default %D)"),
    MMRT_FLAG_I("--heldout", "N", AT(heldout), 0, INT64_MAX, WHOLE,
                "held-out clips 0 .. N-1, for the trainer's evaluation (default %D)"),
    MMRT_FLAG_I("--shard", "N", AT(shard), 1, INT64_MAX, WHOLE,
                "clips per shard file (default %D)"),
    MMRT_FLAG_S("--data", "DIR", AT(data),
                "Fashion-MNIST (default $MMRT_FMNIST_DIR, else " MMRT_FMNIST_DEFAULT_DIR "); or\n"
                "video files: a .json/.jsonl list of {path, cap, num_frames, fps, resolution}"),
    MMRT_FLAG_F("--video-fps", "F", AT(video_fps), 0, 1, "%F takes a positive number, not '%V'",
                "video files: sample each video at F frames a second (default: every frame)"),
    MMRT_FLAG_E("--bad-samples", "M", AT(bad_samples), "fail|skip",
                "%F takes fail or skip, not '%V'",
                "video files: a bad video: fail (default) or skip (the next good one)"),
    MMRT_FLAG_B("--quiet", AT(quiet), "no progress on stderr"),
    MMRT_FLAG_END,
};
#undef WHOLE
#undef AT

/* 0 ok, 1 error (printed), -1 --help. */
static int parse_args(Ext *x, int argc, char **argv) {
  x->clips = 4096, x->heldout = 256, x->shard = 4096, x->seed = 42;
  static const MmrtFlagSet set = {
      .who = "extractor", .flags = ext_flags, .needs_value = "option %F needs a value", .col = 19};
  char head[512];
  snprintf(head, sizeof head,
           "usage: extractor --out DIR [options]   (model %s, batch %lld)\n"
           "Runs the model's frozen encoders (@latents, @text_features) once over the clips and\n"
           "writes the features directory the trainer reads with --features DIR.\n",
           x->m->name, (long long)x->m->batch);
  /* the data section: its source and keys (--video-fps, --bad-samples) the defaults */
  if (x->m->data_source && x->m->data_source[0]) x->data = x->m->data_source;
  if (mmrt_desc_data_flags(x->m, &set, x)) return 1;
  int rc = mmrt_flags_parse(&set, argc, argv, x, head);
  if (rc) return rc;
  if (!x->out) return fail("--out DIR is required (where the features go)");
  char err[ERRLEN];
  const char *in[] = {x->init_from, x->data};
  if (mmrt_probe_output("--out", x->out, MMRT_OUT_DIR, in, 2, err, sizeof err) != MMRT_OK)
    return fail("%s", err);
  return 0;
}

int mmrt_extract_parse(int argc, char **argv, const MmrtModelDesc *m) {
  Ext x = {.m = m};
  return parse_args(&x, argc, argv);
}

static float *at(const Ext *x, const MmrtTensorDesc *d) {
  return (float *)(void *)(x->arenas[d->arena] + d->offset);
}

static int64_t numel(const MmrtTensorDesc *d) {
  int64_t n = 1;
  for (int64_t k = 0; k < d->ndim; k++) n *= d->shape[k];
  return n;
}

static int bind(Ext *x) {
  const MmrtModelDesc *m = x->m;
  if (!m->feat_tensors || !m->feat_latents_step || !m->feat_text_step)
    return fail("model %s was not compiled for feature extraction (mmc compile --task extract)",
                m->name);
  for (int k = 0; k < MMRT_FEAT_NTENSORS; k++) x->t[k] = &m->feat_tensors[k];
  const MmrtTensorDesc *v = x->t[MMRT_FEAT_VIDEO], *lat = x->t[MMRT_FEAT_LATENTS],
                       *txt = x->t[MMRT_FEAT_TEXT], *tf = x->t[MMRT_FEAT_TEXT_FEATURES];
  if (v->ndim != 5 || v->dtype != MMRT_ST_F32 || v->shape[1] != 1 ||
      v->shape[3] != MMRT_VIDEO_SIDE || v->shape[4] != MMRT_VIDEO_SIDE || lat->ndim != 5 ||
      txt->ndim != 2 || txt->dtype != MMRT_ST_I32 || tf->ndim != 3 || tf->dtype != MMRT_ST_F32 ||
      v->shape[0] != lat->shape[0] || txt->shape[0] != v->shape[0] || tf->shape[0] != v->shape[0] ||
      tf->shape[1] != txt->shape[1])
    return fail("model %s: forward latents must take video f32[B, 1, F, 64, 64] and give "
                "[B, C, T, H, W]; text_features take text i32[B, L] and give f32[B, L, D]",
                m->name);
  x->f.lat = numel(lat) / lat->shape[0];
  for (int d = 0; d < 4; d++) x->f.lat_shape[d] = lat->shape[1 + d];
  x->f.L = txt->shape[1], x->f.D = tf->shape[2];
  x->f.frames = (int)v->shape[2];
  x->f.seed = x->seed;
  mmrt_dit_vocab(&x->tok);
  return 0;
}

/* The trainer's initial values, then what --init-from holds; the CRC32 of
 * the frozen parameters' bytes (the encoders'). */
static int init_params(Ext *x, uint32_t *crc) {
  const MmrtModelDesc *m = x->m;
  for (int64_t i = 0; i < m->nparams; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != MMRT_ARENA_PARAM) continue;
    int64_t inner = numel(p) / (p->ndim ? p->shape[0] : 1), real = p->ndim ? p->rows * inner : 1;
    mmrt_init_values(p, x->seed, at(x, p), 0, real);
  }
  int n = 0;
  char err[ERRLEN];
  if (x->init_from) {
    MmrtStFile *f = NULL;
    struct stat st;
    int dir = stat(x->init_from, &st) == 0 && S_ISDIR(st.st_mode), rc = MMRT_OK;
    MmrtCkpt *c = NULL;
    rc = dir ? mmrt_ckpt_open_all(&c, x->init_from, NULL, NULL, err, sizeof err)
             : mmrt_st_open(&f, x->init_from, err, sizeof err);
    for (int64_t i = 0; i < m->nparams && rc == MMRT_OK; i++) {
      const MmrtTensorDesc *p = &m->params[i];
      if (p->arena != MMRT_ARENA_PARAM) continue;
      MmrtTensorRef ref = {
          .name = p->name, .dtype = (MmrtStDtype)p->dtype, .ndim = (int)p->ndim, .data = at(x, p)};
      MmrtSlice whole = {.ndim = (int)p->ndim};
      for (int64_t d = 0; d < p->ndim; d++)
        ref.shape[d] = whole.global[d] = whole.len[d] = p->shape[d];
      int got = c ? mmrt_ckpt_read_slice(c, &ref, &whole, 0, err, sizeof err)
                  : (mmrt_st_find(f, p->name) < 0 ? MMRT_ERR_NOTFOUND
                                                  : mmrt_st_read(f, &ref, err, sizeof err));
      if (got != MMRT_ERR_NOTFOUND) rc = got, n += got == MMRT_OK;
    }
    mmrt_st_close(f);
    mmrt_ckpt_close(c);
    if (rc != MMRT_OK) return fail("--init-from %s: %s", x->init_from, err);
    if (!n) return fail("--init-from %s: none of the model's parameters is there", x->init_from);
    if (!x->quiet) fprintf(stderr, "extractor: %d parameters loaded from %s\n", n, x->init_from);
  }
  uLong h = crc32_z(0, NULL, 0);
  for (int64_t i = 0; i < m->nparams; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena == MMRT_ARENA_PARAM && p->frozen)
      h = crc32_z(h, (const Bytef *)at(x, p), (size_t)numel(p) * mmrt_st_dtype_size(p->dtype));
  }
  *crc = (uint32_t)h;
  return 0;
}

static int step(Ext *x, MmrtStepFn fn, const char *what) {
  return fn(x->arenas, x->seed, NULL) == 0 ? 0 : fail("%s failed", what);
}

/* Rank r's clips [*lo, *hi) of a split of `clips`: a contiguous share of
 * its batches of B. */
static void share(const Ext *x, int r, int64_t clips, int64_t B, int64_t *lo, int64_t *hi) {
  int64_t b0, nb;
  mmrt_split_range((clips + B - 1) / B, x->world, r, &b0, &nb);
  *lo = b0 * B < clips ? b0 * B : clips;
  *hi = (b0 + nb) * B < clips ? (b0 + nb) * B : clips;
}

/* Rank 0 receives every other rank's rows [lo, hi) of the split; the others
 * send theirs. */
static int gather_split(Ext *x, MmrtFeatSplit *s, int64_t B, const char *what) {
  int64_t L = x->f.L, LD = L * x->f.D, lat = x->f.lat;
  for (int r = 1; r < x->world; r++) {
    int64_t lo, hi;
    share(x, r, s->clips, B, &lo, &hi);
    if (hi <= lo || (x->rank != 0 && x->rank != r)) continue;
    struct {
      void *p;
      size_t elems, size;
    } part[4] = {{s->latents + lo * lat, (size_t)((hi - lo) * lat), sizeof(float)},
                 {s->text_features + lo * LD, (size_t)((hi - lo) * LD), sizeof(float)},
                 {s->text + lo * L, (size_t)((hi - lo) * L), sizeof(int32_t)},
                 {s->label + lo, (size_t)(hi - lo), sizeof(int32_t)}};
    MPI_Request rq[4];
    char msg[96];
    snprintf(msg, sizeof msg, "%s features of rank %d", what, r);
    for (int k = 0; k < 4; k++) {
      int rc = x->rank == 0 ? mmrt_recv_raw(&x->mesh, MMRT_AXIS_DP, part[k].p, part[k].elems,
                                            part[k].elems * part[k].size, r, k, msg)
                            : mmrt_isend_raw(&x->mesh, MMRT_AXIS_DP, part[k].p, part[k].elems,
                                             part[k].elems * part[k].size, 0, k, &rq[k]);
      if (rc != MMRT_OK) return fail("%s: %s", msg, x->mesh.err);
    }
    if (x->rank != 0 && mmrt_wait_sends(&x->mesh, MMRT_AXIS_DP, 4, rq, msg) != MMRT_OK)
      return fail("%s: %s", msg, x->mesh.err);
  }
  return 0;
}

/* Rows i0 .. i0 + n - 1 from the video list: entries i0 .. (file order). */
static int files_rows(Ext *x, int64_t i0, int64_t n, float *video, int32_t *ids, MmrtFeatSplit *s,
                      const char *what) {
  int64_t L = x->f.L, *ent = malloc(sizeof *ent * (size_t)n),
          *used = malloc(sizeof *used * (size_t)n);
  uint64_t *smp = malloc(sizeof *smp * (size_t)n);
  char err[ERRLEN];
  int rc =
      ent && used && smp ? MMRT_OK : mmrt_errf(err, sizeof err, MMRT_ERR_NOMEM, "out of memory");
  for (int64_t r = 0; rc == MMRT_OK && r < n; r++) ent[r] = i0 + r, smp[r] = (uint64_t)(i0 + r);
  if (rc == MMRT_OK) rc = mmrt_vfiles_batch(&x->vf, ent, smp, n, video, used, err, sizeof err);
  for (int64_t r = 0; rc == MMRT_OK && r < n; r++) {
    mmrt_dit_text_ids(&x->tok, x->vf.e[used[r]].cap, 0, ids + r * L, L);
    s->label[i0 + r] = -1;
  }
  free(ent), free(used), free(smp);
  return rc == MMRT_OK ? 0 : fail("--data %s (%s rows): %s", x->data, what, err);
}

/* The features of this rank's share of clips [0, s->clips) of v (ids
 * dropped: none), B at a time. */
static int run_split(Ext *x, MmrtVideo *v, MmrtFeatSplit *s, const char *what) {
  const MmrtTensorDesc *vd = x->t[MMRT_FEAT_VIDEO], *ld = x->t[MMRT_FEAT_LATENTS],
                       *td = x->t[MMRT_FEAT_TEXT], *fd = x->t[MMRT_FEAT_TEXT_FEATURES];
  int64_t B = vd->shape[0], per = numel(vd) / B, L = x->f.L, LD = L * x->f.D, lo, hi;
  float *video = at(x, vd);
  int32_t *ids = (int32_t *)(void *)at(x, td);
  share(x, x->rank, s->clips, B, &lo, &hi);
  char title[64];
  snprintf(title, sizeof title, "extractor: %s clip", what);
  MmrtProgress pr; /* this rank's share (rank 0's, printed) */
  mmrt_progress_begin(&pr, title, 0, hi - lo, "clips", !x->quiet);
  for (int64_t i0 = lo; i0 < hi; i0 += B) {
    if (mmrt_stop_signal) return mmrt_progress_break(&pr), 128 + mmrt_stop_signal;
    int64_t n = hi - i0 < B ? hi - i0 : B;
    if (x->files && files_rows(x, i0, n, video, ids, s, what)) return 1;
    for (int64_t r = x->files ? n : 0; r < B; r++) {
      MmrtClipInfo ci;
      if (i0 + r < s->clips) {
        mmrt_video_clip(v, (uint64_t)(i0 + r), video + r * per, &ci);
        mmrt_dit_caption_ids(&x->tok, &ci, 0, ids + r * L, L);
        s->label[i0 + r] = ci.label;
      } else { /* past the last clip: zeros and the null caption, not stored */
        memset(video + r * per, 0, sizeof *video * (size_t)per);
        mmrt_dit_caption_ids(&x->tok, &ci, 1, ids + r * L, L);
      }
    }
    if (step(x, x->m->feat_latents_step, "@latents")) return 1;
    memcpy(s->latents + i0 * x->f.lat, at(x, ld), sizeof(float) * (size_t)(n * x->f.lat));
    if (step(x, x->m->feat_text_step, "@text_features")) return 1;
    memcpy(s->text_features + i0 * LD, at(x, fd), sizeof(float) * (size_t)(n * LD));
    memcpy(s->text + i0 * L, ids, sizeof(int32_t) * (size_t)(n * L));
    mmrt_progress_tick(&pr, i0 + n - lo, (double)(i0 + n - lo), NULL);
  }
  mmrt_progress_break(&pr);
  return x->world > 1 ? gather_split(x, s, B, what) : 0;
}

/* The null caption's features: a batch of null captions, row 0. */
static int run_null(Ext *x) {
  const MmrtTensorDesc *td = x->t[MMRT_FEAT_TEXT];
  int64_t B = td->shape[0], L = x->f.L;
  int32_t *ids = (int32_t *)(void *)at(x, td);
  MmrtClipInfo ci = {0};
  for (int64_t r = 0; r < B; r++) mmrt_dit_caption_ids(&x->tok, &ci, 1, ids + r * L, L);
  if (step(x, x->m->feat_text_step, "@text_features")) return 1;
  memcpy(x->f.null_features, at(x, x->t[MMRT_FEAT_TEXT_FEATURES]),
         sizeof(float) * (size_t)(L * x->f.D));
  memcpy(x->f.null_text, ids, sizeof(int32_t) * (size_t)L);
  return 0;
}

int mmrt_extract_main(int argc, char **argv, const MmrtModelDesc *m) {
  Ext x = {.m = m};
  MmrtVideo vt = {0}, vh = {0};
  uint32_t crc = 0;
  char err[ERRLEN];
  int rc = parse_args(&x, argc, argv);
  if (rc) return rc < 0 ? 0 : rc;
  x.world = mmrt_launcher_world(&x.rank);
  if (x.world > 1) {
    int size[MESH_NAXES]; /* every rank a share of the clips: dp */
    for (int a = 0; a < MESH_NAXES; a++) size[a] = a == MMRT_AXIS_DP ? x.world : 1;
    if (mmrt_mesh_init(&x.mesh, size, err, sizeof err) != MMRT_OK) return fail("%s", err);
    mmrt_comm_set_timeout(&x.mesh, MMRT_COMM_TIMEOUT_DEFAULT);
    if (x.rank) x.quiet = 1; /* rank 0 reports */
  } else {
    x.world = 1, x.rank = 0;
  }
  mmrt_mem_start_threads();
  rc = bind(&x);
  if (!rc && mmrt_alloc_arenas(m, x.arenas, err, sizeof err) != MMRT_OK) rc = fail("%s", err);
  if (!rc) rc = init_params(&x, &crc);
  const char *data = x.data ? x.data : mmrt_fmnist_dir();
  x.files = mmrt_vfiles_is(x.data);
  if (!rc && !x.files && (x.video_fps > 0 || x.bad_samples))
    rc = fail("%s: --data %s is not a list of video files (a .json or .jsonl)",
              x.video_fps > 0 ? "--video-fps" : "--bad-samples", data);
  if (!rc && x.files) {
    const int64_t *v = x.t[MMRT_FEAT_VIDEO]->shape;
    int skip = x.bad_samples && !strcmp(x.bad_samples, "skip");
    if (!mmrt_vfiles_open)
      rc = fail("--data %s: a list of video files, but this program was linked without the video "
                "decoder",
                data);
    else if (mmrt_vfiles_open(&x.vf, x.data, (int)v[1], (int)v[2], (int)v[3], (int)v[4],
                              x.video_fps, skip, err, sizeof err) != MMRT_OK)
      rc = fail("--data %s", err);
    else {
      if (x.clips > x.vf.n) x.clips = x.vf.n;
      if (x.heldout > x.vf.n) x.heldout = x.vf.n;
    }
  }
  if (!rc && !x.files &&
      (mmrt_fmnist_load(&x.train, x.data, MMRT_SPLIT_TRAIN, err, sizeof err) != MMRT_OK ||
       mmrt_fmnist_load(&x.test, x.data, MMRT_SPLIT_TEST, err, sizeof err) != MMRT_OK))
    rc = fail("%s %s: %s", mmrt_fmnist_dir_source(data), data, err);
  if (!rc && !x.files &&
      (mmrt_video_init(&vt, &x.train, x.f.frames, x.seed, err, sizeof err) != MMRT_OK ||
       mmrt_video_init(&vh, &x.test, x.f.frames, MMRT_VIDEO_HELDOUT_SEED, err, sizeof err) !=
           MMRT_OK))
    rc = fail("model %s: %s", m->name, err);
  if (!rc && mmrt_features_alloc(&x.f, x.clips, x.heldout, err, sizeof err) != MMRT_OK)
    rc = fail("%s", err);
  mmrt_stop_install();
  if (!rc) rc = run_split(&x, &vt, &x.f.train, "training");
  if (!rc) rc = run_split(&x, &vh, &x.f.heldout, "held-out");
  if (!rc && x.rank == 0) rc = run_null(&x);
  if (!rc && x.rank == 0 &&
      mmrt_features_write(x.out, &x.f, m, x.init_from, crc, x.shard, err, sizeof err) != MMRT_OK)
    rc = fail("--out %s: %s", x.out, err);
  if (rc > 128 && x.rank == 0)
    fprintf(stderr, "extractor: stopped by %s; nothing written to %s\n", mmrt_stop_name(rc - 128),
            x.out);
  if (!rc && !x.quiet)
    fprintf(stderr,
            "extractor: %lld training and %lld held-out clips of model %s into %s (encoders "
            "crc32 %08x; %d rank%s)\n",
            (long long)x.clips, (long long)x.heldout, m->name, x.out, (unsigned)crc, x.world,
            x.world == 1 ? "" : "s");
  if (!rc && !x.quiet && x.files && x.vf.skip)
    fprintf(stderr,
            "extractor: --bad-samples skip: %lld bad entries in %s, %lld rows took another\n",
            (long long)x.vf.bad_at_read, x.data, (long long)x.vf.skipped);
  for (int k = 0; k < MMRT_NARENAS; k++) free(x.arenas[k]);
  mmrt_features_free(&x.f);
  mmrt_video_free(&vt), mmrt_video_free(&vh);
  if (x.files) mmrt_vfiles_close(&x.vf);
  mmrt_images_free(&x.train), mmrt_images_free(&x.test);
  mmrt_kernels_shutdown();
  if (x.world > 1) {
    if (rc) mmrt_comm_abort(rc); /* the other ranks may wait on this one */
    mmrt_mesh_free(&x.mesh);
    mmrt_comm_finalize();
  }
  return rc;
}
