/* mmrt_feed_caption.c: captioning Fashion-MNIST images (a VLM).
 *
 * Inputs pixels f32[B, 1, 28, 28], text and labels i32[B, T]: the image,
 * then "<bos> <img> x n prompt answer <eos>" with the loss on the answer
 * (mmrt_caption.h; n is image_tokens, the rows the model's `place` puts at
 * the <img> tokens). Training varies the phrasings under the run seed,
 * evaluation uses the canonical ones. Evaluation reports teacher-forced
 * answer-token accuracy (the trainer's argmax) and, at the end, the
 * exact-match rate of greedy captions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_caption.h"
#include "mmrt_comm.h"
#include "mmrt_feed.h"

enum { X, Y, TEXT }; /* c->batch[] */

typedef struct Captions {
  MmrtCaptioner train, eval;
} Captions;

static int bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  const MmrtTensorDesc *px = mmrt_desc_input(m, MMRT_IN(CAP_PIXELS)),
                       *lb = mmrt_desc_input(m, MMRT_IN(CAP_LABELS)),
                       *text = mmrt_desc_input(m, MMRT_IN(CAP_TEXT));
  const int64_t img[4] = {c->B, 1, MMRT_FMNIST_SIDE, MMRT_FMNIST_SIDE}, tok[2] = {c->B, -1};
  if (!mmrt_feed_is(px, MMRT_ST_F32, 4, img) || !mmrt_feed_is(text, MMRT_ST_I32, 2, tok) ||
      !mmrt_feed_is(lb, MMRT_ST_I32, 2, text->shape))
    return 0;
  c->batch[X] = px, c->batch[Y] = c->labels = lb, c->batch[TEXT] = text, c->nbatch = 3;
  c->T = text->shape[1];
  if (m->ignore_index != MMRT_IGNORE_INDEX) {
    snprintf(err, errlen, "model %s ignores label %lld; captions mark unlearned positions with %d",
             m->name, (long long)m->ignore_index, MMRT_IGNORE_INDEX);
    return -1;
  }
  return 1;
}

/* The captioners (train: varied phrasings under the run seed; eval: the
 * canonical ones), once the seed is final; the vocabulary must fit. */
static int start(MmrtFeedCtx *c, char *err, size_t errlen) {
  Captions *k = c->priv ? c->priv : calloc(1, sizeof *k);
  if (!k) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  c->priv = k;
  char why[1024];
  int T = (int)c->T, n = (int)c->m->image_tokens;
  if (mmrt_caption_init(&k->train, T, n, MMRT_CAPTION_TRAIN, c->seed, why, sizeof why) != MMRT_OK ||
      mmrt_caption_init(&k->eval, T, n, MMRT_CAPTION_EVAL, c->seed, why, sizeof why) != MMRT_OK ||
      mmrt_tok_fits(&k->train.tok, (int)mmrt_feed_classes(c->m), why, sizeof why) != MMRT_OK)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "model %s cannot learn the captions: %s",
                     c->m->name, why);
  return MMRT_OK;
}

static void fill(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  (void)rows, (void)sample0; /* the captioner pads the rows past the batch itself */
  Captions *k = c->priv;
  mmrt_caption_fill(eval ? &k->eval : &k->train, it, c->lo, c->lo + c->rows,
                    mmrt_feed_at(c, c->batch[X]), mmrt_feed_at(c, c->batch[TEXT]),
                    mmrt_feed_at(c, c->batch[Y]));
}

/* Greedy generation from each test image's prompt, one eval step per
 * generated token (the model is causal, so the logits at the last prefix
 * position predict the next token), scored by exact match with the
 * canonical caption. */
static int exact_match(MmrtFeedCtx *c, double *rate, char *err, size_t errlen) {
  const Captions *k = c->priv;
  MmrtMesh *mesh = c->mesh;
  const int64_t B = c->rows, T = c->T; /* this rank's rows */
  int32_t *text = mmrt_feed_at(c, c->batch[TEXT]), *y = mmrt_feed_at(c, c->batch[Y]);
  int32_t *len = calloc((size_t)B, sizeof *len), *label = calloc((size_t)B, sizeof *label),
          *gen = calloc((size_t)(B * T), sizeof *gen), *ng = calloc((size_t)B, sizeof *ng),
          *best = calloc((size_t)(B * T), sizeof *best);
  int64_t matches = 0, counted = 0, batches = 0;
  err[0] = 0;
  int rc = !len || !label || !gen || !ng || !best
               ? mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory")
               : mmrt_feed_restart_eval(c, err, errlen);
  MmrtProgress pr;
  mmrt_progress_begin(&pr, "captioning eval batch", 0, mmrt_feed_eval_total(c), "images", c->loud);
  while (!rc && !(c->stop && c->stop(c))) { /* a stop: the caller reports no rate */
    int64_t rows = mmrt_iter_next(&c->eval_it);
    if (rows == 0 || (c->eval_batches >= 0 && batches >= c->eval_batches)) break;
    mmrt_caption_fill_prefix(&k->eval, &c->eval_it, c->lo, c->lo + B, mmrt_feed_at(c, c->batch[X]),
                             text, len, label);
    for (int64_t i = 0; i < B * T; i++)
      y[i] = MMRT_IGNORE_INDEX; /* no loss: only the logits matter */
    memset(ng, 0, (size_t)B * sizeof *ng);
    for (int active = 1; active && !rc;) {
      rc = c->step(c, c->m->eval_step, "the evaluation step (generating captions)");
      if (!rc) mmrt_feed_argmax(c, best, 1);
      active = 0;
      for (int64_t r = 0; r < B && !rc; r++) {
        if (label[r] < 0 || len[r] == 0 || len[r] > T ||
            (ng[r] && gen[r * T + ng[r] - 1] == MMRT_TOK_EOS))
          continue;
        int32_t tok = best[r * T + len[r] - 1];
        gen[r * T + ng[r]++] = tok;
        if (tok != MMRT_TOK_EOS && len[r] < T && ng[r] < T) {
          text[r * T + len[r]++] = tok;
          active = 1;
        } else {
          len[r] = (int32_t)T + 1; /* done */
        }
      }
      if (mesh) /* every rank runs as many steps: they hold collectives */
        if (mmrt_all_reduce_mpi(mesh, MMRT_AXIS_WORLD, &active, 1, MPI_INT, MPI_MAX,
                                "the captioning loop's flag (all-reduce)") != MMRT_OK)
          mmrt_feed_comm_fail(c);
    }
    int64_t n = 0;
    matches += mmrt_caption_count_matches(&k->eval, label, gen, ng, B, T, &n);
    counted += n;
    batches++;
    mmrt_progress_tick(&pr, batches, (double)(batches * c->B), NULL);
  }
  mmrt_progress_break(&pr);
  if (mesh) { /* ranks of one dp group share rows: count once per group */
    int64_t v[2] = {matches, counted};
    if (mmrt_all_reduce_mpi(mesh, MMRT_AXIS_DP, v, 2, MPI_INT64_T, MPI_SUM,
                            "the caption match counts (all-reduce)") != MMRT_OK)
      mmrt_feed_comm_fail(c);
    matches = v[0], counted = v[1];
  }
  free(len), free(label), free(gen), free(ng), free(best);
  *rate = counted ? (double)matches / (double)counted : NAN;
  return rc;
}

static void close_task(MmrtFeedCtx *c) {
  free(c->priv);
  c->priv = NULL;
}

const MmrtFeeder mmrt_feed_caption = {
    .name = "captioning",
    .format = MMRT_FMT_FMNIST_CAPTIONS,
    .inputs = "pixels F32[B, 1, 28, 28], text and labels I32[B, T]",
    .bind = bind,
    .open = mmrt_feed_open_fmnist,
    .start = start,
    .fill = fill,
    .metric = exact_match,
    .metric_key = "eval_caption_exact_match",
    .metric_words = "caption exact match",
    .close = close_task,
};
