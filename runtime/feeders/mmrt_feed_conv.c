/* mmrt_feed_conv.c: conversation datasets (LLaVA/InternVL JSON or JSONL
 * beside a folder of images) for an InternVL-style model.
 *
 * Inputs pixels f32[B, K, 3, S, S], text and labels i32[B, T]: each sample
 * read by mmrt_conv (docs/conversations.md) from --data FILE with
 * --images DIR and --tokenizer tokenizer.json in the chat family --chat
 * (internvl2 by default), each image tiled by InternVL2's rule (1 to
 * --max-tiles tiles of S x S plus a thumbnail, normalised with ImageNet's
 * mean and std) and the tiles of a sample's images laid out in order in its
 * K slots; the slots past them stay zero. The model's `place` puts the
 * projected features of the first tiles at the image-context tokens of
 * the text, in order (a sample with fewer tiles than K holds fewer
 * tokens; the padding tiles' features go nowhere and get no gradient):
 * the image-token positions are the text's context tokens. K is the most
 * tiles a sample may have: a sample with more is a bad sample, as is one
 * longer than T (--too-long truncate|drop changes that), a missing or
 * corrupt image or a wrong count of <image> placeholders; --bad-samples
 * skip skips and counts them. Labels are the next token's id where that
 * token is on an assistant reply, -100 elsewhere.
 *
 * Every sample is read, checked and tokenised when the trainer starts
 * (open); the pixels are decoded again for each use, by the loader thread
 * one batch ahead (as mmrt_feed_text's rows), so a batch's content depends
 * only on its samples: the seed's shuffle, this rank's rows of the batch,
 * a checkpoint's data position. The final evaluation generates the last
 * reply of each sample of --eval-data (default: the training file, in file
 * order) greedily and reports the rate of exact matches. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_comm.h"
#include "mmrt_conv.h"
#include "mmrt_feed.h"
#include "mmrt_image.h"
#include "mmrt_loader.h"

enum { PX, TEXT, Y }; /* c->batch[] */

typedef struct Sample {
  int32_t *ids;
  uint8_t *mask;
  int32_t len;
  int nimg, tiles;
  char **paths;
} Sample;

typedef struct Set {
  Sample *s;
  int64_t n;
} Set;

#define MAX_BLOCKS 64

typedef struct Block {
  int64_t lo, n;
  int64_t *sample;
  int32_t *text, *y;
  float *px;
} Block;

typedef struct Conv {
  Set train, eval;
  int64_t T, K, S;
  int32_t ignore, pad;
  int max_tiles;
  Block blk[MAX_BLOCKS];
  int nblk;
  int64_t cur_epoch, cur_start, fills;
  int64_t *here;
  MmrtBatchIter shadow;
  int has_shadow;
  pthread_t th;
  int has_thread, quit, work, ready;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} Conv;

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *px = mmrt_desc_input(m, MMRT_IN(CONV_PIXELS)),
                       *text = mmrt_desc_input(m, MMRT_IN(CONV_TEXT)),
                       *lb = mmrt_desc_input(m, MMRT_IN(CONV_LABELS));
  const int64_t img[5] = {c->B, -1, 3, -1, -1}, tok[2] = {c->B, -1};
  if (!mmrt_feed_is(px, MMRT_ST_F32, 5, img) || px->shape[3] != px->shape[4] ||
      !mmrt_feed_is(text, MMRT_ST_I32, 2, tok) || !mmrt_feed_is(lb, MMRT_ST_I32, 2, text->shape))
    return 0;
  c->batch[PX] = px, c->batch[TEXT] = text, c->batch[Y] = c->labels = lb, c->nbatch = 3;
  c->T = text->shape[1];
  if (!c->data || !mmrt_loader_is_text(c->data)) {
    snprintf(err, errlen,
             "model %s reads conversations: --data FILE.jsonl|FILE.json with --images DIR and "
             "--tokenizer tokenizer.json",
             m->name);
    return -1;
  }
  if (m->image_token < 0 || m->image_tokens <= 0 || m->image_tokens % px->shape[1]) {
    snprintf(err, errlen,
             "model %s places %lld image rows, not a multiple of its %lld tiles per sample",
             m->name, (long long)m->image_tokens, (long long)px->shape[1]);
    return -1;
  }
  if (c->text->seq_len && c->text->seq_len != c->T) {
    snprintf(err, errlen, "--seq-len %lld: model %s reads rows of T = %lld tokens",
             (long long)c->text->seq_len, m->name, (long long)c->T);
    return -1;
  }
  if (c->text->pack > 0) {
    snprintf(err, errlen, "--pack: conversations are one a row (model %s)", m->name);
    return -1;
  }
  return 1;
}

static void set_free(Set *s) {
  for (int64_t i = 0; i < s->n; i++) {
    free(s->s[i].ids), free(s->s[i].mask);
    for (int k = 0; k < s->s[i].nimg; k++) free(s->s[i].paths[k]);
    free(s->s[i].paths);
  }
  free(s->s);
  memset(s, 0, sizeof *s);
}

/* Reads every sample of path into *out; bad ones stop it (err) or are
 * skipped and counted (*skipped) by --bad-samples. */
static int read_set(MmrtFeedCtx *c, Conv *x, MmrtTok *tok, const char *path, Set *out,
                    int64_t *skipped, char *err, size_t errlen) {
  const MmrtTextOpts *t = c->text;
  MmrtConvOpts o = {.family = t->chat ? t->chat : "internvl2",
                    .image_dir = t->images,
                    .tile = (int)x->S,
                    .max_tiles = x->max_tiles,
                    .tokens_per_tile = (int)(c->m->image_tokens / x->K),
                    .seq_len = (size_t)x->T,
                    .too_long = !t->too_long                   ? MMRT_CONV_FAIL
                                : !strcmp(t->too_long, "drop") ? MMRT_CONV_DROP
                                                               : MMRT_CONV_TRUNCATE};
  int skip = t->bad_samples && !strcmp(t->bad_samples, "skip");
  char e[2048];
  MmrtConv *cv = mmrt_conv_open(path, tok, &o, e, sizeof e);
  if (!cv) return snprintf(err, errlen, "%s", e), 1;
  if (mmrt_conv_context_id(cv) != c->m->image_token) {
    snprintf(err, errlen,
             "%s: the tokenizer's image context token is id %d, but model %s places its image "
             "features at token %lld (recompile with --set IMG=%d)",
             path, mmrt_conv_context_id(cv), c->m->name, (long long)c->m->image_token,
             mmrt_conv_context_id(cv));
    mmrt_conv_close(cv);
    return 1;
  }
  int64_t cap = 0, V = mmrt_feed_classes(c->m);
  int rc = 0;
  for (;;) {
    MmrtConvSample s;
    MmrtConvStatus st = mmrt_conv_next(cv, &s, e, sizeof e);
    if (st == MMRT_CONV_EOF) break;
    if (st == MMRT_CONV_ERROR) {
      snprintf(err, errlen, "%s", e), rc = 1;
      break;
    }
    if (st == MMRT_CONV_OK) {
      int tiles = 0;
      for (int k = 0; k < s.nimages; k++) tiles += s.tiles[k];
      char pre[64] = "";
      for (size_t k = 0; k < s.ids.n && !pre[0]; k++)
        if (s.ids.v[k] < 0 || s.ids.v[k] >= V)
          snprintf(pre, sizeof pre, "token %zu: id %d outside the model's %lld classes", k,
                   s.ids.v[k], (long long)V);
      if (tiles > x->K || pre[0]) {
        if (pre[0])
          snprintf(e, sizeof e, "%s: sample %zu (id \"%s\"): %s", path, s.index, s.id, pre);
        else
          snprintf(e, sizeof e,
                   "%s: sample %zu (id \"%s\"): %d tiles (%d image tokens) exceed the model's %lld "
                   "tiles per sample",
                   path, s.index, s.id, tiles, tiles * o.tokens_per_tile, (long long)x->K);
        mmrt_conv_sample_free(&s);
        st = MMRT_CONV_BAD;
      } else {
        if (out->n == cap) {
          cap = cap ? 2 * cap : 1024;
          Sample *p = realloc(out->s, (size_t)cap * sizeof *p);
          if (!p) abort();
          out->s = p;
        }
        Sample *d = &out->s[out->n++];
        *d = (Sample){s.ids.v, s.mask.v, (int32_t)s.ids.n, s.nimages, tiles, s.paths};
        s.ids.v = NULL, s.mask.v = NULL, s.paths = NULL;
        mmrt_conv_sample_free(&s);
        continue;
      }
    }
    if (st == MMRT_CONV_DROPPED) {
      fprintf(stderr, "trainer: %s\n", e);
      continue;
    }
    if (!skip) {
      snprintf(err, errlen, "%s", e), rc = 1;
      break;
    }
    fprintf(stderr, "trainer: %s (skipped)\n", e);
    ++*skipped;
  }
  mmrt_conv_close(cv);
  return rc;
}

static int open(MmrtFeedCtx *c, const char *spec, char *err, size_t errlen) {
  Conv *x = calloc(1, sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory"), 1;
  c->priv = x;
  pthread_mutex_init(&x->mu, NULL);
  pthread_cond_init(&x->cv, NULL);
  const MmrtTensorDesc *px = c->batch[PX];
  x->T = c->T, x->K = px->shape[1], x->S = px->shape[3];
  x->ignore = (int32_t)c->m->ignore_index;
  x->max_tiles = c->text->max_tiles ? (int)c->text->max_tiles : (int)(x->K > 1 ? x->K - 1 : 1);
  if (!(x->here = malloc((size_t)c->rows * sizeof *x->here)))
    return snprintf(err, errlen, "out of memory"), 1;
  if (!c->text->tokenizer)
    return snprintf(err, errlen, "conversations need --tokenizer tokenizer.json"), 1;
  char e[1024];
  MmrtTok *tok = mmrt_tok_load(c->text->tokenizer, e, sizeof e);
  if (!tok) return snprintf(err, errlen, "--tokenizer %s", e), 1;
  x->pad = mmrt_tok_pad_id(tok) >= 0 ? mmrt_tok_pad_id(tok) : 0;
  int64_t eval_skipped = 0;
  int rc = read_set(c, x, tok, spec, &x->train, &c->skipped, err, errlen);
  if (!rc && c->text->eval_data)
    rc = read_set(c, x, tok, c->text->eval_data, &x->eval, &eval_skipped, err, errlen);
  mmrt_tok_free(tok);
  if (rc) return 1;
  if (x->pad == c->m->image_token) x->pad = x->pad ? 0 : 1;
  if (x->train.n < c->B)
    return snprintf(err, errlen, "%lld conversations, fewer than the batch of %lld",
                    (long long)x->train.n, (long long)c->B),
           1;
  const Set *ev = c->text->eval_data ? &x->eval : &x->train;
  c->train.n = x->train.n, c->test.n = ev->n;
  c->count_skipped = c->text->bad_samples && !strcmp(c->text->bad_samples, "skip");
  int64_t tiles = 0, most = 0;
  for (int64_t i = 0; i < x->train.n; i++) {
    tiles += x->train.s[i].tiles;
    if (x->train.s[i].tiles > most) most = x->train.s[i].tiles;
  }
  snprintf(c->note, sizeof c->note,
           "%lld conversations (%lld tiles of %lldx%lld, at most %lld a sample of the model's "
           "%lld slots), %lld skipped; evaluation on %lld",
           (long long)x->train.n, (long long)tiles, (long long)x->S, (long long)x->S,
           (long long)most, (long long)x->K, (long long)c->skipped, (long long)ev->n);
  return 0;
}

/* Sample s (NULL: padding) into one row: text, labels, K tiles. prefix > 0:
 * the text up to the last reply only, no labels (generation). */
static void lay_one(const Conv *x, const Sample *s, int32_t *text, int32_t *y, float *px,
                    int32_t prefix) {
  size_t tile = 3 * (size_t)x->S * (size_t)x->S;
  int32_t n = s ? (prefix > 0 ? prefix : s->len) : 0;
  for (int64_t j = 0; j < x->T; j++) {
    text[j] = j < n ? s->ids[j] : x->pad;
    y[j] = !prefix && j + 1 < n && s->mask[j + 1] ? s->ids[j + 1] : x->ignore;
  }
  memset(px, 0, (size_t)x->K * tile * sizeof *px);
  int at = 0;
  for (int k = 0; s && k < s->nimg; k++) {
    MmrtImage im;
    float *t = NULL;
    int nt = 0;
    MmrtTileGrid g;
    char e[1024];
    if (mmrt_image_read(s->paths[k], 0, &im, e, sizeof e) != 0) {
      fprintf(stderr, "trainer: warning: %s: its tiles left zero\n", e);
      at += 0;
      continue;
    }
    if (mmrt_image_internvl(&im, (int)x->S, x->max_tiles, mmrt_image_imagenet_mean,
                            mmrt_image_imagenet_std, &t, &nt, &g, e, sizeof e) == 0) {
      if (at + nt > x->K) nt = (int)x->K - at;
      memcpy(px + (size_t)at * tile, t, (size_t)nt * tile * sizeof *px);
      at += nt;
    } else
      fprintf(stderr, "trainer: warning: %s: its tiles left zero\n", e);
    free(t);
    mmrt_image_free(&im);
  }
}

static void lay_rows(const Conv *x, const Set *set, const MmrtBatchIter *it, int64_t rows,
                     Block *b) {
  size_t tiles = (size_t)x->K * 3 * (size_t)x->S * (size_t)x->S;
  for (int64_t k = b->lo; k < b->lo + b->n; k++) {
    int64_t r = k - b->lo;
    b->sample[r] = k < rows ? mmrt_iter_index(it, k) : -1;
    lay_one(x, b->sample[r] >= 0 ? &set->s[b->sample[r]] : NULL, b->text + r * x->T,
            b->y + r * x->T, b->px + (size_t)r * tiles, 0);
  }
}

static void *loader_thread(void *arg) {
  Conv *x = arg;
  pthread_mutex_lock(&x->mu);
  for (;;) {
    while (!x->work && !x->quit) pthread_cond_wait(&x->cv, &x->mu);
    if (x->quit) break;
    pthread_mutex_unlock(&x->mu);
    int64_t rows = mmrt_iter_next(&x->shadow);
    for (int i = 0; i < x->nblk; i++) lay_rows(x, &x->train, &x->shadow, rows, &x->blk[i]);
    pthread_mutex_lock(&x->mu);
    x->work = 0, x->ready = 1;
    pthread_cond_broadcast(&x->cv);
  }
  pthread_mutex_unlock(&x->mu);
  return NULL;
}

static int block_alloc(const Conv *x, Block *b, int64_t n) {
  size_t cells = (size_t)n * (size_t)x->T,
         tiles = (size_t)n * (size_t)x->K * 3 * (size_t)x->S * (size_t)x->S;
  b->sample = malloc((size_t)n * sizeof *b->sample);
  b->text = malloc(cells * sizeof *b->text), b->y = malloc(cells * sizeof *b->y);
  b->px = malloc(tiles * sizeof *b->px);
  b->n = n;
  if (b->sample && b->text && b->y && b->px) return 1;
  free(b->sample), free(b->text), free(b->y), free(b->px);
  memset(b, 0, sizeof *b);
  return 0;
}

static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Conv *x = c->priv;
  x->cur_epoch = -1;
  if (mmrt_iter_init(&x->shadow, &c->train, c->it.batch, 1, c->seed, err, errlen) != MMRT_OK)
    return 1;
  x->has_shadow = 1;
  if (pthread_create(&x->th, NULL, loader_thread, x) != 0)
    return snprintf(err, errlen, "cannot start the loader thread"), 1;
  x->has_thread = 1;
  return 0;
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  (void)sample0;
  Conv *x = c->priv;
  int32_t *text = mmrt_feed_at(c, c->batch[TEXT]), *y = mmrt_feed_at(c, c->batch[Y]);
  float *px = mmrt_feed_at(c, c->batch[PX]);
  Block here = {c->lo, c->rows, x->here, text, y, px};
  if (!x->has_thread || eval) {
    lay_rows(x, eval && c->text->eval_data ? &x->eval : &x->train, it, rows, &here);
    return;
  }
  size_t tiles = (size_t)x->K * 3 * (size_t)x->S * (size_t)x->S;
  pthread_mutex_lock(&x->mu);
  while (x->work) pthread_cond_wait(&x->cv, &x->mu);
  if (it->epoch != x->cur_epoch || it->cur_start != x->cur_start)
    x->cur_epoch = it->epoch, x->cur_start = it->cur_start, x->fills = 0;
  x->fills++;
  int hit = 0;
  for (int i = 0; x->ready && i < x->nblk && !hit; i++) {
    Block *b = &x->blk[i];
    if (b->lo != c->lo || b->n != c->rows) continue;
    hit = 1;
    for (int64_t r = 0; r < b->n && hit; r++)
      hit = b->sample[r] == (c->lo + r < rows ? mmrt_iter_index(it, c->lo + r) : -1);
    if (hit) {
      size_t cells = (size_t)b->n * (size_t)x->T;
      memcpy(text, b->text, cells * sizeof *text), memcpy(y, b->y, cells * sizeof *y);
      memcpy(px, b->px, (size_t)b->n * tiles * sizeof *px);
    }
  }
  if (!hit) lay_rows(x, &x->train, it, rows, &here);
  int known = 0;
  for (int i = 0; i < x->nblk; i++) known |= x->blk[i].lo == c->lo && x->blk[i].n == c->rows;
  if (!known && x->nblk < MAX_BLOCKS && block_alloc(x, &x->blk[x->nblk], c->rows))
    x->blk[x->nblk++].lo = c->lo;
  if (x->fills >= x->nblk) { /* the batch's last block: stage the next batch */
    char st[256], e[256];
    mmrt_iter_state(it, st, sizeof st);
    mmrt_iter_restore(&x->shadow, st, e, sizeof e);
    x->ready = 0, x->work = 1;
    pthread_cond_broadcast(&x->cv);
  }
  pthread_mutex_unlock(&x->mu);
}

/* The start of sample s's last reply (the last run of mask 1s), 0: none. */
static int32_t last_reply(const Sample *s) {
  int32_t j = s->len;
  while (j > 0 && !s->mask[j - 1]) j--;
  while (j > 0 && s->mask[j - 1]) j--;
  return j;
}

/* Greedy generation of each evaluation sample's last reply (one eval step
 * per token; the model is causal), scored by exact match with the file's. */
static int exact_match(MmrtFeedCtx *c, double *rate, char *err, size_t errlen) {
  Conv *x = c->priv;
  const Set *set = c->text->eval_data ? &x->eval : &x->train;
  MmrtMesh *mesh = c->mesh;
  const int64_t B = c->rows, T = c->T;
  int32_t *text = mmrt_feed_at(c, c->batch[TEXT]), *y = mmrt_feed_at(c, c->batch[Y]);
  float *px = mmrt_feed_at(c, c->batch[PX]);
  size_t tiles = (size_t)x->K * 3 * (size_t)x->S * (size_t)x->S;
  int32_t *len = calloc((size_t)B, sizeof *len), *best = calloc((size_t)(B * T), sizeof *best),
          *gen = calloc((size_t)(B * T), sizeof *gen), *ng = calloc((size_t)B, sizeof *ng);
  int64_t *who = calloc((size_t)B, sizeof *who);
  int64_t matches = 0, counted = 0, batches = 0;
  err[0] = 0;
  int rc = !len || !best || !gen || !ng || !who
               ? mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory")
               : mmrt_feed_restart_eval(c, err, errlen);
  while (!rc && !(c->stop && c->stop(c))) {
    int64_t rows = mmrt_iter_next(&c->eval_it);
    if (rows == 0 || (c->eval_batches >= 0 && batches >= c->eval_batches)) break;
    for (int64_t r = 0; r < B; r++) {
      int64_t k = c->lo + r;
      who[r] = k < rows ? mmrt_iter_index(&c->eval_it, k) : -1;
      const Sample *s = who[r] >= 0 ? &set->s[who[r]] : NULL;
      len[r] = s ? last_reply(s) : 0;
      if (s && len[r] == 0) who[r] = -1;
      lay_one(x, who[r] >= 0 ? s : NULL, text + r * T, y + r * T, px + (size_t)r * tiles,
              len[r] > 0 ? len[r] : 0);
      for (int64_t j = 0; j < T; j++) y[r * T + j] = x->ignore;
    }
    memset(ng, 0, (size_t)B * sizeof *ng);
    for (int active = 1; active && !rc;) {
      rc = c->step(c, c->m->eval_step, "the evaluation step (generating replies)");
      if (!rc) mmrt_feed_argmax(c, best, 0);
      active = 0;
      for (int64_t r = 0; r < B && !rc; r++) {
        if (who[r] < 0 || len[r] == 0 || len[r] > T) continue;
        const Sample *s = &set->s[who[r]];
        int32_t tok = best[r * T + len[r] - 1], end = s->ids[s->len - 1];
        gen[r * T + ng[r]++] = tok;
        /* past the reply's length it can match no more: stop there */
        if (tok != end && len[r] < T && ng[r] < s->len - last_reply(s)) {
          text[r * T + len[r]++] = tok;
          active = 1;
        } else
          len[r] = (int32_t)T + 1;
      }
      if (mesh)
        if (mmrt_all_reduce_mpi(mesh, MMRT_AXIS_WORLD, &active, 1, MPI_INT, MPI_MAX,
                                "the generation loop's flag (all-reduce)") != MMRT_OK)
          mmrt_feed_comm_fail(c);
    }
    for (int64_t r = 0; r < B; r++) {
      if (who[r] < 0) continue;
      const Sample *s = &set->s[who[r]];
      int32_t a = last_reply(s), n = s->len - a;
      counted++;
      matches += ng[r] == n && !memcmp(gen + r * T, s->ids + a, (size_t)n * sizeof *gen);
    }
    batches++;
  }
  if (mesh) {
    int64_t v[2] = {matches, counted};
    if (mmrt_all_reduce_mpi(mesh, MMRT_AXIS_DP, v, 2, MPI_INT64_T, MPI_SUM,
                            "the reply match counts (all-reduce)") != MMRT_OK)
      mmrt_feed_comm_fail(c);
    matches = v[0], counted = v[1];
  }
  free(len), free(best), free(gen), free(ng), free(who);
  *rate = counted ? (double)matches / (double)counted : 0;
  return rc;
}

static void close_(MmrtFeedCtx *c) {
  Conv *x = c->priv;
  if (!x) return;
  if (x->has_thread) {
    pthread_mutex_lock(&x->mu);
    x->quit = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->th, NULL);
  }
  for (int i = 0; i < MAX_BLOCKS; i++)
    free(x->blk[i].sample), free(x->blk[i].text), free(x->blk[i].y), free(x->blk[i].px);
  if (x->has_shadow) mmrt_iter_free(&x->shadow);
  set_free(&x->train), set_free(&x->eval);
  free(x->here);
  pthread_mutex_destroy(&x->mu);
  pthread_cond_destroy(&x->cv);
  free(x);
  c->priv = NULL;
}

const MmrtFeeder mmrt_feed_conv = {
    .name = "conversation",
    .format = MMRT_FMT_CONVERSATION,
    .inputs = "pixels F32[B, K, 3, S, S], text and labels I32[B, T] with --data FILE.jsonl "
              "--images DIR --tokenizer FILE",
    .bind = bind,
    .open = open,
    .start = start,
    .fill = fill,
    .metric = exact_match,
    .metric_key = "eval_reply_exact_match",
    .metric_words = "reply exact match",
    .close = close_,
};
