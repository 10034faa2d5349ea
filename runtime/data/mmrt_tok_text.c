/* mmrt_tok_text.c: the tokenizer's text stages as `tokenizers` defines
 * them: normalizers (a string to a string), pre-tokenizers (pieces to
 * smaller pieces) and decoders (token strings to text). Offsets are not
 * tracked: only ids and text are produced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicase.h>
#include <unigbrk.h>
#include <uninorm.h>
#include <unistr.h>

#include "mmrt_tok_int.h"

#define SUB(buf, fmt, ...) snprintf(buf, sizeof buf, fmt, __VA_ARGS__)

static bool type_of(TkLd *ld, const char *path, json_object *o, const char **type) {
  if (!json_object_is_type(o, json_type_object))
    return tk_fail(ld, path, "expected an object, got %s", tk_jtype(o));
  json_object *t;
  if (!tk_member(ld, path, o, "type", json_type_string, true, &t)) return false;
  *type = json_object_get_string(t);
  return true;
}

static char *dup_str(json_object *s, size_t *n) {
  *n = (size_t)json_object_get_string_len(s);
  char *p = malloc(*n + 1);
  memcpy(p, json_object_get_string(s), *n + 1);
  return p;
}

/* {"type": T, key: "string"}: the string, copied into *text. */
static bool text_only(TkLd *ld, const char *path, json_object *o, const char *key, char **text,
                      size_t *n) {
  const char *const keys[] = {"type", key, NULL};
  json_object *v;
  if (!tk_keys(ld, path, o, keys) || !tk_member(ld, path, o, key, json_type_string, true, &v))
    return false;
  *text = dup_str(v, n);
  return true;
}

/* {"type": "Replace", "pattern": {...}, "content": "string"} */
static bool replace_parse(TkLd *ld, const char *path, json_object *o, TkPattern *pat, char **text,
                          size_t *n) {
  static const char *const keys[] = {"type", "pattern", "content", NULL};
  json_object *v;
  if (!tk_keys(ld, path, o, keys) ||
      !tk_member(ld, path, o, "pattern", json_type_object, true, &v) ||
      !tk_pattern_parse(ld, path, v, pat) ||
      !tk_member(ld, path, o, "content", json_type_string, true, &v))
    return false;
  *text = dup_str(v, n);
  return true;
}

/* One code point from a string field that must hold exactly one. */
static bool one_char(TkLd *ld, const char *path, json_object *o, const char *key, uint32_t *uc) {
  json_object *v;
  if (!tk_member(ld, path, o, key, json_type_string, true, &v)) return false;
  const char *s = json_object_get_string(v);
  size_t n = (size_t)json_object_get_string_len(v);
  if (n == 0 || (size_t)tk_utf8(s, n, uc) != n)
    return tk_fail(ld, path, "'%s' must be one character, got \"%s\"", key, s);
  return true;
}

/* ================= normalizers ================= */

enum {
  N_NFC,
  N_NFD,
  N_NFKC,
  N_NFKD,
  N_LOWER,
  N_STRIP,
  N_STRIPACC,
  N_REPLACE,
  N_PREPEND,
  N_BYTE,
  N_PRECOMPILED,
  N_SEQ
};

struct TkNorm {
  int kind;
  bool left, right; /* Strip */
  TkPattern pat;    /* Replace */
  char *text;       /* Replace content, Prepend prepend */
  size_t textn;
  uint32_t *trie; /* Precompiled: SentencePiece's double array (darts-clone units) */
  size_t ntrie;
  char *norm; /* Precompiled: the replacement strings, NUL-separated */
  size_t nnorm;
  TkNorm **subs;
  size_t nsubs;
};

void tk_norm_free(TkNorm *n) {
  if (!n) return;
  free(n->trie);
  free(n->norm);
  for (size_t i = 0; i < n->nsubs; i++) tk_norm_free(n->subs[i]);
  free(n->subs);
  tk_pattern_free(&n->pat);
  free(n->text);
  free(n);
}

/* ---- Precompiled: SentencePiece's normalization rules (spm_precompiled) ---- */

static int b64(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* precompiled_charsmap: base64 of [u32 LE trie bytes][trie units][strings] */
static bool precompiled_parse(TkLd *ld, const char *path, json_object *v, TkNorm *n) {
  const char *s = json_object_get_string(v);
  size_t len = (size_t)json_object_get_string_len(v), k = 0;
  if (len % 4) return tk_fail(ld, path, "precompiled_charsmap is not base64 (length %zu)", len);
  unsigned char *raw = malloc(len / 4 * 3 + 1);
  for (size_t i = 0; i < len; i += 4) {
    int q[4];
    for (int j = 0; j < 4; j++)
      q[j] = s[i + j] == '=' && i + 4 == len && j >= 2 ? 0 : b64(s[i + j]);
    if (q[0] < 0 || q[1] < 0 || q[2] < 0 || q[3] < 0) {
      free(raw);
      return tk_fail(ld, path, "precompiled_charsmap is not base64 (at character %zu)", i);
    }
    uint32_t x = (uint32_t)(q[0] << 18 | q[1] << 12 | q[2] << 6 | q[3]);
    raw[k++] = (unsigned char)(x >> 16);
    if (s[i + 2] != '=') raw[k++] = (unsigned char)(x >> 8);
    if (s[i + 3] != '=') raw[k++] = (unsigned char)x;
  }
  uint32_t tsize = k >= 4 ? (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 |
                                (uint32_t)raw[3] << 24
                          : 0;
  if (k < 4 || (size_t)tsize / 4 * 4 > k - 4 || tsize < 4) {
    free(raw);
    return tk_fail(ld, path, "precompiled_charsmap: its trie size does not fit its %zu bytes", k);
  }
  n->ntrie = tsize / 4;
  n->trie = malloc(n->ntrie * sizeof *n->trie);
  for (size_t i = 0; i < n->ntrie; i++) {
    const unsigned char *u = raw + 4 + 4 * i;
    n->trie[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
  }
  size_t at = 4 + n->ntrie * 4;
  n->nnorm = k - at;
  n->norm = malloc(n->nnorm + 1);
  memcpy(n->norm, raw + at, n->nnorm);
  n->norm[n->nnorm] = 0;
  free(raw);
  if (u8_check((const uint8_t *)n->norm, n->nnorm))
    return tk_fail(ld, path, "precompiled_charsmap: its strings are not UTF-8");
  return true;
}

/* The replacement of chunk: the first (shortest) prefix of it in the
 * double array, as spm_precompiled's transform; NULL when none. */
static const char *precompiled_find(const TkNorm *n, const char *s, size_t len, size_t *outn) {
#define UNIT_LEAF(u)   (((u) >> 8) & 1)
#define UNIT_VALUE(u)  ((u) & 0x7FFFFFFFu)
#define UNIT_LABEL(u)  ((u) & 0x800000FFu)
#define UNIT_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
  size_t pos = UNIT_OFFSET(n->trie[0]);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0) break;
    pos ^= c;
    if (pos >= n->ntrie) return NULL;
    uint32_t u = n->trie[pos];
    if (UNIT_LABEL(u) != c) return NULL;
    pos ^= UNIT_OFFSET(u);
    if (pos >= n->ntrie) return NULL;
    if (UNIT_LEAF(u)) {
      size_t a = UNIT_VALUE(n->trie[pos]), b = a;
      if (a > n->nnorm) return NULL;
      while (b < n->nnorm && n->norm[b]) b++;
      *outn = b - a;
      return n->norm + a;
    }
  }
  return NULL;
#undef UNIT_LEAF
#undef UNIT_VALUE
#undef UNIT_LABEL
#undef UNIT_OFFSET
}

/* Per extended grapheme cluster: the cluster's replacement when it is under
 * 6 bytes and has one, else each character's, else the character. */
static void precompiled_apply(const TkNorm *nm, const char *s, size_t n, TkBuf *out) {
  if (!n) return;
  char *brk = malloc(n);
  u8_grapheme_breaks((const uint8_t *)s, n, brk);
  for (size_t a = 0; a < n;) {
    size_t b = a + 1, rn;
    while (b < n && !brk[b]) b++;
    const char *r = b - a < 6 ? precompiled_find(nm, s + a, b - a, &rn) : NULL;
    if (r) {
      tk_buf_put(out, r, rn);
    } else {
      for (size_t i = a; i < b;) {
        uint32_t uc;
        size_t k = (size_t)tk_utf8(s + i, b - i, &uc);
        r = precompiled_find(nm, s + i, k, &rn);
        if (r)
          tk_buf_put(out, r, rn);
        else
          tk_buf_put(out, s + i, k);
        i += k;
      }
    }
    a = b;
  }
  free(brk);
}

bool tk_norm_parse(TkLd *ld, const char *path, json_object *o, TkNorm **out) {
  const char *type = NULL;
  if (!type_of(ld, path, o, &type)) return false;
  TkNorm *n = calloc(1, sizeof *n);
  *out = n;
  static const char *const only_type[] = {"type", NULL};
  static const struct {
    const char *name;
    int kind;
  } plain[] = {{"NFC", N_NFC},       {"NFD", N_NFD},         {"NFKC", N_NFKC},
               {"NFKD", N_NFKD},     {"Lowercase", N_LOWER}, {"StripAccents", N_STRIPACC},
               {"ByteLevel", N_BYTE}};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    if (strcmp(type, plain[i].name) == 0) {
      n->kind = plain[i].kind;
      return tk_keys(ld, path, o, only_type);
    }
  char sub[512];
  json_object *v;
  if (strcmp(type, "Strip") == 0) {
    static const char *const keys[] = {"type", "strip_left", "strip_right", NULL};
    n->kind = N_STRIP;
    return tk_keys(ld, path, o, keys) && tk_bool(ld, path, o, "strip_left", false, &n->left) &&
           tk_bool(ld, path, o, "strip_right", false, &n->right);
  }
  if (strcmp(type, "Replace") == 0) {
    n->kind = N_REPLACE;
    return replace_parse(ld, path, o, &n->pat, &n->text, &n->textn);
  }
  if (strcmp(type, "Prepend") == 0) {
    n->kind = N_PREPEND;
    return text_only(ld, path, o, "prepend", &n->text, &n->textn);
  }
  if (strcmp(type, "Precompiled") == 0) {
    static const char *const keys[] = {"type", "precompiled_charsmap", NULL};
    n->kind = N_PRECOMPILED;
    if (!tk_keys(ld, path, o, keys) ||
        !tk_member(ld, path, o, "precompiled_charsmap", json_type_string, true, &v))
      return false;
    return precompiled_parse(ld, path, v, n);
  }
  if (strcmp(type, "Sequence") == 0) {
    n->kind = N_SEQ;
    if (!(n->subs = tk_seq(ld, path, o, "normalizers", sizeof *n->subs, &v, &n->nsubs)))
      return false;
    for (size_t i = 0; i < n->nsubs; i++)
      if (!tk_norm_parse(ld, tk_seq_path(sub, sizeof sub, path, "normalizers", i),
                         json_object_array_get_idx(v, i), &n->subs[i]))
        return false;
    return true;
  }
  return tk_fail(ld, path,
                 "normalizer type '%s' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                 "Lowercase, Strip, StripAccents, Replace, Prepend, ByteLevel, Precompiled, "
                 "Sequence)",
                 type);
}

void tk_norm_apply(TkNorm *nm, const char *s, size_t n, TkBuf *out, bool *strip_start) {
  uint32_t uc;
  switch (nm->kind) {
    case N_NFC:
    case N_NFD:
    case N_NFKC:
    case N_NFKD: {
      uninorm_t f = nm->kind == N_NFC    ? UNINORM_NFC
                    : nm->kind == N_NFD  ? UNINORM_NFD
                    : nm->kind == N_NFKC ? UNINORM_NFKC
                                         : UNINORM_NFKD;
      size_t len = 0;
      uint8_t *r = u8_normalize(f, (const uint8_t *)s, n, NULL, &len);
      if (r)
        tk_buf_put(out, r, len);
      else
        tk_buf_put(out, s, n); /* only on allocation failure */
      free(r);
      return;
    }
    case N_LOWER: /* per character (Rust's char::to_lowercase: no final-sigma context) */
      for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 128) {
          tk_buf_putc(out, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c));
          i++;
          continue;
        }
        int k = tk_utf8(s + i, n - i, &uc);
        uint8_t tmp[32];
        size_t len = sizeof tmp;
        uint8_t *r = u8_tolower((const uint8_t *)s + i, (size_t)k, NULL, NULL, tmp, &len);
        if (r) tk_buf_put(out, r, len);
        if (r && r != tmp) free(r);
        i += (size_t)k;
      }
      return;
    case N_STRIP: {
      size_t a = 0, b = n;
      while (nm->left && a < b) {
        int k = tk_utf8(s + a, b - a, &uc);
        if (!tk_is_space(uc)) break;
        a += (size_t)k;
      }
      while (nm->right && b > a) {
        size_t j = b - 1;
        while (j > a && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        tk_utf8(s + j, b - j, &uc);
        if (!tk_is_space(uc)) break;
        b = j;
      }
      if (a > 0) *strip_start = true;
      tk_buf_put(out, s + a, b - a);
      return;
    }
    case N_STRIPACC:
      for (size_t i = 0; i < n;) {
        int k = tk_utf8(s + i, n - i, &uc);
        if (!tk_is_mark(uc)) tk_buf_put(out, s + i, (size_t)k);
        i += (size_t)k;
      }
      return;
    case N_REPLACE: {
      TkSpans sp = {0};
      tk_pattern_spans(&nm->pat, s, n, &sp);
      for (size_t i = 0; i < sp.n; i++)
        if (sp.v[i].match)
          tk_buf_put(out, nm->text, nm->textn);
        else
          tk_buf_put(out, s + sp.v[i].a, sp.v[i].b - sp.v[i].a);
      free(sp.v);
      return;
    }
    case N_PREPEND:
      if (n) tk_buf_put(out, nm->text, nm->textn);
      tk_buf_put(out, s, n);
      return;
    case N_BYTE:
      for (size_t i = 0; i < n; i++) tk_buf_put_uc(out, tk_byte_char((unsigned char)s[i]));
      return;
    case N_PRECOMPILED: precompiled_apply(nm, s, n, out); return;
    case N_SEQ: {
      TkBuf a = {0}, b = {0};
      tk_buf_put(&a, s, n);
      for (size_t i = 0; i < nm->nsubs; i++) {
        b.n = 0;
        tk_norm_apply(nm->subs[i], a.p, a.n, &b, strip_start);
        TkBuf t = a;
        a = b, b = t;
      }
      tk_buf_put(out, a.p, a.n);
      free(a.p), free(b.p);
      return;
    }
  }
}

/* ================= pre-tokenizers ================= */

enum { P_BYTE, P_SPLIT, P_META, P_WS, P_WSSPLIT, P_DIGITS, P_PUNCT, P_SEQ };
enum { B_REMOVED, B_ISOLATED, B_PREV, B_NEXT, B_CONTIG };
enum { PS_ALWAYS, PS_FIRST, PS_NEVER };

struct TkPre {
  int kind;
  bool prefix_space, use_regex; /* ByteLevel */
  bool invert;                  /* Split */
  bool individual;              /* Digits */
  bool split;                   /* Metaspace */
  int behavior, scheme;
  uint32_t repl; /* Metaspace */
  TkPattern pat; /* Split */
  TkRegex re;    /* ByteLevel's GPT-2 pattern */
  TkPre **subs;
  size_t nsubs;
};

/* GPT-2's pattern, as `tokenizers` writes it for the ByteLevel pre-tokenizer. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void tk_pre_free(TkPre *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nsubs; i++) tk_pre_free(p->subs[i]);
  free(p->subs);
  tk_pattern_free(&p->pat);
  tk_regex_free(&p->re);
  free(p);
}

static bool behavior_parse(TkLd *ld, const char *path, json_object *o, bool required, int *out) {
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                      "Contiguous"};
  json_object *v;
  if (!tk_member(ld, path, o, "behavior", json_type_string, required, &v)) return false;
  if (!v) return true;
  for (int i = 0; i < 5; i++)
    if (strcmp(json_object_get_string(v), names[i]) == 0) {
      *out = i;
      return true;
    }
  return tk_fail(ld, path,
                 "behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, "
                 "MergedWithNext, Contiguous",
                 json_object_get_string(v));
}

bool tk_pre_parse(TkLd *ld, const char *path, json_object *o, TkPre **out) {
  const char *type = NULL;
  if (!type_of(ld, path, o, &type)) return false;
  TkPre *p = calloc(1, sizeof *p);
  *out = p;
  json_object *v;
  char sub[512];
  static const char *const only_type[] = {"type", NULL};
  if (strcmp(type, "ByteLevel") == 0) {
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    p->kind = P_BYTE;
    bool trim;
    return tk_keys(ld, path, o, keys) &&
           tk_bool(ld, path, o, "add_prefix_space", true, &p->prefix_space) &&
           tk_bool(ld, path, o, "trim_offsets", true, &trim) && /* offsets only */
           tk_bool(ld, path, o, "use_regex", true, &p->use_regex) &&
           tk_regex_compile(ld, path, gpt2_pattern, sizeof gpt2_pattern - 1, &p->re);
  }
  if (strcmp(type, "Split") == 0) {
    static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
    p->kind = P_SPLIT;
    return tk_keys(ld, path, o, keys) &&
           tk_member(ld, path, o, "pattern", json_type_object, true, &v) &&
           tk_pattern_parse(ld, path, v, &p->pat) &&
           behavior_parse(ld, path, o, true, &p->behavior) &&
           tk_bool(ld, path, o, "invert", false, &p->invert);
  }
  if (strcmp(type, "Metaspace") == 0) {
    static const char *const keys[] = {
        "type", "replacement", "add_prefix_space", "split", "str_rep", "prepend_scheme", NULL};
    p->kind = P_META;
    bool aps;
    json_object *aps_v;
    if (!tk_keys(ld, path, o, keys) || !one_char(ld, path, o, "replacement", &p->repl) ||
        !tk_bool(ld, path, o, "split", true, &p->split) ||
        !tk_member(ld, path, o, "add_prefix_space", json_type_boolean, false, &aps_v) ||
        !tk_member(ld, path, o, "prepend_scheme", json_type_string, false, &v))
      return false;
    p->scheme = PS_ALWAYS;
    if (v) {
      const char *s = json_object_get_string(v);
      if (strcmp(s, "always") == 0)
        p->scheme = PS_ALWAYS;
      else if (strcmp(s, "first") == 0)
        p->scheme = PS_FIRST;
      else if (strcmp(s, "never") == 0)
        p->scheme = PS_NEVER;
      else
        return tk_fail(ld, path, "prepend_scheme '%s' is not always, first or never", s);
    }
    aps = aps_v ? json_object_get_boolean(aps_v) : true;
    if (!aps) {
      if (p->scheme != PS_NEVER)
        return tk_fail(ld, path, "add_prefix_space false does not match prepend_scheme");
      p->scheme = PS_NEVER;
    }
    return true;
  }
  if (strcmp(type, "Whitespace") == 0 || strcmp(type, "WhitespaceSplit") == 0) {
    p->kind = strcmp(type, "Whitespace") == 0 ? P_WS : P_WSSPLIT;
    return tk_keys(ld, path, o, only_type);
  }
  if (strcmp(type, "Digits") == 0) {
    static const char *const keys[] = {"type", "individual_digits", NULL};
    p->kind = P_DIGITS;
    return tk_keys(ld, path, o, keys) &&
           tk_bool(ld, path, o, "individual_digits", false, &p->individual);
  }
  if (strcmp(type, "Punctuation") == 0) {
    static const char *const keys[] = {"type", "behavior", NULL};
    p->kind = P_PUNCT;
    p->behavior = B_ISOLATED;
    return tk_keys(ld, path, o, keys) && behavior_parse(ld, path, o, false, &p->behavior);
  }
  if (strcmp(type, "Sequence") == 0) {
    p->kind = P_SEQ;
    if (!(p->subs = tk_seq(ld, path, o, "pretokenizers", sizeof *p->subs, &v, &p->nsubs)))
      return false;
    for (size_t i = 0; i < p->nsubs; i++)
      if (!tk_pre_parse(ld, tk_seq_path(sub, sizeof sub, path, "pretokenizers", i),
                        json_object_array_get_idx(v, i), &p->subs[i]))
        return false;
    return true;
  }
  return tk_fail(ld, path,
                 "pre-tokenizer type '%s' is not supported (supported: ByteLevel, Split, "
                 "Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation, Sequence)",
                 type);
}

/* Each character for which pred holds (or equal to c when pred is NULL) is
 * a match of its own; the runs between are non-matches. */
static void char_spans(const char *s, size_t n, bool (*pred)(uint32_t), uint32_t c, TkSpans *out) {
  if (n == 0) {
    tk_spans_push(out, 0, 0, false);
    return;
  }
  size_t last = 0;
  for (size_t i = 0; i < n;) {
    uint32_t uc;
    size_t k = (size_t)tk_utf8(s + i, n - i, &uc);
    if (pred ? pred(uc) : uc == c) {
      if (last < i) tk_spans_push(out, last, i, false);
      tk_spans_push(out, i, i + k, true);
      last = i + k;
    }
    i += k;
  }
  if (last < n) tk_spans_push(out, last, n, false);
}

/* `tokenizers`' NormalizedString::split: spans to kept ranges by behavior,
 * pushed as pieces (empty ones dropped). off: the text's arena offset. */
static void split_by(const TkSpans *sp, int behavior, bool invert, size_t off, bool at_start,
                     TkPieces *out) {
  TkSpans keep = {0}; /* match = removed */
  bool prev = false;
  for (size_t i = 0; i < sp->n; i++) {
    TkSpan x = sp->v[i];
    if (invert) x.match = !x.match;
    switch (behavior) {
      case B_ISOLATED: tk_spans_push(&keep, x.a, x.b, false); break;
      case B_REMOVED: tk_spans_push(&keep, x.a, x.b, x.match); break;
      case B_CONTIG:
        if (x.match == prev && keep.n)
          keep.v[keep.n - 1].b = x.b;
        else
          tk_spans_push(&keep, x.a, x.b, false);
        prev = x.match;
        break;
      case B_PREV:
        if (x.match && !prev && keep.n)
          keep.v[keep.n - 1].b = x.b;
        else
          tk_spans_push(&keep, x.a, x.b, false);
        prev = x.match;
        break;
      case B_NEXT: break; /* below, right to left */
    }
  }
  if (behavior == B_NEXT) {
    for (size_t j = sp->n; j-- > 0;) {
      TkSpan x = sp->v[j];
      if (invert) x.match = !x.match;
      if (x.match && !prev && keep.n)
        keep.v[keep.n - 1].a = x.a;
      else
        tk_spans_push(&keep, x.a, x.b, false);
      prev = x.match;
    }
    for (size_t i = 0; i < keep.n / 2; i++) {
      TkSpan t = keep.v[i];
      keep.v[i] = keep.v[keep.n - 1 - i];
      keep.v[keep.n - 1 - i] = t;
    }
  }
  for (size_t i = 0; i < keep.n; i++)
    if (!keep.v[i].match && keep.v[i].b > keep.v[i].a)
      tk_pieces_push(out, (TkPiece){off + keep.v[i].a, keep.v[i].b - keep.v[i].a, -1,
                                    at_start && keep.v[i].a == 0});
  free(keep.v);
}

/* Whitespace: runs of \w and runs of [^\w\s]; whitespace dropped. */
static void ws_split(const char *s, size_t n, size_t off, bool at_start, TkPieces *out) {
  size_t a = 0;
  int cls = -1; /* of the run from a: 0 word, 1 other */
  for (size_t i = 0; i <= n;) {
    uint32_t uc = ' ';
    size_t k = i < n ? (size_t)tk_utf8(s + i, n - i, &uc) : 1;
    int c = i == n || tk_is_space(uc) ? -1 : tk_is_word(uc) ? 0 : 1;
    if (c != cls) {
      if (cls >= 0 && i > a) tk_pieces_push(out, (TkPiece){off + a, i - a, -1, at_start && !a});
      a = i, cls = c;
    }
    i += k;
  }
}

static bool is_space_pred(uint32_t uc) {
  return tk_is_space(uc);
}

void tk_pre_apply(TkPre *p, TkBuf *ar, TkPieces *in, TkPieces *out) {
  if (p->kind == P_SEQ) {
    TkPieces a = {0}, b = {0};
    for (size_t i = 0; i < in->n; i++) tk_pieces_push(&a, in->v[i]);
    for (size_t j = 0; j < p->nsubs; j++) {
      b.n = 0;
      tk_pre_apply(p->subs[j], ar, &a, &b);
      TkPieces t = a;
      a = b, b = t;
    }
    for (size_t i = 0; i < a.n; i++) tk_pieces_push(out, a.v[i]);
    free(a.v), free(b.v);
    return;
  }
  TkSpans sp = {0};
  for (size_t i = 0; i < in->n; i++) {
    TkPiece pc = in->v[i];
    if (pc.token >= 0) {
      tk_pieces_push(out, pc);
      continue;
    }
    sp.n = 0;
    switch (p->kind) {
      case P_BYTE: {
        if (p->prefix_space && (pc.len == 0 || ar->p[pc.off] != ' ')) {
          size_t off = ar->n;
          tk_buf_putc(ar, ' ');
          tk_buf_put(ar, ar->p + pc.off, pc.len);
          pc.off = off, pc.len++;
        }
        TkPieces mid = {0};
        if (p->use_regex) {
          tk_regex_spans(&p->re, ar->p + pc.off, pc.len, &sp);
          split_by(&sp, B_ISOLATED, false, pc.off, pc.at_start, &mid);
        } else if (pc.len) {
          tk_pieces_push(&mid, pc);
        }
        for (size_t j = 0; j < mid.n; j++) { /* every byte as its GPT-2 character */
          size_t off = ar->n;
          for (size_t q = 0; q < mid.v[j].len; q++)
            tk_buf_put_uc(ar, tk_byte_char((unsigned char)ar->p[mid.v[j].off + q]));
          tk_pieces_push(out, (TkPiece){off, ar->n - off, -1, mid.v[j].at_start});
        }
        free(mid.v);
        break;
      }
      case P_SPLIT:
        tk_pattern_spans(&p->pat, ar->p + pc.off, pc.len, &sp);
        split_by(&sp, p->behavior, p->invert, pc.off, pc.at_start, out);
        break;
      case P_META: {
        size_t off = ar->n;
        uint32_t first = 0;
        if (pc.len) tk_utf8(ar->p + pc.off, pc.len, &first);
        if (first == ' ') first = p->repl;
        bool pre = pc.len && first != p->repl &&
                   (p->scheme == PS_ALWAYS || (p->scheme == PS_FIRST && pc.at_start));
        if (pre) tk_buf_put_uc(ar, p->repl);
        for (size_t q = 0; q < pc.len; q++) {
          char c = ar->p[pc.off + q];
          if (c == ' ')
            tk_buf_put_uc(ar, p->repl);
          else
            tk_buf_putc(ar, c);
        }
        size_t len = ar->n - off;
        if (p->split) {
          char_spans(ar->p + off, len, NULL, p->repl, &sp);
          split_by(&sp, B_NEXT, false, off, pc.at_start, out);
        } else if (len) {
          tk_pieces_push(out, (TkPiece){off, len, -1, pc.at_start});
        }
        break;
      }
      case P_WS: ws_split(ar->p + pc.off, pc.len, pc.off, pc.at_start, out); break;
      case P_WSSPLIT:
        char_spans(ar->p + pc.off, pc.len, is_space_pred, 0, &sp);
        split_by(&sp, B_REMOVED, false, pc.off, pc.at_start, out);
        break;
      case P_DIGITS:
        char_spans(ar->p + pc.off, pc.len, tk_is_numeric, 0, &sp);
        split_by(&sp, p->individual ? B_ISOLATED : B_CONTIG, false, pc.off, pc.at_start, out);
        break;
      case P_PUNCT:
        char_spans(ar->p + pc.off, pc.len, tk_is_punct, 0, &sp);
        split_by(&sp, p->behavior, false, pc.off, pc.at_start, out);
        break;
    }
  }
  free(sp.v);
}

/* ================= decoders ================= */

enum { D_BYTE, D_META, D_BYTEFB, D_FUSE, D_STRIP, D_REPLACE, D_BPE, D_WORDPIECE, D_SEQ };

struct TkDec {
  int kind;
  uint32_t ch;        /* Metaspace replacement, Strip content */
  int scheme;         /* Metaspace */
  size_t start, stop; /* Strip */
  TkPattern pat;      /* Replace */
  char *text;         /* Replace content, BPEDecoder suffix, WordPiece prefix */
  size_t textn;
  bool cleanup; /* WordPiece */
  TkDec **subs;
  size_t nsubs;
};

void tk_dec_free(TkDec *d) {
  if (!d) return;
  for (size_t i = 0; i < d->nsubs; i++) tk_dec_free(d->subs[i]);
  free(d->subs);
  tk_pattern_free(&d->pat);
  free(d->text);
  free(d);
}

static bool count_field(TkLd *ld, const char *path, json_object *o, const char *key, size_t *out) {
  json_object *v;
  if (!tk_member(ld, path, o, key, json_type_int, true, &v)) return false;
  int64_t x = json_object_get_int64(v);
  if (x < 0) return tk_fail(ld, path, "'%s' is %lld, expected >= 0", key, (long long)x);
  *out = (size_t)x;
  return true;
}

bool tk_dec_parse(TkLd *ld, const char *path, json_object *o, TkDec **out) {
  const char *type = NULL;
  if (!type_of(ld, path, o, &type)) return false;
  TkDec *d = calloc(1, sizeof *d);
  *out = d;
  json_object *v;
  char sub[512];
  static const char *const only_type[] = {"type", NULL};
  if (strcmp(type, "ByteLevel") == 0) {
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    d->kind = D_BYTE;
    return tk_keys(ld, path, o, keys);
  }
  if (strcmp(type, "Metaspace") == 0) {
    TkPre *p = NULL;
    d->kind = D_META;
    bool ok = tk_pre_parse(ld, path, o, &p);
    if (ok) d->ch = p->repl, d->scheme = p->scheme;
    tk_pre_free(p);
    return ok;
  }
  if (strcmp(type, "ByteFallback") == 0 || strcmp(type, "Fuse") == 0) {
    d->kind = strcmp(type, "Fuse") == 0 ? D_FUSE : D_BYTEFB;
    return tk_keys(ld, path, o, only_type);
  }
  if (strcmp(type, "Strip") == 0) {
    static const char *const keys[] = {"type", "content", "start", "stop", NULL};
    d->kind = D_STRIP;
    return tk_keys(ld, path, o, keys) && one_char(ld, path, o, "content", &d->ch) &&
           count_field(ld, path, o, "start", &d->start) &&
           count_field(ld, path, o, "stop", &d->stop);
  }
  if (strcmp(type, "Replace") == 0) {
    d->kind = D_REPLACE;
    return replace_parse(ld, path, o, &d->pat, &d->text, &d->textn);
  }
  if (strcmp(type, "BPEDecoder") == 0) {
    d->kind = D_BPE;
    if (!text_only(ld, path, o, "suffix", &d->text, &d->textn)) return false;
    if (!d->textn) return tk_fail(ld, path, "'suffix' is empty");
    return true;
  }
  if (strcmp(type, "WordPiece") == 0) {
    static const char *const keys[] = {"type", "prefix", "cleanup", NULL};
    d->kind = D_WORDPIECE;
    if (!tk_keys(ld, path, o, keys) ||
        !tk_member(ld, path, o, "prefix", json_type_string, true, &v) ||
        !tk_bool(ld, path, o, "cleanup", true, &d->cleanup))
      return false;
    d->text = dup_str(v, &d->textn);
    return true;
  }
  if (strcmp(type, "Sequence") == 0) {
    d->kind = D_SEQ;
    if (!(d->subs = tk_seq(ld, path, o, "decoders", sizeof *d->subs, &v, &d->nsubs))) return false;
    for (size_t i = 0; i < d->nsubs; i++)
      if (!tk_dec_parse(ld, tk_seq_path(sub, sizeof sub, path, "decoders", i),
                        json_object_array_get_idx(v, i), &d->subs[i]))
        return false;
    return true;
  }
  return tk_fail(ld, path,
                 "decoder type '%s' is not supported (supported: ByteLevel, Metaspace, "
                 "ByteFallback, Fuse, Strip, Replace, BPEDecoder, WordPiece, Sequence)",
                 type);
}

/* Bytes of one well-formed UTF-8 sequence at s, or 0 (Rust's
 * from_utf8_lossy then replaces the longest valid prefix, at least 1 byte). */
static size_t utf8_ok(const unsigned char *s, size_t n, size_t *bad) {
  unsigned char c = s[0];
  size_t need = c < 0x80                 ? 1
                : c >= 0xC2 && c <= 0xDF ? 2
                : c >= 0xE0 && c <= 0xEF ? 3
                : c >= 0xF0 && c <= 0xF4 ? 4
                                         : 0;
  *bad = 1;
  if (need <= 1) return need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  for (size_t i = 1; i < need; i++) {
    if (i >= n || s[i] < lo || s[i] > hi) {
      *bad = i;
      return 0;
    }
    lo = 0x80, hi = 0xBF;
  }
  return need;
}

static void put_lossy(TkBuf *out, const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t bad, k = utf8_ok((const unsigned char *)s + i, n - i, &bad);
    if (k)
      tk_buf_put(out, s + i, k), i += k;
    else
      tk_buf_put(out, "\xEF\xBF\xBD", 3), i += bad;
  }
}

static void replace_all(TkBuf *t, const char *pat, size_t pn, const char *rep, size_t rn) {
  TkBuf o = {0};
  tk_buf_put(&o, "", 0);
  for (size_t i = 0; i < t->n;) {
    if (i + pn <= t->n && memcmp(t->p + i, pat, pn) == 0) {
      tk_buf_put(&o, rep, rn);
      i += pn;
    } else {
      tk_buf_putc(&o, t->p[i++]);
    }
  }
  free(t->p);
  *t = o;
}

static void flush_bytes(TkToks *nt, TkBuf *bytes) {
  if (!bytes->n) return;
  if (u8_check((const uint8_t *)bytes->p, bytes->n) == NULL) {
    tk_toks_push(nt, bytes->p, bytes->n);
  } else {
    for (size_t i = 0; i < bytes->n; i++) tk_toks_push(nt, "\xEF\xBF\xBD", 3);
  }
  bytes->n = 0;
}

void tk_dec_apply(TkDec *d, TkToks *toks) {
  TkToks nt = {0};
  uint32_t uc;
  switch (d->kind) {
    case D_SEQ:
      for (size_t i = 0; i < d->nsubs; i++) tk_dec_apply(d->subs[i], toks);
      return;
    case D_BYTE: {
      TkBuf bytes = {0}, text = {0};
      tk_buf_put(&bytes, "", 0);
      for (size_t i = 0; i < toks->n; i++) {
        TkBuf *t = &toks->v[i];
        size_t mark = bytes.n;
        bool all = true;
        for (size_t q = 0; q < t->n && all;) {
          q += (size_t)tk_utf8(t->p + q, t->n - q, &uc);
          int b = tk_char_byte(uc);
          if (b < 0)
            all = false;
          else
            tk_buf_putc(&bytes, (char)b);
        }
        if (!all) bytes.n = mark, tk_buf_put(&bytes, t->p, t->n);
      }
      tk_buf_put(&text, "", 0);
      put_lossy(&text, bytes.p, bytes.n);
      tk_toks_push(&nt, text.p, text.n);
      free(bytes.p), free(text.p);
      break;
    }
    case D_META:
      for (size_t i = 0; i < toks->n; i++) {
        TkBuf o = {0}, *t = &toks->v[i];
        tk_buf_put(&o, "", 0);
        for (size_t q = 0; q < t->n;) {
          int k = tk_utf8(t->p + q, t->n - q, &uc);
          if (uc != d->ch)
            tk_buf_put(&o, t->p + q, (size_t)k);
          else if (!(i == 0 && d->scheme != PS_NEVER))
            tk_buf_putc(&o, ' ');
          q += (size_t)k;
        }
        tk_toks_push(&nt, o.p, o.n);
        free(o.p);
      }
      break;
    case D_BYTEFB: {
      TkBuf bytes = {0};
      for (size_t i = 0; i < toks->n; i++) {
        TkBuf *t = &toks->v[i];
        unsigned hi, lo;
        if (t->n == 6 && memcmp(t->p, "<0x", 3) == 0 && t->p[5] == '>' &&
            sscanf(t->p + 3, "%1x%1x", &hi, &lo) == 2) {
          tk_buf_putc(&bytes, (char)(hi * 16 + lo));
          continue;
        }
        flush_bytes(&nt, &bytes);
        tk_toks_push(&nt, t->p, t->n);
      }
      flush_bytes(&nt, &bytes);
      free(bytes.p);
      break;
    }
    case D_FUSE: {
      TkBuf o = {0};
      tk_buf_put(&o, "", 0);
      for (size_t i = 0; i < toks->n; i++) tk_buf_put(&o, toks->v[i].p, toks->v[i].n);
      tk_toks_push(&nt, o.p, o.n);
      free(o.p);
      break;
    }
    case D_STRIP:
      for (size_t i = 0; i < toks->n; i++) {
        TkBuf *t = &toks->v[i];
        size_t nch = 0, cap = t->n + 1, *at = malloc(cap * sizeof *at); /* char starts */
        uint32_t *cs = malloc(cap * sizeof *cs);
        for (size_t q = 0; q < t->n; nch++)
          at[nch] = q, q += (size_t)tk_utf8(t->p + q, t->n - q, &cs[nch]);
        at[nch] = t->n;
        size_t a = 0, b = nch;
        for (size_t q = 0; q < d->start && q < nch && cs[q] == d->ch; q++) a = q + 1;
        for (size_t q = 0; q < d->stop && q < nch && cs[nch - 1 - q] == d->ch; q++) b = nch - 1 - q;
        if (b < a) b = a;
        tk_toks_push(&nt, t->p + at[a], at[b] - at[a]);
        free(at), free(cs);
      }
      break;
    case D_REPLACE:
      for (size_t i = 0; i < toks->n; i++) {
        TkBuf o = {0}, *t = &toks->v[i];
        TkSpans sp = {0};
        tk_buf_put(&o, "", 0);
        tk_pattern_spans(&d->pat, t->p, t->n, &sp);
        for (size_t q = 0; q < sp.n; q++)
          if (sp.v[q].match)
            tk_buf_put(&o, d->text, d->textn);
          else
            tk_buf_put(&o, t->p + sp.v[q].a, sp.v[q].b - sp.v[q].a);
        tk_toks_push(&nt, o.p, o.n);
        free(o.p), free(sp.v);
      }
      break;
    case D_BPE:
      for (size_t i = 0; i < toks->n; i++) {
        replace_all(&toks->v[i], d->text, d->textn, " ", i + 1 == toks->n ? 0 : 1);
        tk_toks_push(&nt, toks->v[i].p, toks->v[i].n);
      }
      break;
    case D_WORDPIECE: {
      static const char *const clean[][2] = {
          {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
          {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
          {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
      for (size_t i = 0; i < toks->n; i++) {
        TkBuf o = {0}, *t = &toks->v[i];
        tk_buf_put(&o, "", 0);
        if (i && t->n >= d->textn && memcmp(t->p, d->text, d->textn) == 0) {
          tk_buf_put(&o, t->p + d->textn, t->n - d->textn);
        } else {
          if (i) tk_buf_putc(&o, ' ');
          tk_buf_put(&o, t->p, t->n);
        }
        if (d->cleanup)
          for (size_t c = 0; c < sizeof clean / sizeof clean[0]; c++)
            replace_all(&o, clean[c][0], strlen(clean[c][0]), clean[c][1], strlen(clean[c][1]));
        tk_toks_push(&nt, o.p, o.n);
        free(o.p);
      }
      break;
    }
  }
  tk_toks_free(toks);
  *toks = nt;
}
