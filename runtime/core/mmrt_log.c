/* mmrt_log.c: status messages, opening files for reading, JSON-lines metrics, the progress line
 * of long phases, stopping on SIGINT/SIGTERM, peak RSS. */
#include "mmrt_log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

int mmrt_errf(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

const char *mmrt_status_name(int code) {
  switch (code) {
    case MMRT_OK: return "ok";
    case MMRT_ERR_IO: return "I/O error";
    case MMRT_ERR_NOTFOUND: return "not found";
    case MMRT_ERR_FORMAT: return "format error";
    case MMRT_ERR_MISMATCH: return "mismatch";
    case MMRT_ERR_NOMEM: return "out of memory";
    case MMRT_ERR_ARG: return "bad argument";
  }
  return "unknown error";
}

const char *mmrt_file_kind(unsigned mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISREG(mode)  ? "a regular file"
                          : "not a regular file";
}

int mmrt_open_read(const char *path, int *fd, char *err, size_t errlen) {
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (*fd < 0) {
    int e = errno;
    return mmrt_errf(err, errlen, e == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                     "%s: cannot open: %s", path, strerror(e));
  }
  struct stat st;
  int flags;
  if (fstat(*fd, &st) != 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(*fd);
    *fd = -1;
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: not a regular file (%s); give a file", path,
                     mmrt_file_kind(st.st_mode));
  }
  if ((flags = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
  }
  return MMRT_OK;
}

int mmrt_fopen_read(const char *path, FILE **f, char *err, size_t errlen) {
  int fd, rc = mmrt_open_read(path, &fd, err, errlen);
  *f = NULL;
  if (rc != MMRT_OK) return rc;
  if (!(*f = fdopen(fd, "rb"))) {
    int e = errno;
    close(fd);
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
  }
  return MMRT_OK;
}

int mmrt_log_open(MmrtLog *lg, const char *path, char *err, size_t errlen) {
  memset(lg, 0, sizeof *lg);
  if (strlen(path) >= sizeof lg->path)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: metrics log path too long", path);
  lg->f = fopen(path, "a");
  if (!lg->f)
    return mmrt_errf(err, errlen, errno == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                     "%s: cannot open metrics log for appending: %s", path, strerror(errno));
  strcpy(lg->path, path);
  return MMRT_OK;
}

/* Appends to buf at *pos, never past len, always counting the full length. */
typedef struct Out {
  char *buf;
  size_t len, pos;
} Out;

static void put(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->pos < o->len ? o->len - o->pos : 0;
  int n = vsnprintf(room ? o->buf + o->pos : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->pos += (size_t)n;
}

static void put_json_string(Out *o, const char *s) {
  put(o, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      put(o, "\\%c", *p);
    else if (*p == '\n')
      put(o, "\\n");
    else if (*p < 0x20)
      put(o, "\\u%04x", *p);
    else
      put(o, "%c", *p);
  }
  put(o, "\"");
}

/* Shortest of %.15g / %.17g that reads back exactly. */
static void put_number(Out *o, double v) {
  if (!isfinite(v)) {
    put(o, "null");
    return;
  }
  char tmp[40];
  snprintf(tmp, sizeof tmp, "%.15g", v);
  if (strtod(tmp, NULL) != v) snprintf(tmp, sizeof tmp, "%.17g", v);
  put(o, "%s", tmp);
}

size_t mmrt_log_format(char *buf, size_t len, int64_t step, const MmrtLogField *fields,
                       int nfields) {
  Out o = {buf, len, 0};
  if (len) buf[0] = 0;
  put(&o, "{\"step\": %lld", (long long)step);
  for (int i = 0; i < nfields; i++) {
    put(&o, ", ");
    put_json_string(&o, fields[i].key);
    put(&o, ": ");
    if (fields[i].str)
      put_json_string(&o, fields[i].str);
    else
      put_number(&o, fields[i].num);
  }
  put(&o, "}");
  return o.pos;
}

int mmrt_log_write(MmrtLog *lg, int64_t step, const MmrtLogField *fields, int nfields, char *err,
                   size_t errlen) {
  if (!lg->f) return mmrt_errf(err, errlen, MMRT_ERR_ARG, "metrics log is not open");
  char small[1024];
  size_t n = mmrt_log_format(small, sizeof small, step, fields, nfields);
  char *line = small;
  if (n >= sizeof small) {
    line = malloc(n + 1);
    if (!line)
      return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory for a log line", lg->path);
    mmrt_log_format(line, n + 1, step, fields, nfields);
  }
  int bad = fprintf(lg->f, "%s\n", line) < 0 || fflush(lg->f) != 0;
  int e = errno;
  if (line != small) free(line);
  if (bad)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: writing metrics line for step %lld: %s",
                     lg->path, (long long)step, strerror(e));
  return MMRT_OK;
}

int mmrt_log_write_json(MmrtLog *lg, int64_t step, const char *key, const char *json, char *err,
                        size_t errlen) {
  if (!lg->f) return mmrt_errf(err, errlen, MMRT_ERR_ARG, "metrics log is not open");
  char k[512];
  Out o = {k, sizeof k, 0};
  put_json_string(&o, key);
  if (o.pos >= sizeof k)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: log key too long", lg->path);
  int bad = fprintf(lg->f, "{\"step\": %lld, %s: %s}\n", (long long)step, k, json) < 0 ||
            fflush(lg->f) != 0;
  if (bad)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: writing metrics line for step %lld: %s",
                     lg->path, (long long)step, strerror(errno));
  return MMRT_OK;
}

void mmrt_log_close(MmrtLog *lg) {
  if (lg->f) fclose(lg->f);
  lg->f = NULL;
}

void mmrt_format_hms(char *buf, size_t len, double seconds) {
  if (!isfinite(seconds) || seconds < 0 || seconds > 1e12) {
    snprintf(buf, len, "-:--:--");
    return;
  }
  long long s = (long long)(seconds + 0.5);
  snprintf(buf, len, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

int mmrt_progress_line(char *buf, size_t len, const char *what, int64_t done, int64_t total,
                       const char *extra, double rate, const char *unit, double elapsed_s,
                       double eta_s) {
  char el[32], eta[32];
  mmrt_format_hms(el, sizeof el, elapsed_s);
  mmrt_format_hms(eta, sizeof eta, eta_s);
  double pct = total > 0 ? 100.0 * (double)done / (double)total : 0;
  double rss = (double)mmrt_peak_rss_bytes() / (1024.0 * 1024.0);
  return snprintf(buf, len,
                  "%s %lld/%lld (%.1f%%)%s%s | %.1f %s/s | elapsed %s | eta %s | peak rss %.1f MiB",
                  what, (long long)done, (long long)total, pct, extra ? " | " : "",
                  extra ? extra : "", rate, unit ? unit : "items", el, eta, rss);
}

int mmrt_progress_format(char *buf, size_t len, int64_t step, int64_t total, double loss,
                         double samples_per_s, double elapsed_s) {
  char extra[48];
  snprintf(extra, sizeof extra, "loss %.4f", loss);
  double left = step > 0 ? (double)(total - step) * elapsed_s / (double)step : -1;
  return mmrt_progress_line(buf, len, "step", step, total, extra, samples_per_s, "samples",
                            elapsed_s, left);
}

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mmrt_progress_begin(MmrtProgress *p, const char *what, int64_t first, int64_t total,
                         const char *unit, int loud) {
  memset(p, 0, sizeof *p);
  p->what = what, p->unit = unit, p->first = first, p->total = total, p->loud = loud;
  p->every = (total - first) / 20 > 0 ? (total - first) / 20 : 1;
  p->tty = isatty(2);
  p->t0 = p->last = mono_now();
  p->next = first + p->every;
}

void mmrt_progress_tick(MmrtProgress *p, int64_t done, double items, const char *extra) {
  if (!p->loud) return;
  double tn = mono_now(), el = tn - p->t0;
  int end = done >= p->total;
  int64_t k = done - p->first;
  int first = !p->ticks++;
  if (p->tty ? !(tn - p->last > 0.2 || end)
             : !(first || end || (done >= p->next && tn - p->last >= 2) || tn - p->last >= 30))
    return;
  while (p->next <= done) p->next += p->every;
  char line[512];
  double eta = k > 0 ? (double)(p->total - done) * el / (double)k : -1;
  mmrt_progress_line(line, sizeof line, p->what, done, p->total, extra,
                     items / (el > 0 ? el : 1e-9), p->unit, el, eta);
  fprintf(stderr, p->tty ? "\r%s" : "%s\n", line);
  p->open = p->tty;
  p->last = tn;
}

void mmrt_progress_break(MmrtProgress *p) {
  if (p->open) fputc('\n', stderr);
  p->open = 0;
}

volatile sig_atomic_t mmrt_stop_signal;

static void on_stop(int sig) {
  if (mmrt_stop_signal) { /* a second signal: the default action, now */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  mmrt_stop_signal = sig;
}

void mmrt_stop_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

const char *mmrt_stop_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

int64_t mmrt_peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (int64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
