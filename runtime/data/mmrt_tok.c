/* mmrt_tok.c: a tokenizer.json read into a pipeline that gives the ids of
 * Hugging Face `tokenizers`: added tokens split out first (those with
 * normalized = false on the raw text, the others after the normalizer),
 * then the normalizer, the pre-tokenizer, the model (BPE or Unigram) on each
 * piece, and the post-processor's special tokens when asked for. Decoding
 * maps ids to token strings and runs the decoder.
 *
 * BPE merges a word with a min-heap of (merge rank, position) over a
 * doubly linked list of symbols, O(n log n) per word, and caches words
 * under 256 bytes (10,000 of them), as `tokenizers` does. Unigram runs the
 * Viterbi search over a byte trie of the pieces with their scores, unknown
 * characters at the lowest score - 10 and fused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistr.h>

#include "mmrt_tok.h"
#include "mmrt_tok_int.h"

enum { M_BPE, M_UNIGRAM };
enum { PP_TEMPLATE, PP_BYTE, PP_CLS_SEP, PP_SEQ };
enum { TR_LONGEST_FIRST, TR_ONLY_FIRST, TR_ONLY_SECOND };
#define SEQ_SLOT      INT32_MIN /* where a template puts the sequence */
#define CACHE_WORDS   10000
#define CACHE_MAX_LEN 256
#define MAX_ID        (1 << 24) /* ids index arrays: a bound on what a file can make us allocate */

typedef struct Added {
  char *content, *pattern; /* pattern: content, normalized when `normalized` */
  size_t n, pn;
  int32_t id;
  bool single_word, lstrip, rstrip, normalized, special;
} Added;

/* Added tokens of one kind (raw or normalized), by first byte. */
typedef struct AddedSet {
  int32_t *by_first[256]; /* indices into MmrtTok.added, -1 terminated */
  bool any;
} AddedSet;

typedef struct Post {
  int kind;
  int32_t *items; /* SEQ_SLOT or an id */
  size_t nitems;
  struct Post **subs;
  size_t nsubs;
} Post;

struct MmrtTok {
  int model;
  TkMap vocab; /* token -> id */
  char **tok;  /* id -> model token (NULL: none) */
  uint32_t *tokn;
  int32_t ntok;     /* ids 0..ntok-1 */
  size_t vocab_len; /* model.get_vocab_size() */
  /* BPE */
  TkPairMap merges;      /* (left << 32 | right) -> (rank, merged id) */
  char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix */
  size_t prefixn, suffixn;
  int32_t unk; /* -1: none */
  bool fuse_unk, byte_fallback, ignore_merges;
  int32_t byte_id[256]; /* <0xXX> tokens, -1 when absent */
  TkMap cache;          /* word -> offset in cache_ids: count, ids... */
  MmrtTokIds cache_ids;
  /* Unigram */
  double *score, min_score;
  TkPairMap trie;    /* (node << 8 | byte) -> (child, -) */
  int32_t *node_tok; /* token ending at a node, -1 */
  size_t nnodes, capnodes;
  /* added tokens */
  Added *added;
  size_t nadded;
  AddedSet raw, norm;
  TkMap special;     /* contents of special tokens */
  int32_t *added_at; /* id -> index in added, -1; ntotal entries */
  int32_t ntotal;
  TkNorm *normalizer;
  TkPre *pre;
  Post *post;
  TkDec *dec;
  /* the file's truncation and padding (tokenizers' enable_truncation/enable_padding) */
  bool trunc, trunc_left;
  int trunc_strategy; /* TR_* */
  size_t trunc_max, trunc_stride;
  bool pad, pad_fixed, pad_left;
  size_t pad_len, pad_multiple;
  int32_t pad_id;
  /* scratch of one encode */
  TkBuf arena;
  TkPieces pa, pb;
};

/* ================= models ================= */

static void set_token(MmrtTok *t, int32_t id, const char *s, size_t n) {
  if (id >= t->ntok) {
    int32_t old = t->ntok, cap = id + 1;
    t->tok = realloc(t->tok, (size_t)cap * sizeof *t->tok);
    t->tokn = realloc(t->tokn, (size_t)cap * sizeof *t->tokn);
    if (!t->tok || !t->tokn) abort(); /* out of memory */
    for (int32_t i = old; i < cap; i++) t->tok[i] = NULL, t->tokn[i] = 0;
    t->ntok = cap;
  }
  free(t->tok[id]);
  t->tok[id] = malloc(n + 1);
  memcpy(t->tok[id], s, n);
  t->tok[id][n] = 0;
  t->tokn[id] = (uint32_t)n;
}

static bool parse_bpe(TkLd *ld, MmrtTok *t, json_object *m) {
  static const char *const keys[] = {"type",
                                     "dropout",
                                     "unk_token",
                                     "continuing_subword_prefix",
                                     "end_of_word_suffix",
                                     "fuse_unk",
                                     "byte_fallback",
                                     "ignore_merges",
                                     "vocab",
                                     "merges",
                                     NULL};
  json_object *v, *vocab, *merges;
  if (!tk_keys(ld, "model", m, keys)) return false;
  if (!tk_member(ld, "model", m, "dropout", json_type_double, false, &v)) return false;
  if (v && json_object_get_double(v) != 0.0)
    return tk_fail(ld, "model.dropout", "BPE dropout %g is not supported (only null or 0)",
                   json_object_get_double(v));
  if (!tk_bool(ld, "model", m, "fuse_unk", false, &t->fuse_unk) ||
      !tk_bool(ld, "model", m, "byte_fallback", false, &t->byte_fallback) ||
      !tk_bool(ld, "model", m, "ignore_merges", false, &t->ignore_merges))
    return false;
  if (!tk_member(ld, "model", m, "continuing_subword_prefix", json_type_string, false, &v))
    return false;
  if (v) {
    t->prefixn = (size_t)json_object_get_string_len(v);
    t->prefix = strdup(json_object_get_string(v));
  }
  if (!tk_member(ld, "model", m, "end_of_word_suffix", json_type_string, false, &v)) return false;
  if (v) {
    t->suffixn = (size_t)json_object_get_string_len(v);
    t->suffix = strdup(json_object_get_string(v));
  }
  if (!tk_member(ld, "model", m, "vocab", json_type_object, true, &vocab) ||
      !tk_member(ld, "model", m, "merges", json_type_array, true, &merges))
    return false;
  json_object_object_foreach(vocab, k, idv) {
    if (!json_object_is_type(idv, json_type_int) || json_object_get_int64(idv) < 0 ||
        json_object_get_int64(idv) >= MAX_ID)
      return tk_fail(ld, "model.vocab", "the id of \"%s\" is %s, expected an integer in [0, %d)", k,
                     json_object_to_json_string(idv), MAX_ID);
    int32_t id = (int32_t)json_object_get_int64(idv);
    set_token(t, id, k, strlen(k));
    tk_map_put(&t->vocab, k, strlen(k), id);
  }
  t->vocab_len = t->vocab.n;
  t->unk = -1;
  if (!tk_member(ld, "model", m, "unk_token", json_type_string, false, &v)) return false;
  if (v && !tk_map_get(&t->vocab, json_object_get_string(v), (size_t)json_object_get_string_len(v),
                       &t->unk))
    return tk_fail(ld, "model.unk_token", "\"%s\" is not in model.vocab",
                   json_object_get_string(v));
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    if (!tk_map_get(&t->vocab, name, 6, &t->byte_id[b])) t->byte_id[b] = -1;
  }
  size_t nm = json_object_array_length(merges);
  TkBuf joined = {0};
  for (size_t i = 0; i < nm; i++) {
    json_object *e = json_object_array_get_idx(merges, i);
    char path[64];
    snprintf(path, sizeof path, "model.merges[%zu]", i);
    const char *a, *b;
    size_t an, bn;
    char *tmp = NULL;
    if (json_object_is_type(e, json_type_string)) {
      const char *s = json_object_get_string(e);
      const char *sp = strchr(s, ' ');
      if (!sp || strchr(sp + 1, ' '))
        return free(joined.p), tk_fail(ld, path, "\"%s\" is not two tokens split by a space", s);
      tmp = strdup(s);
      a = tmp, an = (size_t)(sp - s), b = tmp + an + 1, bn = strlen(b);
    } else if (json_object_is_type(e, json_type_array) && json_object_array_length(e) == 2 &&
               json_object_is_type(json_object_array_get_idx(e, 0), json_type_string) &&
               json_object_is_type(json_object_array_get_idx(e, 1), json_type_string)) {
      a = json_object_get_string(json_object_array_get_idx(e, 0));
      an = (size_t)json_object_get_string_len(json_object_array_get_idx(e, 0));
      b = json_object_get_string(json_object_array_get_idx(e, 1));
      bn = (size_t)json_object_get_string_len(json_object_array_get_idx(e, 1));
    } else {
      free(joined.p);
      return tk_fail(ld, path, "is %s, expected \"a b\" or [\"a\", \"b\"]", tk_jtype(e));
    }
    int32_t ia, ib, inew;
    bool ok =
        tk_map_get(&t->vocab, a, an, &ia) && tk_map_get(&t->vocab, b, bn, &ib) && bn >= t->prefixn;
    if (ok) {
      joined.n = 0;
      tk_buf_put(&joined, a, an);
      tk_buf_put(&joined, b + t->prefixn, bn - t->prefixn);
      ok = tk_map_get(&t->vocab, joined.p, joined.n, &inew);
    }
    if (!ok) {
      tk_fail(ld, path,
              "a token of the merge \"%.*s\" \"%.*s\" or their merge is not in model.vocab",
              (int)an, a, (int)bn, b);
      free(tmp), free(joined.p);
      return false;
    }
    tk_pmap_put(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, (int32_t)i, inew);
    free(tmp);
  }
  free(joined.p);
  return true;
}

static int32_t trie_child(MmrtTok *t, int32_t node, unsigned char c, bool make) {
  int32_t child, unused;
  if (tk_pmap_get(&t->trie, (uint64_t)node << 8 | c, &child, &unused)) return child;
  if (!make) return -1;
  if (t->nnodes == t->capnodes) {
    t->capnodes = t->capnodes ? t->capnodes * 2 : 1024;
    t->node_tok = realloc(t->node_tok, t->capnodes * sizeof *t->node_tok);
  }
  child = (int32_t)t->nnodes++;
  t->node_tok[child] = -1;
  tk_pmap_put(&t->trie, (uint64_t)node << 8 | c, child, 0);
  return child;
}

/* A JSON number's text read as serde_json reads it without its
 * float_roundtrip feature, which is how `tokenizers` reads Unigram scores:
 * the decimal digits as a u64 significand (digits past its range dropped),
 * then one multiplication or division by a power of ten. That can be one
 * unit in the last place off the nearest double (16-17 digit significands
 * above 2^53), and Viterbi ties between paths of equal pieces follow it. */
static double serde_f64(const char *s) {
  static const uint64_t max10 = UINT64_MAX / 10, maxd = UINT64_MAX % 10;
  bool neg = *s == '-', ovf = false;
  uint64_t sig = 0;
  int64_t exp = 0;
  if (neg) s++;
  for (; *s >= '0' && *s <= '9'; s++) {
    uint64_t d = (uint64_t)(*s - '0');
    if (!ovf && sig >= max10 && (sig > max10 || d > maxd)) ovf = true;
    if (ovf)
      exp++;
    else
      sig = sig * 10 + d;
  }
  if (*s == '.')
    for (s++; *s >= '0' && *s <= '9'; s++) {
      uint64_t d = (uint64_t)(*s - '0');
      if (!ovf && sig >= max10 && (sig > max10 || d > maxd)) ovf = true;
      if (!ovf) sig = sig * 10 + d, exp--;
    }
  if (*s == 'e' || *s == 'E') {
    s++;
    bool eneg = *s == '-';
    if (*s == '-' || *s == '+') s++;
    int64_t e = 0;
    for (; *s >= '0' && *s <= '9' && e < 100000; s++) e = e * 10 + (*s - '0');
    exp += eneg ? -e : e;
  }
  double f = (double)sig;
  for (;;) {
    int64_t a = exp < 0 ? -exp : exp;
    if (a <= 308) {
      double p = 1.0; /* serde's table: 10^a correctly rounded (exact to 1e22) */
      if (a <= 22) {
        for (int64_t i = 0; i < a; i++) p *= 10.0;
      } else {
        char b[8];
        snprintf(b, sizeof b, "1e%d", (int)a);
        p = strtod(b, NULL);
      }
      f = exp >= 0 ? f * p : f / p;
      break;
    }
    if (f == 0.0 || exp >= 0) break; /* serde: 0, or an error (out of range) */
    f /= 1e308;
    exp += 308;
  }
  return neg ? -f : f;
}

static bool parse_unigram(TkLd *ld, MmrtTok *t, json_object *m) {
  static const char *const keys[] = {"type", "unk_id", "byte_fallback", "vocab", NULL};
  json_object *v, *vocab;
  if (!tk_keys(ld, "model", m, keys) ||
      !tk_bool(ld, "model", m, "byte_fallback", false, &t->byte_fallback) ||
      !tk_member(ld, "model", m, "vocab", json_type_array, true, &vocab) ||
      !tk_member(ld, "model", m, "unk_id", json_type_int, false, &v))
    return false;
  size_t n = json_object_array_length(vocab);
  t->unk = -1;
  if (v) {
    int64_t u = json_object_get_int64(v);
    if (u < 0 || (size_t)u >= n)
      return tk_fail(ld, "model.unk_id", "%lld is not an index of model.vocab (%zu pieces)",
                     (long long)u, n);
    t->unk = (int32_t)u;
  }
  t->score = malloc((n + 1) * sizeof *t->score);
  t->min_score = INFINITY;
  t->nnodes = 1, t->capnodes = 1024;
  t->node_tok = malloc(t->capnodes * sizeof *t->node_tok);
  t->node_tok[0] = -1;
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(vocab, i);
    json_object *p = json_object_is_type(e, json_type_array) && json_object_array_length(e) == 2
                         ? json_object_array_get_idx(e, 0)
                         : NULL;
    json_object *s = p ? json_object_array_get_idx(e, 1) : NULL;
    if (!p || !json_object_is_type(p, json_type_string) ||
        !(json_object_is_type(s, json_type_double) || json_object_is_type(s, json_type_int))) {
      char path[64];
      snprintf(path, sizeof path, "model.vocab[%zu]", i);
      return tk_fail(ld, path, "is %s, expected [piece, score]", tk_jtype(e));
    }
    const char *piece = json_object_get_string(p);
    size_t pn = (size_t)json_object_get_string_len(p);
    t->score[i] = json_object_is_type(s, json_type_double) ? serde_f64(json_object_get_string(s))
                                                           : json_object_get_double(s);
    if (t->score[i] < t->min_score) t->min_score = t->score[i];
    set_token(t, (int32_t)i, piece, pn);
    tk_map_put(&t->vocab, piece, pn, (int32_t)i);
    int32_t node = 0;
    for (size_t q = 0; q < pn; q++) node = trie_child(t, node, (unsigned char)piece[q], true);
    if (pn) t->node_tok[node] = (int32_t)i;
  }
  t->vocab_len = n;
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    if (!tk_map_get(&t->vocab, name, 6, &t->byte_id[b])) t->byte_id[b] = -1;
  }
  return true;
}

/* ---- BPE on one word ---- */

typedef struct Sym {
  int32_t id, prev, next;
  uint32_t len;
} Sym;
typedef struct Cand {
  int32_t rank, pos, id;
} Cand;

static bool cand_less(Cand a, Cand b) {
  return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(Cand *h, size_t *n, Cand c) {
  size_t i = (*n)++;
  h[i] = c;
  while (i && cand_less(h[i], h[(i - 1) / 2])) {
    Cand x = h[i];
    h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = x;
    i = (i - 1) / 2;
  }
}

static Cand heap_pop(Cand *h, size_t *n) {
  Cand top = h[0];
  h[0] = h[--*n];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && cand_less(h[l], h[m])) m = l;
    if (r < *n && cand_less(h[r], h[m])) m = r;
    if (m == i) break;
    Cand x = h[i];
    h[i] = h[m], h[m] = x;
    i = m;
  }
  return top;
}

static bool merge_of(const MmrtTok *t, int32_t a, int32_t b, int32_t *rank, int32_t *id) {
  return tk_pmap_get(&t->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, rank, id);
}

static void bpe_word(MmrtTok *t, const char *w, size_t n, MmrtTokIds *out) {
  Sym *sym = malloc((n + 1) * sizeof *sym);
  size_t ns = 0;
  int32_t unk_id = -1;
  uint32_t unk_len = 0;
  TkBuf s = {0};
#define ADD_SYM(ID, LEN) (sym[ns] = (Sym){(ID), (int32_t)ns - 1, (int32_t)ns + 1, (LEN)}, ns++)
  for (size_t i = 0; i < n;) {
    uint32_t uc;
    size_t k = (size_t)tk_utf8(w + i, n - i, &uc);
    s.n = 0;
    if (i > 0 && t->prefix) tk_buf_put(&s, t->prefix, t->prefixn);
    tk_buf_put(&s, w + i, k);
    if (i + k == n && t->suffix) tk_buf_put(&s, t->suffix, t->suffixn);
    int32_t id;
    if (tk_map_get(&t->vocab, s.p, s.n, &id)) {
      if (unk_id >= 0) ADD_SYM(unk_id, unk_len), unk_id = -1;
      ADD_SYM(id, (uint32_t)k);
    } else {
      bool bytes = t->byte_fallback;
      for (size_t q = 0; q < s.n && bytes; q++) bytes = t->byte_id[(unsigned char)s.p[q]] >= 0;
      if (bytes) {
        if (ns + s.n > n + 1) sym = realloc(sym, (ns + s.n + n + 1) * sizeof *sym);
        for (size_t q = 0; q < s.n; q++) ADD_SYM(t->byte_id[(unsigned char)s.p[q]], 1);
      } else if (t->unk >= 0) {
        if (unk_id >= 0 && t->fuse_unk)
          unk_len += (uint32_t)k;
        else {
          if (unk_id >= 0) ADD_SYM(unk_id, unk_len);
          unk_id = t->unk, unk_len = (uint32_t)k;
        }
      }
    }
    i += k;
  }
  if (unk_id >= 0) ADD_SYM(unk_id, unk_len);
#undef ADD_SYM
  free(s.p);
  if (ns) sym[ns - 1].next = -1;
  Cand *heap = malloc((2 * ns + 2) * sizeof *heap);
  size_t nh = 0, caph = 2 * ns + 2;
  for (size_t i = 0; i + 1 < ns; i++) {
    int32_t rank, id;
    if (merge_of(t, sym[i].id, sym[i + 1].id, &rank, &id))
      heap_push(heap, &nh, (Cand){rank, (int32_t)i, id});
  }
  while (nh) {
    Cand top = heap_pop(heap, &nh);
    Sym *c = &sym[top.pos];
    if (c->len == 0 || c->next < 0) continue;
    Sym right = sym[c->next];
    int32_t rank, id;
    if (!merge_of(t, c->id, right.id, &rank, &id) || id != top.id) continue; /* stale */
    sym[c->next].len = 0;
    c->id = top.id, c->len += right.len, c->next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (nh + 2 > caph) caph *= 2, heap = realloc(heap, caph * sizeof *heap);
    if (c->prev >= 0 && merge_of(t, sym[c->prev].id, c->id, &rank, &id))
      heap_push(heap, &nh, (Cand){rank, c->prev, id});
    if (c->next >= 0 && merge_of(t, c->id, sym[c->next].id, &rank, &id))
      heap_push(heap, &nh, (Cand){rank, top.pos, id});
  }
  for (size_t i = 0; i < ns; i++)
    if (sym[i].len) tk_ids_push(out, sym[i].id);
  free(heap), free(sym);
}

static void bpe(MmrtTok *t, const char *w, size_t n, MmrtTokIds *out) {
  int32_t v;
  if (n == 0) return;
  if (t->ignore_merges && tk_map_get(&t->vocab, w, n, &v)) {
    tk_ids_push(out, v);
    return;
  }
  if (n < CACHE_MAX_LEN && tk_map_get(&t->cache, w, n, &v)) {
    for (int32_t i = 0; i < t->cache_ids.v[v]; i++) tk_ids_push(out, t->cache_ids.v[v + 1 + i]);
    return;
  }
  size_t from = out->n;
  bpe_word(t, w, n, out);
  if (n < CACHE_MAX_LEN && t->cache.n < CACHE_WORDS) {
    int32_t at = (int32_t)t->cache_ids.n;
    tk_ids_push(&t->cache_ids, (int32_t)(out->n - from));
    for (size_t i = from; i < out->n; i++) tk_ids_push(&t->cache_ids, out->v[i]);
    tk_map_put(&t->cache, w, n, at);
  }
}

/* ---- Unigram on one piece ---- */

typedef struct Node {
  double score;
  int32_t from, id; /* from: start of the best token ending here, -1: unreached */
} Node;

static bool unigram(MmrtTok *t, const char *s, size_t n, MmrtTokIds *out, char *err,
                    size_t errlen) {
  if (n == 0) return true;
  Node *best = malloc((n + 1) * sizeof *best);
  for (size_t i = 0; i <= n; i++) best[i] = (Node){0.0, -1, -1};
  double unk_score = t->min_score - 10.0;
  for (size_t at = 0; at < n;) {
    uint32_t uc;
    size_t mb = (size_t)tk_utf8(s + at, n - at, &uc);
    double here = best[at].score;
    bool single = false;
    int32_t node = 0;
    for (size_t q = at; q < n; q++) {
      node = trie_child(t, node, (unsigned char)s[q], false);
      if (node < 0) break;
      int32_t id = t->node_tok[node];
      if (id < 0) continue;
      Node *tg = &best[q + 1];
      double cand = t->score[id] + here;
      if (tg->from < 0 || cand > tg->score) *tg = (Node){cand, (int32_t)at, id};
      if (q + 1 - at == mb) single = true;
    }
    if (!single) {
      if (t->unk < 0) {
        free(best);
        snprintf(err, errlen, "Unigram: \"%.*s\" has no piece and the model has no unk_id", (int)mb,
                 s + at);
        return false;
      }
      Node *tg = &best[at + mb];
      double cand = unk_score + here;
      if (tg->from < 0 || cand > tg->score) *tg = (Node){cand, (int32_t)at, t->unk};
    }
    at += mb;
  }
  /* Back from the end to the token boundaries; runs of unknowns fused. */
  size_t *cut = malloc((n + 2) * sizeof *cut), nc = 0; /* token ends, right to left */
  for (size_t end = n; end > 0; end = (size_t)best[end].from) cut[nc++] = end;
  size_t start = 0;
  for (size_t k = nc; k-- > 0;) {
    size_t stop = cut[k];
    if (t->unk >= 0 && best[stop].id == t->unk)
      while (k > 0 && best[cut[k - 1]].id == t->unk) stop = cut[--k];
    int32_t id;
    if (!tk_map_get(&t->vocab, s + start, stop - start, &id)) {
      bool bytes = t->byte_fallback;
      for (size_t q = start; q < stop && bytes; q++) bytes = t->byte_id[(unsigned char)s[q]] >= 0;
      if (bytes) {
        for (size_t q = start; q < stop; q++) tk_ids_push(out, t->byte_id[(unsigned char)s[q]]);
        start = stop;
        continue;
      }
      id = t->unk;
    }
    tk_ids_push(out, id);
    start = stop;
  }
  free(cut), free(best);
  return true;
}

/* ================= added tokens ================= */

static bool ends_with_word(const char *s, size_t n) {
  if (!n) return false;
  size_t j = n - 1;
  while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
  uint32_t uc;
  tk_utf8(s + j, n - j, &uc);
  return tk_is_word(uc);
}

static bool starts_with_word(const char *s, size_t n) {
  uint32_t uc;
  return n && (tk_utf8(s, n, &uc), tk_is_word(uc));
}

/* `tokenizers`' find_matches: leftmost-longest added tokens in s[0..n),
 * each widened by lstrip/rstrip, skipped when single_word fails. */
static void split_added(MmrtTok *t, AddedSet *set, TkPiece pc, TkPieces *out) {
  if (!set->any || pc.token >= 0) {
    if (pc.len || pc.token >= 0) tk_pieces_push(out, pc);
    return;
  }
  size_t start_off = 0, n = pc.len;
  for (size_t i = 0; i < n;) {
    const char *s = t->arena.p + pc.off;
    int32_t *cands = set->by_first[(unsigned char)s[i]];
    int32_t best = -1;
    for (size_t c = 0; cands && cands[c] >= 0; c++) {
      Added *a = &t->added[cands[c]];
      if (a->pn <= n - i && memcmp(s + i, a->pattern, a->pn) == 0 &&
          (best < 0 || a->pn > t->added[best].pn))
        best = cands[c];
    }
    if (best < 0) {
      i++;
      continue;
    }
    Added *a = &t->added[best];
    size_t start = i, stop = i + a->pn;
    i = stop;
    if (a->single_word && ((start > 0 && ends_with_word(s, start)) ||
                           (stop < n && starts_with_word(s + stop, n - stop))))
      continue;
    if (a->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t j = ns - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        uint32_t uc;
        tk_utf8(s + j, ns - j, &uc);
        if (!tk_is_space(uc)) break;
        ns = j;
      }
      start = ns > start_off ? ns : start_off;
    }
    if (a->rstrip)
      while (stop < n) {
        uint32_t uc;
        int k = tk_utf8(s + stop, n - stop, &uc);
        if (!tk_is_space(uc)) break;
        stop += (size_t)k;
      }
    if (start_off < start)
      tk_pieces_push(
          out, (TkPiece){pc.off + start_off, start - start_off, -1, pc.at_start && start_off == 0});
    tk_pieces_push(out, (TkPiece){pc.off + start, stop - start, a->id, false});
    start_off = stop;
  }
  if (start_off < n)
    tk_pieces_push(out,
                   (TkPiece){pc.off + start_off, n - start_off, -1, pc.at_start && start_off == 0});
}

static void set_add(AddedSet *set, const Added *a, int32_t idx) {
  if (!a->pn) return;
  int32_t **b = &set->by_first[(unsigned char)a->pattern[0]];
  size_t k = 0;
  while (*b && (*b)[k] >= 0) k++;
  *b = realloc(*b, (k + 2) * sizeof **b);
  (*b)[k] = idx, (*b)[k + 1] = -1;
  set->any = true;
}

static bool parse_added(TkLd *ld, MmrtTok *t, json_object *arr) {
  static const char *const keys[] = {"id",     "content",    "single_word", "lstrip",
                                     "rstrip", "normalized", "special",     NULL};
  size_t n = json_object_array_length(arr);
  t->added = calloc(n + 1, sizeof *t->added);
  /* the next new id, as AddedVocabulary::add_tokens counts it */
  int32_t next = (int32_t)t->vocab_len;
  for (size_t i = 0; i < n; i++) {
    char path[64];
    snprintf(path, sizeof path, "added_tokens[%zu]", i);
    json_object *e = json_object_array_get_idx(arr, i), *idv, *cv;
    if (!json_object_is_type(e, json_type_object))
      return tk_fail(ld, path, "is %s, expected an object", tk_jtype(e));
    Added a = {0};
    if (!tk_keys(ld, path, e, keys) || !tk_member(ld, path, e, "id", json_type_int, true, &idv) ||
        !tk_member(ld, path, e, "content", json_type_string, true, &cv) ||
        !tk_bool(ld, path, e, "special", false, &a.special) ||
        !tk_bool(ld, path, e, "single_word", false, &a.single_word) ||
        !tk_bool(ld, path, e, "lstrip", false, &a.lstrip) ||
        !tk_bool(ld, path, e, "rstrip", false, &a.rstrip) ||
        !tk_bool(ld, path, e, "normalized", !a.special, &a.normalized))
      return false;
    a.n = (size_t)json_object_get_string_len(cv);
    if (!a.n) continue; /* ignored by tokenizers too */
    a.content = malloc(a.n + 1);
    memcpy(a.content, json_object_get_string(cv), a.n + 1);
    int32_t id, file_id = (int32_t)json_object_get_int64(idv);
    bool seen = false;
    for (size_t j = 0; j < t->nadded && !seen; j++)
      if (t->added[j].n == a.n && memcmp(t->added[j].content, a.content, a.n) == 0)
        seen = true, id = t->added[j].id;
    if (!seen && !tk_map_get(&t->vocab, a.content, a.n, &id)) id = next++;
    if (id != file_id) {
      free(a.content);
      return tk_fail(ld, path,
                     "id %d, but tokenizers gives \"%s\" id %d (added tokens must follow the "
                     "model's vocabulary in order)",
                     (int)file_id, json_object_get_string(cv), (int)id);
    }
    if (id >= next) next = id + 1;
    a.id = id;
    if (a.special) tk_map_put(&t->special, a.content, a.n, 1);
    t->added[t->nadded++] = a;
  }
  return true;
}

/* Patterns (normalized contents) and the two sets, once the normalizer is known. */
static void build_added(MmrtTok *t) {
  int32_t maxid = t->ntok - 1;
  for (size_t i = 0; i < t->nadded; i++) {
    Added *a = &t->added[i];
    TkBuf b = {0};
    bool strip = false;
    if (a->normalized && t->normalizer)
      tk_norm_apply(t->normalizer, a->content, a->n, &b, &strip);
    else
      tk_buf_put(&b, a->content, a->n);
    a->pattern = b.p, a->pn = b.n;
    set_add(a->normalized ? &t->norm : &t->raw, a, (int32_t)i);
    if (a->id > maxid) maxid = a->id;
  }
  t->ntotal = maxid + 1;
  t->added_at = malloc(((size_t)t->ntotal + 1) * sizeof *t->added_at);
  for (int32_t i = 0; i < t->ntotal; i++) t->added_at[i] = -1;
  for (size_t i = 0; i < t->nadded; i++) t->added_at[t->added[i].id] = (int32_t)i;
}

/* ================= post-processors ================= */

static void post_free(Post *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nsubs; i++) post_free(p->subs[i]);
  free(p->subs), free(p->items), free(p);
}

static void items_push(Post *p, int32_t v) {
  p->items = realloc(p->items, (p->nitems + 1) * sizeof *p->items);
  p->items[p->nitems++] = v;
}

/* ["<s>", 1]: a RobertaProcessing / BertProcessing cls or sep */
static bool pair_id(TkLd *ld, const char *path, json_object *o, const char *key, Post *p) {
  json_object *v;
  if (!tk_member(ld, path, o, key, json_type_array, true, &v)) return false;
  json_object *id = json_object_array_length(v) == 2 ? json_object_array_get_idx(v, 1) : NULL;
  if (!id || !json_object_is_type(id, json_type_int))
    return tk_fail(ld, path, "'%s' is not [token, id]", key);
  items_push(p, (int32_t)json_object_get_int64(id));
  return true;
}

static bool parse_post(TkLd *ld, const char *path, json_object *o, Post **out) {
  json_object *tv, *v;
  if (!json_object_is_type(o, json_type_object))
    return tk_fail(ld, path, "expected an object, got %s", tk_jtype(o));
  if (!tk_member(ld, path, o, "type", json_type_string, true, &tv)) return false;
  const char *type = json_object_get_string(tv);
  Post *p = calloc(1, sizeof *p);
  *out = p;
  char sub[256];
  if (strcmp(type, "ByteLevel") == 0) { /* offsets only */
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    p->kind = PP_BYTE;
    return tk_keys(ld, path, o, keys);
  }
  if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
    static const char *const keys[] = {"type", "sep", "cls", "trim_offsets", "add_prefix_space",
                                       NULL};
    p->kind = PP_CLS_SEP;
    if (!tk_keys(ld, path, o, keys) || !pair_id(ld, path, o, "cls", p)) return false;
    items_push(p, SEQ_SLOT);
    return pair_id(ld, path, o, "sep", p);
  }
  if (strcmp(type, "Sequence") == 0) {
    p->kind = PP_SEQ;
    if (!(p->subs = tk_seq(ld, path, o, "processors", sizeof *p->subs, &v, &p->nsubs)))
      return false;
    for (size_t i = 0; i < p->nsubs; i++)
      if (!parse_post(ld, tk_seq_path(sub, sizeof sub, path, "processors", i),
                      json_object_array_get_idx(v, i), &p->subs[i]))
        return false;
    return true;
  }
  if (strcmp(type, "TemplateProcessing") == 0) {
    static const char *const keys[] = {"type", "single", "pair", "special_tokens", NULL};
    json_object *single, *specials;
    p->kind = PP_TEMPLATE;
    if (!tk_keys(ld, path, o, keys) ||
        !tk_member(ld, path, o, "single", json_type_array, true, &single) ||
        !tk_member(ld, path, o, "special_tokens", json_type_object, true, &specials))
      return false;
    for (size_t i = 0; i < json_object_array_length(single); i++) {
      json_object *e = json_object_array_get_idx(single, i), *x, *idv;
      snprintf(sub, sizeof sub, "%s.single[%zu]", path, i);
      if (json_object_object_get_ex(e, "Sequence", &x)) {
        if (!tk_member(ld, sub, x, "id", json_type_string, true, &idv)) return false;
        if (strcmp(json_object_get_string(idv), "A") != 0)
          return tk_fail(ld, sub, "Sequence '%s' in a single template (only A)",
                         json_object_get_string(idv));
        items_push(p, SEQ_SLOT);
      } else if (json_object_object_get_ex(e, "SpecialToken", &x)) {
        json_object *st, *ids;
        if (!tk_member(ld, sub, x, "id", json_type_string, true, &idv)) return false;
        if (!json_object_object_get_ex(specials, json_object_get_string(idv), &st))
          return tk_fail(ld, sub, "special token '%s' is not in special_tokens",
                         json_object_get_string(idv));
        snprintf(sub, sizeof sub, "%s.special_tokens.%s", path, json_object_get_string(idv));
        if (!tk_member(ld, sub, st, "ids", json_type_array, true, &ids)) return false;
        for (size_t k = 0; k < json_object_array_length(ids); k++)
          items_push(p, (int32_t)json_object_get_int64(json_object_array_get_idx(ids, k)));
      } else {
        return tk_fail(ld, sub, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    return true;
  }
  return tk_fail(ld, path,
                 "post-processor type '%s' is not supported (supported: TemplateProcessing, "
                 "ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
                 type);
}

static void post_apply(const Post *p, MmrtTokIds *ids, size_t from) {
  if (p->kind == PP_SEQ) {
    for (size_t i = 0; i < p->nsubs; i++) post_apply(p->subs[i], ids, from);
    return;
  }
  if (p->kind == PP_BYTE) return;
  size_t n = ids->n - from;
  int32_t *seq = malloc((n + 1) * sizeof *seq);
  if (n) memcpy(seq, ids->v + from, n * sizeof *seq); /* ids->v is NULL before the first id */
  ids->n = from;
  for (size_t i = 0; i < p->nitems; i++)
    if (p->items[i] == SEQ_SLOT)
      for (size_t k = 0; k < n; k++) tk_ids_push(ids, seq[k]);
    else
      tk_ids_push(ids, p->items[i]);
  free(seq);
}

/* ================= truncation and padding ================= */

/* A member that is an integer in [0, max]; missing: dflt unless required. */
static bool count_member(TkLd *ld, const char *path, json_object *o, const char *key, bool required,
                         int64_t max, size_t dflt, size_t *out) {
  json_object *v;
  if (!tk_member(ld, path, o, key, json_type_int, required, &v)) return false;
  *out = dflt;
  if (!v) return true;
  int64_t x = json_object_get_int64(v);
  if (x < 0 || x > max)
    return tk_fail(ld, path, "'%s' is %lld, expected an integer in [0, %lld]", key, (long long)x,
                   (long long)max);
  *out = (size_t)x;
  return true;
}

/* "Left" or "Right" (default Right); *left */
static bool direction_member(TkLd *ld, const char *path, json_object *o, bool *left) {
  json_object *v;
  if (!tk_member(ld, path, o, "direction", json_type_string, false, &v)) return false;
  const char *d = v ? json_object_get_string(v) : "Right";
  *left = strcmp(d, "Left") == 0;
  if (!*left && strcmp(d, "Right") != 0)
    return tk_fail(ld, path, "direction '%s' is not Left or Right", d);
  return true;
}

static bool parse_truncation(TkLd *ld, MmrtTok *t, json_object *o) {
  static const char *const keys[] = {"direction", "max_length", "strategy", "stride", NULL};
  json_object *v;
  if (!json_object_is_type(o, json_type_object))
    return tk_fail(ld, "truncation", "is %s, expected an object or null", tk_jtype(o));
  if (!tk_keys(ld, "truncation", o, keys) ||
      !count_member(ld, "truncation", o, "max_length", true, INT64_MAX, 0, &t->trunc_max) ||
      !count_member(ld, "truncation", o, "stride", true, INT64_MAX, 0, &t->trunc_stride) ||
      !direction_member(ld, "truncation", o, &t->trunc_left) ||
      !tk_member(ld, "truncation", o, "strategy", json_type_string, true, &v))
    return false;
  const char *s = json_object_get_string(v);
  if (strcmp(s, "LongestFirst") == 0)
    t->trunc_strategy = TR_LONGEST_FIRST;
  else if (strcmp(s, "OnlyFirst") == 0)
    t->trunc_strategy = TR_ONLY_FIRST;
  else if (strcmp(s, "OnlySecond") == 0)
    t->trunc_strategy = TR_ONLY_SECOND;
  else
    return tk_fail(ld, "truncation.strategy", "'%s' is not LongestFirst, OnlyFirst or OnlySecond",
                   s);
  t->trunc = true;
  return true;
}

static bool parse_padding(TkLd *ld, MmrtTok *t, json_object *o) {
  static const char *const keys[] = {
      "strategy", "direction", "pad_to_multiple_of", "pad_id", "pad_type_id", "pad_token", NULL};
  json_object *v, *fixed;
  size_t id, type_id;
  if (!json_object_is_type(o, json_type_object))
    return tk_fail(ld, "padding", "is %s, expected an object or null", tk_jtype(o));
  if (!tk_keys(ld, "padding", o, keys) || !direction_member(ld, "padding", o, &t->pad_left) ||
      !count_member(ld, "padding", o, "pad_to_multiple_of", false, MAX_ID, 0, &t->pad_multiple) ||
      !count_member(ld, "padding", o, "pad_id", false, UINT32_MAX, 0, &id) ||
      !count_member(ld, "padding", o, "pad_type_id", false, UINT32_MAX, 0, &type_id) ||
      !tk_member(ld, "padding", o, "pad_token", json_type_string, false, &v))
    return false;
  if (id > INT32_MAX) return tk_fail(ld, "padding.pad_id", "%zu does not fit a token id", id);
  t->pad_id = (int32_t)id;
  if (!json_object_object_get_ex(o, "strategy", &v) || !v)
    return tk_fail(ld, "padding", "field 'strategy' is missing");
  if (json_object_is_type(v, json_type_string) &&
      strcmp(json_object_get_string(v), "BatchLongest") == 0) {
    t->pad_fixed = false;
  } else if (json_object_is_type(v, json_type_object) && json_object_object_length(v) == 1 &&
             json_object_object_get_ex(v, "Fixed", &fixed)) {
    t->pad_fixed = true;
    if (!count_member(ld, "padding.strategy", v, "Fixed", true, MAX_ID, 0, &t->pad_len))
      return false;
  } else {
    return tk_fail(ld, "padding.strategy", "is %s, expected \"BatchLongest\" or {\"Fixed\": N}",
                   json_object_to_json_string(v));
  }
  t->pad = true;
  return true;
}

/* The special tokens the post-processor adds to a single sequence
 * (tokenizers' PostProcessor::added_tokens(false)). */
static size_t post_added(const Post *p) {
  size_t n = 0;
  if (!p) return 0;
  for (size_t i = 0; i < p->nsubs; i++) n += post_added(p->subs[i]);
  for (size_t i = 0; i < p->nitems; i++) n += p->items[i] != SEQ_SLOT;
  return n;
}

/* tokenizers' truncate_encodings for one sequence, before the post-processor:
 * ids[from..) cut to the max length less the tokens the post-processor will
 * add (a max length below that count wraps around in tokenizers' unsigned
 * subtraction and so does not truncate; reproduced). The stride only shapes
 * tokenizers' overflowing pieces, which are not returned here; its check is. */
static bool truncate_ids(const MmrtTok *t, MmrtTokIds *ids, size_t from, bool add_special,
                         char *err, size_t errlen) {
  size_t n = ids->n - from, max = t->trunc_max, extra = add_special ? post_added(t->post) : 0;
  if (extra) {
    if (max < extra) return true;
    max -= extra;
  }
  if (n <= max) return true;
  if (max > 0 && t->trunc_strategy == TR_ONLY_SECOND) {
    snprintf(err, errlen,
             "truncation: strategy OnlySecond needs a second sequence (%zu tokens, max_length "
             "%zu)",
             n, t->trunc_max);
    return false;
  }
  if (max > 0 && t->trunc_stride >= max) {
    snprintf(err, errlen,
             "truncation: stride %zu must be less than the length %zu it truncates to "
             "(max_length %zu less %zu special tokens)",
             t->trunc_stride, max, t->trunc_max, extra);
    return false;
  }
  if (t->trunc_left) memmove(ids->v + from, ids->v + from + (n - max), max * sizeof *ids->v);
  ids->n = from + max;
  return true;
}

/* tokenizers' pad_encodings on a batch of one sequence */
static void pad_ids(const MmrtTok *t, MmrtTokIds *ids, size_t from) {
  size_t n = ids->n - from, len = t->pad_fixed ? t->pad_len : n;
  if (t->pad_multiple > 0 && len % t->pad_multiple) len += t->pad_multiple - len % t->pad_multiple;
  if (n >= len) return;
  for (size_t i = n; i < len; i++) tk_ids_push(ids, t->pad_id);
  if (t->pad_left) {
    memmove(ids->v + from + (len - n), ids->v + from, n * sizeof *ids->v);
    for (size_t i = 0; i < len - n; i++) ids->v[from + i] = t->pad_id;
  }
}

/* ================= load, encode, decode ================= */

void mmrt_tok_free(MmrtTok *t) {
  if (!t) return;
  tk_map_free(&t->vocab);
  for (int32_t i = 0; i < t->ntok; i++) free(t->tok[i]);
  free(t->tok), free(t->tokn);
  tk_pmap_free(&t->merges);
  free(t->prefix), free(t->suffix);
  tk_map_free(&t->cache);
  free(t->cache_ids.v);
  free(t->score);
  tk_pmap_free(&t->trie);
  free(t->node_tok);
  for (size_t i = 0; i < t->nadded; i++) free(t->added[i].content), free(t->added[i].pattern);
  free(t->added);
  for (int b = 0; b < 256; b++) free(t->raw.by_first[b]), free(t->norm.by_first[b]);
  tk_map_free(&t->special);
  free(t->added_at);
  tk_norm_free(t->normalizer);
  tk_pre_free(t->pre);
  post_free(t->post);
  tk_dec_free(t->dec);
  free(t->arena.p), free(t->pa.v), free(t->pb.v);
  free(t);
}

static bool load_json(TkLd *ld, json_object *root, MmrtTok *t) {
  static const char *const keys[] = {
      "version",       "truncation",     "padding", "added_tokens", "normalizer",
      "pre_tokenizer", "post_processor", "decoder", "model",        NULL};
  json_object *v, *m;
  if (!json_object_is_type(root, json_type_object))
    return tk_fail(ld, "(top)", "is %s, expected an object", tk_jtype(root));
  if (!tk_keys(ld, "(top)", root, keys)) return false;
  if (!tk_member(ld, "(top)", root, "version", json_type_string, false, &v)) return false;
  if (v && strcmp(json_object_get_string(v), "1.0") != 0)
    return tk_fail(ld, "version", "'%s' is not 1.0", json_object_get_string(v));
  if (json_object_object_get_ex(root, "truncation", &v) && v && !parse_truncation(ld, t, v))
    return false;
  if (json_object_object_get_ex(root, "padding", &v) && v && !parse_padding(ld, t, v)) return false;
  if (!tk_member(ld, "(top)", root, "model", json_type_object, true, &m) ||
      !tk_member(ld, "model", m, "type", json_type_string, false, &v))
    return false;
  const char *mt = v ? json_object_get_string(v) : "BPE"; /* tokenizers guesses; BPE is the usual */
  if (strcmp(mt, "BPE") == 0) {
    t->model = M_BPE;
    if (!parse_bpe(ld, t, m)) return false;
  } else if (strcmp(mt, "Unigram") == 0) {
    t->model = M_UNIGRAM;
    if (!parse_unigram(ld, t, m)) return false;
  } else {
    return tk_fail(ld, "model.type", "model '%s' is not supported (supported: BPE, Unigram)", mt);
  }
  if (!tk_member(ld, "(top)", root, "added_tokens", json_type_array, false, &v)) return false;
  if (v && !parse_added(ld, t, v)) return false;
  if (json_object_object_get_ex(root, "normalizer", &v) && v &&
      !tk_norm_parse(ld, "normalizer", v, &t->normalizer))
    return false;
  if (json_object_object_get_ex(root, "pre_tokenizer", &v) && v &&
      !tk_pre_parse(ld, "pre_tokenizer", v, &t->pre))
    return false;
  if (json_object_object_get_ex(root, "post_processor", &v) && v &&
      !parse_post(ld, "post_processor", v, &t->post))
    return false;
  if (json_object_object_get_ex(root, "decoder", &v) && v &&
      !tk_dec_parse(ld, "decoder", v, &t->dec))
    return false;
  build_added(t);
  return true;
}

MmrtTok *mmrt_tok_load(const char *path, char *err, size_t errlen) {
  TkLd ld = {path, err, errlen};
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open the file", path);
    return NULL;
  }
  TkBuf b = {0};
  char chunk[1 << 16];
  size_t k;
  while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) tk_buf_put(&b, chunk, k);
  bool rerr = ferror(f);
  fclose(f);
  if (rerr || !b.n) {
    snprintf(err, errlen, "%s: %s", path, rerr ? "read error" : "the file is empty");
    free(b.p);
    return NULL;
  }
  json_tokener *tok = json_tokener_new();
  json_object *root = json_tokener_parse_ex(tok, b.p, (int)b.n);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  if (!root || jerr != json_tokener_success) {
    size_t line = 1;
    for (size_t i = 0; i < end && i < b.n; i++) line += b.p[i] == '\n';
    snprintf(err, errlen, "%s:%zu: not valid JSON: %s", path, line,
             json_tokener_error_desc(jerr == json_tokener_success ? json_tokener_continue : jerr));
    json_object_put(root);
    free(b.p);
    return NULL;
  }
  free(b.p);
  MmrtTok *t = calloc(1, sizeof *t);
  bool ok = load_json(&ld, root, t);
  json_object_put(root);
  if (!ok) {
    mmrt_tok_free(t);
    return NULL;
  }
  return t;
}

int32_t mmrt_tok_vocab_size(const MmrtTok *t) {
  return t->ntotal;
}

bool tk_added_id(const MmrtTok *t, const char *s, size_t n, int32_t *id) {
  for (size_t i = 0; i < t->nadded; i++)
    if (t->added[i].n == n && memcmp(t->added[i].content, s, n) == 0) {
      *id = t->added[i].id;
      return true;
    }
  return false;
}

size_t mmrt_tok_max_length(const MmrtTok *t) {
  return t->trunc ? t->trunc_max : 0;
}

int32_t mmrt_tok_pad_id(const MmrtTok *t) {
  return t->pad ? t->pad_id : -1;
}

bool mmrt_tok_encode(MmrtTok *t, const char *text, size_t len, bool add_special, MmrtTokIds *out,
                     char *err, size_t errlen) {
  return mmrt_tok_encode_opts(t, text, len, add_special ? MMRT_TOK_ADD_SPECIAL : 0, out, err,
                              errlen);
}

bool mmrt_tok_encode_opts(MmrtTok *t, const char *text, size_t len, unsigned flags, MmrtTokIds *out,
                          char *err, size_t errlen) {
  bool add_special = flags & MMRT_TOK_ADD_SPECIAL;
  const uint8_t *bad = u8_check((const uint8_t *)text, len);
  if (bad) {
    snprintf(err, errlen, "invalid UTF-8 at byte %zu (0x%02x)",
             (size_t)(bad - (const uint8_t *)text), *bad);
    return false;
  }
  TkBuf *ar = &t->arena;
  ar->n = 0;
  tk_buf_put(ar, text, len);
  TkPieces *a = &t->pa, *b = &t->pb;
  a->n = b->n = 0;
  split_added(t, &t->raw, (TkPiece){0, len, -1, true}, a);
  for (size_t i = 0; i < a->n; i++) { /* normalize what is not an added token, then split */
    TkPiece pc = a->v[i];
    if (pc.token < 0 && t->normalizer) {
      size_t off = ar->n;
      bool strip = false;
      tk_buf_put(ar, "", 0);
      TkBuf tmp = {0};
      tk_norm_apply(t->normalizer, ar->p + pc.off, pc.len, &tmp, &strip);
      tk_buf_put(ar, tmp.p, tmp.n);
      free(tmp.p);
      pc = (TkPiece){off, ar->n - off, -1, pc.at_start && !strip};
    }
    split_added(t, &t->norm, pc, b);
  }
  a->n = 0;
  if (t->pre)
    tk_pre_apply(t->pre, ar, b, a);
  else
    for (size_t i = 0; i < b->n; i++) tk_pieces_push(a, b->v[i]);
  size_t from = out->n;
  for (size_t i = 0; i < a->n; i++) {
    TkPiece pc = a->v[i];
    if (pc.token >= 0)
      tk_ids_push(out, pc.token);
    else if (t->model == M_BPE)
      bpe(t, ar->p + pc.off, pc.len, out);
    else if (!unigram(t, ar->p + pc.off, pc.len, out, err, errlen))
      return false;
  }
  if ((flags & MMRT_TOK_TRUNCATE) && t->trunc &&
      !truncate_ids(t, out, from, add_special, err, errlen)) {
    out->n = from;
    return false;
  }
  if (add_special && t->post) post_apply(t->post, out, from);
  if ((flags & MMRT_TOK_PAD) && t->pad) pad_ids(t, out, from);
  return true;
}

bool mmrt_tok_decode(const MmrtTok *t, const int32_t *ids, size_t n, bool skip_special,
                     MmrtTokText *out, char *err, size_t errlen) {
  TkToks toks = {0};
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    const char *s = NULL;
    size_t sn = 0;
    if (id >= 0 && id < t->ntotal && t->added_at[id] >= 0) {
      const Added *a = &t->added[t->added_at[id]];
      s = a->pattern, sn = a->pn; /* the normalized content, as tokenizers decodes it */
    } else if (id >= 0 && id < t->ntok && t->tok[id]) {
      s = t->tok[id], sn = t->tokn[id];
    } else {
      snprintf(err, errlen, "id %d is not a token of this tokenizer (ids 0..%d)", (int)id,
               (int)t->ntotal - 1);
      tk_toks_free(&toks);
      return false;
    }
    int32_t dummy;
    if (skip_special && tk_map_get(&t->special, s, sn, &dummy)) continue;
    tk_toks_push(&toks, s, sn);
  }
  TkBuf o = {out->p, out->n, out->cap};
  if (t->dec) {
    tk_dec_apply(t->dec, &toks);
    for (size_t i = 0; i < toks.n; i++) tk_buf_put(&o, toks.v[i].p, toks.v[i].n);
  } else {
    for (size_t i = 0; i < toks.n; i++) {
      if (i) tk_buf_putc(&o, ' ');
      tk_buf_put(&o, toks.v[i].p, toks.v[i].n);
    }
  }
  out->p = o.p, out->n = o.n, out->cap = o.cap;
  tk_toks_free(&toks);
  return true;
}
