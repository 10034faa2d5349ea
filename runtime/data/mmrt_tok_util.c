/* mmrt_tok_util.c: the tokenizer's plumbing: buffers, hash maps, UTF-8 and
 * Unicode classes through libunistring, PCRE2 match spans, and the JSON
 * readers whose errors name the file and the field. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unictype.h>
#include <unistr.h>

#include "mmrt_tok_int.h"

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) abort(); /* out of memory: nothing sensible to return */
  return q;
}

void tk_buf_put(TkBuf *b, const void *s, size_t n) {
  if (b->n + n + 1 > b->cap) { /* s may point into b itself */
    const char *c = s;
    bool inside = b->p && c >= b->p && c < b->p + b->cap;
    size_t at = inside ? (size_t)(c - b->p) : 0;
    b->cap = (b->n + n + 1) * 2;
    b->p = xrealloc(b->p, b->cap);
    if (inside) s = b->p + at;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void tk_buf_putc(TkBuf *b, char c) {
  tk_buf_put(b, &c, 1);
}

void tk_buf_put_uc(TkBuf *b, uint32_t uc) {
  uint8_t tmp[6];
  int k = u8_uctomb(tmp, uc, 6);
  if (k > 0) tk_buf_put(b, tmp, (size_t)k);
}

void tk_ids_push(MmrtTokIds *ids, int32_t id) {
  if (ids->n == ids->cap) {
    ids->cap = ids->cap ? ids->cap * 2 : 64;
    ids->v = xrealloc(ids->v, ids->cap * sizeof *ids->v);
  }
  ids->v[ids->n++] = id;
}

void tk_spans_push(TkSpans *s, size_t a, size_t b, bool match) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 32;
    s->v = xrealloc(s->v, s->cap * sizeof *s->v);
  }
  s->v[s->n++] = (TkSpan){a, b, match};
}

void tk_pieces_push(TkPieces *p, TkPiece x) {
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 32;
    p->v = xrealloc(p->v, p->cap * sizeof *p->v);
  }
  p->v[p->n++] = x;
}

void tk_toks_push(TkToks *t, const char *s, size_t n) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 32;
    t->v = xrealloc(t->v, t->cap * sizeof *t->v);
  }
  t->v[t->n] = (TkBuf){0};
  tk_buf_put(&t->v[t->n++], s, n);
}

void tk_toks_free(TkToks *t) {
  for (size_t i = 0; i < t->n; i++) free(t->v[i].p);
  free(t->v);
  *t = (TkToks){0};
}

/* ---- string map ---- */

static uint64_t hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

void tk_map_free(TkMap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys);
  free(m->lens);
  free(m->vals);
  *m = (TkMap){0};
}

static size_t map_slot(const TkMap *m, const char *k, size_t n) {
  size_t i = hash(k, n) & (m->cap - 1);
  while (m->keys[i] && !(m->lens[i] == n && memcmp(m->keys[i], k, n) == 0))
    i = (i + 1) & (m->cap - 1);
  return i;
}

bool tk_map_get(const TkMap *m, const char *k, size_t n, int32_t *v) {
  if (!m->cap) return false;
  size_t i = map_slot(m, k, n);
  if (!m->keys[i]) return false;
  *v = m->vals[i];
  return true;
}

void tk_map_put(TkMap *m, const char *k, size_t n, int32_t v) {
  if ((m->n + 1) * 2 > m->cap) {
    TkMap old = *m;
    m->cap = m->cap ? m->cap * 2 : 64;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (!m->keys || !m->lens || !m->vals) abort();
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) {
        size_t j = map_slot(m, old.keys[i], old.lens[i]);
        m->keys[j] = old.keys[i], m->lens[j] = old.lens[i], m->vals[j] = old.vals[i];
      }
    free(old.keys), free(old.lens), free(old.vals);
  }
  size_t i = map_slot(m, k, n);
  if (!m->keys[i]) {
    m->keys[i] = xrealloc(NULL, n + 1);
    memcpy(m->keys[i], k, n);
    m->keys[i][n] = 0;
    m->lens[i] = (uint32_t)n;
    m->n++;
  }
  m->vals[i] = v;
}

/* ---- pair map ---- */

static size_t pmap_slot(const TkPairMap *m, uint64_t k) {
  size_t i = (size_t)((k + 1) * 0x9E3779B97F4A7C15ull >> 20) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != k + 1) i = (i + 1) & (m->cap - 1);
  return i;
}

void tk_pmap_free(TkPairMap *m) {
  free(m->keys), free(m->a), free(m->b);
  *m = (TkPairMap){0};
}

bool tk_pmap_get(const TkPairMap *m, uint64_t k, int32_t *a, int32_t *b) {
  if (!m->cap) return false;
  size_t i = pmap_slot(m, k);
  if (!m->keys[i]) return false;
  *a = m->a[i], *b = m->b[i];
  return true;
}

void tk_pmap_put(TkPairMap *m, uint64_t k, int32_t a, int32_t b) {
  if ((m->n + 1) * 2 > m->cap) {
    TkPairMap old = *m;
    m->cap = m->cap ? m->cap * 2 : 1024;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->a = calloc(m->cap, sizeof *m->a);
    m->b = calloc(m->cap, sizeof *m->b);
    if (!m->keys || !m->a || !m->b) abort();
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) {
        size_t j = pmap_slot(m, old.keys[i] - 1);
        m->keys[j] = old.keys[i], m->a[j] = old.a[i], m->b[j] = old.b[i];
      }
    tk_pmap_free(&old);
  }
  size_t i = pmap_slot(m, k);
  if (!m->keys[i]) m->keys[i] = k + 1, m->n++;
  m->a[i] = a, m->b[i] = b;
}

/* ---- Unicode ---- */

int tk_utf8(const char *s, size_t n, uint32_t *uc) {
  ucs4_t c;
  int k = u8_mbtouc(&c, (const uint8_t *)s, n);
  *uc = c;
  return k > 0 ? k : 1;
}

bool tk_is_space(uint32_t uc) {
  return uc_is_property_white_space(uc);
}

bool tk_is_word(uint32_t uc) {
  if (uc < 128) return (uc >= '0' && uc <= '9') || (uc | 32) - 'a' < 26 || uc == '_';
  return uc_is_property_alphabetic(uc) || uc_is_general_category(uc, UC_CATEGORY_M) ||
         uc_is_general_category(uc, UC_CATEGORY_Nd) || uc_is_general_category(uc, UC_CATEGORY_Pc) ||
         uc_is_property_join_control(uc);
}

bool tk_is_numeric(uint32_t uc) {
  if (uc < 128) return uc >= '0' && uc <= '9';
  return uc_is_general_category(uc, UC_CATEGORY_N);
}

bool tk_is_punct(uint32_t uc) {
  if (uc < 128) /* Rust's is_ascii_punctuation: the graphic characters but letters and digits */
    return uc > 32 && uc < 127 && !(uc >= '0' && uc <= '9') && (uc | 32) - 'a' >= 26;
  return uc_is_general_category(uc, UC_CATEGORY_P);
}

bool tk_is_mark(uint32_t uc) {
  return uc_is_general_category(uc, UC_CATEGORY_M);
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the others (controls, space, DEL, NBSP, soft hyphen) for 256, 257, ... in
 * byte order. */
static uint16_t byte_char[256];
static int16_t char_byte[324];
static void byte_tables_fill(void) {
  int next = 256;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_char[b] = (uint16_t)(printable ? b : next++);
  }
  for (int i = 0; i < 324; i++) char_byte[i] = -1;
  for (int b = 0; b < 256; b++) char_byte[byte_char[b]] = (int16_t)b;
}

/* filled once, whichever thread encodes first (mmc data preprocess runs
 * several) */
static void byte_tables(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, byte_tables_fill);
}

uint32_t tk_byte_char(unsigned char b) {
  byte_tables();
  return byte_char[b];
}

int tk_char_byte(uint32_t uc) {
  byte_tables();
  return uc < 324 ? char_byte[uc] : -1;
}

/* ---- regexes ---- */

void tk_regex_free(TkRegex *r) {
  if (r->md) pcre2_match_data_free(r->md);
  if (r->code) pcre2_code_free(r->code);
  *r = (TkRegex){0};
}

/* Every match left to right, the gaps between them as non-matches; an empty
 * match moves the search on by one character. */
void tk_regex_spans(TkRegex *r, const char *s, size_t n, TkSpans *out) {
  if (n == 0) {
    tk_spans_push(out, 0, 0, false);
    return;
  }
  size_t pos = 0, prev = 0;
  while (pos <= n) {
    int rc = pcre2_match(r->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, r->md, NULL);
    if (rc < 0) break;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
    size_t a = ov[0], b = ov[1];
    if (a != prev) tk_spans_push(out, prev, a, false);
    tk_spans_push(out, a, b, true);
    prev = b;
    if (b == a) {
      if (b >= n) break;
      uint32_t uc;
      pos = b + (size_t)tk_utf8(s + b, n - b, &uc);
    } else {
      pos = b;
    }
  }
  if (prev != n) tk_spans_push(out, prev, n, false);
}

void tk_literal_spans(const char *pat, size_t pn, const char *s, size_t n, TkSpans *out) {
  if (n == 0) {
    tk_spans_push(out, 0, 0, false);
    return;
  }
  size_t prev = 0, i = 0;
  while (i + pn <= n) {
    const char *hit = memmem(s + i, n - i, pat, pn);
    if (!hit) break;
    size_t a = (size_t)(hit - s);
    if (a != prev) tk_spans_push(out, prev, a, false);
    tk_spans_push(out, a, a + pn, true);
    prev = i = a + pn;
  }
  if (prev != n) tk_spans_push(out, prev, n, false);
}

/* ---- loading ---- */

bool tk_fail(TkLd *ld, const char *path, const char *fmt, ...) {
  int k = snprintf(ld->err, ld->errlen, "%s: %s: ", ld->file, path);
  if (k < 0 || (size_t)k >= ld->errlen) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ld->err + k, ld->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return false;
}

const char *tk_jtype(json_object *o) {
  switch (json_object_get_type(o)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double: return "a number";
    case json_type_int: return "an integer";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string: return "a string";
  }
  return "?";
}

bool tk_keys(TkLd *ld, const char *path, json_object *obj, const char *const *keys) {
  json_object_object_foreach(obj, k, v) {
    (void)v;
    bool known = false;
    for (const char *const *q = keys; *q && !known; q++) known = strcmp(*q, k) == 0;
    if (!known) {
      const char *type = NULL;
      json_object *t;
      if (json_object_object_get_ex(obj, "type", &t) && json_object_is_type(t, json_type_string))
        type = json_object_get_string(t);
      return tk_fail(ld, path, "field '%s'%s%s%s is not supported", k, type ? " (of " : "",
                     type ? type : "", type ? ")" : "");
    }
  }
  return true;
}

static const char *type_name(json_type t) {
  switch (t) {
    case json_type_boolean: return "a boolean";
    case json_type_int: return "an integer";
    case json_type_double: return "a number";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string: return "a string";
    default: return "null";
  }
}

bool tk_member(TkLd *ld, const char *path, json_object *obj, const char *key, json_type type,
               bool required, json_object **out) {
  json_object *v = NULL;
  *out = NULL;
  if (!json_object_object_get_ex(obj, key, &v) || !v) {
    if (required) return tk_fail(ld, path, "field '%s' is missing (%s)", key, type_name(type));
    return true;
  }
  bool ok = json_object_is_type(v, type) ||
            (type == json_type_double && json_object_is_type(v, json_type_int));
  if (!ok) return tk_fail(ld, path, "'%s' is %s, expected %s", key, tk_jtype(v), type_name(type));
  *out = v;
  return true;
}

bool tk_bool(TkLd *ld, const char *path, json_object *obj, const char *key, bool dflt, bool *out) {
  json_object *v;
  if (!tk_member(ld, path, obj, key, json_type_boolean, false, &v)) return false;
  *out = v ? json_object_get_boolean(v) : dflt;
  return true;
}

void *tk_seq(TkLd *ld, const char *path, json_object *o, const char *key, size_t size,
             json_object **arr, size_t *n) {
  const char *const keys[] = {"type", key, NULL};
  if (!tk_keys(ld, path, o, keys) || !tk_member(ld, path, o, key, json_type_array, true, arr))
    return NULL;
  *n = json_object_array_length(*arr);
  void *subs = calloc(*n + 1, size);
  if (!subs) tk_fail(ld, path, "out of memory for %zu members of '%s'", *n, key);
  return subs;
}

const char *tk_seq_path(char *buf, size_t len, const char *path, const char *key, size_t i) {
  snprintf(buf, len, "%s.%s[%zu]", path, key, i);
  return buf;
}

bool tk_regex_compile(TkLd *ld, const char *path, const char *pat, size_t n, TkRegex *r) {
  int code;
  PCRE2_SIZE at;
  r->code = pcre2_compile((PCRE2_SPTR)pat, n, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
  if (!r->code) {
    PCRE2_UCHAR msg[200];
    pcre2_get_error_message(code, msg, sizeof msg);
    return tk_fail(ld, path, "regex does not compile under PCRE2 at offset %zu: %s", (size_t)at,
                   (char *)msg);
  }
  pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
  r->md = pcre2_match_data_create_from_pattern(r->code, NULL);
  return true;
}

bool tk_pattern_parse(TkLd *ld, const char *path, json_object *o, TkPattern *p) {
  char sub[512];
  snprintf(sub, sizeof sub, "%s.pattern", path);
  json_object *v = NULL;
  if (!json_object_is_type(o, json_type_object) || json_object_object_length(o) != 1)
    return tk_fail(ld, sub, "expected {\"String\": ...} or {\"Regex\": ...}, got %s", tk_jtype(o));
  if (json_object_object_get_ex(o, "String", &v) && json_object_is_type(v, json_type_string)) {
    p->litn = (size_t)json_object_get_string_len(v);
    if (!p->litn) return tk_fail(ld, sub, "String is empty");
    p->lit = malloc(p->litn + 1);
    memcpy(p->lit, json_object_get_string(v), p->litn + 1);
    return true;
  }
  if (json_object_object_get_ex(o, "Regex", &v) && json_object_is_type(v, json_type_string)) {
    p->is_re = true;
    snprintf(sub, sizeof sub, "%s.pattern.Regex", path);
    return tk_regex_compile(ld, sub, json_object_get_string(v),
                            (size_t)json_object_get_string_len(v), &p->re);
  }
  return tk_fail(ld, sub, "expected {\"String\": ...} or {\"Regex\": ...}");
}

void tk_pattern_free(TkPattern *p) {
  free(p->lit);
  tk_regex_free(&p->re);
}

void tk_pattern_spans(TkPattern *p, const char *s, size_t n, TkSpans *out) {
  if (p->is_re)
    tk_regex_spans(&p->re, s, n, out);
  else
    tk_literal_spans(p->lit, p->litn, s, n, out);
}
