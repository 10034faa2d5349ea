/* check_rt_flags.c: the programs' one argv parser (runtime/core/mmrt_flags.c)
 * on a table of every kind of flag: values, ranges, the word for -1, enums,
 * greedy and repeated lists, variants, the messages (each a template of the
 * row), --help from the rows with the defaults filled in, and the pre-scan
 * mmrt_flags_peek; and the table of programs (runtime/model/mmrt_programs.def):
 * every row has a main and a parser, a name of its own, and step functions
 * that are fields of the descriptor. */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mmrt_flags.h"
#include "mmrt_main.h"

typedef struct Args {
  int64_t n, seed;
  double f;
  const char *s, *e;
  const char *l[3], *r[2];
  int nl, nr, q, has_f, only2;
} Args;

#define AT(x) offsetof(Args, x)
static const MmrtFlag flags[] = {
    MMRT_FLAG_I("--n", "N", AT(n), 1, 100, "%F takes a whole number in [%L, %H], not '%V'",
                "a count (default %D)", .choices = "all"),
    MMRT_FLAG_I("--seed", "S", AT(seed), 0, INT64_MAX, "%F takes >= %L, not '%V'", "seed"),
    MMRT_FLAG_F("--f", "X", AT(f), 0, 1, "%F takes a positive number, not '%V'",
                "a rate (default %D)\nsecond line", MMRT_FLAG_SEEN(AT(has_f))),
    MMRT_FLAG_S("--s", "DIR", AT(s), "a folder (default %D)"),
    MMRT_FLAG_E("--e", "K", AT(e), "ab|b|cd", "%F takes ab, b or cd, not '%V'", "a choice"),
    MMRT_FLAG_L("--l", "PATH...", AT(l), AT(nl), 3, 1, "%F: at most %H files", "%F needs a file",
                "files"),
    MMRT_FLAG_L("--r", "TEXT", AT(r), AT(nr), 2, 0, "%F: at most %H texts", NULL, "again for more"),
    MMRT_FLAG_NOTE_ROW("a note between the flags"),
    MMRT_FLAG_B("--q", AT(q), "quiet"),
    MMRT_FLAG_B("--only2", AT(only2), "variant 2 only", .variants = 2),
    MMRT_FLAG_END,
};
#undef AT

static const MmrtFlagSet set = {.who = "prog",
                                .flags = flags,
                                .needs_value = "option %F needs a value",
                                .variant = 1,
                                .col = 16};

static char err_text[4096], out_text[8192];

/* Parses the NULL-terminated words with stdout and stderr captured. */
static int parse_with(const MmrtFlagSet *fs, Args *a, const char *const *words) {
  char *argv[32] = {"prog"};
  int argc = 1;
  for (; words[argc - 1]; argc++) argv[argc] = (char *)words[argc - 1];
  memset(a, 0, sizeof *a);
  a->n = 7, a->f = 0.25, a->s = "here";
  FILE *eo = tmpfile(), *oo = tmpfile();
  ck_assert(eo && oo);
  fflush(stdout), fflush(stderr);
  int e = dup(2), o = dup(1);
  dup2(fileno(eo), 2), dup2(fileno(oo), 1);
  int rc = mmrt_flags_parse(fs, argc, argv, a, "usage: prog [options]\n");
  fflush(stdout), fflush(stderr);
  dup2(e, 2), dup2(o, 1), close(e), close(o);
  rewind(eo), rewind(oo);
  size_t ne = fread(err_text, 1, sizeof err_text - 1, eo),
         no = fread(out_text, 1, sizeof out_text - 1, oo);
  err_text[ne] = 0, out_text[no] = 0;
  fclose(eo), fclose(oo);
  return rc;
}
#define PARSE(a, ...) parse_with(&set, a, (const char *const[]){__VA_ARGS__, NULL})

START_TEST(values) {
  Args a;
  ck_assert_int_eq(PARSE(&a, "--q"), 0);
  ck_assert_int_eq(a.q, 1);
  ck_assert_int_eq(a.n, 7); /* defaults stay */
  ck_assert(a.f == 0.25 && !a.has_f && !strcmp(a.s, "here"));
  ck_assert_int_eq(PARSE(&a, "--n", "100", "--f", "1e-3", "--s", "x", "--e", "b", "--seed",
                         "9223372036854775807"),
                   0);
  ck_assert(a.n == 100 && a.f == 1e-3 && a.has_f && !strcmp(a.s, "x") && !strcmp(a.e, "b"));
  ck_assert(a.seed == INT64_MAX);
  ck_assert_str_eq(err_text, "");
  ck_assert_int_eq(PARSE(&a, "--n", "all"), 0);
  ck_assert_int_eq(a.n, -1);
  ck_assert_int_eq(PARSE(&a, "--l", "p", "q", "--n", "3", "--r", "u", "--r", "v"), 0);
  ck_assert(a.nl == 2 && !strcmp(a.l[0], "p") && !strcmp(a.l[1], "q") && a.n == 3);
  ck_assert(a.nr == 2 && !strcmp(a.r[0], "u") && !strcmp(a.r[1], "v"));
}
END_TEST

/* Each refusal: status 1 and exactly the row's message. */
static void refused(const char *want, const char *const *words) {
  Args a;
  ck_assert_int_eq(parse_with(&set, &a, words), 1);
  ck_assert_msg(!strncmp(err_text, want, strlen(want)), "got '%s', want '%s'", err_text, want);
}
#define REFUSED(want, ...) refused(want, (const char *const[]){__VA_ARGS__, NULL})

START_TEST(refusals) {
  REFUSED("prog: error: --n takes a whole number in [1, 100], not '0'\n", "--n", "0");
  REFUSED("prog: error: --n takes a whole number in [1, 100], not '101'\n", "--n", "101");
  REFUSED("prog: error: --n takes a whole number in [1, 100], not '3x'\n", "--n", "3x");
  REFUSED("prog: error: --n takes a whole number in [1, 100], not ''\n", "--n", "");
  REFUSED("prog: error: --n takes a whole number in [1, 100], not 'alll'\n", "--n", "alll");
  REFUSED("prog: error: --seed takes >= 0, not '99999999999999999999'\n", "--seed",
          "99999999999999999999");
  REFUSED("prog: error: --f takes a positive number, not '0'\n", "--f", "0");
  REFUSED("prog: error: --f takes a positive number, not 'inf'\n", "--f", "inf");
  REFUSED("prog: error: --f takes a positive number, not 'nan'\n", "--f", "nan");
  REFUSED("prog: error: --e takes ab, b or cd, not 'a'\n", "--e", "a");
  REFUSED("prog: error: --e takes ab, b or cd, not 'c'\n", "--e", "c");
  REFUSED("prog: error: --l: at most 3 files\n", "--l", "1", "2", "3", "4");
  REFUSED("prog: error: --l needs a file\n", "--l", "--q");
  REFUSED("prog: error: --l needs a file\n", "--l");
  REFUSED("prog: error: --r: at most 2 texts\n", "--r", "1", "--r", "2", "--r", "3");
  REFUSED("prog: error: option --s needs a value\n", "--q", "--s");
  REFUSED("prog: error: unknown option '--zz'\nusage: prog [options]\n", "--zz");
  REFUSED("prog: error: unknown option '--only2'\n", "--only2"); /* another variant's */
  REFUSED("prog: error: unknown option '--q=1'\n", "--q=1");
}
END_TEST

START_TEST(variants) {
  MmrtFlagSet two = set;
  two.variant = 2;
  Args a;
  ck_assert_int_eq(parse_with(&two, &a, (const char *const[]){"--only2", NULL}), 0);
  ck_assert_int_eq(a.only2, 1);
  ck_assert_int_eq(parse_with(&two, &a, (const char *const[]){"--help", NULL}), -1);
  ck_assert_ptr_nonnull(strstr(out_text, "  --only2       variant 2 only\n"));
  ck_assert_int_eq(PARSE(&a, "-h"), -1);
  ck_assert_ptr_null(strstr(out_text, "--only2"));
}
END_TEST

START_TEST(help) {
  Args a;
  ck_assert_int_eq(PARSE(&a, "--n", "5", "--help"), -1);
  ck_assert_str_eq(err_text, "");
  const char *want = "usage: prog [options]\n"
                     "  --n N         a count (default 5)\n" /* the value before -h */
                     "  --seed S      seed\n"
                     "  --f X         a rate (default 0.25)\n"
                     "                second line\n"
                     "  --s DIR       a folder (default here)\n"
                     "  --e K         a choice\n"
                     "  --l PATH...   files\n"
                     "  --r TEXT      again for more\n"
                     "a note between the flags\n"
                     "  --q           quiet\n";
  ck_assert_str_eq(out_text, want);
}
END_TEST

START_TEST(peek) {
  char *argv[] = {"p", "--threads", "3", "--x", "--threads=5", "--omp-wait", NULL};
  ck_assert_str_eq(mmrt_flags_peek(6, argv, "--threads"), "5");
  ck_assert_ptr_null(mmrt_flags_peek(6, argv, "--omp-wait")); /* no value after it */
  ck_assert_ptr_null(mmrt_flags_peek(6, argv, "--thread"));
}
END_TEST

START_TEST(programs) {
  MmrtModelDesc m;
  memset(&m, 0, sizeof m);
  ck_assert_ptr_null(mmrt_program(-1));
  ck_assert_ptr_null(mmrt_program(MMRT_NTASKS));
  ck_assert_int_eq(MMRT_TASK_TRAIN, 0); /* codegen's default */
  for (int t = 0; t < MMRT_NTASKS; t++) {
    const MmrtProgram *p = mmrt_program(t);
    ck_assert_msg(p && p->name && p->who && p->steps && p->main && p->parse, "task %d", t);
    for (int u = 0; u < t; u++) ck_assert_str_ne(mmrt_program(u)->name, p->name);
    for (const char *s = p->steps; *s;) {
      size_t n = strcspn(s, " ");
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)n, s);
      MmrtStepFn fn = (MmrtStepFn)1;
      ck_assert_msg(mmrt_desc_step(&m, name, &fn), "%s: no step function '%s' in mmrt_desc.def",
                    p->name, name);
      ck_assert_ptr_null((void *)fn);
      s += n + (s[n] == ' ');
    }
  }
  MmrtStepFn fn;
  ck_assert_int_eq(mmrt_desc_step(&m, "pp_fn", &fn), 0); /* an array, not one step */
  ck_assert_int_eq(mmrt_desc_step(&m, "batch", &fn), 0); /* not a step */
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_flags");
  TCase *tc = tcase_create("flags");
  tcase_add_test(tc, values);
  tcase_add_test(tc, refusals);
  tcase_add_test(tc, variants);
  tcase_add_test(tc, help);
  tcase_add_test(tc, peek);
  tcase_add_test(tc, programs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
