/* mmrt_log.h: status codes shared by the runtime's I/O, the metrics log
 * (JSON lines), the stderr progress line, and peak memory.
 *
 * Runtime functions never exit: they return an MmrtStatus and, on failure,
 * write into the caller's `char err[errlen]` a message naming the file, the
 * field and what was expected.  The trainer's main prints it and exits.
 */
#ifndef MMRT_LOG_H
#define MMRT_LOG_H

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

/* "step 120/500 (24.0%) | loss 0.6931 | 812.5 samples/s | elapsed 0:01:02
 *  | eta 0:03:17 | peak rss 512.3 MiB".  ETA is (total - step) * elapsed / step.
 * Returns what snprintf returns. */
int mmrt_progress_format(char *buf, size_t len, int64_t step, int64_t total, double loss,
                         double samples_per_s, double elapsed_s);

/* Peak resident set size of this process in bytes (getrusage), 0 if
 * unknown. */
int64_t mmrt_peak_rss_bytes(void);

#endif
