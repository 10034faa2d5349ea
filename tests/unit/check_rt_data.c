/* check_rt_data.c: IDX reading (the real Debian Fashion-MNIST when present,
 * and small generated files, gzip and raw, good and broken), the batch
 * iterator (shuffle, rank slices, resume), and the metrics log. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tmpdir_fixture.h"
#include "mmrt_data.h"
#include "mmrt_log.h"
#include "mmrt_rng.h"

static void make_tmpdir(void) {
  tmpdir_make("mmrt_data");
}
static void remove_tmpdir(void) {
  tmpdir_remove();
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Write an IDX file under tmpdir: header with `magic` and dims, then
 * `nbytes` data bytes (pattern i*7+k), gzip when gz. */
static void write_idx(const char *name, int gz, uint32_t magic, int ndim, const uint32_t *dims,
                      size_t nbytes, const uint8_t *data) {
  uint8_t hdr[16];
  put_be32(hdr, magic);
  for (int d = 0; d < ndim; d++) put_be32(hdr + 4 + 4 * d, dims[d]);
  uint8_t *buf = malloc(nbytes ? nbytes : 1);
  for (size_t i = 0; i < nbytes; i++) buf[i] = data ? data[i] : (uint8_t)(i * 7);
  char path[512];
  snprintf(path, sizeof path, "%s/%s%s", tmpdir, name, gz ? ".gz" : "");
  if (gz) {
    gzFile f = gzopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gzwrite(f, hdr, 4 + 4 * (unsigned)ndim), 4 + 4 * ndim);
    if (nbytes) ck_assert_int_eq(gzwrite(f, buf, (unsigned)nbytes), (int)nbytes);
    ck_assert_int_eq(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(hdr, 1, 4 + 4 * (size_t)ndim, f);
    fwrite(buf, 1, nbytes, f);
    fclose(f);
  }
  free(buf);
}

/* A good small split "train" of n images with labels i % 10. */
static void write_split(const char *pre, int gz, uint32_t n) {
  char name[64];
  uint32_t idims[3] = {n, 28, 28}, ldims[1] = {n};
  uint8_t *labels = malloc(n);
  for (uint32_t i = 0; i < n; i++) labels[i] = (uint8_t)(i % 10);
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", pre);
  write_idx(name, gz, MMRT_IDX_MAGIC_IMAGES, 3, idims, (size_t)n * 784, NULL);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", pre);
  write_idx(name, gz, MMRT_IDX_MAGIC_LABELS, 1, ldims, n, labels);
  free(labels);
}

/* Load must fail with code and a message containing every needle. */
static void expect_fail(MmrtSplit split, int code, const char *n1, const char *n2) {
  MmrtImages ds;
  char err[512] = "";
  int rc = mmrt_fmnist_load(&ds, tmpdir, split, err, sizeof err);
  ck_assert_msg(rc == code, "rc %d (%s), expected %d; message: %s", rc, mmrt_status_name(rc), code,
                err);
  ck_assert_msg(strstr(err, n1), "message '%s' lacks '%s'", err, n1);
  if (n2) ck_assert_msg(strstr(err, n2), "message '%s' lacks '%s'", err, n2);
  ck_assert_ptr_null(ds.pixels);
  if (getenv("MMRT_SHOW_ERRORS")) fprintf(stderr, "%s\n", err);
}

/* ---- the real files ---- */

static int have_real(void) {
  struct stat st;
  return stat(MMRT_FMNIST_DEFAULT_DIR "/train-labels-idx1-ubyte.gz", &st) == 0;
}

START_TEST(real_fashion_mnist) {
  if (!have_real()) {
    fprintf(stderr, "skip: %s not installed\n", MMRT_FMNIST_DEFAULT_DIR);
    return;
  }
  MmrtImages tr, te;
  char err[512];
  int rc = mmrt_fmnist_load(&tr, NULL, MMRT_SPLIT_TRAIN, err, sizeof err);
  ck_assert_msg(rc == MMRT_OK, "%s", err);
  rc = mmrt_fmnist_load(&te, MMRT_FMNIST_DEFAULT_DIR, MMRT_SPLIT_TEST, err, sizeof err);
  ck_assert_msg(rc == MMRT_OK, "%s", err);
  ck_assert_int_eq(tr.n, 60000);
  ck_assert_int_eq(te.n, 10000);
  ck_assert_int_eq(tr.rows, 28);
  ck_assert_int_eq(tr.cols, 28);
  /* checked with Python's gzip module */
  const int train_first[] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9};
  const int test_first[] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5};
  for (int i = 0; i < 12; i++) {
    ck_assert_int_eq(tr.labels[i], train_first[i]);
    ck_assert_int_eq(te.labels[i], test_first[i]);
  }
  long sum = 0;
  int argmax = 0;
  for (int k = 0; k < 784; k++) {
    sum += tr.pixels[k];
    if (tr.pixels[k] > tr.pixels[argmax]) argmax = k;
  }
  ck_assert_int_eq(sum, 76247);
  ck_assert_int_eq(argmax, 417);
  /* the stated mean/std are the training set's */
  double s = 0, s2 = 0;
  for (size_t k = 0; k < (size_t)tr.n * 784; k++) {
    double v = tr.pixels[k] / 255.0;
    s += v, s2 += v * v;
  }
  double m = s / (tr.n * 784.0), sd = sqrt(s2 / (tr.n * 784.0) - m * m);
  ck_assert(fabs(m - MMRT_FMNIST_MEAN) < 1e-3 && fabs(sd - MMRT_FMNIST_STD) < 1e-3);
  int counts[10] = {0};
  for (int64_t i = 0; i < tr.n; i++) counts[tr.labels[i]]++;
  for (int c = 0; c < 10; c++) ck_assert_int_eq(counts[c], 6000);
  ck_assert_str_eq(mmrt_fmnist_class_name(tr.labels[0]), "Ankle boot");

  /* test split in order, with the partial last batch */
  MmrtBatchIter it;
  ck_assert_int_eq(mmrt_iter_init(&it, &te, 3000, 0, 0, err, sizeof err), MMRT_OK);
  int64_t rows[5];
  for (int b = 0; b < 5; b++) rows[b] = mmrt_iter_next(&it);
  ck_assert_int_eq(rows[0], 3000);
  ck_assert_int_eq(rows[3], 1000);
  ck_assert_int_eq(rows[4], 0);
  mmrt_iter_free(&it);
  mmrt_images_free(&tr);
  mmrt_images_free(&te);
}
END_TEST

/* ---- generated files ---- */

START_TEST(small_gz_and_raw) {
  for (int gz = 0; gz <= 1; gz++) {
    make_tmpdir();
    write_split("t10k", gz, 25);
    MmrtImages ds;
    char err[512];
    int rc = mmrt_fmnist_load(&ds, tmpdir, MMRT_SPLIT_TEST, err, sizeof err);
    ck_assert_msg(rc == MMRT_OK, "%s", err);
    ck_assert_int_eq(ds.n, 25);
    ck_assert_int_eq(ds.labels[13], 3);
    ck_assert_int_eq(ds.pixels[784 * 2 + 5], (uint8_t)((784 * 2 + 5) * 7));
    mmrt_images_free(&ds);
    /* train split is missing: names the .gz and the raw name */
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_NOTFOUND, "train-images-idx3-ubyte.gz", "no such file");
    remove_tmpdir();
  }
}
END_TEST

START_TEST(gz_preferred_over_raw) {
  make_tmpdir();
  write_split("train", 1, 20);
  /* a raw labels file with bad magic beside the good .gz is ignored */
  uint32_t d[1] = {20};
  write_idx("train-labels-idx1-ubyte", 0, 0x0803, 1, d, 20, NULL);
  MmrtImages ds;
  char err[512];
  ck_assert_int_eq(mmrt_fmnist_load(&ds, tmpdir, MMRT_SPLIT_TRAIN, err, sizeof err), MMRT_OK);
  mmrt_images_free(&ds);
  remove_tmpdir();
}
END_TEST

START_TEST(missing_dir) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/mmrt_no_such_dir_%d", (int)getpid());
  expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_NOTFOUND, tmpdir, "does not exist");
}
END_TEST

START_TEST(bad_magic) {
  for (int gz = 0; gz <= 1; gz++) {
    make_tmpdir();
    write_split("train", gz, 10);
    uint32_t d[3] = {10, 28, 28};
    write_idx("train-images-idx3-ubyte", gz, 0x0801, 3, d, 7840, NULL);
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte",
                "bad magic 0x00000801, expected 0x00000803");
    remove_tmpdir();
  }
}
END_TEST

START_TEST(bad_dims) {
  make_tmpdir();
  write_split("train", 1, 10);
  uint32_t d[3] = {10, 32, 28};
  write_idx("train-images-idx3-ubyte", 1, MMRT_IDX_MAGIC_IMAGES, 3, d, 10 * 32 * 28, NULL);
  expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte.gz",
              "32x28, expected 28x28");
  remove_tmpdir();
}
END_TEST

START_TEST(mismatched_counts) {
  make_tmpdir();
  write_split("t10k", 1, 12);
  uint32_t d[1] = {11};
  write_idx("t10k-labels-idx1-ubyte", 1, MMRT_IDX_MAGIC_LABELS, 1, d, 11, NULL);
  expect_fail(MMRT_SPLIT_TEST, MMRT_ERR_FORMAT, "t10k-labels-idx1-ubyte.gz: 11 labels",
              "expected 12");
  remove_tmpdir();
}
END_TEST

START_TEST(label_out_of_range) {
  make_tmpdir();
  write_split("t10k", 0, 5);
  uint32_t d[1] = {5};
  uint8_t lab[5] = {1, 2, 3, 10, 4};
  write_idx("t10k-labels-idx1-ubyte", 0, MMRT_IDX_MAGIC_LABELS, 1, d, 5, lab);
  expect_fail(MMRT_SPLIT_TEST, MMRT_ERR_FORMAT, "label 10 at index 3", "expected 0..9");
  remove_tmpdir();
}
END_TEST

START_TEST(truncated) {
  for (int gz = 0; gz <= 1; gz++) {
    make_tmpdir();
    write_split("train", gz, 10);
    uint32_t d[3] = {10, 28, 28};
    write_idx("train-images-idx3-ubyte", gz, MMRT_IDX_MAGIC_IMAGES, 3, d, 7840 - 100, NULL);
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte",
                "truncated: header promises 7840 data bytes (10 x 28 x 28), file holds 7740");
    /* a header promising far more than exists: truncation, not a huge malloc */
    uint32_t big[3] = {4000000000u, 28, 28};
    write_idx("train-images-idx3-ubyte", gz, MMRT_IDX_MAGIC_IMAGES, 3, big, 5000, NULL);
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte", "truncated");
    /* cut inside the header */
    write_idx("train-images-idx3-ubyte", gz, MMRT_IDX_MAGIC_IMAGES, 1, d, 0, NULL);
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte", "truncated header");
    /* empty file */
    write_idx("train-images-idx3-ubyte", gz, MMRT_IDX_MAGIC_IMAGES, 0, d, 0, NULL);
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", tmpdir, gz ? ".gz" : "");
    ck_assert_int_eq(truncate(p, 0), 0);
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte",
                "expected at least a 4-byte IDX magic");
    /* too much data */
    write_idx("train-images-idx3-ubyte", gz, MMRT_IDX_MAGIC_IMAGES, 3, d, 7841, NULL);
    expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte",
                "more data than the header promises");
    remove_tmpdir();
  }
}
END_TEST

START_TEST(truncated_gzip_stream) {
  /* a .gz cut in the middle of its compressed stream */
  make_tmpdir();
  write_split("train", 1, 50);
  char p[512];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", tmpdir);
  struct stat st;
  ck_assert_int_eq(stat(p, &st), 0);
  ck_assert_int_eq(truncate(p, st.st_size / 2), 0);
  expect_fail(MMRT_SPLIT_TRAIN, MMRT_ERR_FORMAT, "train-images-idx3-ubyte.gz", "truncated");
  remove_tmpdir();
}
END_TEST

/* ---- iterator ---- */

static MmrtImages fake(int64_t n) {
  MmrtImages ds = {n, 28, 28, malloc((size_t)n * 784), malloc((size_t)n)};
  for (int64_t i = 0; i < n; i++) {
    memset(ds.pixels + i * 784, (int)(i % 256), 784);
    ds.labels[i] = (uint8_t)(i % 10);
  }
  return ds;
}

START_TEST(iter_shuffle_epochs) {
  enum { N = 103, B = 10 };
  MmrtImages ds = fake(N);
  MmrtBatchIter it;
  char err[256];
  ck_assert_int_eq(mmrt_iter_init(&it, &ds, B, 1, 42, err, sizeof err), MMRT_OK);
  uint32_t perm[N];
  for (int e = 0; e < 3; e++) {
    mmrt_rng_permutation(perm, N, 42, (uint64_t)e);
    for (int b = 0; b < N / B; b++) {
      ck_assert_int_eq(mmrt_iter_next(&it), B);
      ck_assert_int_eq(it.epoch, e);
      for (int k = 0; k < B; k++) ck_assert_int_eq(mmrt_iter_index(&it, k), perm[b * B + k]);
    }
  }
  /* values: normalised pixels and labels */
  static float x[B * 784];
  int32_t y[B];
  mmrt_iter_fill(&it, 0, B, x, y);
  for (int k = 0; k < B; k++) {
    int64_t idx = mmrt_iter_index(&it, k);
    ck_assert_int_eq(y[k], idx % 10);
    float want = ((float)(idx % 256) / 255.0f - 0.2860f) / 0.3530f;
    ck_assert(x[k * 784] == want && x[k * 784 + 783] == want);
  }
  ck_assert(fabsf(mmrt_fmnist_normalize(0) - (-0.2860f / 0.3530f)) < 1e-6f);
  mmrt_iter_free(&it);
  /* batch bigger than the split cannot make progress */
  ck_assert_int_eq(mmrt_iter_init(&it, &ds, N + 1, 1, 42, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_int_eq(mmrt_iter_init(&it, &ds, 0, 0, 42, err, sizeof err), MMRT_ERR_ARG);
  mmrt_images_free(&ds);
}
END_TEST

/* Ranks filling their slices of each global batch reproduce the serial batch. */
START_TEST(iter_rank_slices) {
  enum { N = 50, B = 7 };
  MmrtImages ds = fake(N);
  char err[256];
  for (int shuffle = 0; shuffle <= 1; shuffle++) {
    for (int nranks = 1; nranks <= 4; nranks++) {
      MmrtBatchIter ser, par[4];
      ck_assert_int_eq(mmrt_iter_init(&ser, &ds, B, shuffle, 5, err, sizeof err), 0);
      for (int r = 0; r < nranks; r++)
        ck_assert_int_eq(mmrt_iter_init(&par[r], &ds, B, shuffle, 5, err, sizeof err), 0);
      for (int step = 0; step < 20; step++) {
        static float xs[B * 784], xp[B * 784];
        int32_t ys[B], yp[B];
        int64_t rows = mmrt_iter_next(&ser);
        mmrt_iter_fill(&ser, 0, B, xs, ys);
        for (int r = 0; r < nranks; r++) {
          int64_t lo, hi;
          mmrt_batch_slice(B, nranks, r, &lo, &hi);
          ck_assert_int_eq(mmrt_iter_next(&par[r]), rows);
          mmrt_iter_fill(&par[r], lo, hi, xp + lo * 784, yp + lo);
        }
        ck_assert(memcmp(xs, xp, sizeof xs) == 0);
        ck_assert(memcmp(ys, yp, sizeof ys) == 0);
        for (int64_t k = rows; k < B; k++) /* padding of a short batch */
          ck_assert(ys[k] == -1 && xs[k * 784] == 0.0f);
      }
      mmrt_iter_free(&ser);
      for (int r = 0; r < nranks; r++) mmrt_iter_free(&par[r]);
    }
  }
  int64_t lo, hi, total = 0;
  for (int r = 0; r < 3; r++) {
    mmrt_batch_slice(10, 3, r, &lo, &hi);
    ck_assert_int_eq(lo, total);
    ck_assert(hi - lo == 3 || hi - lo == 4);
    total = hi;
  }
  ck_assert_int_eq(total, 10);
  mmrt_images_free(&ds);
}
END_TEST

START_TEST(iter_eval_pass) {
  MmrtImages ds = fake(10);
  MmrtBatchIter it;
  char err[256];
  ck_assert_int_eq(mmrt_iter_init(&it, &ds, 4, 0, 0, err, sizeof err), 0);
  for (int pass = 0; pass < 2; pass++) {
    ck_assert_int_eq(mmrt_iter_next(&it), 4);
    ck_assert_int_eq(mmrt_iter_index(&it, 0), 0);
    ck_assert_int_eq(mmrt_iter_next(&it), 4);
    ck_assert_int_eq(mmrt_iter_next(&it), 2);
    ck_assert_int_eq(mmrt_iter_index(&it, 1), 9);
    ck_assert_int_eq(mmrt_iter_index(&it, 2), -1);
    ck_assert_int_eq(mmrt_iter_next(&it), 0);
  }
  mmrt_iter_free(&it);
  mmrt_images_free(&ds);
}
END_TEST

START_TEST(iter_resume) {
  enum { N = 37, B = 5 };
  MmrtImages ds = fake(N);
  MmrtBatchIter a, b;
  char err[256], state[256];
  ck_assert_int_eq(mmrt_iter_init(&a, &ds, B, 1, 77, err, sizeof err), 0);
  for (int i = 0; i < 11; i++) /* into the second epoch */
    mmrt_iter_next(&a);
  ck_assert_int_lt(mmrt_iter_state(&a, state, sizeof state), (int)sizeof state);
  ck_assert_str_eq(state, "mmrt-iter v1 n=37 batch=5 shuffle=1 seed=77 epoch=1 pos=20");
  ck_assert_int_eq(mmrt_iter_init(&b, &ds, B, 1, 77, err, sizeof err), 0);
  ck_assert_int_eq(mmrt_iter_restore(&b, state, err, sizeof err), MMRT_OK);
  for (int i = 0; i < 30; i++) {
    ck_assert_int_eq(mmrt_iter_next(&a), mmrt_iter_next(&b));
    ck_assert_int_eq(a.epoch, b.epoch);
    for (int k = 0; k < B; k++) ck_assert_int_eq(mmrt_iter_index(&a, k), mmrt_iter_index(&b, k));
  }
  mmrt_iter_free(&b);
  /* another seed or batch is refused, naming both */
  ck_assert_int_eq(mmrt_iter_init(&b, &ds, B, 1, 78, err, sizeof err), 0);
  ck_assert_int_eq(mmrt_iter_restore(&b, state, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "seed=77") && strstr(err, "seed=78"), "%s", err);
  ck_assert_int_eq(mmrt_iter_restore(&b, "epoch=3", err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, "expected 'mmrt-iter v1"), "%s", err);
  ck_assert_int_eq(mmrt_iter_restore(&b,
                                     "mmrt-iter v1 n=37 batch=5 shuffle=1 seed=78 epoch=1 "
                                     "pos=99",
                                     err, sizeof err),
                   MMRT_ERR_FORMAT);
  ck_assert_int_eq(mmrt_iter_restore(&b,
                                     "mmrt-iter v1 n=37 batch=5 shuffle=1 seed=78 epoch=1 "
                                     "pos=5 junk",
                                     err, sizeof err),
                   MMRT_ERR_FORMAT);
  mmrt_iter_free(&b);
  mmrt_iter_free(&a);
  mmrt_images_free(&ds);
}
END_TEST

/* ---- metrics log ---- */

START_TEST(log_lines) {
  make_tmpdir();
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/metrics.jsonl", tmpdir);
  MmrtLog lg;
  ck_assert_int_eq(mmrt_log_open(&lg, path, err, sizeof err), MMRT_OK);
  MmrtLogField f[] = {{"loss", 2.31, NULL}, {"lr", 0.001, NULL}, {"samples_per_s", 812.5, NULL}};
  ck_assert_int_eq(mmrt_log_write(&lg, 3, f, 3, err, sizeof err), MMRT_OK);
  /* flushed per line: visible before close */
  FILE *r = fopen(path, "r");
  char line[512];
  ck_assert_ptr_nonnull(fgets(line, sizeof line, r));
  ck_assert_str_eq(line,
                   "{\"step\": 3, \"loss\": 2.31, \"lr\": 0.001, \"samples_per_s\": 812.5}\n");
  MmrtLogField g[] = {
      {"loss", NAN, NULL}, {"eval_accuracy", 0.8125f, NULL}, {"phase", 0, "eval \"x\""}};
  ck_assert_int_eq(mmrt_log_write(&lg, 4, g, 3, err, sizeof err), MMRT_OK);
  ck_assert_ptr_nonnull(fgets(line, sizeof line, r));
  ck_assert_str_eq(line, "{\"step\": 4, \"loss\": null, \"eval_accuracy\": 0.8125, "
                         "\"phase\": \"eval \\\"x\\\"\"}\n");
  fclose(r);
  mmrt_log_close(&lg);
  /* appending keeps earlier lines */
  ck_assert_int_eq(mmrt_log_open(&lg, path, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_log_write(&lg, 5, NULL, 0, err, sizeof err), MMRT_OK);
  mmrt_log_close(&lg);
  r = fopen(path, "r");
  int lines = 0;
  while (fgets(line, sizeof line, r)) lines++;
  fclose(r);
  ck_assert_int_eq(lines, 3);
  ck_assert_str_eq(line, "{\"step\": 5}\n");
  /* float loss round-trips exactly */
  char buf[128];
  MmrtLogField h[] = {{"loss", (double)0.1f, NULL}};
  mmrt_log_format(buf, sizeof buf, 1, h, 1);
  ck_assert(strtod(strstr(buf, "loss\": ") + 7, NULL) == (double)0.1f);
  /* small buffer: truncated but length reported */
  size_t need = mmrt_log_format(buf, 8, 3, f, 3);
  ck_assert_uint_eq(
      need, strlen("{\"step\": 3, \"loss\": 2.31, \"lr\": 0.001, \"samples_per_s\": 812.5}"));
  ck_assert_uint_eq(strlen(buf), 7);

  snprintf(path, sizeof path, "%s/no/such/metrics.jsonl", tmpdir);
  ck_assert_int_eq(mmrt_log_open(&lg, path, err, sizeof err), MMRT_ERR_NOTFOUND);
  ck_assert_msg(strstr(err, path), "%s", err);
  remove_tmpdir();
}
END_TEST

START_TEST(progress_line) {
  char buf[256];
  mmrt_format_hms(buf, sizeof buf, 3725.4);
  ck_assert_str_eq(buf, "1:02:05");
  mmrt_format_hms(buf, sizeof buf, 59.6);
  ck_assert_str_eq(buf, "0:01:00");
  mmrt_format_hms(buf, sizeof buf, -1);
  ck_assert_str_eq(buf, "-:--:--");
  mmrt_progress_format(buf, sizeof buf, 120, 500, 0.69314, 812.5, 62.0);
  ck_assert_msg(strstr(buf, "step 120/500 (24.0%) | loss 0.6931 | 812.5 samples/s | "
                            "elapsed 0:01:02 | eta 0:03:16 | peak rss "),
                "%s", buf);
  mmrt_progress_format(buf, sizeof buf, 0, 500, 0, 0, 0);
  ck_assert_msg(strstr(buf, "eta -:--:--"), "%s", buf);
  int64_t rss = mmrt_peak_rss_bytes();
  ck_assert(rss > 1000000 && rss < (int64_t)1 << 40);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_data");
  TCase *tc = tcase_create("idx");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, real_fashion_mnist);
  tcase_add_test(tc, small_gz_and_raw);
  tcase_add_test(tc, gz_preferred_over_raw);
  tcase_add_test(tc, missing_dir);
  tcase_add_test(tc, bad_magic);
  tcase_add_test(tc, bad_dims);
  tcase_add_test(tc, mismatched_counts);
  tcase_add_test(tc, label_out_of_range);
  tcase_add_test(tc, truncated);
  tcase_add_test(tc, truncated_gzip_stream);
  suite_add_tcase(s, tc);
  tc = tcase_create("iter");
  tcase_add_test(tc, iter_shuffle_epochs);
  tcase_add_test(tc, iter_rank_slices);
  tcase_add_test(tc, iter_eval_pass);
  tcase_add_test(tc, iter_resume);
  suite_add_tcase(s, tc);
  tc = tcase_create("log");
  tcase_add_test(tc, log_lines);
  tcase_add_test(tc, progress_line);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
