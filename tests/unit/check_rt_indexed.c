/* check_rt_indexed.c: the indexed-dataset writer and reader
 * (runtime/data/mmrt_indexed.c) round trip every dtype, with and without modes
 * and with empty documents; a value the dtype cannot hold fails naming the
 * sequence and an aborted or failed writer leaves no file; a FIFO in a
 * dataset's place is refused at once; the strict UTF-8 check of
 * runtime/data/mmrt_jsonl.c on the forms it must refuse. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tmpdir_fixture.h"
#include "mmrt_indexed.h"
#include "mmrt_jsonl.h"

static void setup(void) {
  tmpdir_make("mmrt_indexed");
}
static void teardown(void) {
  tmpdir_remove();
}

static int files_in_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* docs: sequences per document; sequence s holds s % 5 values s * 7 + k */
static const int docs[] = {2, 0, 1, 3, 0};

START_TEST(round_trip_every_dtype) {
  for (int code = 1; code <= 8; code++)
    for (int mm = 0; mm <= 1; mm++) {
      char prefix[300], err[512];
      snprintf(prefix, sizeof prefix, "%s/d%d_%d", tmpdir, code, mm);
      MmrtIndexedWriter *w =
          mmrt_indexed_writer_open(prefix, (MmrtIdxDtype)code, mm, err, sizeof err);
      ck_assert_msg(w != NULL, "%s", err);
      int s = 0;
      for (size_t d = 0; d < sizeof docs / sizeof docs[0]; d++) {
        for (int j = 0; j < docs[d]; j++, s++) {
          int64_t v[4];
          for (int k = 0; k < s % 5 && k < 4; k++) v[k] = s * 7 + k - (code == 2 ? 20 : 0);
          ck_assert_msg(mmrt_indexed_writer_add(w, v, (size_t)(s % 5 < 4 ? s % 5 : 4),
                                                (int8_t)(mm ? s - 3 : 0), err, sizeof err),
                        "%s", err);
        }
        ck_assert(mmrt_indexed_writer_end_document(w, err, sizeof err));
      }
      ck_assert_msg(mmrt_indexed_writer_finish(w, err, sizeof err), "%s", err);
      MmrtIndexed r;
      ck_assert_msg(mmrt_indexed_open(prefix, -1, &r, err, sizeof err), "%s", err);
      ck_assert_int_eq(r.dtype, code);
      ck_assert_int_eq(r.multimodal, mm);
      ck_assert_uint_eq(r.nseq, (uint64_t)s);
      ck_assert_uint_eq(r.ndocidx, 6);
      const int64_t want_docs[] = {0, 2, 2, 3, 6, 6};
      for (int j = 0; j < 6; j++)
        ck_assert_int_eq(mmrt_indexed_docidx(&r, (uint64_t)j), want_docs[j]);
      for (int i = 0; i < s; i++) {
        int n = i % 5 < 4 ? i % 5 : 4;
        ck_assert_int_eq(mmrt_indexed_length(&r, (uint64_t)i), n);
        ck_assert_int_eq(mmrt_indexed_mode(&r, (uint64_t)i), mm ? i - 3 : 0);
        for (int k = 0; k < n; k++)
          ck_assert_int_eq(mmrt_indexed_token(&r, (uint64_t)i, (uint64_t)k),
                           i * 7 + k - (code == 2 ? 20 : 0));
      }
      mmrt_indexed_close(&r);
      /* asked for the other layout, the sizes do not add up */
      ck_assert(!mmrt_indexed_open(prefix, !mm, &r, err, sizeof err));
      ck_assert_msg(strstr(err, ".idx") && strstr(err, "truncated or corrupt"), "%s", err);
    }
  ck_assert_int_eq(files_in_tmpdir(), 32); /* .bin and .idx each, no temporary left */
}
END_TEST

START_TEST(value_out_of_range_and_abort_leave_nothing) {
  char prefix[300], err[512];
  snprintf(prefix, sizeof prefix, "%s/u16", tmpdir);
  MmrtIndexedWriter *w = mmrt_indexed_writer_open(prefix, MMRT_IDX_U16, false, err, sizeof err);
  ck_assert_ptr_nonnull(w);
  int32_t ok[] = {1, 65535}, big[] = {3, 65536};
  ck_assert(mmrt_indexed_writer_add32(w, ok, 2, 0, err, sizeof err));
  ck_assert(!mmrt_indexed_writer_add32(w, big, 2, 0, err, sizeof err));
  ck_assert_msg(strstr(err, "sequence 1, element 1: 65536 does not fit the dataset's dtype uint16"),
                "%s", err);
  ck_assert_int_eq(files_in_tmpdir(), 2); /* the two temporaries */
  mmrt_indexed_writer_abort(w);
  ck_assert_int_eq(files_in_tmpdir(), 0);
  /* a prefix in a folder that does not exist: refused at open, nothing made */
  snprintf(prefix, sizeof prefix, "%s/none/x", tmpdir);
  ck_assert_ptr_null(mmrt_indexed_writer_open(prefix, MMRT_IDX_U16, false, err, sizeof err));
  ck_assert_msg(strstr(err, "none/x.bin: cannot create a temporary file"), "%s", err);
  ck_assert_int_eq(files_in_tmpdir(), 0);
}
END_TEST

START_TEST(fifo_refused_at_once) {
  char prefix[300], path[310], err[512];
  snprintf(prefix, sizeof prefix, "%s/f", tmpdir);
  snprintf(path, sizeof path, "%s.idx", prefix);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  MmrtIndexed r;
  ck_assert(!mmrt_indexed_open(prefix, -1, &r, err, sizeof err));
  ck_assert_msg(strstr(err, "f.idx: not a regular file"), "%s", err);
}
END_TEST

START_TEST(utf8_strict) {
  static const struct {
    const char *s;
    size_t bad; /* offset of the first bad byte, or strlen */
  } cases[] = {
      {"plain", 5},
      {"caf\xc3\xa9 \xe6\x95\xb0 \xf0\x9f\x98\x80", 14},
      {"a\xc0\x80", 1},                    /* overlong NUL */
      {"a\xe0\x9f\xbf", 1},                /* overlong 3-byte */
      {"ab\xed\xa0\x80", 2},               /* surrogate U+D800 */
      {"\xf4\x90\x80\x80", 0},             /* past U+10FFFF */
      {"\xf0\x8f\xbf\xbf", 0},             /* overlong 4-byte */
      {"xy\xe6\x95", 2},                   /* cut short */
      {"\x80", 0},                         /* a continuation byte alone */
      {"\xf5\x80\x80\x80", 0},             /* no such lead byte */
      {"\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7}, /* U+FFFF, U+10FFFF */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(mmrt_utf8_valid_prefix(cases[i].s, strlen(cases[i].s)) == cases[i].bad,
                  "case %zu: %zu, expected %zu", i,
                  mmrt_utf8_valid_prefix(cases[i].s, strlen(cases[i].s)), cases[i].bad);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mmrt_indexed");
  TCase *tc = tcase_create("indexed");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, round_trip_every_dtype);
  tcase_add_test(tc, value_out_of_range_and_abort_leave_nothing);
  tcase_add_test(tc, fifo_refused_at_once);
  tcase_add_test(tc, utf8_strict);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
