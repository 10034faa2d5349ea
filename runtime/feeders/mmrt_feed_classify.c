/* mmrt_feed_classify.c: image classification on Fashion-MNIST.
 *
 * Inputs pixels f32[B, 1, 28, 28] (normalised, (p / 255 - mean) / std) and
 * labels i32[B] (the classes); evaluation reports top-1 accuracy from the
 * logits' argmax (the trainer's). */
#include <stdio.h>

#include "mmrt_feed.h"

enum { X, Y }; /* c->batch[] */

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *px = mmrt_desc_input(m, MMRT_IN(CLS_PIXELS)),
                       *lb = mmrt_desc_input(m, MMRT_IN(CLS_LABELS));
  const int64_t img[4] = {c->B, 1, MMRT_FMNIST_SIDE, MMRT_FMNIST_SIDE}, vec[1] = {c->B};
  if (!mmrt_feed_is(px, MMRT_ST_F32, 4, img) || !mmrt_feed_is(lb, MMRT_ST_I32, 1, vec)) return 0;
  c->batch[X] = px, c->batch[Y] = c->labels = lb, c->nbatch = 2;
  if (m->eval_logits_offset >= 0 && mmrt_feed_classes(m) < MMRT_FMNIST_CLASSES) {
    snprintf(err, errlen, "model %s classifies into %lld classes; Fashion-MNIST has %d", m->name,
             (long long)mmrt_feed_classes(m), MMRT_FMNIST_CLASSES);
    return -1;
  }
  return 1;
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  (void)eval, (void)sample0;
  int32_t *y = mmrt_feed_at(c, c->batch[Y]);
  const int64_t lo = c->lo, hi = c->lo + c->rows;
  mmrt_iter_fill(it, lo, hi, mmrt_feed_at(c, c->batch[X]), y);
  for (int64_t k = rows > lo ? rows : lo; k < hi; k++) y[k - lo] = (int32_t)c->m->ignore_index;
}

const MmrtFeeder mmrt_feed_classify = {
    .name = "classification",
    .format = MMRT_FMT_FMNIST_CLASSIFY,
    .inputs = "pixels F32[B, 1, 28, 28] and labels I32[B]",
    .bind = bind,
    .open = mmrt_feed_open_fmnist,
    .fill = fill,
};
