/* check_rt_files.c: what the runtime's readers accept (runtime/core/mmrt_log.c
 * mmrt_open_read): a FIFO, a directory or a device in place of a data file
 * is refused by name at once, never waited on (each reader here would block
 * for ever in open() on a FIFO without a writer, and the test time out);
 * and the animated GIFs (runtime/data/mmrt_gif.c) declare GIF89a, the version
 * of the extensions that animate them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tmpdir_fixture.h"
#include "mmrt_ckpt.h"
#include "mmrt_data.h"
#include "mmrt_gif.h"
#include "mmrt_log.h"
#include "mmrt_png.h"

static char fifo[300];

static void setup(void) {
  tmpdir_make("mmrt_files");
  snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
}
static void teardown(void) {
  tmpdir_remove();
}

static void assert_refused(int rc, const char *err, const char *path, const char *kind) {
  ck_assert_int_eq(rc, MMRT_ERR_IO);
  ck_assert_msg(strstr(err, path) && strstr(err, "not a regular file") && strstr(err, kind),
                "message '%s' should name %s as %s", err, path, kind);
}

START_TEST(open_read_refuses_fifo_and_directory) {
  char err[512] = "";
  int fd = 123;
  assert_refused(mmrt_open_read(fifo, &fd, err, sizeof err), err, fifo, "a FIFO");
  ck_assert_int_eq(fd, -1);
  assert_refused(mmrt_open_read(tmpdir, &fd, err, sizeof err), err, tmpdir, "a directory");
  FILE *f = (FILE *)1;
  assert_refused(mmrt_fopen_read(fifo, &f, err, sizeof err), err, fifo, "a FIFO");
  ck_assert_ptr_null(f);
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none", tmpdir);
  ck_assert_int_eq(mmrt_open_read(missing, &fd, err, sizeof err), MMRT_ERR_NOTFOUND);
  /* a regular file opens and reads (blocking mode back on) */
  char path[300];
  snprintf(path, sizeof path, "%s/a.txt", tmpdir);
  FILE *w = fopen(path, "w");
  ck_assert_ptr_nonnull(w);
  fputs("abc", w);
  fclose(w);
  ck_assert_int_eq(mmrt_fopen_read(path, &f, err, sizeof err), MMRT_OK);
  char buf[8] = "";
  ck_assert_uint_eq(fread(buf, 1, sizeof buf, f), 3);
  ck_assert_str_eq(buf, "abc");
  fclose(f);
}
END_TEST

/* the readers behind --data (IDX), --images (PNG), --init-from/--weights
 * and --features (safetensors) */
START_TEST(readers_refuse_fifo) {
  char err[512] = "";
  MmrtIdx idx;
  assert_refused(mmrt_idx_read(fifo, 0x00000803, &idx, err, sizeof err), err, fifo, "a FIFO");
  uint8_t px[28 * 28];
  assert_refused(mmrt_png_read_gray(fifo, 28, 28, px, err, sizeof err), err, fifo, "a FIFO");
  MmrtStFile *st = NULL;
  assert_refused(mmrt_st_open(&st, fifo, err, sizeof err), err, fifo, "a FIFO");
  ck_assert_ptr_null(st);
  /* a --data folder whose training images and labels are FIFOs */
  char path[300];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", tmpdir);
  ck_assert_int_eq(rename(fifo, path), 0);
  snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", tmpdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  MmrtImages ds;
  memset(&ds, 0, sizeof ds);
  int rc = mmrt_fmnist_load(&ds, tmpdir, MMRT_SPLIT_TRAIN, err, sizeof err);
  ck_assert_int_ne(rc, MMRT_OK);
  ck_assert_msg(strstr(err, "a FIFO") != NULL, "message '%s' should say a FIFO", err);
  mmrt_images_free(&ds);
}
END_TEST

START_TEST(gif_declares_89a) {
  char path[300], err[512] = "";
  snprintf(path, sizeof path, "%s/a.gif", tmpdir);
  uint8_t px[2 * 4 * 4];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 8);
  ck_assert_int_eq(mmrt_gif_write_gray(path, 2, 4, 4, px, err, sizeof err), MMRT_OK);
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  char head[7] = "";
  ck_assert_uint_eq(fread(head, 1, 6, f), 6);
  fclose(f);
  ck_assert_str_eq(head, "GIF89a");
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_files");
  TCase *tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 10);
  tcase_add_test(tc, open_read_refuses_fifo_and_directory);
  tcase_add_test(tc, readers_refuse_fifo);
  tcase_add_test(tc, gif_declares_89a);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
