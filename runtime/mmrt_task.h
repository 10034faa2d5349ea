/* mmrt_task.h: the trainer's data tasks, one file each, behind one interface.
 *
 * A task binds a model's data inputs to a data set: it recognises the
 * inputs by name and shape, opens the data, fills this rank's rows of a
 * batch, and may add a metric to the final evaluation. The trainer
 * (mmrt_main.c) tries the tasks of mmrt_tasks[] in order and takes the
 * first whose `bind` accepts the model; when none does, mmrt_task_bind's
 * message lists the model's inputs and what each task expects.
 *
 *   mmrt_task_text.c      ids, labels (seg) i32[B, T] with --data FILE|PREFIX: text
 *   mmrt_task_classify.c  pixels f32[B, 1, 28, 28], labels i32[B]
 *   mmrt_task_pixels.c    ids, labels i32[B, T]: next-pixel bytes
 *   mmrt_task_caption.c   pixels, text, labels i32[B, T]: captions
 *   mmrt_task_video.c     video f32[B, 1, F, 64, 64]: moving items (no labels)
 *   mmrt_task_dit.c       latents, text, noise, t_uniform / t_normal: diffusion
 *   mmrt_task_frames.c    frames f32[B, 1, 64, 64], labels: a clip frame's class
 *
 * (mmrt_main.h says what each one feeds the model.) The four tasks
 * share Fashion-MNIST: the splits and their iterators live in MmrtTaskCtx,
 * the trainer advances the iterators and saves the training iterator's
 * position (the data position) in checkpoints. A task never prints: it
 * returns a message in err, which the trainer reports.
 *
 * Adding a task: a new mmrt_task_<name>.c defining one `const MmrtTask`,
 * and its entry in mmrt_tasks[] (mmrt_task.c). */
#ifndef MMRT_TASK_H
#define MMRT_TASK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mmrt_data.h"
#include "mmrt_log.h"
#include "mmrt_main.h"

#define MMRT_TASK_MAX_BATCH 6 /* batch inputs one task fills */

typedef struct MmrtTaskCtx MmrtTaskCtx;

/* What the trainer shares with its task. The trainer sets m, B and
 * eval_batches before bind; lo, rows, mesh and rank after it (the rows of
 * every batch input this rank holds); arenas before fill; seed before open
 * and again (final, perhaps from a checkpoint) before start. */
struct MmrtTaskCtx {
  const MmrtModelDesc *m;
  char **arenas;        /* the trainer's arenas (MMRT_NARENAS) */
  uint64_t seed;        /* the run seed */
  int64_t B;            /* rows per (global) batch: the compiled batch */
  int64_t lo, rows;     /* this rank's rows [lo, lo + rows) of each batch */
  int64_t eval_batches; /* evaluate on at most this many batches (-1: all) */
  void *mesh;           /* the MmrtMesh of a multi-rank run, or NULL */
  /* --features DIR (NULL: none); the task that reads it sets features_used
   * in bind (the trainer refuses the flag otherwise) */
  const char *features;
  int features_used;
  /* --data (the text task tells a file from a folder) and the text flags */
  const char *data;
  const struct MmrtTextOpts *text;
  /* set by open: samples skipped as bad (logged when count_skipped), and a
   * line the trainer prints at the start (empty: none) */
  int64_t skipped;
  int count_skipped;
  char note[320];
  /* set by bind: the inputs filled per batch (each split along dim 0 at
   * most), labels among them (the trainer's accuracy compares the logits'
   * argmax with it), T the tokens per row of a token task */
  const MmrtTensorDesc *batch[MMRT_TASK_MAX_BATCH];
  int nbatch;
  const MmrtTensorDesc *labels;
  int64_t T;
  /* the data (open): the splits and their iterators */
  MmrtImages train, test;
  MmrtBatchIter it, eval_it;
  /* the trainer's step, for tasks that evaluate by running the model: runs
   * fn on the arenas; 0, or 1 after a message (a failed collective aborts
   * the job). */
  int (*step)(MmrtTaskCtx *c, MmrtStepFn fn, const char *what);
  /* polled before each batch of an evaluation: 1 when the pass is to end
   * now (SIGINT/SIGTERM on any rank: a collective, so every rank of the
   * pass calls it as often); NULL: never */
  int (*stop)(MmrtTaskCtx *c);
  int loud;   /* this rank prints progress (rank 0 without --quiet) */
  void *priv; /* the task's own state (start / close) */
};

typedef struct MmrtTask {
  const char *name;   /* "classification", ... (the trainer's start-up line) */
  const char *inputs; /* the inputs it binds, for the message when none matches */
  /* 1: the model's inputs are this task's (c->batch, labels, T set); 0: not
   * this task's; -1: this task's but unusable (err says why). */
  int (*bind)(MmrtTaskCtx *c, char *err, size_t errlen);
  /* Loads the data from dir into c->train and c->test; MMRT_OK or an error. */
  int (*open)(MmrtTaskCtx *c, const char *dir, char *err, size_t errlen);
  /* Once the seed is final (after a resume): NULL, or MMRT_OK / an error. */
  int (*start)(MmrtTaskCtx *c, char *err, size_t errlen);
  /* Rows [lo, lo + rows) of the iterator's current batch into the batch
   * inputs; batch rows at or past `rows` are padding (labels = the loss's
   * ignore index). `sample0` numbers the batch's first sample (train:
   * (step - 1) * B); eval: the test split's batch. */
  void (*fill)(MmrtTaskCtx *c, const MmrtBatchIter *it, int64_t rows, int eval, uint64_t sample0);
  /* A metric beyond loss and accuracy, at the final evaluation (and at
   * every --eval-every evaluation when metric_every is 1): NULL, or MMRT_OK
   * with *value set, 1 when this model has none, or an error (err empty:
   * the step reported it). Its log key and its words in the "eval:" line: */
  int (*metric)(MmrtTaskCtx *c, double *value, char *err, size_t errlen);
  const char *metric_key, *metric_words;
  int metric_every;
  void (*close)(MmrtTaskCtx *c); /* frees priv (NULL: nothing to free) */
} MmrtTask;

extern const MmrtTask mmrt_task_text, mmrt_task_classify, mmrt_task_pixels, mmrt_task_caption,
    mmrt_task_video, mmrt_task_dit, mmrt_task_frames;

/* The tasks in the order bind tries them (NULL-terminated). */
extern const MmrtTask *const mmrt_tasks[];

/* The first task of mmrt_tasks[] that binds the model; NULL with err set
 * (a task's own refusal, or: no task matches, listing the model's inputs
 * and what each task expects). */
const MmrtTask *mmrt_task_bind(MmrtTaskCtx *c, char *err, size_t errlen);

/* ---- helpers for the tasks and the trainer ---- */

/* 1 when t is a dt tensor of ndim dims whose sizes equal shape (-1: any). */
int mmrt_task_is(const MmrtTensorDesc *t, int dt, int ndim, const int64_t *shape);

/* The base of an input or parameter in the arenas. */
void *mmrt_task_at(const MmrtTaskCtx *c, const MmrtTensorDesc *d);

/* Classes (vocabulary) of the logits the trainer reads, all ranks together. */
int64_t mmrt_task_classes(const MmrtModelDesc *m);

/* Fashion-MNIST's train and test splits into c->train, c->test. */
int mmrt_task_open_fmnist(MmrtTaskCtx *c, const char *dir, char *err, size_t errlen);

/* A fresh pass of the evaluation iterator over the test split, in file order. */
/* The batches of an evaluation pass: the test split's, at most
 * eval_batches (after open). */
int64_t mmrt_task_eval_total(const MmrtTaskCtx *c);

/* The trainer's final evaluation covers at most this many test batches
 * unless --eval-batches says otherwise (N, or all). */
#define MMRT_EVAL_BATCHES_DEFAULT 20

int mmrt_task_restart_eval(MmrtTaskCtx *c, char *err, size_t errlen);

/* best[r] = the class of the largest logit of each row of the last eval
 * step; with the classes split over a mesh axis, the largest over the
 * ranks (MPI_MAXLOC on that axis, ties to the lowest class). gen: never
 * PAD, BOS or the image-context token (for generation). */
void mmrt_task_argmax(MmrtTaskCtx *c, int32_t *best, int gen);

/* After a failed collective of the driver's own (mmrt_all_reduce_mpi on
 * c->mesh): prints the mesh's message with the rank and ends the job (the
 * other ranks may be waiting in it). */
_Noreturn void mmrt_task_comm_fail(MmrtTaskCtx *c);

/* The trainer's text flags (mmrt_task_text.c): -1 when f is none of them,
 * 0 taken (*takes: the values it used), 1 after a message. */
struct MmrtTextOpts;
int mmrt_text_flag(struct MmrtTextOpts *o, const char *f, const char *v, int *takes);
void mmrt_text_usage(FILE *out);

#endif
