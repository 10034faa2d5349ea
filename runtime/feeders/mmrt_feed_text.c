/* mmrt_feed_text.c: language modelling on the user's own text.
 *
 * Inputs ids and labels i32[B, T] (and, when the model takes them, seg
 * i32[B, T]: each token's document within its row, 0, 1, ..., the padding
 * a segment of its own; pos i32[B, T]: its position within its document),
 * when --data names text: a JSONL file (a "text" field, or
 * chat "messages"; --tokenizer tokenizer.json turns it into ids), a
 * Megatron indexed dataset's PREFIX (PREFIX.bin + PREFIX.idx), or a blend
 * W1:A,W2:B,... of those. A directory keeps its Fashion-MNIST meaning (the
 * next-pixel task). mmrt_loader.h lays the documents out into rows; a
 * sample of the trainer's iterator is a row, so the rows are shuffled per
 * epoch from the seed, a checkpoint's data position resumes with the next
 * unseen row, and each rank reads only its own rows. Evaluation runs on
 * the same rows in file order.
 *
 * The trainer's text flags are rows of its flag table (mmrt_main.c);
 * mmrt_text_settle derives what the feeder reads from them, and
 * mmrt_feed_bind refuses them when no text feeder takes the data. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_loader.h"
#include "mmrt_vfiles.h"
#include "mmrt_feed.h"

enum { IDS, Y, SEG, POS }; /* c->batch[] */

int mmrt_text_settle(MmrtTextOpts *o, int argc, char **argv) {
  static const char *const names[] = {"--tokenizer", "--seq-len",  "--pack",
                                      "--no-pack",   "--too-long", "--bad-samples"};
  if (o->pack_on && o->pack_off)
    return fprintf(stderr, "trainer: error: --pack and --no-pack together\n"), 1;
  o->pack = o->pack_on ? 1 : o->pack_off ? -1 : 0;
  /* first: the first text flag, but --bad-samples only when no other is
   * given (video files take it too: mmrt_feeders.c) */
  for (int i = 1; i < argc; i++)
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
      size_t n = strlen(names[k]);
      if (!strncmp(argv[i], names[k], n) && (argv[i][n] == 0 || argv[i][n] == '=') &&
          (!o->given || (!strcmp(o->first, "--bad-samples") && strcmp(names[k], "--bad-samples"))))
        o->given = 1, o->first = names[k];
    }
  return 0;
}

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  if (!mmrt_loader_is_text(c->data)) return 0;
  const MmrtTensorDesc *ids = mmrt_desc_input(m, MMRT_IN(TEXT_IDS)),
                       *lb = mmrt_desc_input(m, MMRT_IN(TEXT_LABELS)),
                       *seg = mmrt_desc_input(m, MMRT_IN(TEXT_SEG)),
                       *pos = mmrt_desc_input(m, MMRT_IN(TEXT_POS));
  const int64_t tok[2] = {c->B, -1};
  if (!mmrt_feed_is(ids, MMRT_ST_I32, 2, tok) || !lb ||
      !mmrt_feed_is(lb, MMRT_ST_I32, 2, ids->shape)) {
    if (mmrt_vfiles_is(c->data)) return 0; /* perhaps a list of videos (mmrt_feed_vfiles.c) */
    snprintf(err, errlen,
             "--data %s is text; model %s takes no ids and labels i32[%lld, T] (a folder is "
             "Fashion-MNIST)",
             c->data, m->name, (long long)c->B);
    return -1;
  }
  for (int i = 0; i < 2; i++) {
    const MmrtTensorDesc *d = i ? pos : seg;
    if (d && !mmrt_feed_is(d, MMRT_ST_I32, 2, ids->shape)) {
      snprintf(err, errlen, "model %s: input %s must be i32[%lld, %lld] like ids", m->name, d->name,
               (long long)ids->shape[0], (long long)ids->shape[1]);
      return -1;
    }
  }
  if (pos && !seg) {
    snprintf(err, errlen, "model %s takes pos (positions within a packed document) but no seg",
             m->name);
    return -1;
  }
  c->batch[IDS] = ids, c->batch[Y] = c->labels = lb, c->nbatch = 2;
  if (seg) c->batch[SEG] = seg, c->nbatch = 3;
  if (pos) c->batch[POS] = pos, c->nbatch = 4;
  c->T = ids->shape[1];
  if (c->text->seq_len && c->text->seq_len != c->T) {
    snprintf(err, errlen,
             "--seq-len %lld: model %s reads rows of T = %lld tokens (recompile with `mmc compile "
             "... --set T=%lld`)",
             (long long)c->text->seq_len, m->name, (long long)c->T, (long long)c->text->seq_len);
    return -1;
  }
  if (c->text->pack > 0 && !seg) {
    /* packed rows without seg: documents would see each other (no per-document mask) */
    snprintf(err, errlen,
             "--pack: model %s takes no seg input, so its attention would cross the documents of "
             "a packed row; use a packed model (GPT2TinyPacked) or --no-pack",
             m->name);
    return -1;
  }
  return 1;
}

/* The loader thread: while the step runs, it lays out the rows this rank
 * will fill for the next training batch (each block of rows the trainer
 * filled for this batch, at the same lo: a micro-batch each) into staging;
 * fill copies a block when its samples are the ones asked for and lays
 * them out itself otherwise, so what the step reads never depends on the
 * thread's timing. The thread follows the trainer's iterator with a
 * shadow of it (the same seed and position, one batch ahead). */
#define MAX_BLOCKS 64

typedef struct Block {
  int64_t lo, n;   /* rows [lo, lo + n) of the batch */
  int64_t *sample; /* their samples (-1: padding) */
  int32_t *ids, *y, *seg, *pos;
} Block;

typedef struct Text {
  MmrtLoader *l;
  int64_t T;
  int32_t ignore;
  int has_seg, has_pos;
  /* the blocks filled for the current batch (their lo and n) and staged for the next */
  Block blk[MAX_BLOCKS];
  int nblk;
  int64_t cur_epoch, cur_start; /* the trainer's batch filled last */
  int64_t fills, hits;
  int64_t *here;
  /* the samples of the rows fill lays out itself (c->rows) */ /* blocks filled of that batch;
                                                                  blocks found staged in all */
  MmrtBatchIter shadow; /* the trainer's iterator's copy the thread advances */
  int has_shadow;
  pthread_t th;
  int has_thread, quit, work, ready; /* work: a batch to stage; ready: staged */
  pthread_mutex_t mu;
  pthread_cond_t cv;
} Text;

static void lay_rows(const Text *x, const MmrtBatchIter *it, int64_t rows, Block *b) {
  for (int64_t k = b->lo; k < b->lo + b->n; k++) {
    int64_t r = k - b->lo;
    int32_t *ir = b->ids + r * x->T, *lr = b->y + r * x->T,
            *sr = x->has_seg ? b->seg + r * x->T : 0, *pr = x->has_pos ? b->pos + r * x->T : 0;
    b->sample[r] = k < rows ? mmrt_iter_index(it, k) : -1;
    if (b->sample[r] >= 0) {
      mmrt_loader_row(x->l, b->sample[r], ir, lr, sr, pr);
      continue;
    }
    for (int64_t j = 0; j < x->T; j++) {
      ir[j] = 0, lr[j] = x->ignore;
      if (sr) sr[j] = 0;
      if (pr) pr[j] = (int32_t)j;
    }
  }
}

static void *loader_thread(void *arg) {
  Text *x = arg;
  pthread_mutex_lock(&x->mu);
  for (;;) {
    while (!x->work && !x->quit) pthread_cond_wait(&x->cv, &x->mu);
    if (x->quit) break;
    pthread_mutex_unlock(&x->mu);
    int64_t rows = mmrt_iter_next(&x->shadow); /* the next training batch */
    for (int i = 0; i < x->nblk; i++) lay_rows(x, &x->shadow, rows, &x->blk[i]);
    pthread_mutex_lock(&x->mu);
    x->work = 0, x->ready = 1;
    pthread_cond_broadcast(&x->cv);
  }
  pthread_mutex_unlock(&x->mu);
  return NULL;
}

static int block_alloc(const Text *x, Block *b, int64_t n) {
  size_t cells = (size_t)n * (size_t)x->T;
  b->sample = malloc((size_t)n * sizeof *b->sample);
  b->ids = malloc(cells * sizeof *b->ids), b->y = malloc(cells * sizeof *b->y);
  b->seg = x->has_seg ? malloc(cells * sizeof *b->seg) : NULL;
  b->pos = x->has_pos ? malloc(cells * sizeof *b->pos) : NULL;
  b->n = n;
  if (b->sample && b->ids && b->y && (b->seg || !x->has_seg) && (b->pos || !x->has_pos)) return 1;
  free(b->sample), free(b->ids), free(b->y), free(b->seg), free(b->pos);
  memset(b, 0, sizeof *b);
  return 0;
}

static void block_free(Block *b) {
  free(b->sample), free(b->ids), free(b->y), free(b->seg), free(b->pos);
  memset(b, 0, sizeof *b);
}

static int open(MmrtFeedCtx *c, const char *spec, char *err, size_t errlen) {
  MmrtTextOpts o = *c->text;
  if (!o.pack) o.pack = c->batch[SEG] ? 1 : -1; /* packed when the model masks documents */
  Text *x = calloc(1, sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory"), 1;
  c->priv = x;
  pthread_mutex_init(&x->mu, NULL);
  pthread_cond_init(&x->cv, NULL);
  if (!(x->here = malloc((size_t)c->rows * sizeof *x->here)))
    return snprintf(err, errlen, "out of memory"), 1;
  x->T = c->T, x->has_seg = c->batch[SEG] != NULL, x->has_pos = c->batch[POS] != NULL;
  x->ignore = (int32_t)c->m->ignore_index;
  x->l = mmrt_loader_open(spec, &o, c->T, mmrt_feed_classes(c->m), (int32_t)c->m->ignore_index, err,
                          errlen);
  if (!x->l) return 1;
  int64_t n = mmrt_loader_samples(x->l);
  if (n < c->B) {
    snprintf(err, errlen, "%lld rows of text, fewer than the batch of %lld", (long long)n,
             (long long)c->B);
    return 1;
  }
  c->train.n = c->test.n = n; /* the iterators' samples are rows (no pixels) */
  c->skipped = mmrt_loader_skipped(x->l);
  c->count_skipped = o.bad_samples && !strcmp(o.bad_samples, "skip");
  mmrt_loader_describe(x->l, c->note, sizeof c->note);
  return 0;
}

/* Once the seed and the iterator's position are final (a resume's). */
static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Text *x = c->priv;
  x->cur_epoch = -1;
  if (mmrt_iter_init(&x->shadow, &c->train, c->it.batch, 1, c->seed, err, errlen) != MMRT_OK)
    return 1;
  x->has_shadow = 1;
  if (pthread_create(&x->th, NULL, loader_thread, x) != 0)
    return snprintf(err, errlen, "cannot start the loader thread"), 1;
  x->has_thread = 1;
  return 0;
}

/* The shadow at the trainer's batch (after a batch the thread did not stage). */
static void resync(Text *x, const MmrtBatchIter *it) {
  char st[256], e[256];
  mmrt_iter_state(it, st, sizeof st);
  mmrt_iter_restore(&x->shadow, st, e, sizeof e);
}

/* An indexed dataset's ids are not read before their rows are: an id past
 * the model's classes is named here (file, sequence, token), once, before
 * the step refuses it ("bad labels or ids"). */
static void check_ids(MmrtFeedCtx *c, const Text *x, const MmrtBatchIter *it, int64_t rows) {
  const int32_t *ids = mmrt_feed_at(c, c->batch[IDS]);
  int64_t V = mmrt_feed_classes(c->m);
  for (int64_t r = 0; r < c->rows && c->lo + r < rows; r++)
    for (int64_t j = 0; j < x->T; j++)
      if (ids[r * x->T + j] < 0 || ids[r * x->T + j] >= V) {
        char where[600];
        mmrt_loader_where(x->l, mmrt_iter_index(it, c->lo + r), j, where, sizeof where);
        fprintf(stderr,
                "trainer: error: %s: id %d outside the model's %lld classes (a dataset "
                "of another tokenizer?)\n",
                where, ids[r * x->T + j], (long long)V);
        return;
      }
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  (void)sample0;
  Text *x = c->priv;
  int32_t *ids = mmrt_feed_at(c, c->batch[IDS]), *y = mmrt_feed_at(c, c->batch[Y]);
  int32_t *seg = x->has_seg ? mmrt_feed_at(c, c->batch[SEG]) : NULL;
  int32_t *pos = x->has_pos ? mmrt_feed_at(c, c->batch[POS]) : NULL;
  Block here = {c->lo, c->rows, x->here, ids, y, seg, pos};
  if (!x->has_thread || eval) { /* evaluation: laid out here */
    lay_rows(x, it, rows, &here);
    check_ids(c, x, it, rows);
    return;
  }
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
      memcpy(ids, b->ids, cells * sizeof *ids), memcpy(y, b->y, cells * sizeof *y);
      if (seg) memcpy(seg, b->seg, cells * sizeof *seg);
      if (pos) memcpy(pos, b->pos, cells * sizeof *pos);
    }
  }
  x->hits += hit;
  if (!hit) lay_rows(x, it, rows, &here);
  int known = 0; /* the blocks a batch is filled in (one, or one per micro-batch) */
  for (int i = 0; i < x->nblk; i++) known |= x->blk[i].lo == c->lo && x->blk[i].n == c->rows;
  if (!known && x->nblk < MAX_BLOCKS && block_alloc(x, &x->blk[x->nblk], c->rows))
    x->blk[x->nblk++].lo = c->lo;
  check_ids(c, x, it, rows);
  if (x->fills >= x->nblk) { /* this batch's last block: stage the next batch */
    resync(x, it);
    x->ready = 0, x->work = 1;
    pthread_cond_broadcast(&x->cv);
  }
  pthread_mutex_unlock(&x->mu);
}

static void close_(MmrtFeedCtx *c) {
  Text *x = c->priv;
  if (!x) return;
  if (x->has_thread) {
    pthread_mutex_lock(&x->mu);
    x->quit = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->th, NULL);
  }
  for (int i = 0; i < MAX_BLOCKS; i++) block_free(&x->blk[i]);
  if (x->has_shadow) mmrt_iter_free(&x->shadow);
  mmrt_loader_close(x->l);
  free(x->here);
  pthread_mutex_destroy(&x->mu);
  pthread_cond_destroy(&x->cv);
  free(x);
  c->priv = NULL;
}

const MmrtFeeder mmrt_feed_text = {
    .name = "text",
    .format = MMRT_FMT_TEXT,
    .inputs = "ids and labels I32[B, T] (seg, pos: packed) with --data FILE.jsonl|PREFIX",
    .bind = bind,
    .open = open,
    .start = start,
    .fill = fill,
    .close = close_,
};
