/* mmrt_jsonl.c: the JSON Lines reader of mmrt_jsonl.h, on json-c's
 * tokenizer in strict mode; UTF-8 is checked here, before and after the
 * JSON escapes are decoded (a "\ud800" escape decodes to a surrogate). */
#include "mmrt_jsonl.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void say(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

size_t mmrt_utf8_valid_prefix(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
      k = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      k = 2;
      if (c == 0xE0)
        lo = 0xA0; /* overlong */
      else if (c == 0xED)
        hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      k = 3;
      if (c == 0xF0)
        lo = 0x90; /* overlong */
      else if (c == 0xF4)
        hi = 0x8F; /* past U+10FFFF */
    } else
      return i;
    if (n - i <= k) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t j = 2; j <= k; j++)
      if ((p[i + j] & 0xC0) != 0x80) return i;
    i += k + 1;
  }
  return n;
}

bool mmrt_jsonl_open(MmrtJsonl *r, const char *path, const char *key, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  bool is_stdin = strcmp(path, "-") == 0;
  r->f = is_stdin ? stdin : fopen(path, "rb");
  if (!r->f) {
    say(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return false;
  }
  struct stat st;
  if (fstat(fileno(r->f), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      say(err, errlen, "%s: is a directory, expected a JSONL file", path);
      fclose(r->f);
      r->f = NULL;
      return false;
    }
    if (S_ISREG(st.st_mode)) r->size = (uint64_t)st.st_size;
  }
  r->path = strdup(is_stdin ? "<stdin>" : path);
  r->key = strdup(key);
  r->tok = json_tokener_new();
  if (!r->path || !r->key || !r->tok) {
    say(err, errlen, "%s: out of memory", path);
    mmrt_jsonl_close(r);
    return false;
  }
  json_tokener_set_flags(r->tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
  return true;
}

void mmrt_jsonl_close(MmrtJsonl *r) {
  if (r->f && r->f != stdin) fclose(r->f);
  if (r->obj) json_object_put(r->obj);
  if (r->tok) json_tokener_free(r->tok);
  free(r->line);
  free(r->path);
  free(r->key);
  memset(r, 0, sizeof *r);
}

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int c = p[i], d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* Offset of a \uD800-\uDFFF escape that is not half of a pair, or n
 * (json-c would decode it to U+FFFD silently; the line is well-formed JSON). */
static size_t lone_surrogate(const char *p, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (p[i] != '\\') continue;
    if (p[i + 1] != 'u' || n - i < 6) {
      i++; /* \" \\ \n ...: skip the escaped character */
      continue;
    }
    int v = hex4(p + i + 2);
    if (v >= 0xD800 && v <= 0xDBFF) {
      int lo = n - i >= 12 && p[i + 6] == '\\' && p[i + 7] == 'u' ? hex4(p + i + 8) : -1;
      if (lo < 0xDC00 || lo > 0xDFFF) return i;
      i += 11;
    } else if (v >= 0xDC00 && v <= 0xDFFF)
      return i;
    else
      i += 5;
  }
  return n;
}

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return false;
  return true;
}

MmrtJsonlStatus mmrt_jsonl_next(MmrtJsonl *r, const char **text, size_t *len, char *err,
                                size_t errlen) {
  if (r->obj) {
    json_object_put(r->obj);
    r->obj = NULL;
  }
  errno = 0;
  ssize_t got = getline(&r->line, &r->cap, r->f);
  if (got < 0) {
    if (ferror(r->f)) {
      say(err, errlen, "%s: read error after line %" PRIu64 ": %s", r->path, r->lineno,
          strerror(errno));
      return MMRT_JSONL_IO;
    }
    return MMRT_JSONL_EOF;
  }
  r->lineno++;
  r->bytes += (uint64_t)got;
  const char *p = r->line, *P = r->path;
  size_t n = (size_t)got;
  uint64_t ln = r->lineno;
  size_t bad = mmrt_utf8_valid_prefix(p, n);
  if (bad < n) {
    say(err, errlen, "%s:%" PRIu64 ":%zu: invalid UTF-8 (byte 0x%02x)", P, ln, bad + 1,
        (unsigned char)p[bad]);
    return MMRT_JSONL_BAD;
  }
  if (ln == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) {
    say(err, errlen, "%s:1:1: a UTF-8 byte order mark: JSON Lines have none (remove it)", P);
    return MMRT_JSONL_BAD;
  }
  if (blank(p, n)) {
    say(err, errlen, "%s:%" PRIu64 ": empty line, expected a JSON object", P, ln);
    return MMRT_JSONL_BAD;
  }
  if (n > INT32_MAX) {
    say(err, errlen, "%s:%" PRIu64 ": line of %zu bytes, longer than 2 GiB", P, ln, n);
    return MMRT_JSONL_BAD;
  }
  json_tokener_reset(r->tok);
  struct json_object *o = json_tokener_parse_ex(r->tok, p, (int)n);
  enum json_tokener_error je = json_tokener_get_error(r->tok);
  if (!o || je != json_tokener_success) {
    if (o) json_object_put(o);
    if (je == json_tokener_continue)
      say(err, errlen, "%s:%" PRIu64 ": malformed JSON: the line ends inside a value", P, ln);
    else
      say(err, errlen, "%s:%" PRIu64 ":%zu: malformed JSON: %s", P, ln,
          json_tokener_get_parse_end(r->tok) + 1, json_tokener_error_desc(je));
    return MMRT_JSONL_BAD;
  }
  size_t end = json_tokener_get_parse_end(r->tok);
  if (!blank(p + end, n - end)) {
    json_object_put(o);
    say(err, errlen,
        "%s:%" PRIu64 ":%zu: malformed JSON: text after the object (one object a line)", P, ln,
        end + 1);
    return MMRT_JSONL_BAD;
  }
  r->obj = o;
  size_t sur = lone_surrogate(p, n);
  if (sur < n) {
    say(err, errlen, "%s:%" PRIu64 ":%zu: a lone surrogate escape (%.6s): not a Unicode character",
        P, ln, sur + 1, p + sur);
    return MMRT_JSONL_BAD;
  }
  if (!json_object_is_type(o, json_type_object)) {
    say(err, errlen, "%s:%" PRIu64 ": expected a JSON object, found a %s", P, ln,
        json_type_to_name(json_object_get_type(o)));
    return MMRT_JSONL_BAD;
  }
  struct json_object *v;
  if (!json_object_object_get_ex(o, r->key, &v)) {
    if (json_object_object_get_ex(o, "messages", NULL)) {
      say(err, errlen,
          "%s:%" PRIu64 ": chat samples (\"messages\") are not supported yet (no chat templates); "
          "give each sample a \"%s\" string",
          P, ln, r->key);
      return MMRT_JSONL_UNSUPPORTED;
    }
    say(err, errlen, "%s:%" PRIu64 ": no \"%s\" field", P, ln, r->key);
    return MMRT_JSONL_BAD;
  }
  if (!json_object_is_type(v, json_type_string)) {
    say(err, errlen, "%s:%" PRIu64 ": \"%s\" is a %s, expected a string", P, ln, r->key,
        v ? json_type_to_name(json_object_get_type(v)) : "null");
    return MMRT_JSONL_BAD;
  }
  const char *s = json_object_get_string(v);
  size_t sn = (size_t)json_object_get_string_len(v);
  bad = mmrt_utf8_valid_prefix(s, sn);
  if (bad < sn) {
    say(err, errlen,
        "%s:%" PRIu64 ": \"%s\" is not valid UTF-8 once its escapes are decoded (byte %zu of the "
        "text: a lone surrogate escape?)",
        P, ln, r->key, bad + 1);
    return MMRT_JSONL_BAD;
  }
  *text = s;
  *len = sn;
  return MMRT_JSONL_OK;
}
