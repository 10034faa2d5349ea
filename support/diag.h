/* Source files and clang-style diagnostics.
 *   file:line:col: error: message
 *     the source line
 *     ^~~~~ under the range
 * Errors accumulate in a counter (the caller decides when to stop); notes
 * attach to the diagnostic printed just before them. */
#ifndef MM_SUPPORT_DIAG_H
#define MM_SUPPORT_DIAG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arena.h"

/* A place in a source file: file index in the SourceMgr, 1-based line and
 * column, and the length in bytes of the range (0 or 1 = a single caret). */
typedef struct SrcLoc {
  uint32_t file, line, col, len;
} SrcLoc;

typedef struct SrcFile {
  char *path; /* as given or as resolved */
  char *text; /* NUL-terminated contents */
  size_t size;
  uint32_t *line_start; /* offsets of each line start */
  uint32_t nlines;
} SrcFile;

typedef struct Diag {
  SrcFile **files; /* index 0 is reserved for "no file" */
  uint32_t nfiles, capfiles;
  int errors, warnings;
  int max_errors;    /* stop printing after this many (0 = 100) */
  bool suppressed;   /* set once max_errors was reached */
  bool last_printed; /* whether the last error/warning was printed (for its notes) */
  FILE *out;         /* stderr by default */
  bool color;
  size_t max_source;  /* diag_load_file reads at most this many bytes (diag_init: 64 MiB) */
  char load_err[160]; /* diag_load_file's message when it names the limit */
} Diag;

#define DIAG_MAX_SOURCE_DEFAULT ((size_t)64 << 20)

void diag_init(Diag *d);
void diag_free(Diag *d);
/* Loads a regular file of at most d->max_source bytes; returns its index or
 * 0 (and sets *err to a message that lives as long as d: a directory, FIFO
 * or device is refused by name, never read). */
uint32_t diag_load_file(Diag *d, const char *path, const char **err);
/* Adds an in-memory buffer under a name (copied). */
uint32_t diag_add_buffer(Diag *d, const char *name, const char *text, size_t size);
const SrcFile *diag_file(const Diag *d, uint32_t idx);
const char *diag_path(const Diag *d, SrcLoc at);

void diag_error(Diag *d, SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An error that belongs to no source position (e.g. a bad file name). */
void diag_error_plain(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Spans from a to the end of b (same file and line), for ranges. */
SrcLoc srcloc_span(SrcLoc a, SrcLoc b);

/* What a path that is not a regular file is ("a FIFO", "a directory", ...),
 * for messages; m is a struct stat's st_mode. */
const char *diag_file_kind(unsigned m);

#endif
