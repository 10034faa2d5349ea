/* mmrt_log.h: status codes shared by the runtime's I/O, the metrics log
 * (JSON lines), the stderr progress line, and peak memory.
 *
 * Runtime functions never exit: they return an MmrtStatus and, on failure,
 * write into the caller's `char err[errlen]` a message naming the file, the
 * field and what was expected.  The trainer's main prints it and exits.
 */
#ifndef MMRT_LOG_H
#define MMRT_LOG_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum MmrtStatus {
  MMRT_OK = 0,
  MMRT_ERR_IO = -1,       /* open/read/write/rename failed */
  MMRT_ERR_NOTFOUND = -2, /* file or directory does not exist */
  MMRT_ERR_FORMAT = -3,   /* bad magic, bad header, truncated, corrupt */
  MMRT_ERR_MISMATCH = -4, /* valid file, but not what the caller expects */
  MMRT_ERR_NOMEM = -5,
  MMRT_ERR_ARG = -6, /* bad argument from the caller */
} MmrtStatus;

/* Format a message into err (if err && errlen) and return code. */
int mmrt_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Short name of a status code, e.g. "format error". */
const char *mmrt_status_name(int code);

/* ---- opening a file for reading ---- */

/* Every reader of the runtime opens its file here: a regular file only (a
 * FIFO would block the open or the reads for ever, a directory or device is
 * no data file), checked before a byte is read (opened O_NONBLOCK, which a
 * regular file ignores for reads).  Returns MMRT_OK with *fd / *f set, else
 * NOTFOUND or IO with "path: cannot open: why" or "path: not a regular file
 * (a FIFO)" in err. */
int mmrt_open_read(const char *path, int *fd, char *err, size_t errlen);
int mmrt_fopen_read(const char *path, FILE **f, char *err, size_t errlen);

/* ---- metrics log: one JSON object a line, flushed per line ---- */

typedef struct MmrtLog {
  FILE *f;
  char path[4096];
} MmrtLog;

/* One key of a log line: a number, or a string when str != NULL.
 * Non-finite numbers are written as null (JSON has no NaN). */
typedef struct MmrtLogField {
  const char *key;
  double num;
  const char *str;
} MmrtLogField;

/* Open path for appending (created if absent). */
int mmrt_log_open(MmrtLog *lg, const char *path, char *err, size_t errlen);

/* Append {"step": step, key: value, ...}\n and flush. */
int mmrt_log_write(MmrtLog *lg, int64_t step, const MmrtLogField *fields, int nfields, char *err,
                   size_t errlen);

/* The same line into buf (no newline); returns the length it needed, like
 * snprintf. */
size_t mmrt_log_format(char *buf, size_t len, int64_t step, const MmrtLogField *fields,
                       int nfields);

/* Append {"step": step, "key": json}\n and flush, json being written as
 * it is (the caller's JSON value, e.g. an object of counters). */
int mmrt_log_write_json(MmrtLog *lg, int64_t step, const char *key, const char *json, char *err,
                        size_t errlen);

void mmrt_log_close(MmrtLog *lg);

/* ---- progress line for stderr ---- */

/* "h:mm:ss" of a duration (negative or non-finite gives "-:--:--"). */
void mmrt_format_hms(char *buf, size_t len, double seconds);

/* "WHAT DONE/TOTAL (PCT%) [| EXTRA] | RATE UNIT/s | elapsed h:mm:ss | eta
 * h:mm:ss | peak rss N MiB": the one progress line of every long phase
 * (training steps, evaluation batches, extracted clips, samples).  eta_s < 0
 * prints "-:--:--"; extra and unit may be NULL.  Returns what snprintf
 * returns. */
int mmrt_progress_line(char *buf, size_t len, const char *what, int64_t done, int64_t total,
                       const char *extra, double rate, const char *unit, double elapsed_s,
                       double eta_s);

/* The training line: "step 120/500 (24.0%) | loss 0.6931 | 812.5 samples/s
 * | elapsed 0:01:02 | eta 0:03:17 | peak rss 512.3 MiB", ETA (total - step) *
 * elapsed / step. */
int mmrt_progress_format(char *buf, size_t len, int64_t step, int64_t total, double loss,
                         double samples_per_s, double elapsed_s);

/* A phase's progress on stderr: on a terminal one line rewritten in place
 * (\r) at most 5 times a second; otherwise a line after the first item (its
 * ETA), each twentieth of the phase (at most one in 2 s), at least one in
 * 30 s, and at the end.  The ETA counts from the phase's start
 * and its first item (a resumed run's steps before it are not timed). */
typedef struct MmrtProgress {
  const char *what, *unit;                  /* "eval batch", "samples" */
  int64_t first, total, every, next, ticks; /* next: the next twentieth's mark */
  double t0, last;
  int loud, tty, open; /* open: a \r line waits for its newline */
} MmrtProgress;

/* loud = 0: nothing is printed (--quiet, ranks other than 0). */
void mmrt_progress_begin(MmrtProgress *p, const char *what, int64_t first, int64_t total,
                         const char *unit, int loud);
/* done of total; items: the units done since begin (for the rate); extra:
 * e.g. "loss 0.6931" or NULL.  Prints when due (always at done == total). */
void mmrt_progress_tick(MmrtProgress *p, int64_t done, double items, const char *extra);
/* Ends a \r line with its newline (before other output, and at the end). */
void mmrt_progress_break(MmrtProgress *p);

/* ---- stopping on SIGINT / SIGTERM ---- */

/* The signal that asked the program to stop (0: none).  The handlers
 * mmrt_stop_install sets only record it; every long loop polls it, stops
 * at the next item boundary, leaves no half-written file, and the program
 * exits with 128 + the signal (130 for SIGINT, 143 for SIGTERM).  A second
 * signal ends the program at once (the default action). */
extern volatile sig_atomic_t mmrt_stop_signal;
void mmrt_stop_install(void);
/* "stopped by SIGINT" etc. */
const char *mmrt_stop_name(int sig);

/* Peak resident set size of this process in bytes (getrusage), 0 if
 * unknown. */
int64_t mmrt_peak_rss_bytes(void);

/* What a path that is not a regular file is ("a FIFO", "a directory", ...),
 * for messages; mode is a struct stat's st_mode. */
const char *mmrt_file_kind(unsigned mode);

#endif
