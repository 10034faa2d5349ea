/* check_rt_video.c: the video clips (mmrt_video.h) on the real
 * Fashion-MNIST: reproducible per (seed, index) in any order, the item
 * moving by the drawn velocity (measured from the frames), the pixels
 * (a naive loop over the canvas), the splits, the captions, the video task
 * (binding, fill, rank rows), and mmc-clips' PNG strips and GIFs decoded
 * back (mmrt_png_read_gray, giflib's DGifSlurp). */
#include <check.h>
#include <gif_lib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "mmrt_png.h"
#include "mmrt_rng.h"
#include "mmrt_feed.h"
#include "mmrt_video.h"
#include "tmpdir_fixture.h"

#define S     MMRT_VIDEO_SIDE
#define F     MMRT_VIDEO_FRAMES
#define PER   ((size_t)F * S * S)
#define NCLIP 64

static MmrtImages train, test;
static char err[1024];

static void load(void) {
  ck_assert_msg(mmrt_fmnist_load(&train, NULL, MMRT_SPLIT_TRAIN, err, sizeof err) == MMRT_OK, "%s",
                err);
  ck_assert_msg(mmrt_fmnist_load(&test, NULL, MMRT_SPLIT_TEST, err, sizeof err) == MMRT_OK, "%s",
                err);
  tmpdir_make("mmrt_video");
}
static void unload(void) {
  mmrt_images_free(&train), mmrt_images_free(&test);
  tmpdir_remove();
}

static float *clips_of(const MmrtImages *ds, uint64_t seed, const uint64_t *idx, int n) {
  MmrtVideo v;
  ck_assert_msg(mmrt_video_init(&v, ds, F, seed, err, sizeof err) == MMRT_OK, "%s", err);
  float *out = malloc(sizeof *out * PER * (size_t)n);
  for (int k = 0; k < n; k++) mmrt_video_clip(&v, idx[k], out + PER * (size_t)k, NULL);
  mmrt_video_free(&v);
  return out;
}

START_TEST(same_clip_in_any_order) {
  uint64_t fwd[NCLIP], rev[NCLIP];
  for (int k = 0; k < NCLIP; k++) fwd[k] = k < NCLIP / 2 ? (uint64_t)k : 59990 + (uint64_t)k;
  for (int k = 0; k < NCLIP; k++)
    rev[k] = fwd[NCLIP - 1 - k]; /* crosses the epoch back and forth */
  float *a = clips_of(&train, 7, fwd, NCLIP), *b = clips_of(&train, 7, rev, NCLIP);
  for (int k = 0; k < NCLIP; k++)
    ck_assert_msg(!memcmp(a + PER * (size_t)k, b + PER * (size_t)(NCLIP - 1 - k), PER * sizeof *a),
                  "clip %llu differs with the order", (unsigned long long)fwd[k]);
  float *c = clips_of(&train, 8, fwd, NCLIP); /* another seed: other clips */
  int same = 0;
  for (int k = 0; k < NCLIP; k++)
    same += !memcmp(a + PER * (size_t)k, c + PER * (size_t)k, PER * sizeof *a);
  ck_assert_int_lt(same, 2);
  free(a), free(b), free(c);
}
END_TEST

/* The bounding box of the nonzero pixels of frame f, and the centroid. */
static void measure(const float *f, int box[4], double cen[2]) {
  box[0] = box[1] = S, box[2] = box[3] = -1;
  double m = 0, mx = 0, my = 0;
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S; x++) {
      double p = f[y * S + x];
      if (p == 0) continue;
      if (x < box[0]) box[0] = x;
      if (y < box[1]) box[1] = y;
      if (x > box[2]) box[2] = x;
      if (y > box[3]) box[3] = y;
      m += p, mx += p * x, my += p * y;
    }
  cen[0] = mx / m, cen[1] = my / m;
}

/* The direction word of a displacement, as a person names it. */
static const char *word_of(int dx, int dy) {
  static char w[32];
  snprintf(w, sizeof w, "%s%s%s",
           dy < 0   ? "up"
           : dy > 0 ? "down"
                    : "",
           dx && dy ? "-" : "",
           dx < 0   ? "left"
           : dx > 0 ? "right"
                    : "");
  return w;
}

static const char *const nouns[10] = {"a t-shirt", "a pair of trousers", "a pullover", "a dress",
                                      "a coat",    "a sandal",           "a shirt",    "a sneaker",
                                      "a bag",     "an ankle boot"};

/* Measured motion is straight, at the drawn speed in the drawn direction
 * (words 0 and 1 of the clip's Philox stream, decoded here from the
 * header's rule), and the caption names it and the item's class. */
START_TEST(moves_by_drawn_velocity) {
  MmrtVideo v;
  ck_assert(mmrt_video_init(&v, &train, F, 3, err, sizeof err) == MMRT_OK);
  float *clip = malloc(sizeof *clip * PER);
  int seen_dir[8] = {0}, seen_speed[3] = {0};
  uint64_t stream = mmrt_rng_stream("mmrt/video", 0);
  for (uint64_t i = 0; i < 200; i++) {
    MmrtClipInfo ci;
    mmrt_video_clip(&v, i, clip, &ci);
    int dir = (int)(((uint64_t)mmrt_rng_u32(3, stream, 4 * i) * 8) >> 32);
    int speed = 1 + (int)(((uint64_t)mmrt_rng_u32(3, stream, 4 * i + 1) * 2) >> 32);
    int box0[4], box[4], dx = 0, dy = 0;
    double c0[2], c[2];
    measure(clip, box0, c0);
    for (int t = 1; t < F; t++) {
      measure(clip + (size_t)t * S * S, box, c);
      ck_assert(box[0] >= 0 && box[1] >= 0 && box[2] < S && box[3] < S);
      ck_assert_int_eq(box[2] - box[0], box0[2] - box0[0]); /* whole, not cut by a border */
      ck_assert_int_eq(box[3] - box[1], box0[3] - box0[1]);
      int ex = box[0] - box0[0], ey = box[1] - box0[1];
      if (t == 1) dx = ex, dy = ey;
      ck_assert_int_eq(ex, dx * t); /* straight, constant speed */
      ck_assert_int_eq(ey, dy * t);
      ck_assert_msg(fabs(c[0] - c0[0] - dx * t) < 1e-6 && fabs(c[1] - c0[1] - dy * t) < 1e-6,
                    "clip %llu frame %d: centroid moved (%g, %g), box (%d, %d)",
                    (unsigned long long)i, t, c[0] - c0[0], c[1] - c0[1], ex, ey);
    }
    static const int ux[8] = {-1, 1, 0, 0, -1, 1, -1, 1}, uy[8] = {0, 0, -1, 1, -1, -1, 1, 1};
    ck_assert_msg(dx == ux[dir] * speed && dy == uy[dir] * speed,
                  "clip %llu: moved (%d, %d) a frame, drawn direction %d speed %d",
                  (unsigned long long)i, dx, dy, dir, speed);
    seen_dir[dir]++, seen_speed[speed]++;
    char cap[128], want[128];
    mmrt_video_caption(&ci, cap, sizeof cap);
    snprintf(want, sizeof want, "%s moving %s", nouns[train.labels[ci.item]], word_of(dx, dy));
    ck_assert_str_eq(cap, want);
  }
  for (int d = 0; d < 8; d++) ck_assert_int_gt(seen_dir[d], 5);
  ck_assert_int_gt(seen_speed[1], 50);
  ck_assert_int_gt(seen_speed[2], 50);
  free(clip);
  mmrt_video_free(&v);
}
END_TEST

/* Frame t, pixel by pixel: the item's byte / 255 inside its square at the
 * measured start plus t times the velocity, 0 elsewhere; the item is clip
 * i's entry of the split's permutation (the header's rule). */
static void check_pixels(const MmrtImages *ds, const MmrtImages *other, uint64_t seed) {
  MmrtVideo v;
  ck_assert(mmrt_video_init(&v, ds, F, seed, err, sizeof err) == MMRT_OK);
  uint32_t *perm = malloc(sizeof *perm * (size_t)ds->n);
  mmrt_rng_permutation(perm, (uint32_t)ds->n, seed ^ MMRT_VIDEO_PERM_SALT, 0);
  float *clip = malloc(sizeof *clip * PER);
  for (uint64_t i = 0; i < 20; i++) {
    MmrtClipInfo ci;
    mmrt_video_clip(&v, i, clip, &ci);
    ck_assert_int_eq(ci.item, perm[i]);
    const uint8_t *img = ds->pixels + (size_t)perm[i] * 784;
    for (int t = 0; t < F; t++) {
      int x = ci.x0 + ci.vx * t, y = ci.y0 + ci.vy * t; /* no bounce at 17 frames */
      for (int Y = 0; Y < S; Y++)
        for (int X = 0; X < S; X++) {
          int in = X >= x && X < x + 28 && Y >= y && Y < y + 28;
          float want = in ? (float)img[(Y - y) * 28 + X - x] / 255.0f : 0.0f;
          ck_assert_msg(clip[((size_t)t * S + (size_t)Y) * S + (size_t)X] == want,
                        "clip %llu frame %d pixel (%d, %d)", (unsigned long long)i, t, X, Y);
        }
    }
    /* the other split's item of that number (if any) is another image */
    if (perm[i] < other->n) ck_assert(memcmp(img, other->pixels + (size_t)perm[i] * 784, 784));
  }
  free(clip), free(perm);
  mmrt_video_free(&v);
}

START_TEST(pixels_are_the_item) {
  ck_assert_int_eq(train.n, 60000);
  ck_assert_int_eq(test.n, 10000);
  check_pixels(&train, &test, 5);
  check_pixels(&test, &train, MMRT_VIDEO_HELDOUT_SEED);
}
END_TEST

START_TEST(bad_frames) {
  MmrtVideo v;
  ck_assert_int_eq(mmrt_video_init(&v, &train, 16, 0, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(err, "1 + 4k frames"));
  ck_assert_ptr_nonnull(strstr(err, "16"));
}
END_TEST

/* The task through its interface: a model with one input video
 * f32[4, 1, 17, 64, 64] binds to it; training rows are train clips
 * sample0 + r under the run seed, evaluation rows held-out test clips by
 * their place in the test split; a rank's rows equal the serial rows. */
START_TEST(task_binds_and_fills) {
  const int64_t B = 4;
  MmrtTensorDesc in = {.name = "video", .dtype = MMRT_ST_F32, .ndim = 5, .shape = {B, 1, F, S, S}};
  MmrtModelDesc m = {
      .name = "Clips", .ninputs = 1, .inputs = &in, .batch = B, .eval_logits_offset = -1};
  float *x = calloc(PER * (size_t)B, sizeof *x);
  char *arenas[MMRT_NARENAS] = {0};
  for (int a = 0; a < MMRT_NARENAS; a++) arenas[a] = (char *)x;
  MmrtFeedCtx c = {.m = &m, .arenas = arenas, .seed = 9, .B = B, .eval_batches = -1};
  const MmrtFeeder *t = mmrt_feed_bind(&c, err, sizeof err);
  ck_assert_msg(t == &mmrt_feed_video, "%s", t ? t->name : err);
  ck_assert_ptr_null(c.labels);
  c.lo = 0, c.rows = B;
  ck_assert_msg(t->open(&c, NULL, err, sizeof err) == MMRT_OK, "%s", err);
  ck_assert_msg(t->start(&c, err, sizeof err) == MMRT_OK, "%s", err);
  uint64_t idx[4] = {40, 41, 42, 43};
  float *want = clips_of(&train, 9, idx, 4);
  t->fill(&c, NULL, B, 0, 40);
  ck_assert(!memcmp(x, want, PER * (size_t)B * sizeof *x));
  c.lo = 2, c.rows = 2; /* rank 1 of 2 */
  memset(x, 0, PER * (size_t)B * sizeof *x);
  t->fill(&c, NULL, B, 0, 40);
  ck_assert(!memcmp(x, want + 2 * PER, 2 * PER * sizeof *x));
  free(want);
  c.lo = 0, c.rows = B;
  ck_assert(mmrt_feed_restart_eval(&c, err, sizeof err) == MMRT_OK);
  ck_assert_int_eq(mmrt_iter_next(&c.eval_it), B);
  ck_assert_int_eq(mmrt_iter_next(&c.eval_it), B); /* the second test batch: clips 4..7 */
  uint64_t eidx[4] = {4, 5, 6, 7};
  want = clips_of(&test, MMRT_VIDEO_HELDOUT_SEED, eidx, 4);
  t->fill(&c, &c.eval_it, 3, 1, 0); /* a short batch: row 3 is black */
  ck_assert(!memcmp(x, want, PER * 3 * sizeof *x));
  for (size_t k = 0; k < PER; k++) ck_assert(x[3 * PER + k] == 0.0f);
  free(want);
  t->close(&c);
  mmrt_iter_free(&c.eval_it);
  mmrt_images_free(&c.train), mmrt_images_free(&c.test);
  in.shape[2] = 16; /* not 1 + 4k: the task's, refused */
  ck_assert_ptr_null(mmrt_feed_bind(&c, err, sizeof err));
  ck_assert_ptr_nonnull(strstr(err, "16 frames"));
  free(x);
}
END_TEST

static int run(const char *args, const char *errfile) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/mmc-clips' %s 2> '%s'", getenv("MMC_BINARY_DIR"), args, errfile);
  return system(cmd);
}

/* mmc-clips' files decode back to the clips' bytes; the captions file
 * names each clip. */
START_TEST(dump_decodes_back) {
  char args[1024], path[1024], errf[600];
  snprintf(errf, sizeof errf, "%s/err", tmpdir);
  snprintf(args, sizeof args, "--split test --seed 5 --frames 9 --first 3 '%s/out' 2", tmpdir);
  ck_assert_int_eq(run(args, errf), 0);
  MmrtVideo v;
  ck_assert(mmrt_video_init(&v, &test, 9, 5, err, sizeof err) == MMRT_OK);
  float *clip = malloc(sizeof *clip * 9 * S * S);
  uint8_t *strip = malloc(9 * S * S);
  snprintf(path, sizeof path, "%s/out/captions.txt", tmpdir);
  FILE *txt = fopen(path, "r");
  ck_assert_ptr_nonnull(txt);
  for (uint64_t i = 3; i < 5; i++) {
    MmrtClipInfo ci;
    mmrt_video_clip(&v, i, clip, &ci);
    snprintf(path, sizeof path, "%s/out/clip_%05llu.png", tmpdir, (unsigned long long)i);
    ck_assert_msg(mmrt_png_read_gray(path, S, 9 * S, strip, err, sizeof err) == MMRT_OK, "%s", err);
    snprintf(path, sizeof path, "%s/out/clip_%05llu.gif", tmpdir, (unsigned long long)i);
    int ge = 0;
    GifFileType *g = DGifOpenFileName(path, &ge);
    ck_assert_msg(g && DGifSlurp(g) == GIF_OK, "%s: %s", path, GifErrorString(g ? g->Error : ge));
    ck_assert_int_eq(g->ImageCount, 9);
    ck_assert(g->SWidth == S && g->SHeight == S);
    for (int t = 0; t < 9; t++) {
      const SavedImage *im = &g->SavedImages[t];
      const ColorMapObject *cm = im->ImageDesc.ColorMap ? im->ImageDesc.ColorMap : g->SColorMap;
      ck_assert(im->ImageDesc.Width == S && im->ImageDesc.Height == S);
      for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
          int want = (int)lrintf(clip[((size_t)t * S + (size_t)y) * S + (size_t)x] * 255.0f);
          ck_assert_int_eq(strip[(size_t)y * 9 * S + (size_t)(t * S + x)], want);
          ck_assert_int_eq(cm->Colors[im->RasterBits[y * S + x]].Red, want);
        }
    }
    DGifCloseFile(g, &ge);
    char line[256], cap[128], want[256];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, txt));
    mmrt_video_caption(&ci, cap, sizeof cap);
    snprintf(want, sizeof want, "%llu %lld %d %s\n", (unsigned long long)i, (long long)ci.item,
             ci.label, cap);
    ck_assert_str_eq(line, want);
  }
  ck_assert_ptr_null(fgets(path, sizeof path, txt));
  fclose(txt);
  free(clip), free(strip);
  mmrt_video_free(&v);
}
END_TEST

static int contains(const char *file, const char *text) {
  char buf[4096] = "";
  FILE *f = fopen(file, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return strstr(buf, text) != NULL;
}

/* A truncated IDX file: mmc-clips exits 1 naming it, the loader says so. */
START_TEST(truncated_idx_named) {
  char path[600], args[1024], errf[600];
  gzFile in = gzopen("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "rb");
  ck_assert_ptr_nonnull(in);
  static uint8_t head[16 + 5000];
  ck_assert_int_eq(gzread(in, head, sizeof head), (int)sizeof head);
  gzclose(in);
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", tmpdir);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(head, 1, sizeof head, f), sizeof head);
  fclose(f);
  snprintf(args, sizeof args,
           "ln -s /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz '%s/'", tmpdir);
  ck_assert_int_eq(system(args), 0);
  snprintf(errf, sizeof errf, "%s/err", tmpdir);
  snprintf(args, sizeof args, "--data '%s' '%s/out' 1", tmpdir, tmpdir);
  int rc = run(args, errf);
  ck_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
  ck_assert_msg(contains(errf, path) && contains(errf, "truncated"), "message does not name %s",
                path);
  MmrtImages ds;
  ck_assert_int_eq(mmrt_fmnist_load(&ds, tmpdir, MMRT_SPLIT_TRAIN, err, sizeof err),
                   MMRT_ERR_FORMAT);
  ck_assert_ptr_nonnull(strstr(err, path));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("rt_video");
  TCase *tc = tcase_create("video");
  tcase_add_unchecked_fixture(tc, load, unload);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, same_clip_in_any_order);
  tcase_add_test(tc, moves_by_drawn_velocity);
  tcase_add_test(tc, pixels_are_the_item);
  tcase_add_test(tc, bad_frames);
  tcase_add_test(tc, task_binds_and_fills);
  tcase_add_test(tc, dump_decodes_back);
  tcase_add_test(tc, truncated_idx_named);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_set_fork_status(r, CK_NOFORK);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
