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
 * order) greedily and reports the rate of exact matches.
 *
 * A model may take `tiles` instead of `pixels` (same shape): one pool of
 * tiles for this rank's rows, each row's tiles after the row before's, for
 * `place(..., flat = true)`. A trainer compiled with --tile-buckets runs
 * each training step on the smallest bucket holding this rank's tiles
 * (mmrt_buckets.h; run_train), and under dp a pool's samples are dealt to
 * the ranks by tiles (balance(); --no-tile-balance: batch order).
 * docs/architecture.md "Data", docs/conversations.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_buckets.h"
#include "mmrt_comm.h"
#include "mmrt_conv.h"
#include "mmrt_feed.h"
#include "mmrt_image.h"
#include "mmrt_loader.h"
#include "mmrt_stage.h"

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

typedef struct Conv {
  Set train, eval;
  int64_t T, K, S;
  int32_t ignore, pad;
  int max_tiles;
  int pool;         /* input tiles: one pool of tiles for this rank's rows (place flat) */
  MmrtStage *stage; /* the loader thread (training batches) */
  /* tile buckets (mmrt_buckets.h): the trainer's programs at K[i] < K
   * slots, ascending, each its own input arena; cur the one this batch
   * runs on (-1: the model's own), steps[i] the steps each ran (nb: the
   * model's) */
  const MmrtModelDesc *const *bk;
  int nb, cur;
  int64_t bK[8], steps[9];
  char *bin[8];
  /* encoder balance (a tile pool under dp > 1, not --no-tile-balance): the
   * batch's samples dealt to the dp ranks by tile count (balance());
   * dp the ranks, B the global batch, perm[4 B] scratch (the loader
   * thread's half, fill's half); load[] this rank's tiles of the first
   * steps (the report at close) */
  int balance;
  int64_t dp, B, *perm, load[64], nload;
} Conv;

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *px = mmrt_desc_input(m, MMRT_IN(CONV_PIXELS)),
                       *pool = mmrt_desc_input(m, MMRT_IN(CONV_TILES)),
                       *text = mmrt_desc_input(m, MMRT_IN(CONV_TEXT)),
                       *lb = mmrt_desc_input(m, MMRT_IN(CONV_LABELS));
  const int64_t img[5] = {c->B, -1, 3, -1, -1}, tok[2] = {c->B, -1};
  if (!px == !pool) return 0; /* pixels (K slots a row) or tiles (a pool), one of them */
  if (!px) px = pool;
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
    snprintf(
        err, errlen,
        "%s: the tokenizer's image context token is id %d, but model %s places its image "
        "features at token %lld (recompile with --set IMG=%d, or the --chat family whose image "
        "token the model was compiled for)",
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
        char at[32] = "";
        if (s.line) snprintf(at, sizeof at, ":%zu", s.line);
        if (pre[0])
          snprintf(e, sizeof e, "%s%s: sample %zu (id \"%s\"): %s", path, at, s.index, s.id, pre);
        else
          snprintf(e, sizeof e,
                   "%s%s: sample %zu (id \"%s\"): %d tiles (%d image tokens) exceed the model's "
                   "%lld tiles per sample",
                   path, at, s.index, s.id, tiles, tiles * o.tokens_per_tile, (long long)x->K);
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

static void lay_rows(void *priv, const MmrtBatchIter *it, int64_t rows, int64_t lo, int64_t n,
                     int64_t *sample, void *const *buf);
static void balance(const Conv *x, const MmrtBatchIter *it, int64_t rows, int64_t *perm,
                    int64_t *tmp);
static int64_t row_sample(const Conv *x, const MmrtBatchIter *it, int64_t rows, const int64_t *perm,
                          int64_t k);

/* The trainer's tile buckets (mmc compile --tile-buckets), each checked
 * against the model and given its input arena; their K in the note. */
static int open_buckets(MmrtFeedCtx *c, Conv *x, int at, char *err, size_t errlen) {
  x->cur = -1;
  x->B = c->B, x->dp = c->rows > 0 ? c->B / c->rows : 1;
  int can = x->pool && x->dp > 1 && x->dp <= 64 && x->B <= 512 && c->B % c->rows == 0 &&
            c->m->micro_batches <= 1;
  if (c->text->no_tile_balance && !can)
    return snprintf(err, errlen,
                    "--no-tile-balance: model %s has no encoder balance to turn off (it deals "
                    "the samples of a tile pool, input tiles, over dp > 1 ranks)",
                    c->m->name),
           1;
  x->balance = can && !c->text->no_tile_balance;
  if (x->balance && !(x->perm = malloc(4 * (size_t)x->B * sizeof *x->perm)))
    return snprintf(err, errlen, "out of memory"), 1;
  x->bk = mmrt_tile_buckets(&x->nb);
  if (x->nb > 8) x->nb = 8;
  for (int i = 0; i < x->nb; i++) {
    const MmrtModelDesc *b = x->bk[i];
    char e[256];
    x->bK[i] = mmrt_bucket_dim(b, c->batch[PX]->name, 1);
    e[0] = 0;
    if (mmrt_bucket_check(c->m, b, e, sizeof e) ||
        mmrt_bucket_dim(b, c->batch[PX]->name, 3) != x->S || x->bK[i] < 1 || x->bK[i] >= x->K ||
        (i > 0 && x->bK[i] <= x->bK[i - 1]))
      return snprintf(err, errlen, "tile bucket %d (K = %lld) does not fit model %s: %s", i + 1,
                      (long long)x->bK[i], c->m->name, e),
             1;
    size_t n = ((size_t)b->arena_bytes[MMRT_ARENA_INPUT] + 63) / 64 * 64;
    if (!(x->bin[i] = aligned_alloc(64, n ? n : 64)))
      return snprintf(err, errlen, "out of memory"), 1;
    memset(x->bin[i], 0, n ? n : 64);
    at += snprintf(c->note + at, sizeof c->note - (size_t)at, "%s%lld",
                   i ? ", " : "; tile buckets K = ", (long long)x->bK[i]);
    if (at >= (int)sizeof c->note) at = (int)sizeof c->note - 1;
  }
  if (x->nb) snprintf(c->note + at, sizeof c->note - (size_t)at, ", %lld", (long long)x->K);
  return 0;
}

/* MmrtFeedCtx.run_train: the step on the bucket fill chose. */
static int run_bucket(MmrtFeedCtx *c, uint64_t seed, void *mesh) {
  Conv *x = c->priv;
  return mmrt_bucket_run(c->m, x->bk[x->cur], c->arenas, x->bin[x->cur],
                         x->pool ? c->batch[PX]->name : NULL, seed, mesh);
}

/* The smallest bucket whose K holds the tiles of each of this rank's rows
 * of the batch (a pool: whose rows x K hold the rows' tiles); -1: none, the
 * model's own. */
static void pick_bucket(MmrtFeedCtx *c, Conv *x, const MmrtBatchIter *it, int64_t rows) {
  int64_t most = 0, sum = 0, *perm = NULL;
  if (x->balance) balance(x, it, rows, perm = x->perm + 2 * x->B, x->perm + 3 * x->B);
  for (int64_t r = 0; r < c->rows; r++) {
    int64_t i = row_sample(x, it, rows, perm, c->lo + r);
    if (i >= 0 && x->train.s[i].tiles > most) most = x->train.s[i].tiles;
    if (i >= 0) sum += x->train.s[i].tiles;
  }
  if (x->nload < 64) x->load[x->nload++] = sum;
  if (x->pool) most = (sum + c->rows - 1) / c->rows;
  x->cur = -1;
  for (int i = 0; i < x->nb && x->cur < 0; i++)
    if (x->bK[i] >= most) x->cur = i;
  x->steps[x->cur < 0 ? x->nb : x->cur]++;
  c->run_train = x->cur >= 0 ? run_bucket : NULL;
}

static int open(MmrtFeedCtx *c, const char *spec, char *err, size_t errlen) {
  Conv *x = calloc(1, sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory"), 1;
  c->priv = x;
  const MmrtTensorDesc *px = c->batch[PX];
  x->T = c->T, x->K = px->shape[1], x->S = px->shape[3];
  x->pool = !strcmp(px->name, MMRT_IN(CONV_TILES));
  x->ignore = (int32_t)c->m->ignore_index;
  x->max_tiles = c->text->max_tiles ? (int)c->text->max_tiles : (int)(x->K > 1 ? x->K - 1 : 1);
  size_t row = (size_t)c->T * sizeof(int32_t),
         bytes[3] = {(size_t)(x->K * 3 * x->S * x->S) * sizeof(float), row, row};
  if (!(x->stage = mmrt_stage_new(3, bytes, c->rows, lay_rows, x)))
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
  int at = snprintf(c->note, sizeof c->note,
                    "%lld conversations (%lld tiles of %lldx%lld, at most %lld a sample of the "
                    "model's %lld slots), %lld skipped; evaluation on %lld",
                    (long long)x->train.n, (long long)tiles, (long long)x->S, (long long)x->S,
                    (long long)most, (long long)x->K, (long long)c->skipped, (long long)ev->n);
  return open_buckets(c, x, at, err, errlen);
}

/* Sample s (NULL: padding) into row r of a block of n rows: text, labels,
 * and its tiles into px (the block's, zeroed) from tile *at: slot r * K of
 * the row's K slots, or in a tile pool (x->pool) the next free one, tiles
 * before *at taken by the rows before. prefix > 0: the text up to the last
 * reply only, no labels (generation). */
static void lay_one(const Conv *x, const Sample *s, int32_t *text, int32_t *y, float *px, int64_t r,
                    int64_t nrows, int64_t *at_, int32_t prefix) {
  if (!x->pool) *at_ = r * x->K;
  int64_t at = *at_, lim = x->pool ? nrows * x->K : (r + 1) * x->K;
  int32_t n = s ? (prefix > 0 ? prefix : s->len) : 0;
  for (int64_t j = 0; j < x->T; j++) {
    text[j] = j < n ? s->ids[j] : x->pad;
    y[j] = !prefix && j + 1 < n && s->mask[j + 1] ? s->ids[j + 1] : x->ignore;
  }
  if (s) mmrt_image_tiles_into(s->paths, s->nimg, (int)x->S, x->max_tiles, px, &at, lim, "trainer");
  *at_ = at;
}

/* Encoder balance (MindSpeed-MM's encoder DP balance): rows [0, B) of the
 * batch `it` stands at (rows of them real, the rest padding, -1) dealt to
 * dp ranks of B / dp rows each so that their tiles are even: the samples
 * by tiles, most first (ties: the earlier row), each to the rank with the
 * fewest tiles so far that has a row free (ties: the lower rank); each
 * rank's rows in batch order. perm[r * B / dp + j] is the batch row that
 * rank r lays out as its row j. A function of the batch alone (the seed's
 * shuffle): every rank computes the same. tests/conv_buckets.sh holds it
 * to a Python reference. */
static void balance(const Conv *x, const MmrtBatchIter *it, int64_t rows, int64_t *perm,
                    int64_t *tmp) {
  int64_t B = x->B, dp = x->dp, per = B / dp, load[64] = {0}, fill[64] = {0};
  for (int64_t k = 0; k < B; k++) tmp[k] = k;
  int64_t tiles[512];
  for (int64_t k = 0; k < B; k++) {
    int64_t i = k < rows ? mmrt_iter_index(it, k) : -1;
    tiles[k] = i >= 0 ? x->train.s[i].tiles : -1; /* padding after every real sample */
  }
  for (int64_t a = 1; a < B; a++) /* insertion sort: most tiles first, stable */
    for (int64_t b = a; b > 0 && tiles[tmp[b]] > tiles[tmp[b - 1]]; b--) {
      int64_t t = tmp[b];
      tmp[b] = tmp[b - 1], tmp[b - 1] = t;
    }
  int64_t *own = perm; /* rank r's rows, in the order dealt, then sorted */
  for (int64_t j = 0; j < B; j++) {
    int64_t best = -1;
    for (int64_t r = 0; r < dp; r++)
      if (fill[r] < per && (best < 0 || load[r] < load[best])) best = r;
    own[best * per + fill[best]++] = tmp[j];
    load[best] += tiles[tmp[j]] > 0 ? tiles[tmp[j]] : 0;
  }
  for (int64_t r = 0; r < dp; r++) /* each rank's rows in batch order */
    for (int64_t a = 1; a < per; a++)
      for (int64_t b = a; b > 0 && own[r * per + b] < own[r * per + b - 1]; b--) {
        int64_t t = own[r * per + b];
        own[r * per + b] = own[r * per + b - 1], own[r * per + b - 1] = t;
      }
}

/* The sample of row k of this rank's share of the batch (k in the batch's
 * rows, lo..lo + rows of the rank) after balance (perm), or -1. */
static int64_t row_sample(const Conv *x, const MmrtBatchIter *it, int64_t rows, const int64_t *perm,
                          int64_t k) {
  int64_t j = perm ? perm[k] : k;
  return j < rows ? mmrt_iter_index(it, j) : -1;
}

/* MmrtStageLay: rows [lo, lo + n) of the training set into buf = {pixels,
 * text, labels} (an evaluation's rows are laid out by fill itself). */
static void lay_rows(void *priv, const MmrtBatchIter *it, int64_t rows, int64_t lo, int64_t n,
                     int64_t *sample, void *const *buf) {
  const Conv *x = priv;
  size_t tiles = (size_t)x->K * 3 * (size_t)x->S * (size_t)x->S;
  memset(buf[0], 0, (size_t)n * tiles * sizeof(float));
  int64_t at = 0, *perm = NULL;
  if (x->balance) balance(x, it, rows, perm = x->perm, x->perm + x->B); /* the loader's */
  for (int64_t k = lo; k < lo + n; k++) {
    int64_t r = k - lo, i = row_sample(x, it, rows, perm, k);
    /* sample[] is the stage's check that the batch staged is the one asked
     * for: the batch's own rows, whatever balance deals this rank */
    sample[r] = k < rows ? mmrt_iter_index(it, k) : -1;
    lay_one(x, i >= 0 ? &x->train.s[i] : NULL, (int32_t *)buf[1] + r * x->T,
            (int32_t *)buf[2] + r * x->T, buf[0], r, n, &at, 0);
  }
}

static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Conv *x = c->priv;
  return mmrt_stage_start(x->stage, &c->train, c->it.batch, c->seed, err, errlen);
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  (void)sample0;
  Conv *x = c->priv;
  float *px = mmrt_feed_at(c, c->batch[PX]);
  int32_t *text = mmrt_feed_at(c, c->batch[TEXT]), *y = mmrt_feed_at(c, c->batch[Y]);
  if (!eval) {
    mmrt_stage_fill(x->stage, it, rows, c->lo, c->rows, (void *const[3]){px, text, y});
    pick_bucket(c, x, it, rows);
    return;
  }
  c->run_train = NULL;
  const Set *set = c->text->eval_data ? &x->eval : &x->train; /* laid out here */
  size_t tiles = (size_t)x->K * 3 * (size_t)x->S * (size_t)x->S;
  memset(px, 0, (size_t)c->rows * tiles * sizeof *px);
  int64_t at = 0;
  for (int64_t r = 0; r < c->rows; r++) {
    int64_t k = c->lo + r, i = k < rows ? mmrt_iter_index(it, k) : -1;
    lay_one(x, i >= 0 ? &set->s[i] : NULL, text + r * x->T, y + r * x->T, px, r, c->rows, &at, 0);
  }
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
    memset(px, 0, (size_t)B * tiles * sizeof *px);
    int64_t at = 0;
    for (int64_t r = 0; r < B; r++) {
      int64_t k = c->lo + r;
      who[r] = k < rows ? mmrt_iter_index(&c->eval_it, k) : -1;
      const Sample *s = who[r] >= 0 ? &set->s[who[r]] : NULL;
      len[r] = s ? last_reply(s) : 0;
      if (s && len[r] == 0) who[r] = -1;
      lay_one(x, who[r] >= 0 ? s : NULL, text + r * T, y + r * T, px, r, B, &at,
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
  if (x->nb && c->loud) {
    fprintf(stderr, "trainer: steps by tile bucket (rank 0):");
    for (int i = 0; i <= x->nb; i++)
      fprintf(stderr, " K=%lld %lld", (long long)(i < x->nb ? x->bK[i] : x->K),
              (long long)x->steps[i]);
    fprintf(stderr, "\n");
  }
  if (x->nb || x->balance) { /* every rank: its tiles a step (the balance), one write */
    char line[2048];
    int n = snprintf(line, sizeof line, "trainer: rank %lld of dp %lld: tiles a step",
                     (long long)(c->lo / (c->rows ? c->rows : 1)), (long long)x->dp);
    for (int64_t i = 0; i < x->nload && n < (int)sizeof line - 64; i++)
      n += snprintf(line + n, sizeof line - (size_t)n, " %lld", (long long)x->load[i]);
    MmrtOverlapStats o = mmrt_comm_overlap_stats(); /* the time this rank waited for others */
    snprintf(line + n, sizeof line - (size_t)n, "%s; %.1f ms blocked in collectives\n",
             x->balance ? " (balanced)" : "", 1e3 * (o.wait_s + o.blocking_s + o.reduce_s));
    fputs(line, stderr);
  }
  for (int i = 0; i < x->nb; i++) free(x->bin[i]);
  free(x->perm);
  c->run_train = NULL;
  mmrt_stage_free(x->stage);
  set_free(&x->train), set_free(&x->eval);
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
