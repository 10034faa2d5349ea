/* mmrt_main.c: the driver of a compiled trainer (see mmrt_main.h).
 *
 *   ./trainer [--data DIR] [--steps N] [--batch B] [--lr X] [--seed S]
 *             [--eval-every N] [--eval-batches N|all] [--ckpt DIR] [--ckpt-every N]
 *             [--keep K] [--resume] [--on-nan stop|skip-step] [--comm-timeout S] [--log FILE]
 *             [--quiet]
 *
 * It allocates exactly the arenas of the memory plan, initialises the
 * parameters from Philox streams named after them, binds the model's inputs
 * to a data feeder (mmrt_feed.h: Fashion-MNIST classes, pixels or captions), runs the step function
 * with the LR schedule and the step counter as inputs, logs, evaluates on the test split, and
 * checkpoints (mmrt_ckpt.h: a directory per step behind an atomic pointer) so that a resumed run
 * continues bit for bit: the weights, optimizer state, step, seed and data-iterator position are
 * all in the checkpoint, and everything random is a function of (seed, step). Every user error (a
 * flag, a data file, a checkpoint) is one message that names the flag or file, and exit status 1.
 */
#include "mmrt_main.h"
#include "mmrt_mem.h"

#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mmrt_comm.h"
#include "mmrt_data.h"
#include "mmrt_vfiles.h"
#include "mmrt_flags.h"
#include "mmrt_loader.h"
#include "mmrt_hf.h"
#include "mmrt_log.h"
#include "mmrt_feed.h"
#include "mmrt_pp.h"
#include "mmrt_prof.h"
#include "mmrt_trace.h"
#include "mmrt_threads.h"

#define ERRLEN 1024

#define SKIP_LIMIT 10 /* --on-nan skip-step: this many skipped in a row stop the run */
#define STR_(x)    #x
#define STR(x)     STR_(x)

typedef struct Args {
  const char *data, *ckpt, *log, *dump_logits, *dump_inputs, *init_from, *load_adapters, *features,
      *save_adapters, *save_weights, *save_hf, *hf_dtype, *omp_wait, *trace, *on_nan;
  int64_t steps, batch, eval_every, eval_batches, ckpt_every, keep, threads, shard_size;
  double lr, comm_timeout, video_fps;
  uint64_t seed;
  int has_lr, has_seed, has_keep, has_timeout, resume, quiet, profile;
  int has_ckpt_every, skip_nan; /* --on-nan skip-step */
  MmrtTextOpts text;            /* the text feeder's flags (mmrt_feed_text.c) */
} Args;

typedef struct Trainer {
  const MmrtModelDesc *m;
  Args a;
  char *arenas[MMRT_NARENAS];
  char *arena_mem[MMRT_NARENAS];   /* what was allocated (under pp: this rank's range) */
  int64_t arena_lo[MMRT_NARENAS];  /* its first byte's offset (pp_range) */
  int64_t arena_own[MMRT_NARENAS]; /* its bytes */
  const MmrtFeeder *feeder;        /* the data feeder bound to the model's inputs */
  MmrtFeedCtx cx;                  /* its inputs, rows, data and iterators */
  const MmrtTensorDesc *lr, *step; /* the step inputs */
  unsigned char *loaded;           /* per parameter: set by --init-from */
  const char *sub;                 /* --init-from SUB=PATH: the sub-model loaded */
  int64_t done;                    /* steps completed */
  MmrtMemBaseline mem;             /* resident memory before the data and the arenas */
  int64_t saved;                   /* step of the checkpoint written or loaded last (-1: none) */
  int stopped;                     /* every rank decided to stop (a signal on one of them) */
  MmrtLog log;
  int has_log;
  /* ranks: a mesh when the model was compiled for more than one */
  MmrtMesh mesh;
  int has_mesh, rank, world;
  /* the training steps' communication per phase, and [MMRT_NPHASES] in all */
  MmrtCommCount step_comm[MMRT_NPHASES + 1][MMRT_COMM_NKINDS][MMRT_NAXES];
  int64_t comm_steps;
  MmrtMbAcc mb; /* micro-batches (mmrt_pp.h) */
  MmrtPp *pp;   /* the pipeline (mmrt_pp.h) */
  float pp_lr, pp_fs;
  int locked;               /* holds --ckpt DIR's lock */
  int64_t skipped;          /* --on-nan skip-step: steps skipped in all (checkpointed) */
  int64_t skip_run;         /* of them in a row, up to the last step */
  char *snap[MMRT_NARENAS]; /* skip-step: the param and opt arenas before the step */
  int64_t fault_step;       /* a test's MMRT_FAULT_NAN_STEP (0: none), see train() */
  int fault_rank;           /* MMRT_FAULT_NAN_RANK (-1: every rank) */
} Trainer;

static int g_rank = -1; /* named in messages when there are several */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (g_rank >= 0)
    fprintf(stderr, "trainer (rank %d): error: ", g_rank);
  else
    fputs("trainer: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* ---- arguments ---- */

#define AT(f) offsetof(Args, f)
#define WHOLE "%F takes a whole number >= %L, not '%V'"
static const MmrtFlag train_flags[] = {
    MMRT_FLAG_S("--data", "DIR", AT(data),
                "Fashion-MNIST IDX files (default %D); or text data\n"
                "for a model with ids, labels i32[B, T]: a .jsonl file (\"text\" or chat\n"
                "\"messages\"), an indexed dataset PREFIX (PREFIX.bin + PREFIX.idx), or a\n"
                "blend W1:A,W2:B,...; or video files for a video or text-to-video\n"
                "model: a .json/.jsonl list of {path, cap, num_frames, fps, resolution}"),
    MMRT_TEXT_FLAG_TOKENIZER(
        AT(text), "text: tokenizer.json for JSONL data (its chat template for messages)"),
    MMRT_FLAG_I("--seq-len", "N", AT(text.seq_len), 1, INT64_MAX, WHOLE,
                "text: tokens per row; must equal the model's T (a check)",
                MMRT_FLAG_SEEN(AT(text.at[1]))),
    MMRT_FLAG_B("--pack", AT(text.pack_on),
                "text: documents packed into rows (the default for a model with seg)",
                MMRT_FLAG_SEEN(AT(text.at[2]))),
    MMRT_FLAG_B("--no-pack", AT(text.pack_off), "text: one document a row, padded",
                MMRT_FLAG_SEEN(AT(text.at[3]))),
    MMRT_TEXT_FLAG_TOO_LONG(AT(text),
                            "text: a document longer than a row: truncate (default) or drop"),
    MMRT_TEXT_FLAG_BAD_SAMPLES(
        AT(text), "text: a malformed sample: fail (default: exit naming the file and\n"
                  "line) or skip (counted in the log's skipped_samples); also video files"),
    MMRT_TEXT_FLAG_IMAGES(AT(text),
                          "conversations: the folder the samples' image names are relative to"),
    MMRT_TEXT_FLAG_CHAT(AT(text),
                        "conversations: the chat format (internvl2 default, chatml, qwen2, ...)"),
    MMRT_TEXT_FLAG_EVAL_DATA(AT(text),
                             "conversations: the final evaluation's samples (default: --data's)"),
    MMRT_TEXT_FLAG_MAX_TILES(
        AT(text), "conversations: 1 to N tiles an image, plus a thumbnail (default: the\n"
                  "model's tiles per sample - 1)"),
    MMRT_FLAG_B("--no-tile-balance", AT(text.no_tile_balance),
                "conversations: under dp, a tile pool's samples dealt to the ranks in\n"
                "batch order, not evened by tiles (docs/conversations.md)",
                MMRT_FLAG_SEEN(AT(text.at[10]))),
    MMRT_FLAG_I("--loader-threads", "N", AT(text.threads), 0, 32,
                "%F takes a whole number from 0 to 32, not '%V'",
                "text: threads tokenizing JSONL while it is read (default: min(2,\n"
                "CPUs); 0: the reading thread tokenizes; the rows are the same)",
                MMRT_FLAG_SEEN(AT(text.at[11]))),
    MMRT_FLAG_F("--eval-split", "F", AT(text.eval_split), 0, 1,
                "--eval-split takes a fraction in (0, 1), not '%V'",
                "text: hold out every 1/F-th document (a fraction F of them, the same\n"
                "for any seed) from training; evaluation runs on them",
                MMRT_FLAG_SEEN(AT(text.at[12]))),
    MMRT_FLAG_F("--video-fps", "F", AT(video_fps), 0, 1, "%F takes a positive number, not '%V'",
                "video files: sample each video at F frames a second (default: every frame)"),
    MMRT_FLAG_I("--steps", "N", AT(steps), 0, INT64_MAX, WHOLE, "train until step N (default %D)"),
    MMRT_FLAG_I("--batch", "B", AT(batch), 1, INT64_MAX, WHOLE,
                "must equal the compiled batch (recompile with --set B=N to change it)"),
    MMRT_FLAG_F("--lr", "X", AT(lr), 0, 1, "--lr takes a positive number, not '%V'",
                "base learning rate (default %D from the model's train section)",
                MMRT_FLAG_SEEN(AT(has_lr))),
    MMRT_FLAG_I("--seed", "S", AT(seed), 0, INT64_MAX, WHOLE,
                "run seed: initialisation, shuffling, dropout (default %D)",
                MMRT_FLAG_SEEN(AT(has_seed))),
    MMRT_FLAG_I("--eval-every", "N", AT(eval_every), 0, INT64_MAX, WHOLE,
                "evaluate on the test split every N steps (default 0: at the end only)"),
    MMRT_FLAG_I("--eval-batches", "N", AT(eval_batches), 0, INT64_MAX,
                "%F takes a whole number >= %L or all, not '%V'",
                "evaluate on at most N test batches, or all: the whole split (default\n%D)",
                .choices = "all"),
    MMRT_FLAG_S("--ckpt", "DIR", AT(ckpt),
                "write checkpoints there (at the end, and every --ckpt-every N steps):\n"
                "DIR/step-NNNNNN/ each, DIR/latest naming the newest complete one;\n"
                "a DIR holding a checkpoint takes --resume"),
    MMRT_FLAG_I("--ckpt-every", "N", AT(ckpt_every), 0, INT64_MAX, WHOLE,
                "with --ckpt: a checkpoint every N steps too (default 0: at the end only)",
                MMRT_FLAG_SEEN(AT(has_ckpt_every))),
    MMRT_FLAG_I("--keep", "K", AT(keep), 1, INT64_MAX, WHOLE,
                "keep the last K checkpoints in --ckpt DIR (default %D); a newer one\n"
                "than the run resumed from stays until the run passes it",
                MMRT_FLAG_SEEN(AT(has_keep))),
    MMRT_FLAG_B("--resume", AT(resume),
                "continue from the checkpoint DIR/latest names (DIR absent or empty:\n"
                "start at step 0; anything else there without DIR/latest: an error)\n"
                "DIR/lock (host and pid) keeps a second trainer out of DIR"),
    MMRT_FLAG_E("--on-nan", "MODE", AT(on_nan), "stop|skip-step",
                "--on-nan takes stop or skip-step, not '%V'",
                "a loss or weight not finite after a step (a gradient that is not\n"
                "makes its weights so):\n"
                "stop (default: exit 1 naming the step, loss and tensor, nothing\n"
                "written) or skip-step (undo the step, count it in the log's\n"
                "skipped_steps; keeps a copy of the weights and optimizer state;\n"
                "" STR(SKIP_LIMIT) " skipped in a row stop the run)"),
    MMRT_FLAG_F("--comm-timeout", "S", AT(comm_timeout), 0, 0,
                "--comm-timeout takes a number of seconds >= 0, not '%V'",
                "a rank waiting longer than S seconds in a collective names the ranks\n"
                "that did not arrive and ends the job (default %D; 0: wait for ever)",
                MMRT_FLAG_SEEN(AT(has_timeout))),
    MMRT_FLAG_S("--log", "FILE", AT(log), "append metrics as JSON lines"),
    MMRT_FLAG_S("--dump-logits", "FILE", AT(dump_logits),
                "write the logits of the first test batch (f32, row-major) after training"),
    MMRT_FLAG_S("--dump-inputs", "DIR", AT(dump_inputs),
                "write each training step's inputs to DIR/step-NNNNNN.safetensors (for\n"
                "checking against another implementation on the same batches); with\n"
                "--dump-logits, that test batch's inputs to DIR/eval.safetensors"),
    MMRT_FLAG_S("--init-from", "[SUB=]PATH", AT(init_from),
                "load parameters by name from a checkpoint directory or a\n"
                ".safetensors file (a LoRA model from its base: the adapters keep their\n"
                "init), or a Hugging Face directory (config.json: mapped by\n"
                "runtime/io/mmrt_hf_map.def, bf16/fp16 converted); a tensor that matches no\n"
                "parameter is an error; SUB=: load sub-model SUB only (the rest keep\n"
                "their init, listed; a file's tensors outside SUB are not read)"),
    MMRT_FLAG_S("--features", "DIR", AT(features),
                "text-to-video: the latents and text features the extractor wrote\n"
                "(the model compiled for the extract task), instead of running the\n"
                "frozen encoders"),
    MMRT_FLAG_S("--load-adapters", "F", AT(load_adapters),
                "LoRA: load every adapter (*.lora_a, *.lora_b) from F"),
    MMRT_FLAG_S("--save-adapters", "F", AT(save_adapters),
                "LoRA: write the adapters alone to F after training (safetensors)"),
    MMRT_FLAG_S("--save-weights", "F", AT(save_weights),
                "write every parameter and optimizer state, whole (gathered from the ranks),\n"
                "to F after training (safetensors, from rank 0)"),
    MMRT_FLAG_S("--save-hf", "DIR", AT(save_hf),
                "write the --init-from Hugging Face model back to DIR after training:\n"
                "its names, layouts and config.json (from rank 0)"),
    MMRT_FLAG_S("--save-hf-dtype", "D", AT(hf_dtype),
                "f32 (default) or bf16 (rounded to nearest even)"),
    MMRT_FLAG_I("--shard-size", "N", AT(shard_size), 1, INT64_MAX, WHOLE,
                "--save-hf: at most N bytes per file (default 5e9; a larger tensor\n"
                "alone), with model.safetensors.index.json when there are several"),
    MMRT_FLAG_NOTE_ROW("A model compiled for N ranks (--dp/--tp) runs under mpirun -np N."),
    MMRT_FLAG_I("--threads", "N", AT(threads), 1, INT64_MAX, WHOLE,
                "OpenMP threads (default: this process's CPUs, shared by the node's\n"
                "ranks)"),
    MMRT_FLAG_E("--omp-wait", "W", AT(omp_wait), "active|passive|spin",
                "--omp-wait takes active, passive or spin, not '%V'",
                "active (threads spin between kernels), passive (they sleep) or\n"
                "spin (a bounded while, then sleep); default spin, passive when\n"
                "other programs' tasks wait for the CPUs"),
    MMRT_FLAG_B("--profile", AT(profile),
                "at the end, the time per op kind and per layer (forward, backward,\n"
                "update, communication), steps after the first"),
    MMRT_FLAG_B("--quiet", AT(quiet), "no progress line"),
    MMRT_FLAG_S("--trace", "FILE", AT(trace),
                "the training steps' timeline as Chrome trace JSON (Perfetto), one\n"
                "track per rank: forward, backward, send, recv and update events"),
    MMRT_FLAG_END,
};
#undef WHOLE
#undef AT

static const MmrtFlagSet train_flag_set = {.who = "trainer",
                                           .flags = train_flags,
                                           .needs_value = "%F needs a value (see --help)",
                                           .col = 21};

static int parse_args(int argc, char **argv, const MmrtModelDesc *m, Args *a) {
  memset(a, 0, sizeof *a);
  a->data = mmrt_fmnist_dir();
  /* the model's data { } section: defaults the flags override */
  if (m->data_source && m->data_source[0]) a->data = m->data_source;
  a->steps = m->steps > 0 ? m->steps : 100;
  a->batch = m->batch;
  a->lr = m->lr;
  a->seed = 42;
  a->text.threads = -1;
  a->eval_batches = MMRT_EVAL_BATCHES_DEFAULT;
  a->keep = MMRT_CKPT_KEEP_DEFAULT;
  a->comm_timeout = MMRT_COMM_TIMEOUT_DEFAULT;
  char head[256];
  snprintf(head, sizeof head, "usage: trainer [options]   (model %s, batch %lld)\n", m->name,
           (long long)m->batch);
  /* the section's other keys, as the flags they default (the command line's come after) */
  if (mmrt_desc_data_flags(m, &train_flag_set, a)) return 1;
  memset(a->text.at, 0, sizeof a->text.at); /* the text flags given: the command line's */
  int rc = mmrt_flags_parse(&train_flag_set, argc, argv, a, head);
  if (rc) return rc;
  if (mmrt_text_settle(&a->text, train_flags, a)) return 1;
  if (!a->text.pack) a->text.pack = (int)m->data_pack;
  if (a->batch != m->batch)
    return fail("--batch %lld differs from the compiled batch %lld of model %s; recompile with "
                "`mmc compile ... --set B=%lld`",
                (long long)a->batch, (long long)m->batch, m->name, (long long)a->batch);
  if (a->threads > 4096) return fail("--threads takes 1 .. 4096, not %lld", (long long)a->threads);
  if (a->resume && !a->ckpt)
    return fail("--resume needs --ckpt DIR (the checkpoint to continue from)");
  if (a->has_keep && !a->ckpt) return fail("--keep needs --ckpt DIR (the checkpoints to keep)");
  if (a->has_ckpt_every && !a->ckpt)
    return fail("--ckpt-every needs --ckpt DIR (where the checkpoints go)");
  a->skip_nan = a->on_nan && !strcmp(a->on_nan, "skip-step");
  if (a->has_timeout && mmrt_desc_ranks(m, MESH_NAXES) <= 1)
    return fail("--comm-timeout: model %s runs on one rank and has no collectives to time out",
                m->name);
  if ((a->load_adapters || a->save_adapters) && m->lora_rank <= 0)
    return fail("%s: model %s has no LoRA adapters",
                a->load_adapters ? "--load-adapters" : "--save-adapters", m->name);
  return 0;
}

int mmrt_train_parse(int argc, char **argv, const MmrtModelDesc *m) {
  Args a;
  return parse_args(argc, argv, m, &a);
}

/* ---- binding inputs to data ---- */

static int run_step(Trainer *t, MmrtStepFn fn, const char *what);

/* The step callback of the feeder context (it is t->cx). */
static int eval_step(Trainer *t, int share, const char *what);
static int feed_stop(MmrtFeedCtx *c);
static int feed_step(MmrtFeedCtx *c, MmrtStepFn fn, const char *what) {
  Trainer *t = (Trainer *)(void *)((char *)c - offsetof(Trainer, cx));
  if (fn == t->m->eval_step) return eval_step(t, 1, what); /* through the pipeline under pp */
  return run_step(t, fn, what);
}

/* The step inputs, and the first feeder that takes the model's data inputs. */
static int bind(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  char err[ERRLEN];
  t->lr = mmrt_desc_input(m, "lr");
  t->step = mmrt_desc_input(m, "step");
  if (t->lr && (t->lr->dtype != MMRT_ST_F32 || t->lr->ndim != 0))
    return fail("model input 'lr' must be f32[] (the learning rate)");
  if (t->step && (t->step->dtype != MMRT_ST_F32 || t->step->ndim != 0))
    return fail("model input 'step' must be f32[] (the step counter)");
  t->cx.m = m;
  t->cx.B = m->batch / (m->micro_batches > 1 ? m->micro_batches : 1); /* the inputs' rows */
  t->cx.arenas = t->arenas;
  t->cx.seed = t->a.seed;
  t->cx.eval_batches = t->a.eval_batches;
  t->cx.step = feed_step;
  t->cx.stop = feed_stop;
  t->cx.features = t->a.features;
  t->cx.data = t->a.data, t->cx.text = &t->a.text, t->cx.video_fps = t->a.video_fps;
  if (t->a.video_fps > 0 && !mmrt_vfiles_is(t->a.data))
    return fail("--video-fps %g: --data %s is not a list of video files (a .json or .jsonl)",
                t->a.video_fps, t->a.data ? t->a.data : "");
  t->feeder = mmrt_feed_bind(&t->cx, err, sizeof err);
  if (t->feeder && t->a.features && !t->cx.features_used)
    return fail("--features %s: model %s takes no stored features (a model with forwards latents "
                "and text_features does, on the text-to-video task)",
                t->a.features, m->name);
  return t->feeder ? 0 : fail("%s", err);
}

static void *at(Trainer *t, const MmrtTensorDesc *d) {
  return t->arenas[d->arena] + d->offset;
}

/* Ranks on the axes of a split mask. */
static int64_t ways(const Trainer *t, int64_t mask) {
  int64_t n = 1;
  for (int a = 0; a < MMRT_DESC_NAXES; a++)
    if (mask >> a & 1) n *= t->m->mesh[a];
  return n;
}

/* Elements this rank holds of a tensor (global dims divided by their splits). */
static int64_t numel(const Trainer *t, const MmrtTensorDesc *d) {
  int64_t n = 1;
  for (int64_t i = 0; i < d->ndim; i++) n *= d->shape[i] / ways(t, d->split[i]);
  return n;
}

/* Whether this rank holds tensor d: under a pipeline, a parameter or
 * optimizer state of its stages (the descriptor's pp_ranks); always
 * otherwise. */
static int held(const Trainer *t, const MmrtTensorDesc *d) {
  return t->m->pp <= 1 || !d->pp_ranks || !t->has_mesh ||
         (d->pp_ranks >> t->mesh.coord[MMRT_AXIS_PP] & 1);
}

/* Under a pipeline: the range [lo, hi) of the param or opt arena this
 * rank's tensors take (memplan lays them out rank by rank); the whole
 * arena otherwise. */
static void pp_range(const Trainer *t, int arena, int64_t *lo, int64_t *hi) {
  const MmrtModelDesc *m = t->m;
  *lo = 0, *hi = m->arena_bytes[arena];
  if (m->pp > 1 && (arena == MMRT_ARENA_ACT || arena == MMRT_ARENA_GRAD)) {
    *hi = mmrt_pp_arena_bytes(m, t->mesh.coord[MMRT_AXIS_PP], arena, 1); /* its stages' */
    if (*hi < 0) *hi = m->arena_bytes[arena];
    return;
  }
  if (m->pp <= 1 || (arena != MMRT_ARENA_PARAM && arena != MMRT_ARENA_OPT)) return;
  int64_t a = -1, b = 0;
  for (int64_t i = 0; i < m->nparams; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != arena || !held(t, p)) continue;
    int64_t e = p->offset +
                (numel(t, p) * (int64_t)mmrt_st_dtype_size((MmrtStDtype)p->dtype) + 63) / 64 * 64;
    if (a < 0 || p->offset < a) a = p->offset;
    if (e > b) b = e;
  }
  *lo = a < 0 ? 0 : a, *hi = a < 0 ? 0 : b;
}

static void *mesh_of(Trainer *t) {
  return t->has_mesh ? &t->mesh : NULL;
}

/* Runs a step; a failed collective ends the job (the other ranks may be
 * waiting in it), bad data is reported like any error. */
static int run_step(Trainer *t, MmrtStepFn fn, const char *what) {
  int rc = fn == t->m->train_step && t->cx.run_train /* a tile bucket's (mmrt_buckets.h) */
               ? t->cx.run_train(&t->cx, t->a.seed, mesh_of(t))
               : fn(t->arenas, t->a.seed, mesh_of(t));
  if (rc >= 0) return 0;
  if (t->has_mesh && t->mesh.err[0]) {
    fail("%s: %s", what, t->mesh.err);
    mmrt_comm_abort(1);
  }
  return fail("%s failed (bad labels or ids; see above)", what);
}

/* Adds the counters' change since `before` to the training-step table;
 * returns the bytes this rank sent in between. */
typedef MmrtCommCount CommSnap[MMRT_NPHASES + 1][MMRT_COMM_NKINDS][MMRT_NAXES];

static MmrtCommCount comm_count(int p, int k, int a) {
  return p == MMRT_NPHASES
             ? mmrt_comm_counter((MmrtCommKind)k, (MmrtAxis)a)
             : mmrt_comm_counter_phase((MmrtCommPhase)p, (MmrtCommKind)k, (MmrtAxis)a);
}

/* Adds the counters' change since `before` to the training-step table;
 * returns the bytes this rank sent in between. */
static uint64_t add_step_comm(Trainer *t, CommSnap before) {
  uint64_t bytes = 0;
  for (int p = 0; p <= MMRT_NPHASES; p++)
    for (int k = 0; k < MMRT_COMM_NKINDS; k++)
      for (int a = 0; a < MMRT_NAXES; a++) {
        MmrtCommCount c = comm_count(p, k, a), *s = &t->step_comm[p][k][a];
        s->calls += c.calls - before[p][k][a].calls;
        s->elems += c.elems - before[p][k][a].elems;
        s->bytes += c.bytes - before[p][k][a].bytes;
        if (p == MMRT_NPHASES) bytes += c.bytes - before[p][k][a].bytes;
        if (c.calls != before[p][k][a].calls) s->n = c.n;
      }
  t->comm_steps++;
  return bytes;
}

static void snap_comm(CommSnap snap) {
  for (int p = 0; p <= MMRT_NPHASES; p++)
    for (int k = 0; k < MMRT_COMM_NKINDS; k++)
      for (int a = 0; a < MMRT_NAXES; a++) snap[p][k][a] = comm_count(p, k, a);
}

/* One table as JSON: {kind.axis: {n, calls, elems, bytes}, ..., "bytes": b}. */
static size_t comm_table_json(char *buf, size_t len,
                              MmrtCommCount tab[MMRT_COMM_NKINDS][MMRT_NAXES]) {
  size_t pos = (size_t)snprintf(buf, len, "{");
  uint64_t bytes = 0;
  for (int k = 0; k < MMRT_COMM_NKINDS; k++)
    for (int a = 0; a < MMRT_NAXES; a++) {
      const MmrtCommCount *c = &tab[k][a];
      if (!c->calls) continue;
      pos += (size_t)snprintf(buf + pos, pos < len ? len - pos : 0,
                              "\"%s.%s\":{\"n\":%d,\"calls\":%llu,\"elems\":%llu,\"bytes\":%llu},",
                              mmrt_comm_kind_name((MmrtCommKind)k), mmrt_axis_name((MmrtAxis)a),
                              c->n, (unsigned long long)c->calls, (unsigned long long)c->elems,
                              (unsigned long long)c->bytes);
      bytes += c->bytes;
    }
  pos += (size_t)snprintf(buf + pos, pos < len ? len - pos : 0, "\"bytes\":%llu}",
                          (unsigned long long)bytes);
  return pos;
}

/* The metrics log's line of this rank's communication: {"steps": n,
 * "train": {kind.axis: {n, calls, elems, bytes}, ..., "bytes": b} of the
 * training steps, "total": the same of the whole run so far (with
 * evaluation)}. */
static int log_comm(Trainer *t) {
  char err[ERRLEN];
  size_t tl = mmrt_comm_counters_json(NULL, 0) + 1,
         need = tl + 256 + (MMRT_NPHASES + 1) * 128 * MMRT_COMM_NKINDS * MMRT_NAXES;
  char *buf = malloc(need);
  if (!buf) return fail("out of memory for the communication counters");
  size_t pos = (size_t)snprintf(buf, need, "{\"steps\":%lld,\"train\":", (long long)t->comm_steps);
  pos += comm_table_json(buf + pos, need - pos, t->step_comm[MMRT_NPHASES]);
  for (int p = 0; p < MMRT_NPHASES; p++) {
    pos += (size_t)snprintf(buf + pos, need - pos,
                            ",\"train_%s\":", mmrt_comm_phase_name((MmrtCommPhase)p));
    pos += comm_table_json(buf + pos, need - pos, t->step_comm[p]);
  }
  pos += (size_t)snprintf(buf + pos, need - pos, ",\"total\":");
  mmrt_comm_counters_json(buf + pos, need - pos - 1);
  pos = strlen(buf);
  snprintf(buf + pos, need - pos, "}");
  int rc = mmrt_log_write_json(&t->log, t->done, "comm", buf, err, sizeof err);
  free(buf);
  return rc == MMRT_OK ? 0 : fail("%s", err);
}

static void fill_batch(Trainer *t, const MmrtBatchIter *it, int64_t rows, int eval,
                       uint64_t sample0) {
  t->feeder->fill(&t->cx, it, rows, eval, sample0);
}

/* ---- parameters ---- */

/* Elements [g, g + n) of a parameter's global initial values into w. */
static void init_run(Trainer *t, const MmrtTensorDesc *p, float *w, uint64_t g, int64_t n) {
  mmrt_init_values(p, t->a.seed, w, g, n);
}

/* The part of a dim split by the axes of `mask` this rank holds: cp is the
 * outermost split, then tp, then dp (as the IR orders them). */
static int64_t part_of(const Trainer *t, int64_t mask) {
  static const int order[3] = {MMRT_DESC_AXIS_CP, MMRT_DESC_AXIS_TP, MMRT_DESC_AXIS_DP};
  int64_t c = 0;
  for (int k = 0; k < 3; k++) {
    int a = order[k];
    if (mask >> a & 1) c = c * t->m->mesh[a] + (t->has_mesh ? t->mesh.coord[a] : 0);
  }
  return c;
}

/* This rank's piece of a tensor as runs along its last dim: calls
 * fn(cx, local, global, n) for each run of n elements, at element `local`
 * of the piece and `global` of the whole tensor (a scalar: one run of 1).
 * Each run along the last dim is contiguous in the whole tensor too. */
static void for_each_run(Trainer *t, const MmrtTensorDesc *p,
                         void (*fn)(void *cx, int64_t local, int64_t global, int64_t n), void *cx) {
  int64_t r = p->ndim, len[MMRT_DESC_MAX_DIMS], first[MMRT_DESC_MAX_DIMS],
          stride[MMRT_DESC_MAX_DIMS];
  if (r == 0) {
    fn(cx, 0, 0, 1);
    return;
  }
  for (int64_t d = r - 1, k = 1; d >= 0; d--) {
    len[d] = p->shape[d] / ways(t, p->split[d]);
    first[d] = part_of(t, p->split[d]) * len[d];
    stride[d] = k;
    k *= p->shape[d];
  }
  int64_t runs = numel(t, p) / len[r - 1], idx[MMRT_DESC_MAX_DIMS] = {0};
  for (int64_t q = 0; q < runs; q++) { /* idx: the local position of run q in dims 0 .. r-2 */
    int64_t g = first[r - 1];
    for (int64_t d = 0; d < r - 1; d++) g += (first[d] + idx[d]) * stride[d];
    fn(cx, q * len[r - 1], g, len[r - 1]);
    for (int64_t d = r - 2; d >= 0 && ++idx[d] == len[d]; d--) idx[d] = 0;
  }
}

typedef struct InitRun {
  Trainer *t;
  const MmrtTensorDesc *p;
} InitRun;

/* Rows from p->rows on (a padded vocabulary) are zero: the elements before
 * them are the unpadded tensor's, at the same global index. */
static void init_one_run(void *cx, int64_t local, int64_t global, int64_t n) {
  InitRun *u = cx;
  float *w = (float *)at(u->t, u->p) + local;
  int64_t inner = 1;
  for (int64_t d = 1; d < u->p->ndim; d++) inner *= u->p->shape[d];
  int64_t real = u->p->ndim ? u->p->rows * inner : global + n;
  int64_t k = real - global < 0 ? 0 : real - global < n ? real - global : n;
  if (k) init_run(u->t, u->p, w, (uint64_t)global, k);
  if (k < n) memset(w + k, 0, (size_t)(n - k) * sizeof *w);
}

/* A parameter's initial values; a rank holding part of split dims gets
 * exactly the elements the one-rank run puts there. */
static int init_param(Trainer *t, const MmrtTensorDesc *p) {
  InitRun u = {t, p};
  for_each_run(t, p, init_one_run, &u);
  return 0;
}

/* Every arena; under a pipeline, of the param and opt arenas only this
 * rank's range, its base set so that the planned offsets hold. */
static int alloc_arenas(Trainer *t) {
  for (int r = 0; r < MMRT_NARENAS; r++) {
    int64_t lo, hi;
    pp_range(t, r, &lo, &hi);
    int64_t n = hi - lo;
    t->arena_lo[r] = lo, t->arena_own[r] = n > 0 ? n : 0;
    if (n <= 0) continue;
    t->arena_mem[r] = aligned_alloc(64, (size_t)n);
    if (!t->arena_mem[r]) return fail("cannot allocate %lld bytes for arena %d", (long long)n, r);
    memset(t->arena_mem[r], 0, (size_t)n);
    t->arenas[r] = (char *)((uintptr_t)t->arena_mem[r] - (uintptr_t)lo);
  }
  for (int64_t i = 0; i < t->m->nparams; i++) {
    const MmrtTensorDesc *p = &t->m->params[i];
    if (p->dtype != MMRT_ST_F32)
      return fail("parameter %s is %s; the trainer initialises f32 only", p->name,
                  mmrt_st_dtype_name((MmrtStDtype)p->dtype));
  }
  return 0;
}

/* ---- checkpoints ---- */

/* This rank's piece of p as a checkpoint holds it: of a padded vocabulary
 * (passes/vocabpad.c) only its real rows, in front (a rank holding padding
 * alone keeps one zero row: a tensor has no empty dim). */
static void piece_shape(const Trainer *t, const MmrtTensorDesc *p, int64_t *shape) {
  for (int64_t d = 0; d < p->ndim; d++) shape[d] = p->shape[d] / ways(t, p->split[d]);
  if (p->ndim && p->rows < p->shape[0]) {
    int64_t real = p->rows - part_of(t, p->split[0]) * shape[0];
    shape[0] = real < 1 ? 1 : real < shape[0] ? real : shape[0];
  }
}

/* Where this rank's piece of p sits in the logical tensor (the unpadded
 * one): the checkpoint's record of it, and what a run under another plan
 * assembles its own piece by (mmrt_ckpt_read_slice).  A rank holding
 * vocabulary padding alone has length 0 in dim 0. */
static void slice_of(const Trainer *t, const MmrtTensorDesc *p, MmrtSlice *s) {
  s->ndim = (int)p->ndim;
  for (int64_t d = 0; d < p->ndim; d++) {
    s->global[d] = p->shape[d];
    s->len[d] = p->shape[d] / ways(t, p->split[d]);
    s->first[d] = part_of(t, p->split[d]) * s->len[d];
  }
  if (p->ndim && p->rows < p->shape[0]) {
    int64_t real = p->rows - s->first[0];
    s->global[0] = p->rows;
    s->len[0] = real < 0 ? 0 : real < s->len[0] ? real : s->len[0];
    if (!s->len[0]) s->first[0] = 0;
  }
}

static MmrtTensorRef *tensor_refs(Trainer *t) {
  MmrtTensorRef *refs = calloc((size_t)t->m->nparams + 1, sizeof *refs);
  for (int64_t i = 0; refs && i < t->m->nparams; i++) {
    const MmrtTensorDesc *p = &t->m->params[i];
    refs[i].name = p->name;
    refs[i].dtype = (MmrtStDtype)p->dtype;
    refs[i].ndim = (int)p->ndim;
    piece_shape(t, p, refs[i].shape);
    refs[i].data = held(t, p) ? at(t, p) : NULL;
  }
  return refs;
}

/* 1 on every rank if any rank passes bad != 0 (one rank's failure is all
 * ranks' failure); a failed reduction ends the job. */
static int any_rank(Trainer *t, int bad, const char *what) {
  if (!t->has_mesh) return bad != 0;
  if (mmrt_all_reduce_mpi(&t->mesh, MMRT_AXIS_WORLD, &bad, 1, MPI_INT, MPI_MAX, what) != MMRT_OK) {
    fail("%s", t->mesh.err);
    mmrt_comm_abort(1);
  }
  return bad != 0;
}

/* The evaluation's stop poll (MmrtFeedCtx.stop): a signal on any rank
 * stops every rank at the same batch (the training loop's rule). */
static int feed_stop(MmrtFeedCtx *c) {
  Trainer *t = (Trainer *)(void *)((char *)c - offsetof(Trainer, cx));
  if (!any_rank(t, mmrt_stop_signal != 0, "the stop flag (all-reduce before each test batch)"))
    return 0;
  if (!mmrt_stop_signal) mmrt_stop_signal = SIGTERM;
  return t->stopped = 1;
}

#define SLICE_TEXT 640 /* "slice:<name>" and its value */

/* Values of x[0, n) that are not finite (mmrt_f32_not_finite). */
static int64_t count_nonfinite(const float *x, int64_t n) {
  int64_t c = 0;
#pragma omp parallel for reduction(+ : c) if (n > (1 << 18)) schedule(static)
  for (int64_t j = 0; j < n; j += 4096) { /* blocks of 32-bit counts: vectorised */
    uint32_t k = 0;
    int64_t e = j + 4096 < n ? j + 4096 : n;
    for (int64_t i = j; i < e; i++) k += (uint32_t)mmrt_f32_not_finite(x[i]);
    c += k;
  }
  return c;
}

/* The first of this rank's parameters and optimizer state (descriptor
 * order) holding a value that is not finite, *bad of its *n values; -1 if
 * none. */
static int64_t first_nonfinite(Trainer *t, int64_t *bad, int64_t *n) {
  for (int64_t i = 0; i < t->m->nparams; i++) {
    const MmrtTensorDesc *p = &t->m->params[i];
    if (!held(t, p) || p->dtype != MMRT_ST_F32) continue;
    *n = numel(t, p);
    if ((*bad = count_nonfinite(at(t, p), *n)) > 0) return i;
  }
  return -1;
}

/* 1 (on every rank) when some rank holds a weight or optimizer state that
 * is not finite, after a message of each such rank naming its first one;
 * `what` says where ("--init-from x", "the checkpoint of step 5"). */
static int weights_nonfinite(Trainer *t, const char *what) {
  int64_t bad = 0, n = 0, i = first_nonfinite(t, &bad, &n);
  if (i >= 0)
    fail("%s: tensor '%s' has %lld of its %lld values not finite (NaN or infinite)", what,
         t->m->params[i].name, (long long)bad, (long long)n);
  return any_rank(t, i >= 0, "the finite-weights check (all-reduce)");
}

/* A checkpoint of step t->done: every rank's file into the step
 * directory, a barrier, rank 0 writes the manifest and flips DIR/latest, a
 * barrier, rank 0 prunes to the last --keep.  A failure anywhere leaves
 * DIR/latest naming the previous checkpoint. */
static int save_ckpt(Trainer *t) {
  char err[ERRLEN], seed[32], it[256], step[32], dir[4096] = "", skipped[32];
  if (t->saved == t->done) return 0; /* written (or loaded) already: the state is that */
  char what[96];
  snprintf(what, sizeof what, "not writing the checkpoint of step %lld", (long long)t->done);
  if (weights_nonfinite(t, what)) return 1; /* a checkpoint is never of diverged weights */
  MmrtManifest man = {.world_size = t->world, .step = t->done};
  snprintf(man.fingerprint, sizeof man.fingerprint, "%s", t->m->fingerprint);
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->a.seed);
  snprintf(step, sizeof step, "%lld", (long long)t->done);
  snprintf(skipped, sizeof skipped, "%lld", (long long)t->skipped);
  mmrt_iter_state(&t->cx.it, it, sizeof it);
  MmrtKV meta[] = {{MMRT_CKPT_SEED, seed},
                   {MMRT_CKPT_DATA_ITER, it},
                   {MMRT_CKPT_OPT_STEP, step},
                   {"model", t->m->name},
                   {"skipped_steps", skipped}};
  int rc = mmrt_ckpt_target(t->a.ckpt, t->done, dir, sizeof dir, err, sizeof err);
  if (rc == MMRT_OK) {
    /* and per tensor the slice of the logical tensor this piece is */
    int64_t np = t->m->nparams;
    MmrtTensorRef *refs = tensor_refs(t);
    MmrtKV *all = calloc((size_t)np + 6, sizeof *all);
    char *text = calloc((size_t)np + 1, 2 * SLICE_TEXT);
    if (refs && all && text) {
      memcpy(all, meta, sizeof meta);
      int64_t k = 0; /* under a pipeline: the tensors of this rank's stages */
      for (int64_t i = 0; i < np; i++) {
        if (!held(t, &t->m->params[i])) continue;
        MmrtSlice sl;
        char *key = text + 2 * SLICE_TEXT * k, *val = key + SLICE_TEXT;
        slice_of(t, &t->m->params[i], &sl);
        snprintf(key, SLICE_TEXT, "%s%s", MMRT_CKPT_SLICE_PREFIX, t->m->params[i].name);
        mmrt_slice_format(val, SLICE_TEXT, &sl);
        all[5 + k] = (MmrtKV){key, val};
        refs[k++] = refs[i];
      }
      rc = mmrt_ckpt_save_rank(dir, t->rank, &man, refs, (int)k, all, (int)k + 5, err, sizeof err);
    } else {
      rc = mmrt_errf(err, sizeof err, MMRT_ERR_NOMEM, "out of memory");
    }
    free(text);
    free(all);
    free(refs);
  }
  /* every rank's file before the manifest and pointer that name them */
  if (any_rank(t, rc != MMRT_OK, "the checkpoint barrier") && rc == MMRT_OK)
    rc = mmrt_errf(err, sizeof err, MMRT_ERR_IO, "another rank could not write its file");
  if (rc == MMRT_OK && t->rank == 0) rc = mmrt_ckpt_commit(t->a.ckpt, dir, &man, err, sizeof err);
  int bad = any_rank(t, rc != MMRT_OK, "the checkpoint commit");
  if (bad) {
    char e2[ERRLEN];
    if (t->rank == 0 && dir[0] && mmrt_ckpt_discard(t->a.ckpt, dir, e2, sizeof e2) != MMRT_OK)
      fail("%s", e2);
    if (rc == MMRT_OK) return 1; /* rank 0 names the failure */
    return fail("writing the checkpoint of step %lld failed: %s (%s/%s still names the previous "
                "checkpoint)",
                (long long)t->done, err, t->a.ckpt, MMRT_CKPT_POINTER);
  }
  t->saved = t->done;
  if (t->rank == 0 && mmrt_ckpt_prune(t->a.ckpt, (int)t->a.keep, err, sizeof err) != MMRT_OK)
    fprintf(stderr,
            "trainer: warning: checkpoint of step %lld written, but removing old ones "
            "failed: %s\n",
            (long long)t->done, err);
  return 0;
}

typedef struct CopyRun {
  const float *piece;
  float *whole;
} CopyRun;

static void copy_run(void *cx, int64_t local, int64_t global, int64_t n) {
  CopyRun *u = cx;
  memcpy(u->whole + global, u->piece + local, (size_t)n * sizeof *u->whole);
}

/* --save-weights: every tensor whole, as the one-rank trainer holds it.
 * Each rank puts its piece into a zeroed whole tensor (a tensor replicated
 * over an axis: only coordinate 0 of that axis), and a sum over the world
 * on rank 0 assembles it exactly (every element has one contributor).
 * One tensor at a time: rank 0 writes each as it is gathered
 * (mmrt_st_save_stream), so that no rank holds more than the largest
 * tensor beside its arenas (all of them at once were 2 MB, 4% of
 * InternVL2Tiny's planned peak: tests/mpi_separate.sh). Every rank gathers
 * in the file's order (mmrt_st_file_order), rank 0 inside the writer. */
static void gather_one(Trainer *t, const MmrtTensorDesc *p, float *w, int64_t whole);

typedef struct WeightsGather {
  Trainer *t;
  int *order;   /* the file's order: indices into m->params */
  int64_t next; /* gathers made */
  float *buf;
} WeightsGather;

static int64_t whole_of(const MmrtTensorDesc *p) {
  int64_t whole = 1;
  for (int64_t d = 0; d < p->ndim; d++) whole *= p->shape[d];
  return whole;
}

static int weights_fill(void *cx, int i, const void **bytes, char *err, size_t errlen) {
  WeightsGather *g = cx;
  if (g->next >= g->t->m->nparams || g->order[g->next] != i)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "tensor %d out of the gathers' order", i);
  const MmrtTensorDesc *p = &g->t->m->params[i];
  gather_one(g->t, p, g->buf, whole_of(p));
  g->next++;
  *bytes = g->buf;
  return MMRT_OK;
}

static int save_weights(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  char err[ERRLEN];
  if (weights_nonfinite(t, "not writing --save-weights")) return 1;
  int64_t n = m->nparams, most = 1;
  MmrtTensorRef *refs = calloc((size_t)n + 1, sizeof *refs);
  WeightsGather g = {t, calloc((size_t)n + 1, sizeof *g.order), 0, NULL};
  for (int64_t i = 0; refs && i < n; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    refs[i] =
        (MmrtTensorRef){.name = p->name, .dtype = (MmrtStDtype)p->dtype, .ndim = (int)p->ndim};
    for (int64_t d = 0; d < p->ndim; d++) refs[i].shape[d] = p->shape[d];
    if (p->ndim && p->rows < p->shape[0]) refs[i].shape[0] = p->rows; /* its real rows, in front */
    if (whole_of(p) > most) most = whole_of(p);
  }
  g.buf = malloc((size_t)most * sizeof *g.buf);
  if (any_rank(t, !refs || !g.order || !g.buf, "--save-weights (all-reduce of its allocation)")) {
    free(refs), free(g.order), free(g.buf);
    return fail("out of memory for --save-weights");
  }
  int64_t k = mmrt_st_file_order(refs, (int)n, g.order);
  int rc = k == n ? 0 : fail("--save-weights: a tensor of an unknown element size");
  if (!rc && t->rank == 0) {
    MmrtKV meta[] = {{"model", m->name}, {"format", "mmc-weights"}};
    if (mmrt_st_save_stream(t->a.save_weights, refs, (int)n, meta, 2, weights_fill, &g, err,
                            sizeof err) != MMRT_OK)
      rc = fail("--save-weights %s", err);
  }
  /* the other ranks' gathers (and rank 0's left when its file failed) */
  for (; g.next < k; g.next++)
    gather_one(t, &m->params[g.order[g.next]], g.buf, whole_of(&m->params[g.order[g.next]]));
  free(refs), free(g.order), free(g.buf);
  return rc;
}

/* One parameter whole on rank 0 (the sum of every rank's pieces) in w. */
static void gather_one(Trainer *t, const MmrtTensorDesc *p, float *w, int64_t whole) {
  int64_t used = 0; /* axes splitting some dim */
  for (int64_t d = 0; d < p->ndim; d++) used |= p->split[d];
  int mine = 1;
  for (int a = 0; t->has_mesh && a < MMRT_DESC_NAXES; a++)
    if (!(used >> a & 1) && t->mesh.coord[a] != 0) mine = 0;
  /* a pipeline: the lowest pp rank holding it (a tied one has two) */
  if (t->has_mesh && t->m->pp > 1 && p->pp_ranks &&
      (!held(t, p) || (p->pp_ranks & (((int64_t)1 << t->mesh.coord[MMRT_AXIS_PP]) - 1))))
    mine = 0;
  memset(w, 0, (size_t)whole * sizeof *w);
  CopyRun u = {mine ? at(t, p) : NULL, w};
  if (mine) for_each_run(t, p, copy_run, &u);
  if (t->has_mesh && mmrt_all_reduce_mpi(&t->mesh, MMRT_AXIS_WORLD, w, (int)whole, MPI_FLOAT,
                                         MPI_SUM, "--save-weights (all-reduce)") != MMRT_OK)
    mmrt_feed_comm_fail(&t->cx);
}

/* mmrt_hf_export's get: parameter j gathered whole, one at a time. */
typedef struct HfGather {
  Trainer *t;
  const int64_t *which; /* j -> its index in m->params */
  float *buf;
} HfGather;

static int hf_get(void *cx, int j, const float **data, char *err, size_t errlen) {
  (void)err, (void)errlen;
  HfGather *g = cx;
  const MmrtTensorDesc *p = &g->t->m->params[g->which[j]];
  int64_t whole = 1;
  for (int64_t d = 0; d < p->ndim; d++) whole *= p->shape[d];
  gather_one(g->t, p, g->buf, whole);
  *data = g->buf;
  return MMRT_OK;
}

/* --save-hf DIR: the parameters under the --init-from Hugging Face
 * directory's sub-model written back in its names and layouts
 * (mmrt_hf_export), each gathered whole on rank 0 when its tensor is
 * written: every rank makes the same gathers, rank 0 writes. */
static int save_hf(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  char err[ERRLEN], sub[256] = "";
  const char *src = t->a.init_from, *eq = src ? strchr(src, '=') : NULL;
  struct stat st;
  if (weights_nonfinite(t, "not writing --save-hf")) return 1;
  if (eq && stat(src, &st) != 0)
    snprintf(sub, sizeof sub, "%.*s", (int)(eq - src), src), src = eq + 1;
  if (!src || !mmrt_hf_is_dir(src))
    return fail("--save-hf %s: needs --init-from a Hugging Face directory (its config.json, "
                "names and layouts)",
                t->a.save_hf);
  int rc = 0, n = 0;
  MmrtHfParam *p = calloc((size_t)m->nparams + 1, sizeof *p);
  int64_t *which = calloc((size_t)m->nparams + 1, sizeof *which), most = 1;
  if (!p || !which) rc = fail("out of memory for --save-hf");
  for (int64_t i = 0; !rc && i < m->nparams; i++) {
    const MmrtTensorDesc *d = &m->params[i];
    if (d->arena != MMRT_ARENA_PARAM || mmrt_is_adapter(d->name)) continue;
    int64_t whole = 1;
    p[n] = (MmrtHfParam){.name = d->name, .ndim = (int)d->ndim};
    for (int64_t k = 0; k < d->ndim; k++) whole *= p[n].shape[k] = d->shape[k];
    if (d->ndim && d->rows < d->shape[0]) p[n].shape[0] = d->rows; /* a padded vocabulary */
    if (whole > most) most = whole;
    which[n++] = i;
  }
  HfGather g = {t, which, rc ? NULL : malloc((size_t)most * sizeof(float))};
  if (!rc && !g.buf) rc = fail("out of memory for --save-hf");
  MmrtHf *h = NULL;
  if (!rc) {
    int e = mmrt_hf_open(&h, src, err, sizeof err);
    if (e == MMRT_OK)
      e = mmrt_hf_export(h, *sub ? sub : mmrt_hf_instance(h), p, n, hf_get, &g,
                         t->rank == 0 ? t->a.save_hf : NULL,
                         t->a.hf_dtype && !strcmp(t->a.hf_dtype, "bf16"),
                         t->a.shard_size ? t->a.shard_size : (int64_t)5000000000, err, sizeof err);
    mmrt_hf_close(h);
    if (e != MMRT_OK && t->rank == 0) rc = fail("--save-hf %s: %s", t->a.save_hf, err);
  }
  free(g.buf);
  free(p);
  free(which);
  return rc;
}

/* --dump-inputs: this rank's data inputs of a training step (the global
 * batch on one rank) as DIR/step-NNNNNN.safetensors, named as in the model;
 * step -1: the test batch --dump-logits ran, as DIR/eval.safetensors. */
static int dump_inputs(Trainer *t, int64_t step) {
  const MmrtModelDesc *m = t->m;
  MmrtTensorRef refs[16];
  int n = 0;
  for (int64_t i = 0; i < m->ninputs && n < 16; i++) {
    const MmrtTensorDesc *d = &m->inputs[i];
    if (d->arena != MMRT_ARENA_INPUT || d->ndim == 0) /* lr and step are scalars the driver sets */
      continue;
    MmrtTensorRef *r = &refs[n++];
    r->name = d->name;
    r->dtype = (MmrtStDtype)d->dtype;
    r->ndim = (int)d->ndim;
    for (int k = 0; k < r->ndim; k++) r->shape[k] = d->shape[k];
    r->data = t->arenas[d->arena] + d->offset;
  }
  char path[4096], err[512];
  if (mkdir(t->a.dump_inputs, 0755) != 0 && errno != EEXIST)
    return fail("--dump-inputs %s: cannot create the folder: %s", t->a.dump_inputs,
                strerror(errno));
  if (step < 0)
    snprintf(path, sizeof path, "%s/eval.safetensors", t->a.dump_inputs);
  else
    snprintf(path, sizeof path, "%s/step-%06lld.safetensors", t->a.dump_inputs, (long long)step);
  if (mmrt_st_save(path, refs, n, NULL, 0, err, sizeof err)) return fail("--dump-inputs: %s", err);
  return 0;
}

/* This rank's piece of every parameter and optimizer state from the open
 * checkpoint c, whatever plan wrote it: each piece assembled from the
 * pieces of the logical tensor the rank files hold (this rank's own file
 * first: under the same plan that is one read per tensor).  which: -2
 * everything (optimizer state too), else as in load_by_name; need_all: a tensor no file has is an
 * error.  Returns the number loaded, or -1 with err set. */
static int load_pieces(Trainer *t, MmrtCkpt *c, int which, int need_all, char *err, size_t len) {
  int loaded = 0;
  for (int64_t i = 0; i < t->m->nparams; i++) {
    const MmrtTensorDesc *p = &t->m->params[i];
    if (!held(t, p) || (which > -2 && (p->arena != MMRT_ARENA_PARAM ||
                                       (which >= 0 && mmrt_is_adapter(p->name) != which))))
      continue;
    size_t k = t->sub ? strlen(t->sub) : 0; /* --init-from SUB=DIR: SUB only */
    if (k && (strncmp(p->name, t->sub, k) != 0 || p->name[k] != '.')) continue;
    MmrtTensorRef ref = {
        .name = p->name, .dtype = (MmrtStDtype)p->dtype, .ndim = (int)p->ndim, .data = at(t, p)};
    MmrtSlice sl;
    slice_of(t, p, &sl);
    for (int d = 0; d < ref.ndim; d++) ref.shape[d] = sl.len[d];
    int rc = mmrt_ckpt_read_slice(c, &ref, &sl, t->rank, err, len);
    if (rc == MMRT_ERR_NOTFOUND && !need_all) continue;
    if (rc != MMRT_OK) return -1;
    if (t->loaded) t->loaded[i] = 1;
    loaded++;
  }
  return loaded;
}

/* Loads the checkpoint of --ckpt; *fresh = 1 when there is none yet.  The
 * checkpoint may come from another plan (tp, sp, dp, ZeRO, world size):
 * only the model must be the same (its fingerprint). */
static int load_ckpt(Trainer *t, int *fresh) {
  char err[ERRLEN];
  MmrtManifest found;
  MmrtCkpt *c = NULL;
  int rc = mmrt_ckpt_open_all(&c, t->a.ckpt, t->m->fingerprint, &found, err, sizeof err);
  *fresh = rc == MMRT_ERR_NOTFOUND;
  char other[256];
  if (*fresh && mmrt_ckpt_leftover(t->a.ckpt, other, sizeof other))
    return fail("--resume: %s has no checkpoint (no %s/%s) but is not empty (it holds '%s'); "
                "resuming would start again at step 0 and prune what is there: name the "
                "checkpoint's own directory, restore %s, or use an empty --ckpt DIR",
                t->a.ckpt, t->a.ckpt, MMRT_CKPT_POINTER, other, MMRT_CKPT_POINTER);
  if (*fresh) return 0;
  if (rc == MMRT_ERR_MISMATCH && strstr(err, "fingerprint"))
    return fail("the checkpoint in %s is not of this model: %s", t->a.ckpt, err);
  if (rc != MMRT_OK) return fail("cannot resume from %s: %s", t->a.ckpt, err);
  /* the run's state from the file of this rank (rank 0's when the writer had fewer) */
  MmrtStFile *f = mmrt_ckpt_file(c, t->rank < mmrt_ckpt_nfiles(c) ? t->rank : 0);
  int64_t seed = 0, step = 0;
  const char *its = mmrt_st_meta(f, MMRT_CKPT_DATA_ITER);
  rc = load_pieces(t, c, -2, 1, err, sizeof err) < 0 ? MMRT_ERR_MISMATCH : MMRT_OK;
  if (rc == MMRT_OK) rc = mmrt_st_meta_int64(f, MMRT_CKPT_SEED, &seed, err, sizeof err);
  if (rc == MMRT_OK) rc = mmrt_st_meta_int64(f, MMRT_CKPT_STEP, &step, err, sizeof err);
  if (rc == MMRT_OK && mmrt_st_meta(f, "skipped_steps")) /* (older checkpoints have none) */
    rc = mmrt_st_meta_int64(f, "skipped_steps", &t->skipped, err, sizeof err);
  if (rc == MMRT_OK && !its)
    rc = mmrt_errf(err, sizeof err, MMRT_ERR_FORMAT, "%s: no '%s' in the metadata", mmrt_st_path(f),
                   MMRT_CKPT_DATA_ITER);
  if (rc == MMRT_OK && t->a.has_seed && (uint64_t)seed != t->a.seed)
    rc = mmrt_errf(err, sizeof err, MMRT_ERR_MISMATCH, "%s was trained with --seed %lld, not %llu",
                   mmrt_st_path(f), (long long)seed, (unsigned long long)t->a.seed);
  if (rc == MMRT_OK) {
    t->a.seed = (uint64_t)seed;
    mmrt_iter_free(&t->cx.it); /* the iterator's order depends on the seed */
    rc = mmrt_iter_init(&t->cx.it, &t->cx.train, t->m->batch, 1, t->a.seed, err, sizeof err);
    if (rc == MMRT_OK) rc = mmrt_iter_restore(&t->cx.it, its, err, sizeof err);
  }
  mmrt_ckpt_close(c);
  if (rc != MMRT_OK) return fail("cannot resume from %s: %s", t->a.ckpt, err);
  if (!t->a.quiet && t->rank == 0 && found.world_size != t->world)
    fprintf(stderr,
            "trainer: the checkpoint was written by %d rank%s; each piece assembled from "
            "theirs\n",
            found.world_size, found.world_size == 1 ? "" : "s");
  t->done = t->saved = step;
  return 0;
}

/* ---- loading by name, LoRA adapters ---- */

/* After --init-from: the parameters (of this rank) it left at their init,
 * by name (LoRA adapters counted); they were all set by init_param, and a
 * loaded one was overwritten, so compare with a fresh init. */
static int left_at_init(const Trainer *t, int64_t i, int adapters) {
  const MmrtTensorDesc *p = &t->m->params[i];
  return p->arena == MMRT_ARENA_PARAM && held(t, p) && !t->loaded[i] &&
         mmrt_is_adapter(p->name) == adapters;
}

static void report_left(Trainer *t) {
  int nleft = 0, nad = 0;
  for (int64_t i = 0; i < t->m->nparams; i++)
    nleft += left_at_init(t, i, 0), nad += left_at_init(t, i, 1);
  if (nleft) {
    fprintf(stderr, "trainer: %d parameter%s left at their init:", nleft, nleft == 1 ? "" : "s");
    for (int64_t i = 0; i < t->m->nparams; i++)
      if (left_at_init(t, i, 0)) fprintf(stderr, " %s", t->m->params[i].name);
    fprintf(stderr, "\n");
  }
  if (nad) fprintf(stderr, "trainer: %d LoRA adapters left at their init\n", nad);
}

/* p is under sub-model `sub` (NULL or "": everything). */
static int under_sub(const char *name, const char *sub) {
  size_t k = sub ? strlen(sub) : 0;
  return !k || (strncmp(name, sub, k) == 0 && name[k] == '.');
}

/* --init-from [SUB=]HF_DIR: every parameter under SUB (default: the
 * architecture's instance, e.g. llm) from its mapped tensor (mmrt_hf.h),
 * each rank reading whole source tensors one at a time and keeping its
 * slice. LoRA adapters keep their init. Returns the number loaded or -1. */
static int load_hf(Trainer *t, const char *flag, const char *dir, const char *sub) {
  char err[ERRLEN];
  MmrtHf *h = NULL;
  if (mmrt_hf_open(&h, dir, err, sizeof err) != MMRT_OK) return fail("%s %s", flag, err), -1;
  const MmrtModelDesc *m = t->m;
  MmrtHfParam *p = calloc((size_t)m->nparams + 1, sizeof *p);
  MmrtHfSrc *src = calloc((size_t)m->nparams + 1, sizeof *src);
  int n = 0, loaded = 0, rc = p && src ? MMRT_OK : MMRT_ERR_NOMEM;
  int64_t *which = calloc((size_t)m->nparams + 1, sizeof *which);
  for (int64_t i = 0; rc == MMRT_OK && which && i < m->nparams; i++) {
    const MmrtTensorDesc *d = &m->params[i];
    if (d->arena != MMRT_ARENA_PARAM || mmrt_is_adapter(d->name)) continue;
    MmrtSlice sl;
    slice_of(t, d, &sl);
    p[n] = (MmrtHfParam){.name = d->name, .ndim = (int)d->ndim};
    for (int k = 0; k < sl.ndim; k++) p[n].shape[k] = sl.global[k];
    which[n++] = i;
  }
  if (!which) rc = MMRT_ERR_NOMEM;
  if (rc == MMRT_OK)
    rc = mmrt_hf_match(h, sub && *sub ? sub : mmrt_hf_instance(h), p, n, src, err, sizeof err);
  if (rc == MMRT_OK) rc = mmrt_hf_check_ties(h, err, sizeof err);
  for (int k = 0; rc == MMRT_OK && k < n; k++) {
    const MmrtTensorDesc *d = &m->params[which[k]];
    if (src[k].tensor < 0 || !held(t, d)) continue;
    MmrtSlice sl;
    slice_of(t, d, &sl);
    rc = mmrt_hf_read(h, &p[k], &src[k], &sl, at(t, d), err, sizeof err);
    loaded += rc == MMRT_OK;
    if (rc == MMRT_OK && t->loaded) t->loaded[which[k]] = 1;
  }
  if (rc == MMRT_ERR_NOMEM) snprintf(err, sizeof err, "out of memory");
  free(p);
  free(src);
  free(which);
  mmrt_hf_close(h);
  if (rc != MMRT_OK) return fail("%s %s", flag, err), -1;
  return loaded;
}

/* A tensor of a file (or checkpoint) that is neither a parameter of the
 * model nor optimizer state of one (passes/optimizer.c's "adamw.m.<param>"
 * ...: --init-from loads parameters only, and a model that trains fewer
 * of them, e.g. LoRA's, has less state); NULL if there is none. Tensors
 * outside sub-model `sub` are not looked at. */
static const char *unmatched(Trainer *t, MmrtStFile *f, const char *sub) {
  static const char *const state[] = {"adamw.m.", "adamw.v.", "sgd.momentum."};
  for (int i = 0; i < mmrt_st_count(f); i++) {
    const char *nm = mmrt_st_name(f, i), *p = nm;
    for (size_t s = 0; s < sizeof state / sizeof state[0]; s++)
      if (strncmp(nm, state[s], strlen(state[s])) == 0) p = nm + strlen(state[s]);
    int64_t k = 0;
    while (k < t->m->nparams && strcmp(t->m->params[k].name, p) != 0) k++;
    if (k == t->m->nparams && under_sub(p, sub)) return nm;
  }
  return NULL;
}

/* The parameters (not optimizer state) a file has, by name and shape:
 * adapters only, everything else, or (which < 0) all. PATH is a
 * .safetensors file or a checkpoint directory (of any plan: each piece
 * assembled from its rank files). Returns the
 * number loaded, or -1 after a message. `need_all`: every selected
 * parameter must be there. */
static int load_by_name(Trainer *t, const char *flag, const char *path, int which, int need_all) {
  char err[ERRLEN];
  struct stat st;
  const char *sub = NULL;
  if (which < 0 && t->sub) sub = t->sub;
  if (which < 0 && mmrt_hf_is_dir(path)) return load_hf(t, flag, path, sub);
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { /* a checkpoint of any plan */
    MmrtCkpt *c = NULL;
    if (mmrt_ckpt_open_all(&c, path, NULL, NULL, err, sizeof err) != MMRT_OK)
      return fail("%s %s: %s", flag, path, err), -1;
    int n = load_pieces(t, c, which < 0 ? -1 : which, need_all, err, sizeof err);
    const char *extra = NULL;
    for (int k = 0; n > 0 && which < 0 && !extra && k < mmrt_ckpt_nfiles(c); k++)
      extra = unmatched(t, mmrt_ckpt_file(c, k), sub);
    if (extra)
      snprintf(err, sizeof err, "%s holds tensor '%s' that matches no parameter of model %s",
               mmrt_ckpt_dir(c), extra, t->m->name);
    mmrt_ckpt_close(c);
    if (extra) return fail("%s %s", flag, err), -1;
    return n < 0 ? (fail("%s %s: %s", flag, path, err), -1) : n;
  }
  MmrtStFile *f = NULL;
  if (mmrt_st_open(&f, path, err, sizeof err) != MMRT_OK)
    return fail("%s %s: %s", flag, path, err), -1;
  int loaded = 0, rc = MMRT_OK;
  for (int64_t i = 0; i < t->m->nparams && rc == MMRT_OK; i++) {
    const MmrtTensorDesc *p = &t->m->params[i];
    if (p->arena != MMRT_ARENA_PARAM || (which >= 0 && mmrt_is_adapter(p->name) != which) ||
        !held(t, p) || !under_sub(p->name, sub))
      continue;
    if (mmrt_st_find(f, p->name) < 0) {
      if (need_all)
        rc = mmrt_errf(err, sizeof err, MMRT_ERR_NOTFOUND, "%s: no tensor '%s'", path, p->name);
      continue;
    }
    MmrtTensorRef ref = {
        .name = p->name, .dtype = (MmrtStDtype)p->dtype, .ndim = (int)p->ndim, .data = at(t, p)};
    piece_shape(t, p, ref.shape);
    for (int64_t d = 0; d < p->ndim; d++)
      if (p->split[d])
        rc = mmrt_errf(err, sizeof err, MMRT_ERR_ARG,
                       "%s: %s is split over ranks; load it from a checkpoint directory (of any "
                       "plan)",
                       path, p->name);
    if (rc == MMRT_OK) rc = mmrt_st_read(f, &ref, err, sizeof err);
    loaded += rc == MMRT_OK;
    if (rc == MMRT_OK && t->loaded) t->loaded[i] = 1;
  }
  const char *extra = rc == MMRT_OK && loaded && which < 0 ? unmatched(t, f, sub) : NULL;
  if (extra)
    rc = mmrt_errf(err, sizeof err, MMRT_ERR_MISMATCH,
                   "%s holds tensor '%s' that matches no parameter of model %s", path, extra,
                   t->m->name);
  mmrt_st_close(f);
  if (rc != MMRT_OK) return fail("%s %s: %s", flag, path, err), -1;
  return loaded;
}

/* The adapters alone, with their rank and alpha in the metadata. */
static int save_adapters(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  char err[ERRLEN], rank[32], alpha[32];
  if (weights_nonfinite(t, "not writing --save-adapters")) return 1;
  MmrtTensorRef *refs = calloc((size_t)m->nparams + 1, sizeof *refs);
  int n = 0;
  for (int64_t i = 0; refs && i < m->nparams; i++) {
    const MmrtTensorDesc *p = &m->params[i];
    if (p->arena != MMRT_ARENA_PARAM || !mmrt_is_adapter(p->name)) continue;
    for (int64_t d = 0; d < p->ndim; d++)
      if (p->split[d])
        return free(refs),
               fail("--save-adapters: %s is split over ranks; train LoRA on dp only", p->name);
    refs[n] = (MmrtTensorRef){
        .name = p->name, .dtype = (MmrtStDtype)p->dtype, .ndim = (int)p->ndim, .data = NULL};
    for (int64_t d = 0; d < p->ndim; d++) refs[n].shape[d] = p->shape[d];
    if (m->pp > 1 && t->has_mesh) { /* from the lowest pp rank holding it, summed over pp */
      size_t e = (size_t)numel(t, p);
      float *w = calloc(e + 1, sizeof *w);
      if (!w) return free(refs), fail("out of memory");
      if (held(t, p) && !(p->pp_ranks & (((int64_t)1 << t->mesh.coord[MMRT_AXIS_PP]) - 1)))
        memcpy(w, at(t, p), e * sizeof *w);
      if (mmrt_all_reduce_mpi(&t->mesh, MMRT_AXIS_PP, w, (int)e, MPI_FLOAT, MPI_SUM,
                              "--save-adapters (all-reduce over pp)") != MMRT_OK)
        mmrt_feed_comm_fail(&t->cx);
      refs[n].data = w;
    } else {
      refs[n].data = at(t, p);
    }
    n++;
  }
  if (!refs) return fail("out of memory");
  snprintf(rank, sizeof rank, "%lld", (long long)m->lora_rank);
  snprintf(alpha, sizeof alpha, "%.17g", m->lora_alpha);
  MmrtKV meta[] = {
      {"lora_rank", rank}, {"lora_alpha", alpha}, {"model", m->name}, {"format", "mmc-lora"}};
  int rc =
      t->rank == 0 ? mmrt_st_save(t->a.save_adapters, refs, n, meta, 4, err, sizeof err) : MMRT_OK;
  for (int i = 0; m->pp > 1 && t->has_mesh && i < n; i++) free(refs[i].data);
  free(refs);
  if (rc != MMRT_OK) return fail("--save-adapters %s: %s", t->a.save_adapters, err);
  return 0;
}

/* ---- the schedule, evaluation, the loop ---- */

static double lr_at(const Trainer *t, int64_t step) {
  const MmrtModelDesc *m = t->m;
  double lr = t->a.lr;
  int64_t warm = m->warmup, total = t->a.steps;
  if (step <= warm && warm > 0) return lr * (double)step / (double)warm;
  if (m->lr_sched == MMRT_LR_CONSTANT || total <= warm) return lr;
  double p = (double)(step - warm) / (double)(total - warm);
  if (p > 1) p = 1;
  if (m->lr_sched == MMRT_LR_LINEAR) return lr + (m->min_lr - lr) * p;
  return m->min_lr + 0.5 * (lr - m->min_lr) * (1 + cos(M_PI * p));
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int restart_eval(Trainer *t) {
  char err[ERRLEN];
  return mmrt_feed_restart_eval(&t->cx, err, sizeof err) == MMRT_OK ? 0 : fail("%s", err);
}

static int pp_run(void *u, MmrtStepFn fn, char **arenas, const char *what);
static int pp_fail(void *u, const char *msg);
static int64_t mb_elems(void *t, const MmrtTensorDesc *d);

/* The evaluation step on the batch in the arenas: @forward, or under a
 * pipeline its stages on this rank (mmrt_pp_eval: no parameter is
 * gathered; the loss and logits are the last stage's rank's, and with
 * share every pp rank's). */
static int eval_step(Trainer *t, int share, const char *what) {
  const MmrtModelDesc *m = t->m;
  if (m->pp <= 1 || !t->has_mesh) return run_step(t, m->eval_step, what);
  MmrtPpHooks h = {t, NULL, pp_run, mb_elems, pp_fail};
  return mmrt_pp_eval(m, &t->mesh, t->arenas, &h, share, what);
}

/* Loss and top-1 accuracy over the test split (or --eval-batches of it). */
static int evaluate(Trainer *t, double *loss, double *acc) {
  const MmrtModelDesc *m = t->m;
  int64_t counted = 0, correct = 0, batches = 0;
  double lsum = 0;
  int32_t *best = calloc((size_t)m->logits_rows + 1, sizeof *best);
  if (!best) return fail("out of memory");
  if (restart_eval(t)) {
    free(best);
    return 1;
  }
  MmrtProgress pr; /* a stop leaves the sums partial: the caller reports none */
  mmrt_progress_begin(&pr, "eval batch", 0, mmrt_feed_eval_total(&t->cx), "samples", t->cx.loud);
  for (int64_t seen = 0; !feed_stop(&t->cx); mmrt_progress_tick(&pr, batches, (double)seen, NULL)) {
    int64_t rows = mmrt_iter_next(&t->cx.eval_it);
    if (rows == 0 || (t->a.eval_batches >= 0 && batches >= t->a.eval_batches)) break;
    seen += rows;
    fill_batch(t, &t->cx.eval_it, rows, 1, 0);
    if (eval_step(t, 0, "the evaluation step on a test batch")) {
      free(best);
      return 1;
    }
    /* under a pipeline the last stage's ranks count (the sum over pp below) */
    int counts = m->pp <= 1 || !t->has_mesh || mmrt_pp_eval_last(m, &t->mesh);
    const int32_t *y = t->cx.labels ? at(t, t->cx.labels) : NULL;
    int64_t nc[2] = {0, 0}; /* rows counted, rows right */
    if (!y && counts)       /* no labels (video): this rank's rows of the batch (the dp sum: all) */
      nc[0] = rows < t->cx.lo ? 0 : (rows < t->cx.lo + t->cx.rows ? rows - t->cx.lo : t->cx.rows);
    if (y && m->eval_logits_offset >= 0 && counts) {
      mmrt_feed_argmax(&t->cx, best, 0);
      for (int64_t r = 0; r < m->logits_rows; r++) {
        if (y[r] == (int32_t)m->ignore_index) continue;
        nc[1] += best[r] == y[r];
        nc[0]++;
      }
    }
    if (t->has_mesh) /* the rows of the whole dp group (the loss is the group's already) */
      if (mmrt_all_reduce_mpi(&t->mesh, MMRT_AXIS_DP, nc, 2, MPI_INT64_T, MPI_SUM,
                              "the evaluation counts (all-reduce)") != MMRT_OK)
        mmrt_feed_comm_fail(&t->cx);
    int64_t n = nc[0];
    correct += nc[1];
    float l = 0;
    if (counts) memcpy(&l, t->arenas[MMRT_ARENA_ACT] + m->eval_loss_offset, sizeof l);
    lsum += (double)l * (double)n;
    counted += n;
    batches++;
  }
  mmrt_progress_break(&pr);
  free(best);
  if (m->pp > 1 && t->has_mesh) { /* the last stage's sums on every pp rank */
    double v[3] = {lsum, (double)counted, (double)correct};
    if (mmrt_all_reduce_mpi(&t->mesh, MMRT_AXIS_PP, v, 3, MPI_DOUBLE, MPI_SUM,
                            "the evaluation's sums (all-reduce over pp)") != MMRT_OK)
      mmrt_feed_comm_fail(&t->cx);
    lsum = v[0], counted = (int64_t)v[1], correct = (int64_t)v[2];
  }
  *loss = counted ? lsum / (double)counted : NAN;
  *acc = counted && t->cx.labels ? (double)correct / (double)counted : NAN;
  return 0;
}

/* The logits of the first test batch, for comparing builds bit by bit. */
static int dump_logits(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  if (m->eval_logits_offset < 0) return fail("--dump-logits: model %s has no logits", m->name);
  if (restart_eval(t)) return 1;
  fill_batch(t, &t->cx.eval_it, mmrt_iter_next(&t->cx.eval_it), 1, 0);
  if (eval_step(t, 1, "the evaluation step on a test batch")) return 1;
  if (t->rank != 0) return 0;
  if (t->a.dump_inputs && dump_inputs(t, -1)) return 1;
  size_t n = (size_t)(m->logits_rows * m->logits_cols);
  char err[ERRLEN];
  if (mmrt_write_file_atomic(t->a.dump_logits, t->arenas[MMRT_ARENA_ACT] + m->eval_logits_offset,
                             n * sizeof(float), err, sizeof err) != MMRT_OK)
    return fail("--dump-logits %s", err);
  return 0;
}

static int64_t mb_elems(void *t, const MmrtTensorDesc *d) {
  return numel(t, d);
}

/* ---- the pipeline's hooks (mmrt_pp.h) ---- */

static int pp_fill(void *u, int64_t k, char **arenas) {
  Trainer *t = u;
  const MmrtModelDesc *m = t->m;
  int64_t lo0 = t->cx.lo;
  char **keep = t->cx.arenas;
  t->cx.lo = lo0 + k * t->cx.B;
  t->cx.arenas = arenas;
  fill_batch(t, &t->cx.it, m->batch, 0, (uint64_t)(t->done) * (uint64_t)m->batch);
  t->cx.arenas = keep;
  t->cx.lo = lo0;
  memcpy(arenas[t->lr->arena] + t->lr->offset, &t->pp_lr, sizeof t->pp_lr);
  memcpy(arenas[t->step->arena] + t->step->offset, &t->pp_fs, sizeof t->pp_fs);
  return 0;
}

static int pp_run(void *u, MmrtStepFn fn, char **arenas, const char *what) {
  Trainer *t = u;
  if (fn(arenas, t->a.seed, mesh_of(t)) >= 0) return 0;
  if (t->has_mesh && t->mesh.err[0]) {
    fail("%s: %s", what, t->mesh.err);
    mmrt_comm_abort(1);
  }
  return fail("%s failed (bad labels or ids; see above)", what);
}

static int pp_fail(void *u, const char *msg) {
  (void)u;
  return fail("%s", msg);
}

/* A step of micro_batches = M > 1 (mmrt_pp.h): micro-batch k is rows
 * [k B / M, (k + 1) B / M) of the step's batch (this rank's share of them
 * under dp), forward and backward, its gradients summed; then the update. */
static int mb_step(Trainer *t, int64_t step, float lr, float fs, const char *what, float *loss) {
  const MmrtModelDesc *m = t->m;
  if (t->a.dump_inputs)
    return fail("--dump-inputs writes a step's batch; with micro-batches (%lld) there are several",
                (long long)m->micro_batches);
  if (!t->mb.m && mmrt_mb_init(&t->mb, m, t->arenas[MMRT_ARENA_GRAD], mb_elems, t))
    return fail("out of memory for the micro-batches' gradient sums");
  int64_t lo0 = t->cx.lo, b = t->cx.B;
  mmrt_mb_begin_step(&t->mb);
  for (int64_t k = 0; k < m->micro_batches; k++) {
    t->cx.lo = lo0 + k * b;
    fill_batch(t, &t->cx.it, m->batch, 0, (uint64_t)(step - 1) * (uint64_t)m->batch);
    memcpy(at(t, t->lr), &lr, sizeof lr);
    memcpy(at(t, t->step), &fs, sizeof fs);
    double t0 = mmrt_trace_now();
    int rc = run_step(t, m->train_step, what);
    mmrt_trace_add("F+B", "forward", t0, mmrt_trace_now(), (int)k, 0);
    t->cx.lo = lo0;
    if (rc) return 1;
    float l;
    memcpy(&l, t->arenas[MMRT_ARENA_ACT] + m->train_loss_offset, sizeof l);
    mmrt_mb_add(&t->mb, t->arenas, l);
  }
  *loss = mmrt_mb_finish(&t->mb, t->arenas);
  double t0 = mmrt_trace_now();
  int rc = run_step(t, m->update_step, what);
  mmrt_trace_add("update", "update", t0, mmrt_trace_now(), -1, -1);
  return rc;
}

/* The feeder's metric: 1 with *v set, 0 when there is none for this model, -1
 * after a message. */
static int feed_metric(Trainer *t, double *v) {
  char err[ERRLEN];
  if (!t->feeder->metric) return 0;
  int rc = t->feeder->metric(&t->cx, v, err, sizeof err);
  if (rc == 1) return 0;
  if (rc != MMRT_OK) return err[0] ? -fail("%s", err) : -1;
  return 1;
}

/* --on-nan skip-step: the param and opt arenas (this rank's range) into
 * the snapshot before a step (back = 0), or back from it (undoing it). */
static void snapshot(Trainer *t, int back) {
  static const int which[2] = {MMRT_ARENA_PARAM, MMRT_ARENA_OPT};
  for (int k = 0; k < 2; k++) {
    int r = which[k];
    if (!t->snap[r] || t->arena_own[r] <= 0) continue;
    if (back)
      memcpy(t->arena_mem[r], t->snap[r], (size_t)t->arena_own[r]);
    else
      memcpy(t->snap[r], t->arena_mem[r], (size_t)t->arena_own[r]);
  }
}

/* After a step: a loss or weight that is not finite on any rank (a
 * gradient that was not, or an update that overflowed) stops
 * the run with a message naming the step, the loss and each rank's first
 * such tensor, before anything of the step is logged or written (--on-nan
 * stop); with skip-step the step is undone (*skip = 1) unless SKIP_LIMIT
 * steps in a row were. Every rank takes the same decision. */
static int check_step(Trainer *t, int64_t step, float loss, int *skip) {
  /* the weights: a gradient that is not finite makes its parameter's update so, which the
   * optimizer noted as it wrote it (mmrt_opt_nonfinite_take: no pass over the weights); then
   * the first such tensor is named. The optimizer state is scanned when a checkpoint or weights
   * file is written */
  int64_t bad = 0, n = 0;
  int64_t i = mmrt_opt_nonfinite_take() ? first_nonfinite(t, &bad, &n) : -1;
  int lossbad = mmrt_f32_not_finite(loss);
  *skip = 0;
  if (!any_rank(t, i >= 0 || lossbad, "the finite-loss check (all-reduce)")) {
    t->skip_run = 0;
    return 0;
  }
  const char *name = i >= 0 ? t->m->params[i].name : NULL;
  if (t->a.skip_nan && t->skip_run + 1 < SKIP_LIMIT) {
    snapshot(t, 1);
    t->skipped++, t->skip_run++, *skip = 1;
    if (!t->a.quiet && t->rank == 0)
      fprintf(stderr, "trainer: step %lld skipped (--on-nan skip-step): loss %g%s%s%s\n",
              (long long)step, loss != loss ? (double)NAN : (double)loss, name ? ", tensor '" : "",
              name ? name : "", name ? "' not finite" : "");
    return 0;
  }
  if (name)
    fail("step %lld: tensor '%s' has %lld of its %lld values not finite after the update (its "
         "gradient was not finite, or the update overflowed)",
         (long long)step, name, (long long)bad, (long long)n);
  if (t->rank == 0)
    fail("step %lld: the training diverged: loss %g%s; stopped before the step was logged or "
         "any weights written (try a lower --lr%s)",
         (long long)step, loss != loss ? (double)NAN : (double)loss,
         t->a.skip_nan ? ", and the last " STR(SKIP_LIMIT) " steps in a row were not finite "
                                                           "(--on-nan skip-step)"
                       : "",
         t->m->clip > 0 ? "" : ", or clip in the train section");
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The measured median step beside the compile-time prediction (mmc compile
 * --device, docs/planner.md): the steps after the first two (oneDNN's
 * primitives are made in the first), each from its start to its checks. */
static void print_step_times(const Trainer *t, double *dt, int64_t n) {
  if (t->rank != 0 || t->a.quiet || !(t->m->predicted_step_s > 0) || n < 1) return;
  int64_t skip = n > 4 ? 2 : 0;
  qsort(dt + skip, (size_t)(n - skip), sizeof *dt, cmp_double);
  double med = dt[skip + (n - skip) / 2];
  fprintf(stderr,
          "step time: measured median %.6g s over %lld steps, predicted %.6g s on %s "
          "(measured / predicted %.3f)\n",
          med, (long long)(n - skip), t->m->predicted_step_s, t->m->predicted_device,
          med / t->m->predicted_step_s);
}

static int train(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  char err[ERRLEN];
  double t0 = now();
  int64_t ntimes = 0;
  /* static: still reachable when a step fails and returns early */
  static double *times;
  free(times);
  times = t->a.steps > t->done ? malloc((size_t)(t->a.steps - t->done) * sizeof *times) : NULL;
  int64_t first = t->done;
  int loud = !t->a.quiet && t->rank == 0;
  MmrtProgress pr;
  mmrt_progress_begin(&pr, "step", first, t->a.steps, "samples", loud);
  if (t->a.trace) mmrt_trace_start();
  for (int64_t step = t->done + 1; step <= t->a.steps; step++) {
    int stop = mmrt_stop_signal != 0;
    /* all ranks stop at the same step, or one would wait in a collective */
    stop = any_rank(t, stop, "the stop flag (all-reduce before each step)");
    if (stop) {
      if (!mmrt_stop_signal) mmrt_stop_signal = SIGTERM;
      t->stopped = 1;
      break;
    }
    double step_t0 = now();
    if (mmrt_iter_next(&t->cx.it) != m->batch) return fail("the training data gave a short batch");
    float lr = (float)lr_at(t, step), fs = (float)step, loss;
    char what[64];
    snprintf(what, sizeof what, "step %lld", (long long)step);
    CommSnap before;
    snap_comm(before);
    if (t->a.skip_nan) snapshot(t, 0);
    /* a test's fault (tests/ckpt_safety.sh): MMRT_FAULT_NAN_STEP=N puts a NaN into the first
     * weight this rank holds before step N (on world rank MMRT_FAULT_NAN_RANK only, if set) */
    if (step == t->fault_step && (t->fault_rank < 0 || t->fault_rank == t->rank))
      for (int64_t i = 0; i < m->nparams; i++)
        if (m->params[i].arena == MMRT_ARENA_PARAM && held(t, &m->params[i]) &&
            !m->params[i].frozen) {
          float nan = NAN;
          memcpy(at(t, &m->params[i]), &nan, sizeof nan);
          break;
        }
    if (m->pp > 1) {
      if (t->a.dump_inputs) return fail("--dump-inputs: not with a pipeline");
      if (!t->pp) {
        MmrtPpHooks h = {t, pp_fill, pp_run, mb_elems, pp_fail};
        t->pp = mmrt_pp_new(m, &t->mesh, t->arenas, &h);
        if (!t->pp) return 1;
      }
      t->pp_lr = lr, t->pp_fs = fs;
      t->mesh.err[0] = 0;
      if (mmrt_pp_step(t->pp, step, what, &loss)) {
        if (t->mesh.err[0]) mmrt_comm_abort(1); /* a failed transfer: the others may wait on it */
        return 1;
      }
    } else if (m->micro_batches > 1) {
      if (mb_step(t, step, lr, fs, what, &loss)) return 1;
    } else {
      fill_batch(t, &t->cx.it, m->batch, 0, (uint64_t)(step - 1) * (uint64_t)m->batch);
      if (t->a.dump_inputs && dump_inputs(t, step)) return 1;
      memcpy(at(t, t->lr), &lr, sizeof lr);
      memcpy(at(t, t->step), &fs, sizeof fs);
      double ts = mmrt_trace_now();
      if (run_step(t, m->train_step, what)) return 1;
      mmrt_trace_add("step", "step", ts, mmrt_trace_now(), -1, -1);
      memcpy(&loss, t->arenas[MMRT_ARENA_ACT] + m->train_loss_offset, sizeof loss);
    }
    uint64_t sent = add_step_comm(t, before);
    int skipped;
    if (check_step(t, step, loss, &skipped)) return 1;
    if (times) times[ntimes++] = now() - step_t0;
    t->done = step;
    double tn = now(),
           sps = (double)m->batch * (double)(step - first) / (tn - t0 > 0 ? tn - t0 : 1e-9);
    MmrtLogField f[10] = {{"loss", loss, NULL}, {"lr", lr, NULL}, {"samples_per_s", sps, NULL}};
    int nf = 3;
    if (m->disc_loss_offset >= 0) { /* a gan's discriminator loss (0 before its start) */
      float dl;
      memcpy(&dl, t->arenas[MMRT_ARENA_ACT] + m->disc_loss_offset, sizeof dl);
      f[nf++] = (MmrtLogField){"disc_loss", dl, NULL};
    }
    if (t->has_mesh) /* bytes this rank sent in the step */
      f[nf++] = (MmrtLogField){"comm_bytes", (double)sent, NULL};
    if (t->a.skip_nan) /* the steps skipped so far (this one too) */
      f[nf++] = (MmrtLogField){"skipped_steps", (double)t->skipped, NULL};
    if (t->cx.count_skipped) f[nf++] = (MmrtLogField){"skipped_samples", (double)t->cx.skipped, 0};
    if (t->a.eval_every > 0 && step % t->a.eval_every == 0 && step < t->a.steps) {
      double el, ea, mv = NAN;
      mmrt_progress_break(&pr);
      int bad = evaluate(t, &el, &ea);
      if (!bad && t->stopped) break; /* step done: the checkpoint after the loop has it */
      int has = bad || !t->feeder->metric_every ? 0 : feed_metric(t, &mv);
      if (bad) return 1;
      if (has >= 0 && t->stopped) break;
      f[nf++] = (MmrtLogField){"eval_loss", el, NULL};
      f[nf++] = (MmrtLogField){"eval_accuracy", ea, NULL};
      if (has < 0) return 1;
      if (has) f[nf++] = (MmrtLogField){t->feeder->metric_key, mv, NULL};
      if (loud) {
        fprintf(stderr, "step %lld: eval loss %.4f", (long long)step, el);
        if (t->cx.labels) fprintf(stderr, ", accuracy %.4f", ea);
        if (has) fprintf(stderr, ", %s %.4f", t->feeder->metric_words, mv);
        fputc('\n', stderr);
      }
    }
    if (t->has_log && mmrt_log_write(&t->log, step, f, nf, err, sizeof err) != MMRT_OK)
      return fail("%s", err);
    char extra[48];
    snprintf(extra, sizeof extra, "loss %.4f", loss);
    mmrt_progress_tick(&pr, step, (double)m->batch * (double)(step - first), extra);
    if (t->a.ckpt && t->a.ckpt_every > 0 && step % t->a.ckpt_every == 0 && save_ckpt(t)) return 1;
  }
  mmrt_progress_break(&pr);
  if (times) print_step_times(t, times, ntimes);
  free(times);
  times = NULL;
  return 0;
}

/* The mesh of a multi-rank model, and this rank's rows of every batch:
 * batch inputs may be split along the batch (dim 0) by dp, nothing else. */
static int setup_ranks(Trainer *t) {
  const MmrtModelDesc *m = t->m;
  char err[ERRLEN];
  int size[MESH_NAXES];
  mmrt_desc_mesh(m, size);
  t->world = (int)mmrt_desc_ranks(m, MESH_NAXES);
  t->cx.rows = t->cx.B;
  if (t->world > 1) {
    if ((m->pp_one0 ? mmrt_mesh_init_one0 : mmrt_mesh_init)(&t->mesh, size, err, sizeof err) !=
        MMRT_OK)
      return fail("%s", err);
    t->has_mesh = 1;
    t->world = t->mesh.size[MMRT_AXIS_WORLD]; /* 1 + tp under pp_one0 */
    if (m->zero_node > 0 && mmrt_mesh_hzero(&t->mesh, (int)m->zero_node, err, sizeof err))
      return fail("%s", err);
    t->rank = t->mesh.coord[MMRT_AXIS_WORLD];
    g_rank = t->rank;
    t->cx.mesh = &t->mesh;
    mmrt_comm_set_timeout(&t->mesh, t->a.comm_timeout);
    if (!t->a.quiet && mmrt_mesh_placement(&t->mesh, stderr, err, sizeof err) != MMRT_OK)
      return fail("%s", err); /* the same on every rank: --quiet is everyone's */
  }
  for (int k = 0; k < t->cx.nbatch; k++) {
    const MmrtTensorDesc *d = t->cx.batch[k];
    for (int64_t i = 1; i < d->ndim; i++)
      if (d->split[i])
        return fail(
            "input %s is split along dim %lld; the trainer splits batches along the batch only",
            d->name, (long long)i);
    if (d->split[0] & ~(int64_t)(1 << MMRT_DESC_AXIS_DP))
      return fail("input %s is split along the batch by an axis other than dp", d->name);
    int64_t lo = 0, len = t->cx.B;
    if (d->split[0])
      mmrt_split_range(t->cx.B, (int)m->mesh[MMRT_DESC_AXIS_DP], t->mesh.coord[MMRT_AXIS_DP], &lo,
                       &len);
    if (k > 0 && (lo != t->cx.lo || len != t->cx.rows))
      return fail("inputs %s and %s are split differently", t->cx.batch[0]->name, d->name);
    t->cx.lo = lo, t->cx.rows = len;
  }
  return 0;
}

/* Every rank's measured peak (mmrt_mem.h) beside what the plan counts:
 * the arenas and the data set. */
static void print_memory(const Trainer *t) {
  MmrtMemPeak p;
  if (mmrt_mem_end(&t->mem, mmrt_dnnl_prim_bytes(), &p)) return;
  /* conversations are not Fashion-MNIST (mmc plan counts no data for them either) */
  int64_t arenas = 0, data = t->feeder == &mmrt_feed_conv ? 0 : MMRT_FMNIST_RESIDENT_BYTES;
  for (int r = 0; r < MMRT_NARENAS; r++) arenas += t->arena_own[r];
  /* a pipeline rank's further slots and gradient sums (mmrt_pp.h); its
   * evaluation allocates nothing (mmrt_pp_eval) */
  if (t->m->pp > 1)
    arenas += mmrt_pp_extra_bytes(t->m, t->mesh.coord[MMRT_AXIS_PP], mb_elems, (void *)t);
  else /* micro-batches: the gradient sums (mmrt_pp.h mmrt_mb_bytes) */
    arenas += mmrt_mb_bytes(t->m, mb_elems, (void *)t);
  char who[48] = "";
  if (t->world > 1) snprintf(who, sizeof who, " of rank %d of %d", t->rank, t->world);
  printf("memory%s: measured peak %lld bytes, plan %lld bytes (arenas %lld + data %lld), "
         "measured/plan %.4f (in it: oneDNN's largest scratchpad %lld bytes, the convolutions' "
         "blocked-layout copies %lld bytes); code, in neither: "
         "library pages %lld bytes, generated kernels %lld bytes, their objects %lld bytes (%d "
         "oneDNN primitives)\n",
         who, (long long)p.peak, (long long)(arenas + data), (long long)arenas, (long long)data,
         (double)p.peak / (double)(arenas + data), (long long)mmrt_dnnl_scratchpad_max(),
         (long long)mmrt_dnnl_layout_bytes(), (long long)p.lib_code, (long long)p.jit_code,
         (long long)p.kernel_heap, mmrt_dnnl_cache_size());
  if (t->m->micro_batches > 1) /* what the gradients take (docs/accumulation.md "Memory") */
    printf("gradient memory%s: grad arena %lld bytes, sums beside it %lld bytes (allocated)\n", who,
           (long long)t->arena_own[MMRT_ARENA_GRAD],
           (long long)(t->pp ? mmrt_pp_sum_bytes(t->pp) : t->mb.bytes));
}

/* Every file and directory the run will write, checked before its work
 * (mmrt_probe_output: directories created, a missing or read-only place, a
 * path of the wrong kind or one of the inputs refused by flag and path);
 * then --ckpt DIR's lock (rank 0). Every rank agrees. */
static int check_outputs(Trainer *t) {
  const Args *a = &t->a;
  const char *in[] = {a->init_from, a->load_adapters, a->data, a->features};
  const struct {
    const char *flag, *path;
    int kind, all; /* all: every rank writes there, else rank 0 */
  } o[] = {
      {"--ckpt", a->ckpt, MMRT_OUT_DIR, 1},
      {"--dump-inputs", a->dump_inputs, MMRT_OUT_DIR, 1},
      {"--save-weights", a->save_weights, MMRT_OUT_FILE, 0},
      {"--save-adapters", a->save_adapters, MMRT_OUT_FILE, 0},
      {"--save-hf", a->save_hf, MMRT_OUT_DIR, 0},
      {"--dump-logits", a->dump_logits, MMRT_OUT_FILE, 0},
      {"--trace", a->trace, MMRT_OUT_FILE, 0},
      {"--log", a->log, MMRT_OUT_STREAM, 0},
  };
  char err[ERRLEN];
  int bad = 0;
  for (size_t i = 0; i < sizeof o / sizeof o[0] && !bad; i++)
    if (o[i].path && (o[i].all || t->rank == 0) &&
        mmrt_probe_output(o[i].flag, o[i].path, o[i].kind, in, 4, err, sizeof err) != MMRT_OK)
      bad = fail("%s", err);
  for (size_t i = 0; i < sizeof o / sizeof o[0] && !bad; i++)
    for (size_t j = 0; j < i && !bad; j++)
      if (o[i].path && o[j].path && !strcmp(o[i].path, o[j].path))
        bad = fail("%s and %s name the same path %s", o[j].flag, o[i].flag, o[i].path);
  if (any_rank(t, bad, "the output paths' check (all-reduce)")) return 1;
  if (a->ckpt && !a->resume && t->rank == 0) { /* a fresh run would overwrite and prune them */
    char live[4096];
    if (mmrt_ckpt_resolve(a->ckpt, live, sizeof live, err, sizeof err) != MMRT_ERR_NOTFOUND)
      bad = fail("--ckpt %s holds another run's checkpoints (%s/%s); a new run would overwrite and "
                 "prune them: --resume continues that run, or give an empty or new folder",
                 a->ckpt, a->ckpt, MMRT_CKPT_POINTER);
  }
  if (any_rank(t, bad, "the checkpoint folder's check (all-reduce)")) return 1;
  if (a->ckpt && t->rank == 0) {
    long stale;
    if (mmrt_ckpt_lock(a->ckpt, &stale, err, sizeof err) != MMRT_OK)
      bad = fail("--ckpt %s: %s", a->ckpt, err);
    else if (stale)
      fprintf(stderr, "trainer: took over the lock %s/%s of process %ld, which is not running\n",
              a->ckpt, MMRT_CKPT_LOCK, stale);
    t->locked = !bad;
  }
  return any_rank(t, bad, "the checkpoint lock (all-reduce)");
}

static int run(Trainer *t, int argc, char **argv) {
  const MmrtModelDesc *m = t->m;
  int rc = parse_args(argc, argv, m, &t->a);
  if (rc) return rc < 0 ? 0 : rc; /* -1: --help */
  if ((t->a.hf_dtype || t->a.shard_size) && !t->a.save_hf)
    return fail("%s goes with --save-hf", t->a.hf_dtype ? "--save-hf-dtype" : "--shard-size");
  if (t->a.hf_dtype && strcmp(t->a.hf_dtype, "f32") != 0 && strcmp(t->a.hf_dtype, "bf16") != 0)
    return fail("--save-hf-dtype takes f32 or bf16, not '%s'", t->a.hf_dtype);
  if (t->a.save_hf) { /* refused before training, not after */
    const char *src = t->a.init_from, *eq = src ? strchr(src, '=') : NULL;
    struct stat hs;
    if (eq && stat(src, &hs) != 0) src = eq + 1;
    if (!src || !mmrt_hf_is_dir(src))
      return fail("--save-hf %s: needs --init-from a Hugging Face directory (its config.json, "
                  "names and layouts)",
                  t->a.save_hf);
  }
  if (bind(t) || setup_ranks(t) || check_outputs(t)) return 1;
  int loud = !t->a.quiet && t->rank == 0;
  if (!m->train_step || !t->lr || !t->step)
    return fail("model %s has no training function (@train with inputs lr and step)", m->name);
  char err[ERRLEN];
  mmrt_mem_begin(&t->mem);
  mmrt_mem_start_threads(); /* their stacks before the data and arenas */
  if (t->feeder->open(&t->cx, t->a.data, err, sizeof err) != MMRT_OK)
    return fail("%s %s: %s", mmrt_fmnist_dir_source(t->a.data), t->a.data, err);
  if (mmrt_iter_init(&t->cx.it, &t->cx.train, m->batch, 1, t->a.seed, err, sizeof err) != MMRT_OK)
    return fail("%s", err);
  if (alloc_arenas(t)) return 1;
  for (int64_t i = 0; i < m->nparams; i++)
    if (held(t, &m->params[i]) && init_param(t, &m->params[i])) return 1;
  if (t->a.resume) {
    int fresh;
    if (load_ckpt(t, &fresh)) return 1;
    if (fresh && t->rank == 0)
      fprintf(stderr, "trainer: no checkpoint in %s yet; starting at step 0\n", t->a.ckpt);
    else if (loud && !fresh)
      fprintf(stderr, "trainer: resumed from %s at step %lld\n", t->a.ckpt, (long long)t->done);
  }
  if (t->a.init_from && !t->a.resume) {
    const char *path = t->a.init_from, *eq = strchr(path, '=');
    char sub[256];
    struct stat st;
    if (eq && stat(path, &st) != 0) { /* SUB=PATH */
      snprintf(sub, sizeof sub, "%.*s", (int)(eq - path), path);
      t->sub = sub, path = eq + 1;
    }
    t->loaded = calloc((size_t)m->nparams + 1, 1);
    if (!t->loaded) return fail("out of memory");
    int n = load_by_name(t, "--init-from", path, -1, 0);
    if (n < 0) return 1;
    if (n == 0) return fail("--init-from %s: none of the model's parameters is there", path);
    if (loud) {
      fprintf(stderr, "trainer: %d parameters loaded from %s\n", n, path);
      report_left(t);
    }
    free(t->loaded);
    t->loaded = NULL, t->sub = NULL;
  }
  if (t->a.load_adapters && !t->a.resume &&
      load_by_name(t, "--load-adapters", t->a.load_adapters, 1, 1) < 0)
    return 1;
  {
    char what[4200]; /* training never starts from weights that are not finite */
    if (t->done > 0)
      snprintf(what, sizeof what, "--resume: the checkpoint of step %lld in %s", (long long)t->done,
               t->a.ckpt);
    else
      snprintf(what, sizeof what, "%s%s%s%s", t->a.init_from ? "--init-from " : "",
               t->a.init_from ? t->a.init_from : "", t->a.load_adapters ? " --load-adapters " : "",
               t->a.load_adapters ? t->a.load_adapters : "");
    if (weights_nonfinite(t, what[0] ? what : "the initial weights")) return 1;
  }
  for (int r = 0; t->a.skip_nan && r < MMRT_NARENAS; r++)
    if ((r == MMRT_ARENA_PARAM || r == MMRT_ARENA_OPT) && t->arena_own[r] > 0 &&
        !(t->snap[r] = malloc((size_t)t->arena_own[r])))
      return fail("--on-nan skip-step: out of memory for the copy of arena %d (%lld bytes)", r,
                  (long long)t->arena_own[r]);
  t->cx.seed = t->a.seed; /* final: a checkpoint's */
  if (t->feeder->start && t->feeder->start(&t->cx, err, sizeof err) != MMRT_OK)
    return fail("%s", err);
  if (t->a.log && t->rank == 0) {
    if (mmrt_log_open(&t->log, t->a.log, err, sizeof err) != MMRT_OK) return fail("--log %s", err);
    t->has_log = 1;
  }
  mmrt_stop_install();
  t->cx.loud = loud;
  if (loud) {
    char omp[256], ev[160];
    mmrt_omp_describe(omp, sizeof omp);
    int64_t part = mmrt_feed_eval_total(&t->cx), all = (t->cx.test.n + t->cx.B - 1) / t->cx.B;
    if (part < all)
      snprintf(ev, sizeof ev, "%lld of the %lld test batches (--eval-batches all: every one)",
               (long long)part, (long long)all);
    else
      snprintf(ev, sizeof ev, "the whole test split (%lld batches)", (long long)all);
    fprintf(stderr,
            "trainer: model %s, %s data (%s%s), batch %lld, steps %lld, seed %llu, %d rank%s, %s, "
            "precision %s%s; evaluation on %s\n",
            m->name, t->feeder->name, t->cx.declared ? "format " : "",
            t->cx.declared ? m->data_format
                           : "no data format declared: the first feeder that took the inputs",
            (long long)t->cx.B, (long long)t->a.steps, (unsigned long long)t->a.seed,
            t->world > 1 ? t->world : 1, t->world > 1 ? "s" : "", omp,
            m->precision == 1 ? "bf16 " : "fp32", m->precision == 1 ? mmrt_bf16_path() : "", ev);
  }
  if (loud && t->cx.note[0]) fprintf(stderr, "trainer: %s\n", t->cx.note);
  if (loud && t->a.skip_nan)
    fprintf(stderr,
            "trainer: --on-nan skip-step: a step whose loss or weights are not "
            "finite is undone (from a copy of %lld bytes)\n",
            (long long)(t->arena_own[MMRT_ARENA_PARAM] + t->arena_own[MMRT_ARENA_OPT]));
  if (t->a.profile) mmrt_prof_enable();
  const char *fs = getenv("MMRT_FAULT_NAN_STEP"), *fr = getenv("MMRT_FAULT_NAN_RANK");
  t->fault_step = fs ? atoll(fs) : 0;
  t->fault_rank = fr ? atoi(fr) : -1;
  rc = train(t);
  /* --steps 0 --ckpt DIR writes the initial weights (a reference starts from them) */
  if (!rc && t->a.ckpt && (t->done > 0 || t->a.steps == 0)) rc = save_ckpt(t);
  if (!rc && t->a.save_adapters) rc = save_adapters(t);
  if (!rc && t->a.save_weights) rc = save_weights(t);
  if (!rc && t->a.save_hf) rc = save_hf(t);
  if (!rc && t->a.trace) {
    char terr[ERRLEN];
    if (mmrt_trace_write(t->a.trace, mesh_of(t), t->rank, terr, sizeof terr)) rc = fail("%s", terr);
  }
  if (!rc && t->has_mesh && t->has_log) rc = log_comm(t);
  if (!rc && !t->stopped) {
    double el, ea;
    rc = evaluate(t, &el, &ea);
    MmrtLogField f[3] = {{"eval_loss", el, NULL}, {"eval_accuracy", ea, NULL}};
    int nf = 2;
    double v = NAN;
    int has = rc || t->stopped ? 0 : feed_metric(t, &v);
    if (has < 0) rc = 1;
    if (has > 0) f[nf++] = (MmrtLogField){t->feeder->metric_key, v, NULL};
    if (!rc && !t->stopped && t->rank == 0) { /* stopped: partial sums, no figure */
      int64_t part = mmrt_feed_eval_total(&t->cx), all = (t->cx.test.n + t->cx.B - 1) / t->cx.B;
      printf("eval: loss %.6f", el);
      if (t->cx.labels) printf(" accuracy %.4f", ea); /* a feeder without labels has none */
      if (nf > 2) printf(" %s %.4f", t->feeder->metric_words, f[2].num);
      if (part < all)
        printf(" (test split: first %lld of %lld batches; --eval-batches all for the whole)\n",
               (long long)part, (long long)all);
      else
        printf(" (test split)\n");
      if (t->has_log && mmrt_log_write(&t->log, t->done, f, nf, err, sizeof err) != MMRT_OK)
        rc = fail("%s", err);
    }
  }
  if (!rc && !t->stopped && t->a.dump_logits) rc = dump_logits(t);
  if (mmrt_stop_signal) { /* exit 128 + the signal, as a shell reports a killed program */
    if (t->rank == 0)
      fprintf(stderr, "trainer: stopped by %s after step %lld%s\n",
              mmrt_stop_name(mmrt_stop_signal), (long long)t->done,
              t->a.ckpt && t->saved == t->done ? " (checkpoint written)" : "");
    rc = rc ? rc : 128 + mmrt_stop_signal;
  }
  print_memory(t);
  if (t->rank == 0) {
    int64_t total = 0;
    for (int r = 0; r < MMRT_NARENAS; r++) total += t->arena_own[r];
    printf("allocated arena bytes%s: param=%lld grad=%lld opt=%lld act=%lld input=%lld "
           "total=%lld\n",
           t->world > 1 ? (m->pp > 1 ? " of rank 0" : " per rank") : "",
           (long long)t->arena_own[MMRT_ARENA_PARAM], (long long)t->arena_own[MMRT_ARENA_GRAD],
           (long long)t->arena_own[MMRT_ARENA_OPT], (long long)t->arena_own[MMRT_ARENA_ACT],
           (long long)t->arena_own[MMRT_ARENA_INPUT], (long long)total);
    printf("peak RSS: %lld bytes (%.1f MiB)\n", (long long)mmrt_peak_rss_bytes(),
           (double)mmrt_peak_rss_bytes() / (1 << 20));
    if (t->has_mesh) { /* every rank of an axis runs the same collectives: rank 0 stands for them */
      printf("communication of rank 0 of %d (%lld training steps and evaluation):\n", t->world,
             (long long)t->comm_steps);
      mmrt_comm_counters_print(stdout);
      mmrt_comm_overlap_print(stdout);
      mmrt_comm_ring_print(stdout);
    }
    if (t->a.profile) mmrt_prof_print(stdout);
  }
  return rc;
}

int mmrt_train_main(int argc, char **argv, const MmrtModelDesc *m) {
  Trainer t;
  memset(&t, 0, sizeof t);
  t.m = m;
  t.saved = -1;
  int rc = run(&t, argc, argv);
  fflush(NULL);
  if (t.has_log) mmrt_log_close(&t.log);
  if (t.feeder && t.feeder->close) t.feeder->close(&t.cx);
  mmrt_iter_free(&t.cx.it);
  mmrt_iter_free(&t.cx.eval_it);
  mmrt_images_free(&t.cx.train);
  mmrt_images_free(&t.cx.test);
  for (int r = 0; r < MMRT_NARENAS; r++) free(t.arena_mem[r]), free(t.snap[r]);
  if (t.locked) mmrt_ckpt_unlock(t.a.ckpt);
  mmrt_mb_free(&t.mb);
  mmrt_pp_free(t.pp);
  mmrt_kernels_shutdown();
  if (t.has_mesh) {
    mmrt_mesh_free(&t.mesh);
    mmrt_comm_finalize();
  }
  return rc;
}
