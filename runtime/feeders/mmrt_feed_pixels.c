/* mmrt_feed_pixels.c: next-pixel prediction, a language model on the bytes
 * of Fashion-MNIST images.
 *
 * Inputs ids and labels i32[B, T] with a vocabulary of at least 256: each
 * row is T + 1 consecutive pixel bytes of one image in raster order,
 * starting at a per-sample offset drawn from Philox (seed, "data/offset",
 * sample index) in [0, 784 - T - 1] (evaluation: seed 0,
 * "data/offset/eval", image index); ids are the first T bytes, labels the
 * next T. Evaluation reports next-byte accuracy (the trainer's argmax). */
#include <stdio.h>

#include "mmrt_rng.h"
#include "mmrt_feed.h"

enum { IDS, Y }; /* c->batch[] */

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *ids = mmrt_desc_input(m, MMRT_IN(PIX_IDS)),
                       *lb = mmrt_desc_input(m, MMRT_IN(PIX_LABELS));
  const int64_t tok[2] = {c->B, -1};
  if (!mmrt_feed_is(ids, MMRT_ST_I32, 2, tok) || !lb ||
      !mmrt_feed_is(lb, MMRT_ST_I32, 2, ids->shape))
    return 0;
  c->batch[IDS] = ids, c->batch[Y] = c->labels = lb, c->nbatch = 2;
  c->T = ids->shape[1];
  if (c->T + 1 > MMRT_FMNIST_SIDE * MMRT_FMNIST_SIDE) {
    snprintf(err, errlen,
             "model %s reads sequences of %lld tokens; an image has only %d pixel bytes", m->name,
             (long long)c->T, MMRT_FMNIST_SIDE * MMRT_FMNIST_SIDE - 1);
    return -1;
  }
  if (m->eval_logits_offset >= 0 && mmrt_feed_classes(m) < 256) {
    snprintf(err, errlen, "model %s has a vocabulary of %lld; pixel bytes need 256", m->name,
             (long long)mmrt_feed_classes(m));
    return -1;
  }
  return 1;
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  int32_t *ids = mmrt_feed_at(c, c->batch[IDS]), *y = mmrt_feed_at(c, c->batch[Y]);
  const int64_t lo = c->lo, hi = c->lo + c->rows, T = c->T;
  const int64_t npx = MMRT_FMNIST_SIDE * MMRT_FMNIST_SIDE, span = npx - T;
  uint64_t stream = mmrt_rng_stream(eval ? "data/offset/eval" : "data/offset", 0);
  for (int64_t k = lo; k < hi; k++) {
    int32_t *ir = ids + (k - lo) * T, *lr = y + (k - lo) * T;
    if (k >= rows) {
      for (int64_t j = 0; j < T; j++) ir[j] = 0, lr[j] = (int32_t)c->m->ignore_index;
      continue;
    }
    int64_t img = mmrt_iter_index(it, k);
    uint64_t key = eval ? (uint64_t)img : sample0 + (uint64_t)k;
    int64_t off = (int64_t)(mmrt_rng_u32(eval ? 0 : c->seed, stream, key) % (uint32_t)span);
    const uint8_t *px = it->ds->pixels + img * npx + off;
    for (int64_t j = 0; j < T; j++) ir[j] = px[j], lr[j] = px[j + 1];
  }
}

const MmrtFeeder mmrt_feed_pixels = {
    .name = "next-pixel",
    .format = MMRT_FMT_FMNIST_PIXELS,
    .inputs = "ids and labels I32[B, T]",
    .bind = bind,
    .open = mmrt_feed_open_fmnist,
    .fill = fill,
};
