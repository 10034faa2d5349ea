/* mmrt_jsonl.h: a JSON Lines reader for text datasets: one JSON object per
 * line, the sample's text in a string field (default "text").
 *
 * Each line is checked before it is used: valid UTF-8 (strict: no overlong
 * forms, surrogates or code points past U+10FFFF), exactly one JSON object
 * with nothing after it, the key present with a string value whose decoded
 * text is UTF-8 again. A line that fails is a bad sample (the caller skips
 * or stops); a chat sample ("messages" instead of the key) is refused as not
 * supported yet. Messages are "FILE:LINE: what". Nothing here exits. */
#ifndef MMRT_JSONL_H
#define MMRT_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum MmrtJsonlStatus {
  MMRT_JSONL_OK,          /* *text holds the sample */
  MMRT_JSONL_EOF,         /* no more lines */
  MMRT_JSONL_BAD,         /* this line is a bad sample; the next call reads on */
  MMRT_JSONL_UNSUPPORTED, /* a format not supported yet (chat messages): stop */
  MMRT_JSONL_IO,          /* the file cannot be read: stop */
} MmrtJsonlStatus;

typedef struct MmrtJsonl {
  FILE *f;
  char *path;
  char *key;
  char *line; /* getline's buffer */
  size_t cap;
  uint64_t lineno; /* of the line last read, 1-based */
  uint64_t bytes;  /* read so far */
  uint64_t size;   /* of the file (0 for a pipe) */
  void *tok;       /* json_tokener */
  void *obj;       /* the last line's json_object (owns *text) */
} MmrtJsonl;

/* Opens PATH ("-" is stdin) reading the string field KEY. */
bool mmrt_jsonl_open(MmrtJsonl *r, const char *path, const char *key, char *err, size_t errlen);
void mmrt_jsonl_close(MmrtJsonl *r);

/* The next sample's text (valid UTF-8, len bytes, may hold NUL bytes),
 * valid until the next call. */
MmrtJsonlStatus mmrt_jsonl_next(MmrtJsonl *r, const char **text, size_t *len, char *err,
                                size_t errlen);

/* Byte offset of the first byte of s[0..n) that is not strict UTF-8, or n. */
size_t mmrt_utf8_valid_prefix(const char *s, size_t n);

#endif
