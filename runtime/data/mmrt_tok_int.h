/* mmrt_tok_int.h: what the tokenizer's files share (not for users of
 * mmrt_tok.h): byte buffers, hash maps, UTF-8 and Unicode classes
 * (libunistring), PCRE2 regexes, the JSON readers that name the field they
 * refuse, and the text stages (normalizers, pre-tokenizers, decoders) of
 * mmrt_tok_text.c. Layering: mmrt_tok_util.c <- mmrt_tok_text.c <- mmrt_tok.c. */
#ifndef MMRT_TOK_INT_H
#define MMRT_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <json-c/json.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mmrt_tok.h"

/* ---- buffers ---- */
typedef struct TkBuf {
  char *p;
  size_t n, cap;
} TkBuf;
void tk_buf_put(TkBuf *b, const void *s, size_t n);
void tk_buf_putc(TkBuf *b, char c);
void tk_buf_put_uc(TkBuf *b, uint32_t uc); /* one code point as UTF-8 */
void tk_ids_push(MmrtTokIds *ids, int32_t id);

/* ---- string -> int32 map (open addressing; keys copied) ---- */
typedef struct TkMap {
  char **keys;
  uint32_t *lens;
  int32_t *vals;
  size_t cap, n;
} TkMap;
void tk_map_free(TkMap *m);
bool tk_map_get(const TkMap *m, const char *k, size_t n, int32_t *v);
void tk_map_put(TkMap *m, const char *k, size_t n, int32_t v); /* overwrites */

/* ---- uint64 -> (int32, int32) map ---- */
typedef struct TkPairMap {
  uint64_t *keys; /* key + 1; 0: empty */
  int32_t *a, *b;
  size_t cap, n;
} TkPairMap;
void tk_pmap_free(TkPairMap *m);
bool tk_pmap_get(const TkPairMap *m, uint64_t k, int32_t *a, int32_t *b);
void tk_pmap_put(TkPairMap *m, uint64_t k, int32_t a, int32_t b);

/* ---- UTF-8 and Unicode classes (input is valid UTF-8) ---- */
int tk_utf8(const char *s, size_t n, uint32_t *uc); /* bytes of the code point at s */
bool tk_is_space(uint32_t uc);                      /* White_Space (Rust char::is_whitespace) */
bool tk_is_word(uint32_t uc);           /* Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control */
bool tk_is_numeric(uint32_t uc);        /* General_Category N (Rust char::is_numeric) */
bool tk_is_punct(uint32_t uc);          /* ASCII punctuation or General_Category P */
bool tk_is_mark(uint32_t uc);           /* General_Category M */
uint32_t tk_byte_char(unsigned char b); /* GPT-2's byte -> code point */
int tk_char_byte(uint32_t uc);          /* its inverse, -1 when none */

/* ---- regexes ---- */
typedef struct TkRegex {
  pcre2_code *code;
  pcre2_match_data *md;
} TkRegex;
/* Match spans of the whole string: (start, end, is_match) triples. */
typedef struct TkSpan {
  size_t a, b;
  bool match;
} TkSpan;
typedef struct TkSpans {
  TkSpan *v;
  size_t n, cap;
} TkSpans;
void tk_spans_push(TkSpans *s, size_t a, size_t b, bool match);
void tk_regex_free(TkRegex *r);
void tk_regex_spans(TkRegex *r, const char *s, size_t n, TkSpans *out);
void tk_literal_spans(const char *pat, size_t pn, const char *s, size_t n, TkSpans *out);

/* ---- loading: the file, the JSON path, the message ---- */
typedef struct TkLd {
  const char *file;
  char *err;
  size_t errlen;
} TkLd;
bool tk_fail(TkLd *ld, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *tk_jtype(json_object *o);
/* Refuses any key of obj not in keys (NULL-terminated). */
bool tk_keys(TkLd *ld, const char *path, json_object *obj, const char *const *keys);
/* A member of obj of the given json type; missing or null: *out = NULL and
 * true unless required. */
bool tk_member(TkLd *ld, const char *path, json_object *obj, const char *key, json_type type,
               bool required, json_object **out);
bool tk_bool(TkLd *ld, const char *path, json_object *obj, const char *key, bool dflt, bool *out);
/* A Sequence {"type": "Sequence", key: [...]}: the array in *arr, its
 * length in *n and a zeroed array of n + 1 members of size bytes each
 * (returned; NULL after a message). The caller parses member i from
 * json_object_array_get_idx(*arr, i) with the path tk_seq_path makes. */
void *tk_seq(TkLd *ld, const char *path, json_object *o, const char *key, size_t size,
             json_object **arr, size_t *n);
/* "path.key[i]" in buf (a PATH_MAX-sized buffer or smaller) */
const char *tk_seq_path(char *buf, size_t len, const char *path, const char *key, size_t i);
bool tk_regex_compile(TkLd *ld, const char *path, const char *pat, size_t n, TkRegex *r);
/* {"String": s} or {"Regex": r}: a regex, or a literal in *lit */
typedef struct TkPattern {
  char *lit;
  size_t litn;
  TkRegex re;
  bool is_re;
} TkPattern;
bool tk_pattern_parse(TkLd *ld, const char *path, json_object *o, TkPattern *p);
void tk_pattern_free(TkPattern *p);
void tk_pattern_spans(TkPattern *p, const char *s, size_t n, TkSpans *out);

/* ---- pieces of one encode: text in a scratch arena, or an added token ---- */
typedef struct TkPiece {
  size_t off, len; /* in the arena */
  int32_t token;   /* an added token's id, or -1 */
  bool at_start;   /* begins at offset 0 of the original text (Metaspace "first") */
} TkPiece;
typedef struct TkPieces {
  TkPiece *v;
  size_t n, cap;
} TkPieces;
void tk_pieces_push(TkPieces *p, TkPiece x);

/* ---- normalizers ---- */
typedef struct TkNorm TkNorm;
bool tk_norm_parse(TkLd *ld, const char *path, json_object *o, TkNorm **out);
void tk_norm_free(TkNorm *n);
/* Appends normalize(s[0..n)) to out; *strip_start: characters were removed
 * at the start (the piece no longer begins at offset 0). */
void tk_norm_apply(TkNorm *nm, const char *s, size_t n, TkBuf *out, bool *strip_start);

/* ---- pre-tokenizers: split each text piece of `in` into `out` ---- */
typedef struct TkPre TkPre;
bool tk_pre_parse(TkLd *ld, const char *path, json_object *o, TkPre **out);
void tk_pre_free(TkPre *p);
void tk_pre_apply(TkPre *p, TkBuf *arena, TkPieces *in, TkPieces *out);

/* ---- decoders: a list of token strings, transformed in place ---- */
typedef struct TkToks {
  TkBuf *v;
  size_t n, cap;
} TkToks;
void tk_toks_push(TkToks *t, const char *s, size_t n);
void tk_toks_free(TkToks *t);
typedef struct TkDec TkDec;
bool tk_dec_parse(TkLd *ld, const char *path, json_object *o, TkDec **out);
void tk_dec_free(TkDec *d);
void tk_dec_apply(TkDec *d, TkToks *toks);

/* ---- for mmrt_tok_chat.c ---- */
/* The id of the added token whose content is s[0..n), false when none. */
bool tk_added_id(const MmrtTok *t, const char *s, size_t n, int32_t *id);

#endif
