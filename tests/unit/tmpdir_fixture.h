/* A scratch folder for one runtime unit test at a time: tmpdir_make()
 * creates /tmp/<prefix>_XXXXXX into `tmpdir`, tmpdir_remove() deletes it
 * with everything in it. Header-only, for the check_rt_* suites. */
#ifndef MMC_TESTS_TMPDIR_FIXTURE_H
#define MMC_TESTS_TMPDIR_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

static char tmpdir[256];

static inline void tmpdir_make(const char *prefix) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/%s_XXXXXX", prefix);
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static inline void tmpdir_remove(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

#endif
