/* mmrt_loader.c: the text loader (see mmrt_loader.h). */
#include "mmrt_loader.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_indexed.h"
#include "mmrt_jsonl.h"
#include "mmrt_tok.h"

#define MAX_SOURCES 64

typedef struct Piece {
  uint64_t doc;
  uint32_t len; /* tokens taken (the document's, or T when truncated) */
} Piece;

typedef struct Source {
  char *path;
  double weight;
  int indexed;
  MmrtIndexed idx;
  /* JSONL: the tokens of every document back to back, a loss mask per token
   * (chat only), and where each document starts */
  MmrtTokIds tok;
  MmrtTokMask mask;
  int chat;
  uint64_t *doc_off;
  size_t ndoc, doc_cap;
  /* the rows: pieces [row_first[r], row_first[r + 1]) */
  Piece *pieces;
  size_t npieces;
  uint64_t *row_first;
  int64_t nrows;
  int64_t used; /* tokens in the rows */
} Source;

struct MmrtLoader {
  Source src[MAX_SOURCES];
  int nsrc;
  int64_t T, N;
  int32_t ignore;
  int packed;
  uint8_t *bsrc; /* (N) source of blended sample i (NULL: one source) */
  int64_t *brow; /* (N) its row */
  int64_t skipped, dropped, docs;
};

static int say(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* "0.7:" at the head of s: the weight, and the path after it. */
static int weight_prefix(const char *s, double *w, const char **rest) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != ':' || errno) return 0;
  *w = v, *rest = end + 1;
  return 1;
}

static int exists_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_prefix(const char *p) {
  char b[4200];
  snprintf(b, sizeof b, "%s.idx", p);
  if (!exists_file(b)) return 0;
  snprintf(b, sizeof b, "%s.bin", p);
  return exists_file(b);
}

int mmrt_loader_is_text(const char *spec) {
  double w;
  const char *rest;
  struct stat st;
  if (!spec) return 0;
  if (weight_prefix(spec, &w, &rest) || strchr(spec, ',')) return 1;
  if (stat(spec, &st) == 0) return !S_ISDIR(st.st_mode);
  size_t n = strlen(spec); /* a missing file named as JSONL is text (and then not found) */
  return is_prefix(spec) || (n > 6 && !strcmp(spec + n - 6, ".jsonl"));
}

static int64_t token(const Source *s, uint64_t doc, uint64_t k) {
  return s->indexed ? mmrt_indexed_token(&s->idx, doc, k) : s->tok.v[s->doc_off[doc] + k];
}

static uint64_t doc_len(const Source *s, uint64_t doc) {
  return s->indexed ? (uint64_t)mmrt_indexed_length(&s->idx, doc)
                    : s->doc_off[doc + 1] - s->doc_off[doc];
}

static uint64_t ndocs(const Source *s) {
  return s->indexed ? s->idx.nseq : s->ndoc;
}

static int push_doc(Source *s, char *err, size_t errlen) {
  if (s->ndoc + 2 > s->doc_cap) {
    size_t c = s->doc_cap ? s->doc_cap * 2 : 1024;
    uint64_t *p = realloc(s->doc_off, c * sizeof *p);
    if (!p) return say(err, errlen, "%s: out of memory", s->path);
    s->doc_off = p, s->doc_cap = c;
  }
  if (s->ndoc == 0) s->doc_off[0] = 0;
  s->doc_off[++s->ndoc] = s->tok.n;
  return 0;
}

static int mask_grow(Source *s) {
  if (!s->chat) return 0;
  while (s->mask.n < s->tok.n) {
    if (s->mask.n == s->mask.cap) {
      size_t c = s->mask.cap * 2 + 4096;
      uint8_t *p = realloc(s->mask.v, c);
      if (!p) return -1;
      s->mask.v = p, s->mask.cap = c;
    }
    s->mask.v[s->mask.n++] = 1;
  }
  return 0;
}

/* The chat messages of line `ln` (the reader's object) as ids and mask. */
static int chat_doc(Source *s, MmrtJsonl *r, MmrtTok *tok, const char *family, char *err,
                    size_t errlen, int *bad) {
  struct json_object *msgs = NULL;
  *bad = 1;
  json_object_object_get_ex(r->obj, "messages", &msgs);
  if (!json_object_is_type(msgs, json_type_array) || json_object_array_length(msgs) == 0)
    return say(err, errlen, "%s:%llu: \"messages\" is not a non-empty array", s->path,
               (unsigned long long)r->lineno);
  size_t n = json_object_array_length(msgs);
  MmrtTokMsg *m = calloc(n, sizeof *m);
  if (!m) return *bad = 0, say(err, errlen, "%s: out of memory", s->path);
  for (size_t i = 0; i < n; i++) {
    struct json_object *e = json_object_array_get_idx(msgs, i), *ro, *co;
    if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "role", &ro) ||
        !json_object_is_type(ro, json_type_string) ||
        !json_object_object_get_ex(e, "content", &co) ||
        !json_object_is_type(co, json_type_string)) {
      free(m);
      return say(err, errlen,
                 "%s:%llu: message %zu: expected {\"role\": string, \"content\": string}", s->path,
                 (unsigned long long)r->lineno, i + 1);
    }
    m[i].role = json_object_get_string(ro);
    m[i].content = json_object_get_string(co);
    m[i].content_len = (size_t)json_object_get_string_len(co);
    if (mmrt_utf8_valid_prefix(m[i].content, m[i].content_len) < m[i].content_len) {
      free(m);
      return say(err, errlen, "%s:%llu: message %zu: content not valid UTF-8", s->path,
                 (unsigned long long)r->lineno, i + 1);
    }
  }
  s->chat = 1; /* the text documents before the first chat one: every label in */
  if (mask_grow(s)) return free(m), *bad = 0, say(err, errlen, "%s: out of memory", s->path);
  char e2[512];
  bool ok = mmrt_tok_chat_encode(tok, family, m, n, &s->tok, &s->mask, e2, sizeof e2);
  free(m);
  if (!ok) return say(err, errlen, "%s:%llu: %s", s->path, (unsigned long long)r->lineno, e2);
  return push_doc(s, err, errlen);
}

static int read_jsonl(MmrtLoader *l, Source *s, const MmrtTextOpts *o, int64_t vocab, char *err,
                      size_t errlen) {
  char e2[1024];
  if (!o->tokenizer)
    return say(err, errlen,
               "%s: a JSONL file needs --tokenizer tokenizer.json (to turn its text "
               "into ids), or give an indexed dataset PREFIX (mmc data preprocess)",
               s->path);
  MmrtTok *tok = mmrt_tok_load(o->tokenizer, e2, sizeof e2);
  if (!tok) return say(err, errlen, "--tokenizer %s", e2);
  if (mmrt_tok_vocab_size(tok) > vocab) {
    say(err, errlen, "--tokenizer %s: a vocabulary of %d ids; the model's logits have %lld classes",
        o->tokenizer, mmrt_tok_vocab_size(tok), (long long)vocab);
    mmrt_tok_free(tok);
    return -1;
  }
  /* the chat family: ChatML when the tokenizer has <|im_start|> as one token, else Llama-2 */
  MmrtTokIds probe = {0};
  const char *family = "llama2";
  if (mmrt_tok_encode(tok, "<|im_start|>", 12, false, &probe, e2, sizeof e2) && probe.n == 1)
    family = "chatml";
  free(probe.v);
  MmrtJsonl r;
  if (!mmrt_jsonl_open(&r, s->path, "text", e2, sizeof e2)) {
    mmrt_tok_free(tok);
    return say(err, errlen, "%s", e2);
  }
  int skip = o->bad_samples && !strcmp(o->bad_samples, "skip"), rc = 0;
  for (;;) {
    const char *text;
    size_t len;
    MmrtJsonlStatus st = mmrt_jsonl_next(&r, &text, &len, e2, sizeof e2);
    if (st == MMRT_JSONL_EOF) break;
    int bad = st == MMRT_JSONL_BAD;
    if (st == MMRT_JSONL_IO) {
      rc = say(err, errlen, "%s", e2);
      break;
    }
    if (st == MMRT_JSONL_UNSUPPORTED) { /* chat messages */
      if (chat_doc(s, &r, tok, family, e2, sizeof e2, &bad) == 0) continue;
    } else if (st == MMRT_JSONL_OK) {
      size_t before = s->tok.n;
      if (mmrt_tok_encode(tok, text, len, true, &s->tok, e2, sizeof e2)) {
        if (mask_grow(s) || push_doc(s, e2, sizeof e2))
          bad = 0, st = MMRT_JSONL_IO;
        else
          continue;
      } else {
        s->tok.n = before;
        char e3[600];
        snprintf(e3, sizeof e3, "%.500s", e2);
        snprintf(e2, sizeof e2, "%.300s:%llu: %s", s->path, (unsigned long long)r.lineno, e3);
        bad = 1;
      }
    }
    if (!bad || !skip) {
      rc = say(err, errlen, "%s%s", e2,
               bad ? " (--bad-samples skip: leave such lines out, counted)" : "");
      break;
    }
    l->skipped++;
  }
  mmrt_jsonl_close(&r);
  mmrt_tok_free(tok);
  if (rc) return rc;
  for (size_t i = 0; i < s->tok.n; i++)
    if (s->tok.v[i] < 0 || s->tok.v[i] >= vocab)
      return say(err, errlen, "%s: id %d outside the model's %lld classes", s->path, s->tok.v[i],
                 (long long)vocab);
  return 0;
}

/* The rows of a source: its documents in file order, packed or one a row. */
static int lay_out(MmrtLoader *l, Source *s, int drop, char *err, size_t errlen) {
  uint64_t nd = ndocs(s);
  s->pieces = malloc((nd + 1) * sizeof *s->pieces);
  s->row_first = malloc((nd + 2) * sizeof *s->row_first);
  if (!s->pieces || !s->row_first) return say(err, errlen, "%s: out of memory", s->path);
  uint64_t fill = 0; /* tokens in the open row */
  for (uint64_t d = 0; d < nd; d++) {
    uint64_t n = doc_len(s, d);
    if (n < 2) continue;
    if (n > (uint64_t)l->T) {
      if (drop) {
        l->dropped++;
        continue;
      }
      n = (uint64_t)l->T;
    }
    l->docs++;
    if (!l->packed || s->nrows == 0 || fill + n > (uint64_t)l->T) {
      s->row_first[s->nrows++] = s->npieces;
      fill = 0;
    }
    s->pieces[s->npieces++] = (Piece){d, (uint32_t)n};
    fill += n;
    s->used += (int64_t)n;
  }
  s->row_first[s->nrows] = s->npieces;
  if (s->nrows == 0)
    return say(err, errlen, "%s: no samples (%s)", s->path,
               nd == 0 ? "an empty dataset" : "no document of two tokens or more fits");
  return 0;
}

static int open_source(MmrtLoader *l, Source *s, const MmrtTextOpts *o, int64_t vocab, char *err,
                       size_t errlen) {
  struct stat st;
  if (stat(s->path, &st) == 0 && S_ISREG(st.st_mode)) {
    if (st.st_size == 0) return say(err, errlen, "%s: an empty file, expected JSON lines", s->path);
    return read_jsonl(l, s, o, vocab, err, errlen);
  }
  if (!is_prefix(s->path)) {
    if (stat(s->path, &st) == 0 && S_ISDIR(st.st_mode))
      return say(err, errlen, "%s: a directory in a blend (Fashion-MNIST is --data DIR alone)",
                 s->path);
    return say(err, errlen,
               "%s: no such file, and no indexed dataset %s.bin + %s.idx (expected a .jsonl file "
               "or an indexed dataset's prefix)",
               s->path, s->path, s->path);
  }
  char e2[1024];
  if (!mmrt_indexed_open(s->path, -1, &s->idx, e2, sizeof e2)) return say(err, errlen, "%s", e2);
  s->indexed = 1;
  if (!mmrt_idx_dtype_is_int(s->idx.dtype))
    return say(err, errlen, "%s: elements of %s, expected integer token ids", s->idx.bin_path,
               mmrt_idx_dtype_name(s->idx.dtype));
  return 0;
}

MmrtLoader *mmrt_loader_open(const char *spec, const MmrtTextOpts *o, int64_t T, int64_t vocab,
                             int32_t ignore, char *err, size_t errlen) {
  MmrtLoader *l = calloc(1, sizeof *l);
  char *copy = strdup(spec);
  if (!l || !copy) {
    free(l), free(copy);
    say(err, errlen, "out of memory");
    return NULL;
  }
  l->T = T, l->ignore = ignore, l->packed = o->pack > 0;
  int drop = o->too_long && !strcmp(o->too_long, "drop");
  int blend = strchr(spec, ',') != NULL || weight_prefix(spec, &(double){0}, &(const char *){0});
  int rc = 0;
  double wsum = 0;
  for (char *save = NULL, *part = strtok_r(copy, ",", &save); part && !rc;
       part = strtok_r(NULL, ",", &save)) {
    double w = 1;
    const char *path = part;
    if (blend && !weight_prefix(part, &w, &path))
      rc = say(err, errlen, "--data %s: '%s' is not WEIGHT:PATH (a blend is W1:A,W2:B,...)", spec,
               part);
    else if (blend && !(w > 0 && w < 1e9))
      rc =
          say(err, errlen, "--data %s: weight %g of %s, expected a positive number", spec, w, path);
    else if (l->nsrc == MAX_SOURCES)
      rc = say(err, errlen, "--data %s: more than %d datasets", spec, MAX_SOURCES);
    if (rc) break;
    Source *s = &l->src[l->nsrc++];
    s->path = strdup(path), s->weight = w;
    wsum += w;
    if (!s->path) rc = say(err, errlen, "out of memory");
    if (!rc) rc = open_source(l, s, o, vocab, err, errlen);
    if (!rc) rc = lay_out(l, s, drop, err, errlen);
  }
  free(copy);
  if (!rc && l->nsrc == 0) rc = say(err, errlen, "--data '%s' names no dataset", spec);
  int jsonl = 0;
  for (int k = 0; k < l->nsrc; k++) jsonl |= !l->src[k].indexed;
  if (!rc && o->tokenizer && !jsonl)
    rc = say(err, errlen,
             "--tokenizer %s: --data %s holds token ids already (an indexed dataset), nothing to "
             "tokenize",
             o->tokenizer, spec);
  for (int k = 0; k < l->nsrc && !rc; k++) l->N += l->src[k].nrows;
  if (!rc && l->nsrc > 1) { /* Megatron's greedy assignment by weight */
    l->bsrc = malloc((size_t)l->N), l->brow = malloc((size_t)l->N * sizeof *l->brow);
    int64_t cnt[MAX_SOURCES] = {0};
    if (!l->bsrc || !l->brow) rc = say(err, errlen, "out of memory for the blend");
    for (int64_t i = 0; i < l->N && !rc; i++) {
      int best = 0;
      double be = -1e300;
      for (int k = 0; k < l->nsrc; k++) {
        double e = l->src[k].weight / wsum * (double)(i + 1) - (double)cnt[k];
        if (e > be) be = e, best = k;
      }
      l->bsrc[i] = (uint8_t)best;
      l->brow[i] = cnt[best]++ % l->src[best].nrows;
    }
  }
  if (rc) {
    mmrt_loader_close(l);
    return NULL;
  }
  return l;
}

void mmrt_loader_close(MmrtLoader *l) {
  if (!l) return;
  for (int k = 0; k < l->nsrc; k++) {
    Source *s = &l->src[k];
    if (s->indexed) mmrt_indexed_close(&s->idx);
    free(s->path), free(s->tok.v), free(s->mask.v), free(s->doc_off), free(s->pieces),
        free(s->row_first);
  }
  free(l->bsrc), free(l->brow), free(l);
}

int64_t mmrt_loader_samples(const MmrtLoader *l) {
  return l->N;
}

int64_t mmrt_loader_skipped(const MmrtLoader *l) {
  return l->skipped;
}

void mmrt_loader_row(const MmrtLoader *l, int64_t sample, int32_t *ids, int32_t *labels,
                     int32_t *seg, int32_t *pos) {
  int k = l->bsrc ? l->bsrc[sample] : 0;
  int64_t r = l->bsrc ? l->brow[sample] : sample;
  const Source *s = &l->src[k];
  int64_t at = 0;
  int32_t sg = 0;
  for (uint64_t p = s->row_first[r]; p < s->row_first[r + 1]; p++, sg++) {
    const Piece *pc = &s->pieces[p];
    for (uint32_t j = 0; j < pc->len; j++) {
      ids[at + j] = (int32_t)token(s, pc->doc, j);
      int in = j + 1 < pc->len &&
               (!s->chat || s->mask.v[s->doc_off[pc->doc] + j + 1]); /* the boundary: ignored */
      labels[at + j] = in ? (int32_t)token(s, pc->doc, j + 1) : l->ignore;
      if (seg) seg[at + j] = sg;
      if (pos) pos[at + j] = (int32_t)j;
    }
    at += pc->len;
  }
  for (int32_t j = 0; at < l->T; at++, j++) { /* padding: a segment of its own */
    ids[at] = 0, labels[at] = l->ignore;
    if (seg) seg[at] = sg;
    if (pos) pos[at] = j;
  }
}

void mmrt_loader_where(const MmrtLoader *l, int64_t sample, int64_t at, char *buf, size_t n) {
  int k = l->bsrc ? l->bsrc[sample] : 0;
  int64_t r = l->bsrc ? l->brow[sample] : sample;
  const Source *s = &l->src[k];
  for (uint64_t p = s->row_first[r]; p < s->row_first[r + 1]; p++) {
    if (at < (int64_t)s->pieces[p].len) {
      snprintf(buf, n, "%s: %s %llu, token %lld", s->indexed ? s->idx.bin_path : s->path,
               s->indexed ? "sequence" : "document", (unsigned long long)s->pieces[p].doc,
               (long long)at);
      return;
    }
    at -= s->pieces[p].len;
  }
  snprintf(buf, n, "%s: padding", s->path);
}

void mmrt_loader_describe(const MmrtLoader *l, char *buf, size_t n) {
  int64_t used = 0;
  for (int k = 0; k < l->nsrc; k++) used += l->src[k].used;
  int64_t rows = 0;
  for (int k = 0; k < l->nsrc; k++) rows += l->src[k].nrows;
  size_t w = (size_t)snprintf(buf, n,
                              "text data: %d dataset%s, %lld documents in %lld rows of %lld "
                              "tokens (%s), %lld tokens of %lld slots used (packing efficiency "
                              "%.1f%%)",
                              l->nsrc, l->nsrc > 1 ? "s (blended)" : "", (long long)l->docs,
                              (long long)rows, (long long)l->T, l->packed ? "packed" : "unpacked",
                              (long long)used, (long long)(rows * l->T),
                              rows ? 100.0 * (double)used / (double)(rows * l->T) : 0.0);
  if (w < n && (l->dropped || l->skipped))
    snprintf(buf + w, n - w, "; %lld too long dropped, %lld bad samples skipped",
             (long long)l->dropped, (long long)l->skipped);
}
