/* mmrt_loader.c: the text loader (see mmrt_loader.h). */
#include "mmrt_loader.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <json-c/json.h>
#include <math.h>
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

/* The rows of a split: pieces [row_first[r], row_first[r + 1]). */
typedef struct Rows {
  Piece *pieces;
  size_t npieces;
  uint64_t *row_first;
  int64_t nrows;
  int64_t used; /* tokens in the rows */
} Rows;

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
  Rows rows[2]; /* training, held out (MMRT_TEXT_TRAIN, _EVAL) */
} Source;

struct MmrtLoader {
  Source src[MAX_SOURCES];
  int nsrc;
  int64_t T, N;
  int32_t ignore;
  int packed;
  double eval_split;
  int64_t held_docs; /* documents in the held-out rows */
  uint8_t *bsrc;     /* (N) source of blended sample i (NULL: one source) */
  int64_t *brow;     /* (N) its row */
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

/* ---- JSONL: read on the calling thread, tokenized by a pool ----
 * The caller reads the lines (JSON, UTF-8 and the chat messages' shape
 * checked) into chunks of documents; the pool's threads, each with its own
 * tokenizer (its word cache is not shared), tokenize whole chunks; the
 * caller appends the chunks' ids in file order as they complete. A
 * document's ids depend on its text alone, so the result is the same for
 * any number of threads (0: the caller tokenizes). */
#define CHUNK_DOCS  512
#define CHUNK_BYTES (1u << 20)
#define RING        128

enum { J_TEXT, J_CHAT, J_BAD, J_FATAL };

typedef struct Job {
  int kind;
  uint64_t lineno;
  size_t off, len; /* text (J_TEXT) or message (J_BAD, J_FATAL) in the chunk's bytes */
  size_t m0, nm;   /* J_CHAT: messages [m0, m0 + nm) */
} Job;

typedef struct MsgAt {
  size_t role, content, content_len; /* offsets in the chunk's bytes (NUL-terminated) */
} MsgAt;

typedef struct Chunk {
  Job *jobs;
  size_t njobs, jcap;
  char *bytes;
  size_t nbytes, bcap;
  MsgAt *msgs;
  size_t nmsgs, mcap;
  MmrtTokIds ids;   /* the documents' ids back to back */
  MmrtTokMask mask; /* one byte per id: 1 for text, the chat template's mask */
  size_t *end;      /* per job: ids.n after it */
  int has_chat, done, oom;
} Chunk;

typedef struct Pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  Chunk *ring[RING];        /* >= 2 * 32 + 2 chunks in flight */
  size_t head, claim, tail; /* to merge, to tokenize, to fill (counts, mod the ring) */
  int quit, nth;
  const char *family, *path;
} Pool;

static int grow(void **p, size_t *cap, size_t need, size_t elt) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elt);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

/* Appends n bytes and a NUL; the offset, or (size_t)-1. */
static size_t put_bytes(Chunk *c, const char *s, size_t n) {
  if (grow((void **)&c->bytes, &c->bcap, c->nbytes + n + 1, 1)) return (size_t)-1;
  size_t at = c->nbytes;
  memcpy(c->bytes + at, s, n);
  c->bytes[at + n] = 0;
  c->nbytes += n + 1;
  return at;
}

static Job *new_job(Chunk *c, int kind, uint64_t lineno) {
  if (grow((void **)&c->jobs, &c->jcap, c->njobs + 1, sizeof *c->jobs)) return c->oom = 1, NULL;
  Job *j = &c->jobs[c->njobs++];
  *j = (Job){kind, lineno, 0, 0, 0, 0};
  return j;
}

/* A bad (or fatal) line with its message. */
static void job_msg(Chunk *c, int kind, uint64_t lineno, const char *msg) {
  Job *j = new_job(c, kind, lineno);
  if (!j) return;
  j->off = put_bytes(c, msg, strlen(msg)), j->len = strlen(msg);
  if (j->off == (size_t)-1) c->oom = 1, c->njobs--;
}

/* Line `lineno`'s chat messages (the reader's object), checked and copied. */
static void read_chat(Chunk *c, MmrtJsonl *r, const char *path) {
  struct json_object *msgs = NULL;
  char e[700];
  json_object_object_get_ex(r->obj, "messages", &msgs);
  unsigned long long ln = (unsigned long long)r->lineno;
  if (!json_object_is_type(msgs, json_type_array) || json_object_array_length(msgs) == 0) {
    snprintf(e, sizeof e, "%.500s:%llu: \"messages\" is not a non-empty array", path, ln);
    return job_msg(c, J_BAD, r->lineno, e);
  }
  size_t n = json_object_array_length(msgs), m0 = c->nmsgs;
  for (size_t i = 0; i < n; i++) {
    struct json_object *m = json_object_array_get_idx(msgs, i), *ro, *co;
    if (!json_object_is_type(m, json_type_object) || !json_object_object_get_ex(m, "role", &ro) ||
        !json_object_is_type(ro, json_type_string) ||
        !json_object_object_get_ex(m, "content", &co) ||
        !json_object_is_type(co, json_type_string)) {
      snprintf(e, sizeof e,
               "%.500s:%llu: message %zu: expected {\"role\": string, \"content\": string}", path,
               ln, i + 1);
      c->nmsgs = m0;
      return job_msg(c, J_BAD, r->lineno, e);
    }
    const char *content = json_object_get_string(co);
    size_t len = (size_t)json_object_get_string_len(co);
    if (mmrt_utf8_valid_prefix(content, len) < len) {
      snprintf(e, sizeof e, "%.500s:%llu: message %zu: content not valid UTF-8", path, ln, i + 1);
      c->nmsgs = m0;
      return job_msg(c, J_BAD, r->lineno, e);
    }
    const char *role = json_object_get_string(ro);
    if (grow((void **)&c->msgs, &c->mcap, c->nmsgs + 1, sizeof *c->msgs)) return (void)(c->oom = 1);
    MsgAt *a = &c->msgs[c->nmsgs++];
    a->role = put_bytes(c, role, strlen(role));
    a->content = put_bytes(c, content, len), a->content_len = len;
    if (a->role == (size_t)-1 || a->content == (size_t)-1) return (void)(c->oom = 1);
  }
  Job *j = new_job(c, J_CHAT, r->lineno);
  if (j) j->m0 = m0, j->nm = n;
}

/* Tokenizes a chunk's documents with tok (a pool thread's or the caller's). */
static void tokenize_chunk(Chunk *c, MmrtTok *tok, const char *family, const char *path) {
  char e2[1024], e3[1400];
  if (grow((void **)&c->end, &(size_t){0}, c->njobs + 1, sizeof *c->end)) return (void)(c->oom = 1);
  for (size_t k = 0; k < c->njobs; k++) {
    Job *j = &c->jobs[k];
    size_t before = c->ids.n;
    int ok = 1;
    if (j->kind == J_TEXT) {
      ok = mmrt_tok_encode(tok, c->bytes + j->off, j->len, true, &c->ids, e2, sizeof e2);
      if (ok) {
        if (grow((void **)&c->mask.v, &c->mask.cap, c->ids.n, 1)) return (void)(c->oom = 1);
        memset(c->mask.v + c->mask.n, 1, c->ids.n - c->mask.n), c->mask.n = c->ids.n;
      } else
        c->ids.n = before,
        snprintf(e3, sizeof e3, "%.300s:%llu: %.500s", path, (unsigned long long)j->lineno, e2);
    } else if (j->kind == J_CHAT) {
      MmrtTokMsg *m = calloc(j->nm, sizeof *m);
      if (!m) return (void)(c->oom = 1);
      for (size_t i = 0; i < j->nm; i++) {
        const MsgAt *a = &c->msgs[j->m0 + i];
        m[i] = (MmrtTokMsg){c->bytes + a->role, c->bytes + a->content, a->content_len};
      }
      ok = mmrt_tok_chat_encode(tok, family, m, j->nm, &c->ids, &c->mask, e2, sizeof e2);
      free(m);
      if (ok)
        c->has_chat = 1;
      else
        snprintf(e3, sizeof e3, "%.500s:%llu: %.800s", path, (unsigned long long)j->lineno, e2);
    }
    if (!ok) {
      j->kind = J_BAD, j->len = strlen(e3), j->off = put_bytes(c, e3, j->len);
      if (j->off == (size_t)-1) return (void)(c->oom = 1);
    }
    c->end[k] = c->ids.n;
  }
}

typedef struct Worker {
  Pool *p;
  MmrtTok *tok;
  pthread_t th;
} Worker;

static void *pool_thread(void *arg) {
  Worker *w = arg;
  Pool *p = w->p;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->claim == p->tail && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
    if (p->claim == p->tail) break;
    Chunk *c = p->ring[p->claim++ % RING];
    pthread_mutex_unlock(&p->mu);
    tokenize_chunk(c, w->tok, p->family, p->path);
    pthread_mutex_lock(&p->mu);
    c->done = 1;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void chunk_free(Chunk *c) {
  if (!c) return;
  free(c->jobs), free(c->bytes), free(c->msgs), free(c->ids.v), free(c->mask.v), free(c->end);
  free(c);
}

/* Appends a tokenized chunk's documents to the source, in order; 1 at the
 * first line that stops the reading (its message in err), else 0. */
static int merge_chunk(MmrtLoader *l, Source *s, Chunk *c, int skip, char *err, size_t errlen) {
  if (c->oom) return say(err, errlen, "%s: out of memory", s->path), 1;
  if (c->has_chat && !s->chat) {
    s->chat = 1; /* the text documents before the first chat one: every label in */
    if (mask_grow(s)) return say(err, errlen, "%s: out of memory", s->path), 1;
  }
  size_t from = 0;
  for (size_t k = 0; k < c->njobs; k++) {
    const Job *j = &c->jobs[k];
    if (j->kind == J_BAD || j->kind == J_FATAL) {
      if (j->kind == J_BAD && skip) {
        l->skipped++;
        continue;
      }
      say(err, errlen, "%s%s", c->bytes + j->off,
          j->kind == J_BAD ? " (--bad-samples skip: leave such lines out, counted)" : "");
      return 1;
    }
    size_t n = c->end[k] - from;
    if (grow((void **)&s->tok.v, &s->tok.cap, s->tok.n + n, sizeof *s->tok.v) ||
        (s->chat && grow((void **)&s->mask.v, &s->mask.cap, s->mask.n + n, 1)))
      return say(err, errlen, "%s: out of memory", s->path), 1;
    memcpy(s->tok.v + s->tok.n, c->ids.v + from, n * sizeof *s->tok.v), s->tok.n += n;
    if (s->chat) memcpy(s->mask.v + s->mask.n, c->mask.v + from, n), s->mask.n += n;
    from = c->end[k];
    if (push_doc(s, err, errlen)) return 1;
  }
  return 0;
}

/* Reads lines into a new chunk until it is full; *stop at the end of the
 * file or at a line that stops the reading (not with skip). */
static Chunk *read_chunk(MmrtJsonl *r, const char *path, int skip, int *stop) {
  Chunk *c = calloc(1, sizeof *c);
  char e2[1024];
  if (!c) return NULL;
  while (!*stop && !c->oom && c->njobs < CHUNK_DOCS && c->nbytes < CHUNK_BYTES) {
    const char *text;
    size_t len;
    MmrtJsonlStatus st = mmrt_jsonl_next(r, &text, &len, e2, sizeof e2);
    if (st == MMRT_JSONL_EOF) {
      *stop = 1;
    } else if (st == MMRT_JSONL_IO) {
      job_msg(c, J_FATAL, r->lineno, e2), *stop = 1;
    } else if (st == MMRT_JSONL_BAD) {
      job_msg(c, J_BAD, r->lineno, e2), *stop = !skip;
    } else if (st == MMRT_JSONL_UNSUPPORTED) { /* chat messages */
      read_chat(c, r, path);
      *stop = !skip && c->njobs && c->jobs[c->njobs - 1].kind == J_BAD;
    } else {
      Job *j = new_job(c, J_TEXT, r->lineno);
      if (j) j->len = len, j->off = put_bytes(c, text, len);
      if (j && j->off == (size_t)-1) c->oom = 1;
    }
  }
  if (c->oom) *stop = 1;
  return c;
}

/* The loader threads for --loader-threads N (< 0: min(2, CPUs): the reading
 * thread is mostly idle, reading a line taking about a sixth of the time
 * tokenizing it does, and the pool is done before the first step). */
static int pool_threads(int64_t asked) {
  if (asked >= 0) return asked > 32 ? 32 : (int)asked;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus >= 2 ? 2 : 1;
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
  int skip = o->bad_samples && !strcmp(o->bad_samples, "skip"), rc = 0, stop = 0, failed = 0;
  Pool p = {.family = family, .path = s->path, .nth = pool_threads(o->threads)};
  Worker w[32];
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  int started = 0;
  for (; started < p.nth; started++) { /* each thread its own tokenizer */
    w[started] = (Worker){&p, started ? mmrt_tok_load(o->tokenizer, e2, sizeof e2) : tok, 0};
    if (!w[started].tok) break;
    if (pthread_create(&w[started].th, NULL, pool_thread, &w[started])) {
      if (started) mmrt_tok_free(w[started].tok);
      break;
    }
  }
  size_t inflight = started ? 2 * (size_t)started + 2 : 1;
  while (!stop || p.head < p.tail) {
    Chunk *c = NULL;
    if (!stop && p.tail - p.head < inflight) {
      c = read_chunk(&r, s->path, skip, &stop);
      if (!c) {
        rc = say(err, errlen, "%s: out of memory", s->path), stop = failed = 1;
        continue;
      }
      if (!started) tokenize_chunk(c, tok, family, s->path), c->done = 1;
      pthread_mutex_lock(&p.mu);
      p.ring[p.tail++ % RING] = c;
      pthread_cond_broadcast(&p.cv);
      pthread_mutex_unlock(&p.mu);
    }
    /* merge what is done, in order; wait for the oldest when the ring is full or read */
    pthread_mutex_lock(&p.mu);
    while (p.head < p.tail && !p.ring[p.head % RING]->done && (stop || p.tail - p.head >= inflight))
      pthread_cond_wait(&p.cv, &p.mu);
    while (p.head < p.tail && p.ring[p.head % RING]->done) {
      Chunk *d = p.ring[p.head++ % RING];
      pthread_mutex_unlock(&p.mu);
      if (!failed && merge_chunk(l, s, d, skip, err, errlen)) rc = -1, failed = stop = 1;
      chunk_free(d);
      pthread_mutex_lock(&p.mu);
    }
    pthread_mutex_unlock(&p.mu);
  }
  pthread_mutex_lock(&p.mu);
  p.quit = 1;
  pthread_cond_broadcast(&p.cv);
  pthread_mutex_unlock(&p.mu);
  for (int i = 0; i < started; i++) {
    pthread_join(w[i].th, NULL);
    if (i) mmrt_tok_free(w[i].tok);
  }
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.cv);
  mmrt_jsonl_close(&r);
  mmrt_tok_free(tok);
  if (rc) return rc;
  for (size_t i = 0; i < s->tok.n; i++)
    if (s->tok.v[i] < 0 || s->tok.v[i] >= vocab)
      return say(err, errlen, "%s: id %d outside the model's %lld classes", s->path, s->tok.v[i],
                 (long long)vocab);
  return 0;
}

/* Document d held out for evaluation (mmrt_loader.h). */
static int held_out(double f, uint64_t d) {
  return f > 0 && floor((double)(d + 1) * f) > floor((double)d * f);
}

/* The rows of a source's split: its documents (those of the split) in file
 * order, packed or one a row. */
static int lay_out(MmrtLoader *l, Source *s, int split, int drop, char *err, size_t errlen) {
  uint64_t nd = ndocs(s);
  Rows *w = &s->rows[split];
  w->pieces = malloc((nd + 1) * sizeof *w->pieces);
  w->row_first = malloc((nd + 2) * sizeof *w->row_first);
  if (!w->pieces || !w->row_first) return say(err, errlen, "%s: out of memory", s->path);
  uint64_t fill = 0; /* tokens in the open row */
  for (uint64_t d = 0; d < nd; d++) {
    if (held_out(l->eval_split, d) != (split == MMRT_TEXT_EVAL)) continue;
    uint64_t n = doc_len(s, d);
    if (n < 2) continue;
    if (n > (uint64_t)l->T) {
      if (drop) {
        l->dropped++;
        continue;
      }
      n = (uint64_t)l->T;
    }
    if (split == MMRT_TEXT_TRAIN)
      l->docs++;
    else
      l->held_docs++;
    if (!l->packed || w->nrows == 0 || fill + n > (uint64_t)l->T) {
      w->row_first[w->nrows++] = w->npieces;
      fill = 0;
    }
    w->pieces[w->npieces++] = (Piece){d, (uint32_t)n};
    fill += n;
    w->used += (int64_t)n;
  }
  w->row_first[w->nrows] = w->npieces;
  if (w->nrows == 0 && split == MMRT_TEXT_TRAIN)
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
  l->T = T, l->ignore = ignore, l->packed = o->pack > 0, l->eval_split = o->eval_split;
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
    if (!rc) rc = lay_out(l, s, MMRT_TEXT_TRAIN, drop, err, errlen);
    if (!rc && l->eval_split > 0) rc = lay_out(l, s, MMRT_TEXT_EVAL, drop, err, errlen);
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
  for (int k = 0; k < l->nsrc && !rc; k++) l->N += l->src[k].rows[0].nrows;
  if (!rc && l->eval_split > 0 && l->held_docs == 0)
    rc = say(err, errlen,
             "--eval-split %g: no document of two tokens or more is held out (%lld documents "
             "train); hold out a larger fraction",
             l->eval_split, (long long)l->docs);
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
      l->brow[i] = cnt[best]++ % l->src[best].rows[0].nrows;
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
    free(s->path), free(s->tok.v), free(s->mask.v), free(s->doc_off);
    for (int i = 0; i < 2; i++) free(s->rows[i].pieces), free(s->rows[i].row_first);
  }
  free(l->bsrc), free(l->brow), free(l);
}

int64_t mmrt_loader_samples(const MmrtLoader *l, int split) {
  if (split == MMRT_TEXT_TRAIN || l->eval_split <= 0) return l->N;
  int64_t n = 0;
  for (int k = 0; k < l->nsrc; k++) n += l->src[k].rows[MMRT_TEXT_EVAL].nrows;
  return n;
}

int64_t mmrt_loader_tokens(const MmrtLoader *l) {
  int64_t n = 0;
  for (int k = 0; k < l->nsrc; k++) {
    const Source *s = &l->src[k];
    if (!s->indexed) n += (int64_t)s->tok.n;
    for (uint64_t d = 0; s->indexed && d < s->idx.nseq; d++) n += (int64_t)doc_len(s, d);
  }
  return n;
}

int64_t mmrt_loader_skipped(const MmrtLoader *l) {
  return l->skipped;
}

/* The source and its row of sample i of a split: the training split's
 * blended or not; the held-out one's the sources' rows in turn. */
static const Rows *locate(const MmrtLoader *l, int split, int64_t i, const Source **s, int64_t *r) {
  if (split == MMRT_TEXT_EVAL && l->eval_split > 0) {
    int k = 0;
    while (k + 1 < l->nsrc && i >= l->src[k].rows[MMRT_TEXT_EVAL].nrows)
      i -= l->src[k++].rows[MMRT_TEXT_EVAL].nrows;
    *s = &l->src[k], *r = i;
    return &l->src[k].rows[MMRT_TEXT_EVAL];
  }
  int k = l->bsrc ? l->bsrc[i] : 0;
  *s = &l->src[k], *r = l->bsrc ? l->brow[i] : i;
  return &l->src[k].rows[MMRT_TEXT_TRAIN];
}

void mmrt_loader_row(const MmrtLoader *l, int split, int64_t sample, int32_t *ids, int32_t *labels,
                     int32_t *seg, int32_t *pos) {
  const Source *s;
  int64_t r;
  const Rows *w = locate(l, split, sample, &s, &r);
  int64_t at = 0;
  int32_t sg = 0;
  for (uint64_t p = w->row_first[r]; p < w->row_first[r + 1]; p++, sg++) {
    const Piece *pc = &w->pieces[p];
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

void mmrt_loader_where(const MmrtLoader *l, int split, int64_t sample, int64_t at, char *buf,
                       size_t n) {
  const Source *s;
  int64_t r;
  const Rows *w = locate(l, split, sample, &s, &r);
  for (uint64_t p = w->row_first[r]; p < w->row_first[r + 1]; p++) {
    if (at < (int64_t)w->pieces[p].len) {
      snprintf(buf, n, "%s: %s %llu, token %lld", s->indexed ? s->idx.bin_path : s->path,
               s->indexed ? "sequence" : "document", (unsigned long long)w->pieces[p].doc,
               (long long)at);
      return;
    }
    at -= w->pieces[p].len;
  }
  snprintf(buf, n, "%s: padding", s->path);
}

void mmrt_loader_describe(const MmrtLoader *l, char *buf, size_t n) {
  int64_t used = 0, rows = 0;
  for (int k = 0; k < l->nsrc; k++) used += l->src[k].rows[0].used, rows += l->src[k].rows[0].nrows;
  size_t w = (size_t)snprintf(buf, n,
                              "text data: %d dataset%s, %lld documents in %lld rows of %lld "
                              "tokens (%s), %lld tokens of %lld slots used (packing efficiency "
                              "%.1f%%)",
                              l->nsrc, l->nsrc > 1 ? "s (blended)" : "", (long long)l->docs,
                              (long long)rows, (long long)l->T, l->packed ? "packed" : "unpacked",
                              (long long)used, (long long)(rows * l->T),
                              rows ? 100.0 * (double)used / (double)(rows * l->T) : 0.0);
  if (w < n && l->eval_split > 0)
    w += (size_t)snprintf(
        buf + w, n - w, "; held out for evaluation (--eval-split %g): %lld documents in %lld rows",
        l->eval_split, (long long)l->held_docs, (long long)mmrt_loader_samples(l, MMRT_TEXT_EVAL));
  if (w < n && (l->dropped || l->skipped))
    snprintf(buf + w, n - w, "; %lld too long dropped, %lld bad samples skipped",
             (long long)l->dropped, (long long)l->skipped);
}
