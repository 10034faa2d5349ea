/* mmrt_feed.h: the trainer's data feeders, one file each, behind one interface.
 *
 * A feeder binds a model's data inputs to a data set: it recognises the
 * inputs by name and shape, opens the data, fills this rank's rows of a
 * batch, and may add a metric to the final evaluation. A model
 * whose data section names a format (data { format = fmnist_classify }) is
 * bound to that format's feeder, whose bind must accept it; a model without
 * one (older models) by trying the feeders of mmrt_feeders[] in order, the
 * first whose `bind` accepts it winning. Either way a refusal's message
 * lists the model's inputs and what the feeder(s) expect. The inputs each
 * format fills are one table, ir/data_formats.def, the compiler's too
 * (mmrt_formats.h).
 *
 *   mmrt_feed_text.c      ids, labels (seg) i32[B, T] with --data FILE|PREFIX: text
 *   mmrt_feed_classify.c  pixels f32[B, 1, 28, 28], labels i32[B]
 *   mmrt_feed_pixels.c    ids, labels i32[B, T]: next-pixel bytes
 *   mmrt_feed_caption.c   pixels, text, labels i32[B, T]: captions
 *   mmrt_feed_video.c     video f32[B, 1, F, 64, 64]: moving items (no labels)
 *   mmrt_feed_dit.c       latents, text, noise, t_uniform / t_normal: diffusion
 *   mmrt_feed_frames.c    frames f32[B, 1, 64, 64], labels: a clip frame's class
 *   mmrt_feed_conv.c      pixels f32[B, K, 3, S, S], text, labels: conversations
 *   mmrt_feed_vfiles.c    (video files for the video and diffusion feeders: --data LIST.json)
 *
 * (mmrt_main.h says what each one feeds the model.) The four feeders
 * share Fashion-MNIST: the splits and their iterators live in MmrtFeedCtx,
 * the trainer advances the iterators and saves the training iterator's
 * position (the data position) in checkpoints. A feeder never prints: it
 * returns a message in err, which the trainer reports.
 *
 * Adding a feeder: a new mmrt_feed_<name>.c defining one `const MmrtFeeder`,
 * and its entry in mmrt_feeders[] (mmrt_feed.c). */
#ifndef MMRT_FEED_H
#define MMRT_FEED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mmrt_data.h"
#include "mmrt_formats.h"
#include "mmrt_log.h"
#include "mmrt_main.h"

#define MMRT_FEED_MAX_BATCH 6 /* batch inputs one feeder fills */

typedef struct MmrtFeedCtx MmrtFeedCtx;

/* What the trainer shares with its feeder. The trainer sets m, B and
 * eval_batches before bind; lo, rows, mesh and rank after it (the rows of
 * every batch input this rank holds); arenas before fill; seed before open
 * and again (final, perhaps from a checkpoint) before start. */
struct MmrtFeedCtx {
  const MmrtModelDesc *m;
  char **arenas;        /* the trainer's arenas (MMRT_NARENAS) */
  uint64_t seed;        /* the run seed */
  int64_t B;            /* rows per (global) batch: the compiled batch */
  int64_t lo, rows;     /* this rank's rows [lo, lo + rows) of each batch */
  int64_t eval_batches; /* evaluate on at most this many batches (-1: all) */
  void *mesh;           /* the MmrtMesh of a multi-rank run, or NULL */
  /* --features DIR (NULL: none); the feeder that reads it sets features_used
   * in bind (the trainer refuses the flag otherwise) */
  const char *features;
  int features_used;
  /* --data (the text task tells a file from a folder) and the text flags */
  const char *data;
  const struct MmrtTextOpts *text;
  double video_fps; /* --video-fps F: video files sampled at F fps (0: the source's) */
  /* set by open: samples skipped as bad (logged when count_skipped), and a
   * line the trainer prints at the start (empty: none) */
  int64_t skipped;
  int count_skipped;
  char note[320];
  /* set by bind: the inputs filled per batch (each split along dim 0 at
   * most), labels among them (the trainer's accuracy compares the logits'
   * argmax with it), T the tokens per row of a token feeder */
  const MmrtTensorDesc *batch[MMRT_FEED_MAX_BATCH];
  int nbatch;
  const MmrtTensorDesc *labels;
  int64_t T;
  /* set by mmrt_feed_bind: 1 when the model's data section named the
   * feeder's format, 0 when the feeder was found by trying them in order */
  int declared;
  /* the data (open): the splits and their iterators */
  MmrtImages train, test;
  MmrtBatchIter it, eval_it;
  /* the trainer's step, for feeders that evaluate by running the model: runs
   * fn on the arenas; 0, or 1 after a message (a failed collective aborts
   * the job). */
  int (*step)(MmrtFeedCtx *c, MmrtStepFn fn, const char *what);
  /* polled before each batch of an evaluation: 1 when the pass is to end
   * now (SIGINT/SIGTERM on any rank: a collective, so every rank of the
   * pass calls it as often); NULL: never */
  int (*stop)(MmrtFeedCtx *c);
  int loud;   /* this rank prints progress (rank 0 without --quiet) */
  void *priv; /* the feeder's own state (start / close) */
  /* set by a feeder that runs the train step of the batch it filled on a
   * tile bucket of the trainer (mmrt_buckets.h) rather than the model's own
   * (the conversation feeder): the step's status; NULL: the model's */
  int (*run_train)(MmrtFeedCtx *c, uint64_t seed, void *mesh);
};

typedef struct MmrtFeeder {
  const char *name;      /* "classification", ... (the trainer's start-up line) */
  MmrtDataFormat format; /* the data format it serves (ir/data_formats.def) */
  const char *inputs;    /* the inputs it binds, for the message when none matches */
  /* 1: the model's inputs are this feeder's (c->batch, labels, T set); 0: not
   * this feeder's; -1: this feeder's but unusable (err says why). */
  int (*bind)(MmrtFeedCtx *c, char *err, size_t errlen);
  /* Loads the data from dir into c->train and c->test; MMRT_OK or an error. */
  int (*open)(MmrtFeedCtx *c, const char *dir, char *err, size_t errlen);
  /* Once the seed is final (after a resume): NULL, or MMRT_OK / an error. */
  int (*start)(MmrtFeedCtx *c, char *err, size_t errlen);
  /* Rows [lo, lo + rows) of the iterator's current batch into the batch
   * inputs; batch rows at or past `rows` are padding (labels = the loss's
   * ignore index). `sample0` numbers the batch's first sample (train:
   * (step - 1) * B); eval: the test split's batch. */
  void (*fill)(MmrtFeedCtx *c, const MmrtBatchIter *it, int64_t rows, int eval, uint64_t sample0);
  /* A metric beyond loss and accuracy, at the final evaluation (and at
   * every --eval-every evaluation when metric_every is 1): NULL, or MMRT_OK
   * with *value set, 1 when this model has none, or an error (err empty:
   * the step reported it). Its log key and its words in the "eval:" line: */
  int (*metric)(MmrtFeedCtx *c, double *value, char *err, size_t errlen);
  const char *metric_key, *metric_words;
  int metric_every;
  void (*close)(MmrtFeedCtx *c); /* frees priv (NULL: nothing to free) */
} MmrtFeeder;

extern const MmrtFeeder mmrt_feed_text, mmrt_feed_classify, mmrt_feed_pixels, mmrt_feed_caption,
    mmrt_feed_video, mmrt_feed_dit, mmrt_feed_frames, mmrt_feed_conv;

/* The feeders in the order bind tries them (NULL-terminated). */
extern const MmrtFeeder *const mmrt_feeders[];

/* The feeder of the model's declared data format (m->data_format), or the
 * first feeder of mmrt_feeders[] that binds the model when it declares
 * none; sets c->declared. NULL with err set (a feeder's own refusal, or: the
 * declared format's feeder does not take the model, or no feeder matches,
 * listing the model's inputs and what is expected). */
const MmrtFeeder *mmrt_feed_bind(MmrtFeedCtx *c, char *err, size_t errlen);

/* ---- video files (mmrt_feed_vfiles.c) ---- */

/* --data names a video list (mmrt_vfiles_is): opens it for clips of
 * cthw = {C, T, H, W}; sets the splits' sizes (no pixels), the note and
 * the skipped count. */
struct MmrtVfiles;
int mmrt_feed_vfiles_open(MmrtFeedCtx *c, struct MmrtVfiles *v, const char *json,
                          const int64_t *cthw, char *err, size_t errlen)
    __attribute__((weak)); /* linked for models with a video input (mmrt_vfiles.h) */
/* This rank's rows of the batch decoded into out (c->rows clips, padding
 * rows zero; used[k] the entry row k came from, -1 padding; may be NULL),
 * then the next training batch's rows started on the loader thread. A bad
 * sample under --bad-samples fail ends the run with its message. */
void mmrt_feed_vfiles_rows(MmrtFeedCtx *c, struct MmrtVfiles *v, const MmrtBatchIter *it,
                           int64_t rows, int eval, uint64_t sample0, float *out, int64_t *used)
    __attribute__((weak));

/* ---- helpers for the feeders and the trainer ---- */

/* 1 when t is a dt tensor of ndim dims whose sizes equal shape (-1: any). */
int mmrt_feed_is(const MmrtTensorDesc *t, int dt, int ndim, const int64_t *shape);

/* The base of an input or parameter in the arenas. */
void *mmrt_feed_at(const MmrtFeedCtx *c, const MmrtTensorDesc *d);

/* Classes (vocabulary) of the logits the trainer reads, all ranks together. */
int64_t mmrt_feed_classes(const MmrtModelDesc *m);

/* Fashion-MNIST's train and test splits into c->train, c->test. */
int mmrt_feed_open_fmnist(MmrtFeedCtx *c, const char *dir, char *err, size_t errlen);

/* A fresh pass of the evaluation iterator over the test split, in file order. */
/* The batches of an evaluation pass: the test split's, at most
 * eval_batches (after open). */
int64_t mmrt_feed_eval_total(const MmrtFeedCtx *c);

/* The trainer's final evaluation covers at most this many test batches
 * unless --eval-batches says otherwise (N, or all). */
#define MMRT_EVAL_BATCHES_DEFAULT 20

int mmrt_feed_restart_eval(MmrtFeedCtx *c, char *err, size_t errlen);

/* best[r] = the class of the largest logit of each row of the last eval
 * step; with the classes split over a mesh axis, the largest over the
 * ranks (MPI_MAXLOC on that axis, ties to the lowest class). gen: never
 * PAD, BOS or the image-context token (for generation). */
void mmrt_feed_argmax(MmrtFeedCtx *c, int32_t *best, int gen);

/* After a failed collective of the driver's own (mmrt_all_reduce_mpi on
 * c->mesh): prints the mesh's message with the rank and ends the job (the
 * other ranks may be waiting in it). */
_Noreturn void mmrt_feed_comm_fail(MmrtFeedCtx *c);

/* The trainer's text flags are rows of its flag table (`flags`, parsed into
 * `args`, which holds o), each with MMRT_FLAG_SEEN into o->at; after the
 * parse, mmrt_text_settle (mmrt_feed_text.c) sets o->pack from
 * --pack/--no-pack (both: a message, 1) and o->given / o->first (the first
 * text flag in argv, for mmrt_feed_bind's refusal when the data is not
 * text); else 0. */
struct MmrtTextOpts;
struct MmrtFlag;
int mmrt_text_settle(struct MmrtTextOpts *o, const struct MmrtFlag *flags, const void *args);

#endif
