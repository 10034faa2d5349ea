/* mmrt_flags.h: the programs' one argv parser, over a table of flags.
 *
 * A program (runtime/programs) declares its flags as an array of MmrtFlag
 * rows, each naming the flag, its kind, where its value goes (an offset in
 * the program's argument struct), its range or choices, the message for a
 * bad value and its --help text; mmrt_flags_parse reads argv into the
 * struct and mmrt_flags_usage prints the help from the same rows. What a
 * program checks across flags (one needs another, a required one) stays in
 * the program, after the parse.
 *
 * Messages are templates: %F the flag, %V the value given, %L and %H the
 * row's lo and hi, %% a percent sign. Help texts: %D the destination's value
 * before argv is read (the default), lines after the first start at the
 * text column. */
#ifndef MMRT_FLAGS_H
#define MMRT_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  MMRT_FLAG_BOOL,   /* no value; int set to 1 */
  MMRT_FLAG_INT,    /* int64_t in [lo, hi]; `choices`, if any, a word standing for -1 */
  MMRT_FLAG_FLOAT,  /* double, finite, >= min (> min when min_open) */
  MMRT_FLAG_STRING, /* const char * (argv's own string) */
  MMRT_FLAG_ENUM,   /* const char *, one of `choices` ("a|b|c") */
  MMRT_FLAG_LIST,   /* const char *[hi], its count an int at `count`: one value per use, or
                     * (greedy) every argument up to the next one starting with "--" */
  MMRT_FLAG_NOTE    /* no flag: a line of --help between two flags */
} MmrtFlagKind;

typedef struct MmrtFlag {
  const char *name; /* "--steps" (NULL: the end of the table) */
  const char *meta; /* "N" in --help (NULL: none) */
  MmrtFlagKind kind;
  size_t at;   /* offsetof(args struct, destination) */
  size_t seen; /* with has_seen: offsetof an int set to the flag's first position in argv
                * (>= 1) when it is given */
  int has_seen;
  size_t count;         /* LIST: offsetof its int count */
  int64_t lo, hi;       /* INT: the range; LIST: hi the most values */
  double min;           /* FLOAT: the least value */
  int min_open, greedy; /* FLOAT: > min rather than >=; LIST: greedy */
  const char *choices;  /* ENUM: "a|b|c"; INT: a word for -1, e.g. "all" */
  const char *bad;      /* a bad value (LIST: too many) */
  const char *none;     /* greedy LIST: no value after the flag */
  const char *help;     /* --help: what the flag does */
  unsigned variants;    /* 0: every variant of the program; else the variants' bits */
} MmrtFlag;

/* Rows, by kind; `at` an offsetof in the program's argument struct, the
 * optional tail more designated fields: MMRT_FLAG_SEEN(at), .variants. */
#define MMRT_FLAG_SEEN(at_) .seen = (at_), .has_seen = 1
#define MMRT_FLAG_B(name_, at_, help_, ...)                                                        \
  {.name = name_, .kind = MMRT_FLAG_BOOL, .at = (at_), .help = help_, __VA_ARGS__}
#define MMRT_FLAG_S(name_, meta_, at_, help_, ...)                                                 \
  {.name = name_, .meta = meta_, .kind = MMRT_FLAG_STRING, .at = (at_), .help = help_, __VA_ARGS__}
#define MMRT_FLAG_I(name_, meta_, at_, lo_, hi_, bad_, help_, ...)                                 \
  {.name = name_,                                                                                  \
   .meta = meta_,                                                                                  \
   .kind = MMRT_FLAG_INT,                                                                          \
   .at = (at_),                                                                                    \
   .lo = (lo_),                                                                                    \
   .hi = (hi_),                                                                                    \
   .bad = bad_,                                                                                    \
   .help = help_,                                                                                  \
   __VA_ARGS__}
#define MMRT_FLAG_F(name_, meta_, at_, min_, open_, bad_, help_, ...)                              \
  {.name = name_,                                                                                  \
   .meta = meta_,                                                                                  \
   .kind = MMRT_FLAG_FLOAT,                                                                        \
   .at = (at_),                                                                                    \
   .min = (min_),                                                                                  \
   .min_open = (open_),                                                                            \
   .bad = bad_,                                                                                    \
   .help = help_,                                                                                  \
   __VA_ARGS__}
#define MMRT_FLAG_E(name_, meta_, at_, choices_, bad_, help_, ...)                                 \
  {.name = name_,                                                                                  \
   .meta = meta_,                                                                                  \
   .kind = MMRT_FLAG_ENUM,                                                                         \
   .at = (at_),                                                                                    \
   .choices = choices_,                                                                            \
   .bad = bad_,                                                                                    \
   .help = help_,                                                                                  \
   __VA_ARGS__}
#define MMRT_FLAG_L(name_, meta_, at_, count_, most_, greedy_, bad_, none_, help_, ...)            \
  {.name = name_,                                                                                  \
   .meta = meta_,                                                                                  \
   .kind = MMRT_FLAG_LIST,                                                                         \
   .at = (at_),                                                                                    \
   .count = (count_),                                                                              \
   .hi = (most_),                                                                                  \
   .greedy = (greedy_),                                                                            \
   .bad = bad_,                                                                                    \
   .none = none_,                                                                                  \
   .help = help_,                                                                                  \
   __VA_ARGS__}
#define MMRT_FLAG_NOTE_ROW(help_, ...) {.kind = MMRT_FLAG_NOTE, .help = help_, __VA_ARGS__}
#define MMRT_FLAG_END                  {0}

/* A program's parse: its name in messages ("trainer"), its flag table
 * (ending with a row whose name and help are NULL), the message when a flag
 * has no value, and the variant being parsed (a bit of MmrtFlag.variants;
 * 0 matches rows with variants 0 only). */
typedef struct MmrtFlagSet {
  const char *who;
  const MmrtFlag *flags;
  const char *needs_value; /* e.g. "option %F needs a value" */
  unsigned variant;
  int col; /* --help: the column of the flags' texts */
} MmrtFlagSet;

/* argv into `args`: each row's destination, in argv's order, values
 * checked as the row says. -h/--help prints `head` (already formatted by
 * the caller, may be NULL) and the flags to stdout and returns -1; an
 * unknown flag, a missing or bad value print "<who>: error: ..." (an
 * unknown flag also the help) on stderr and return 1; else 0. */
int mmrt_flags_parse(const MmrtFlagSet *s, int argc, char **argv, void *args, const char *head);

/* The flags' help from the table, each row's %D from `args` (the defaults). */
void mmrt_flags_usage(const MmrtFlagSet *s, FILE *out, const void *args);

/* The value of flag `name` in argv ("NAME V" or "NAME=V", the last one), or
 * NULL: for what must be known before the program parses (the OpenMP
 * thread count, mmrt_threads.c). */
const char *mmrt_flags_peek(int argc, char **argv, const char *name);

#endif /* MMRT_FLAGS_H */
