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
 * the held-out rows (--eval-split F) in file order, or without it on the
 * training rows in file order.
 *
 * The trainer's text flags are rows of its flag table (mmrt_main.c);
 * mmrt_text_settle derives what the feeder reads from them, and
 * mmrt_feed_bind refuses them when no text feeder takes the data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_flags.h"
#include "mmrt_loader.h"
#include "mmrt_vfiles.h"
#include "mmrt_feed.h"
#include "mmrt_stage.h"

enum { IDS, Y, SEG, POS }; /* c->batch[] */

int mmrt_text_settle(MmrtTextOpts *o, const MmrtFlag *flags, const void *args) {
  if (o->pack_on && o->pack_off)
    return fprintf(stderr, "trainer: error: --pack and --no-pack together\n"), 1;
  if (o->eval_split >= 1)
    return fprintf(stderr,
                   "trainer: error: --eval-split takes a fraction in (0, 1), not %g (the "
                   "fraction of the documents held out)\n",
                   o->eval_split),
           1;
  o->pack = o->pack_on ? 1 : o->pack_off ? -1 : 0;
  /* first: the text flag given first (the rows whose position is in o->at),
   * but --bad-samples only when no other is given (video files take it
   * too: mmrt_feeders.c) */
  size_t lo = (size_t)((const char *)o->at - (const char *)args), hi = lo + sizeof o->at;
  int best = 0, best_bad = 0;
  for (const MmrtFlag *f = flags; f->name || f->help; f++) {
    if (!f->has_seen || f->seen < lo || f->seen >= hi) continue;
    int at = o->at[(f->seen - lo) / sizeof o->at[0]], bad = !strcmp(f->name, "--bad-samples");
    if (at && (!o->given || bad < best_bad || (bad == best_bad && at < best)))
      o->given = 1, o->first = f->name, best = at, best_bad = bad;
  }
  return 0;
}

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  if (!mmrt_loader_is_text(c->data)) return 0;
  const MmrtTextOpts *o = c->text;
  if (o->images || o->chat || o->eval_data || o->max_tiles || o->no_tile_balance) {
    snprintf(err, errlen, "%s: a conversation flag, but model %s reads text",
             o->images      ? "--images"
             : o->chat      ? "--chat"
             : o->eval_data ? "--eval-data"
             : o->max_tiles ? "--max-tiles"
                            : "--no-tile-balance",
             m->name);
    return -1;
  }
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

/* The rows are laid out by a loader thread one batch ahead (mmrt_stage.h). */
typedef struct Text {
  MmrtLoader *l;
  int64_t T;
  int32_t ignore;
  int has_seg, has_pos;
  MmrtStage *stage;
} Text;

/* rows [lo, lo + n) of split (MMRT_TEXT_TRAIN or _EVAL) into buf = {ids, labels, seg, pos} */
static void lay_split(const Text *x, int split, const MmrtBatchIter *it, int64_t rows, int64_t lo,
                      int64_t n, int64_t *sample, void *const *buf) {
  for (int64_t k = lo; k < lo + n; k++) {
    int64_t r = k - lo;
    int32_t *ir = (int32_t *)buf[0] + r * x->T, *lr = (int32_t *)buf[1] + r * x->T,
            *sr = buf[2] ? (int32_t *)buf[2] + r * x->T : 0,
            *pr = buf[3] ? (int32_t *)buf[3] + r * x->T : 0;
    sample[r] = k < rows ? mmrt_iter_index(it, k) : -1;
    if (sample[r] >= 0) {
      mmrt_loader_row(x->l, split, sample[r], ir, lr, sr, pr);
      continue;
    }
    for (int64_t j = 0; j < x->T; j++) {
      ir[j] = 0, lr[j] = x->ignore;
      if (sr) sr[j] = 0;
      if (pr) pr[j] = (int32_t)j;
    }
  }
}

/* MmrtStageLay: the training rows [lo, lo + n) */
static void lay_rows(void *priv, const MmrtBatchIter *it, int64_t rows, int64_t lo, int64_t n,
                     int64_t *sample, void *const *buf) {
  lay_split(priv, MMRT_TEXT_TRAIN, it, rows, lo, n, sample, buf);
}

static int open(MmrtFeedCtx *c, const char *spec, char *err, size_t errlen) {
  MmrtTextOpts o = *c->text;
  if (!o.pack) o.pack = c->batch[SEG] ? 1 : -1; /* packed when the model masks documents */
  Text *x = calloc(1, sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory"), 1;
  c->priv = x;
  x->T = c->T, x->has_seg = c->batch[SEG] != NULL, x->has_pos = c->batch[POS] != NULL;
  size_t row = (size_t)c->T * sizeof(int32_t),
         bytes[4] = {row, row, x->has_seg ? row : 0, x->has_pos ? row : 0};
  if (!(x->stage = mmrt_stage_new(4, bytes, c->rows, lay_rows, x)))
    return snprintf(err, errlen, "out of memory"), 1;
  x->ignore = (int32_t)c->m->ignore_index;
  x->l = mmrt_loader_open(spec, &o, c->T, mmrt_feed_classes(c->m), (int32_t)c->m->ignore_index, err,
                          errlen);
  if (!x->l) return 1;
  int64_t n = mmrt_loader_samples(x->l, MMRT_TEXT_TRAIN);
  if (n < c->B) {
    snprintf(err, errlen, "%lld rows of text, fewer than the batch of %lld", (long long)n,
             (long long)c->B);
    return 1;
  }
  c->train.n = n; /* the iterators' samples are rows (no pixels) */
  c->test.n = mmrt_loader_samples(x->l, MMRT_TEXT_EVAL);
  c->skipped = mmrt_loader_skipped(x->l);
  c->count_skipped = o.bad_samples && !strcmp(o.bad_samples, "skip");
  mmrt_loader_describe(x->l, c->note, sizeof c->note);
  return 0;
}

/* Once the seed and the iterator's position are final (a resume's). */
static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Text *x = c->priv;
  return mmrt_stage_start(x->stage, &c->train, c->it.batch, c->seed, err, errlen);
}

/* An indexed dataset's ids are not read before their rows are: an id past
 * the model's classes is named here (file, sequence, token), once, before
 * the step refuses it ("bad labels or ids"). */
static void check_ids(MmrtFeedCtx *c, const Text *x, int split, const MmrtBatchIter *it,
                      int64_t rows) {
  const int32_t *ids = mmrt_feed_at(c, c->batch[IDS]);
  int64_t V = mmrt_feed_classes(c->m);
  for (int64_t r = 0; r < c->rows && c->lo + r < rows; r++)
    for (int64_t j = 0; j < x->T; j++)
      if (ids[r * x->T + j] < 0 || ids[r * x->T + j] >= V) {
        char where[600];
        mmrt_loader_where(x->l, split, mmrt_iter_index(it, c->lo + r), j, where, sizeof where);
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
  void *const buf[4] = {mmrt_feed_at(c, c->batch[IDS]), mmrt_feed_at(c, c->batch[Y]),
                        x->has_seg ? mmrt_feed_at(c, c->batch[SEG]) : NULL,
                        x->has_pos ? mmrt_feed_at(c, c->batch[POS]) : NULL};
  if (eval) { /* evaluation: laid out here */
    int64_t *sample = malloc((size_t)c->rows * sizeof *sample);
    if (!sample) abort();
    lay_split(x, MMRT_TEXT_EVAL, it, rows, c->lo, c->rows, sample, buf);
    free(sample);
  } else
    mmrt_stage_fill(x->stage, it, rows, c->lo, c->rows, buf);
  check_ids(c, x, eval ? MMRT_TEXT_EVAL : MMRT_TEXT_TRAIN, it, rows);
}

static void close_(MmrtFeedCtx *c) {
  Text *x = c->priv;
  if (!x) return;
  mmrt_stage_free(x->stage);
  mmrt_loader_close(x->l);
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
