/* Diagnostics: loads sources, indexes line starts, prints errors with the
 * source line and a caret/tilde range underneath. */
#include "diag.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void diag_init(Diag *d) {
  memset(d, 0, sizeof *d);
  d->out = stderr;
  d->max_errors = 100;
  d->max_source = DIAG_MAX_SOURCE_DEFAULT;
  d->capfiles = 8;
  d->files = calloc(d->capfiles, sizeof(SrcFile *));
  if (!d->files) mm_die(__FILE__, __LINE__, "out of memory");
  d->nfiles = 1;
}

void diag_free(Diag *d) {
  for (uint32_t i = 1; i < d->nfiles; i++) {
    free(d->files[i]->path);
    free(d->files[i]->text);
    free(d->files[i]->line_start);
    free(d->files[i]);
  }
  free(d->files);
  d->files = NULL;
  d->nfiles = 0;
}

static uint32_t add_file(Diag *d, const char *path, char *text, size_t size) {
  if (d->nfiles == d->capfiles) {
    d->capfiles *= 2;
    d->files = realloc(d->files, d->capfiles * sizeof(SrcFile *));
    if (!d->files) mm_die(__FILE__, __LINE__, "out of memory");
  }
  SrcFile *f = calloc(1, sizeof *f);
  if (!f) mm_die(__FILE__, __LINE__, "out of memory");
  f->path = strdup(path);
  f->text = text;
  f->size = size;
  uint32_t n = 1;
  for (size_t i = 0; i < size; i++)
    if (text[i] == '\n') n++;
  f->line_start = malloc(sizeof(uint32_t) * (n + 1));
  if (!f->path || !f->line_start) mm_die(__FILE__, __LINE__, "out of memory");
  f->line_start[0] = 0;
  uint32_t k = 1;
  for (size_t i = 0; i < size; i++)
    if (text[i] == '\n') f->line_start[k++] = (uint32_t)(i + 1);
  f->nlines = n;
  d->files[d->nfiles] = f;
  return d->nfiles++;
}

uint32_t diag_add_buffer(Diag *d, const char *name, const char *text, size_t size) {
  char *copy = malloc(size + 1);
  if (!copy) mm_die(__FILE__, __LINE__, "out of memory");
  memcpy(copy, text, size);
  copy[size] = 0;
  return add_file(d, name, copy, size);
}

const char *diag_file_kind(unsigned m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

static const char *too_large(Diag *d) {
  snprintf(d->load_err, sizeof d->load_err,
           "larger than the source size limit of %zu MiB (--max-source-mb N sets it)",
           d->max_source >> 20);
  return d->load_err;
}

uint32_t diag_load_file(Diag *d, const char *path, const char **err) {
  /* O_NONBLOCK: opening a FIFO must not wait for a writer */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *err = strerror(errno);
    return 0;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *err = strerror(errno);
    close(fd);
    return 0;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(d->load_err, sizeof d->load_err, "%s, not a regular file", diag_file_kind(st.st_mode));
    *err = d->load_err;
    close(fd);
    return 0;
  }
  size_t max = d->max_source ? d->max_source : DIAG_MAX_SOURCE_DEFAULT;
  if ((uint64_t)st.st_size > max) {
    close(fd);
    *err = too_large(d);
    return 0;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE *fp = fdopen(fd, "rb");
  if (!fp) {
    *err = strerror(errno);
    close(fd);
    return 0;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf) mm_die(__FILE__, __LINE__, "out of memory");
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      if (!buf) mm_die(__FILE__, __LINE__, "out of memory");
    }
    size_t r = fread(buf + n, 1, 4096, fp);
    n += r;
    if (r < 4096 || n > max) break; /* the file may have grown since fstat */
  }
  bool bad = ferror(fp);
  fclose(fp);
  if (bad || n > max) {
    free(buf);
    *err = bad ? "read error" : too_large(d);
    return 0;
  }
  buf[n] = 0;
  return add_file(d, path, buf, n);
}

const SrcFile *diag_file(const Diag *d, uint32_t idx) {
  return idx > 0 && idx < d->nfiles ? d->files[idx] : NULL;
}

const char *diag_path(const Diag *d, SrcLoc at) {
  const SrcFile *f = diag_file(d, at.file);
  return f ? f->path : "<unknown>";
}

SrcLoc srcloc_span(SrcLoc a, SrcLoc b) {
  if (a.file != b.file || a.line != b.line || b.col + b.len < a.col) return a;
  SrcLoc r = a;
  r.len = b.col + (b.len ? b.len : 1) - a.col;
  return r;
}

/* The source line of at with a caret and tildes under its range. A line
 * longer than DIAG_LINE_WINDOW columns is shown as a window of that many
 * around the column, with "..." where it is cut. Written with one fwrite
 * per line (stderr is unbuffered). */
#define DIAG_LINE_WINDOW 160
static void print_line(Diag *d, SrcLoc at) {
  const SrcFile *f = diag_file(d, at.file);
  if (!f || at.line == 0 || at.line > f->nlines) return;
  const char *s = f->text + f->line_start[at.line - 1];
  const char *e = s;
  while (e < f->text + f->size && *e != '\n' && *e != '\r') e++;
  size_t len = (size_t)(e - s), col = at.col ? at.col - 1 : 0;
  if (col > len) col = len;
  size_t lo = 0, hi = len;
  if (len > DIAG_LINE_WINDOW) {
    lo = col > DIAG_LINE_WINDOW / 2 ? col - DIAG_LINE_WINDOW / 2 : 0;
    hi = lo + DIAG_LINE_WINDOW < len ? lo + DIAG_LINE_WINDOW : len;
  }
  char buf[2 * DIAG_LINE_WINDOW + 32];
  size_t n = 0;
  n += (size_t)snprintf(buf + n, sizeof buf - n, "  %s", lo ? "..." : "");
  for (size_t i = lo; i < hi; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[n++] = c == '\t' ? ' ' : (c < 32 || c == 127) ? '?' : (char)c;
  }
  n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\n", hi < len ? "..." : "");
  fwrite(buf, 1, n, d->out);
  n = 0;
  buf[n++] = ' ';
  buf[n++] = ' ';
  for (size_t i = lo ? lo - 3 : 0; i < col; i++) buf[n++] = ' ';
  buf[n++] = '^';
  size_t span = at.len;
  if (col + span > hi) span = hi - col;
  for (size_t i = 1; i < span; i++) buf[n++] = '~';
  buf[n++] = '\n';
  fwrite(buf, 1, n, d->out);
}

static void vreport(Diag *d, const char *kind, SrcLoc at, const char *fmt, va_list ap) {
  const SrcFile *f = diag_file(d, at.file);
  if (f)
    fprintf(d->out, "%s:%u:%u: %s: ", f->path, at.line, at.col, kind);
  else
    fprintf(d->out, "mmc: %s: ", kind);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
  if (f) print_line(d, at);
}

void diag_error(Diag *d, SrcLoc at, const char *fmt, ...) {
  d->errors++;
  if (d->errors > d->max_errors) {
    if (!d->suppressed) fprintf(d->out, "mmc: too many errors, stopping here\n");
    d->suppressed = true;
    d->last_printed = false;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vreport(d, "error", at, fmt, ap);
  va_end(ap);
  d->last_printed = true;
}

void diag_warning(Diag *d, SrcLoc at, const char *fmt, ...) {
  d->warnings++;
  if (d->suppressed) return;
  va_list ap;
  va_start(ap, fmt);
  vreport(d, "warning", at, fmt, ap);
  va_end(ap);
  d->last_printed = true;
}

void diag_note(Diag *d, SrcLoc at, const char *fmt, ...) {
  if (!d->last_printed) return;
  va_list ap;
  va_start(ap, fmt);
  vreport(d, "note", at, fmt, ap);
  va_end(ap);
}

void diag_error_plain(Diag *d, const char *fmt, ...) {
  d->errors++;
  va_list ap;
  va_start(ap, fmt);
  fputs("mmc: error: ", d->out);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
  va_end(ap);
  d->last_printed = true;
}
