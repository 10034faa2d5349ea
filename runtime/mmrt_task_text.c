/* mmrt_task_text.c: language modelling on the user's own text.
 *
 * Inputs ids and labels i32[B, T] (and seg i32[B, T] when the model takes
 * it: each token's document within its row, 0, 1, ...; padding a segment
 * of its own), when --data names text: a JSONL file (a "text" field, or
 * chat "messages"; --tokenizer tokenizer.json turns it into ids), a
 * Megatron indexed dataset's PREFIX (PREFIX.bin + PREFIX.idx), or a blend
 * W1:A,W2:B,... of those. A directory keeps its Fashion-MNIST meaning (the
 * next-pixel task). mmrt_loader.h lays the documents out into rows; a
 * sample of the trainer's iterator is a row, so the rows are shuffled per
 * epoch from the seed, a checkpoint's data position resumes with the next
 * unseen row, and each rank reads only its own rows. Evaluation runs on
 * the same rows in file order.
 *
 * The trainer's text flags are parsed here (mmrt_text_flag, one hook in
 * the trainer's loop) and refused by mmrt_task_bind when no text task
 * takes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_loader.h"
#include "mmrt_task.h"

enum { IDS, Y, SEG }; /* c->batch[] */

void mmrt_text_usage(FILE *out) {
  fputs("text data (a model with ids, labels i32[B, T]; --data a file or prefix, not a folder):\n"
        "  --data SPEC        a .jsonl file (\"text\" or chat \"messages\"), an indexed dataset\n"
        "                     PREFIX (PREFIX.bin + PREFIX.idx), or a blend W1:A,W2:B,...\n"
        "  --tokenizer FILE   tokenizer.json for JSONL data (its chat template for messages)\n"
        "  --seq-len N        tokens per row; must equal the model's T (a check)\n"
        "  --pack, --no-pack  documents packed into rows (default) or one document a row\n"
        "  --too-long M       a document longer than a row: truncate (default) or drop\n"
        "  --bad-samples M    a malformed sample: fail (default: exit naming the file and line)\n"
        "                     or skip (counted in the log's skipped_samples)\n",
        out);
}

int mmrt_text_flag(MmrtTextOpts *o, const char *f, const char *v, int *takes) {
  int pack = !strcmp(f, "--pack") ? 1 : !strcmp(f, "--no-pack") ? -1 : 0;
  const char *valued[] = {"--tokenizer", "--seq-len", "--too-long", "--bad-samples"};
  int k = -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(f, valued[i])) k = i;
  if (!pack && k < 0) return -1;
  if (!o->given) o->first = f;
  o->given = 1;
  if (pack) {
    if (o->pack && o->pack != pack)
      return fprintf(stderr, "trainer: error: --pack and --no-pack together\n"), 1;
    o->pack = pack, *takes = 0;
    return 0;
  }
  *takes = 1;
  if (!v) return fprintf(stderr, "trainer: error: %s needs a value (see --help)\n", f), 1;
  if (k == 0) o->tokenizer = v;
  if (k == 1) {
    char *end;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || n < 1)
      return fprintf(stderr, "trainer: error: --seq-len takes a whole number >= 1, not '%s'\n", v),
             1;
    o->seq_len = n;
  }
  if (k == 2 && strcmp(v, "truncate") && strcmp(v, "drop"))
    return fprintf(stderr, "trainer: error: --too-long takes truncate or drop, not '%s'\n", v), 1;
  if (k == 3 && strcmp(v, "fail") && strcmp(v, "skip"))
    return fprintf(stderr, "trainer: error: --bad-samples takes fail or skip, not '%s'\n", v), 1;
  if (k == 2) o->too_long = v;
  if (k == 3) o->bad_samples = v;
  return 0;
}

static int bind(MmrtTaskCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  if (!mmrt_loader_is_text(c->data)) return 0;
  const MmrtTensorDesc *ids = mmrt_desc_input(m, "ids"), *lb = mmrt_desc_input(m, "labels"),
                       *seg = mmrt_desc_input(m, "seg");
  const int64_t tok[2] = {c->B, -1};
  if (!mmrt_task_is(ids, MMRT_ST_I32, 2, tok) || !lb ||
      !mmrt_task_is(lb, MMRT_ST_I32, 2, ids->shape)) {
    snprintf(err, errlen,
             "--data %s is text; model %s takes no ids and labels i32[%lld, T] (a folder is "
             "Fashion-MNIST)",
             c->data, m->name, (long long)c->B);
    return -1;
  }
  if (seg && !mmrt_task_is(seg, MMRT_ST_I32, 2, ids->shape)) {
    snprintf(err, errlen, "model %s: input seg must be i32[%lld, %lld] like ids", m->name,
             (long long)ids->shape[0], (long long)ids->shape[1]);
    return -1;
  }
  c->batch[IDS] = ids, c->batch[Y] = c->labels = lb, c->nbatch = 2;
  if (seg) c->batch[SEG] = seg, c->nbatch = 3;
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

static int open(MmrtTaskCtx *c, const char *spec, char *err, size_t errlen) {
  MmrtTextOpts o = *c->text;
  if (!o.pack) o.pack = c->batch[SEG] ? 1 : -1; /* packed when the model masks documents */
  MmrtLoader *l = mmrt_loader_open(spec, &o, c->T, mmrt_task_classes(c->m),
                                   (int32_t)c->m->ignore_index, err, errlen);
  if (!l) return 1;
  c->priv = l;
  int64_t n = mmrt_loader_samples(l);
  if (n < c->B) {
    snprintf(err, errlen, "%lld rows of text, fewer than the batch of %lld", (long long)n,
             (long long)c->B);
    return 1;
  }
  c->train.n = c->test.n = n; /* the iterators' samples are rows (no pixels) */
  c->skipped = mmrt_loader_skipped(l);
  c->count_skipped = o.bad_samples && !strcmp(o.bad_samples, "skip");
  mmrt_loader_describe(l, c->note, sizeof c->note);
  return 0;
}

static void fill(MmrtTaskCtx *c, const MmrtBatchIter *it, int64_t rows, int eval,
                 uint64_t sample0) {
  (void)eval, (void)sample0;
  const MmrtLoader *l = c->priv;
  int32_t *ids = mmrt_task_at(c, c->batch[IDS]), *y = mmrt_task_at(c, c->batch[Y]);
  int32_t *seg = c->batch[SEG] ? mmrt_task_at(c, c->batch[SEG]) : NULL;
  const int64_t lo = c->lo, hi = c->lo + c->rows, T = c->T;
  for (int64_t k = lo; k < hi; k++) {
    int32_t *ir = ids + (k - lo) * T, *lr = y + (k - lo) * T, *sr = seg ? seg + (k - lo) * T : NULL;
    if (k >= rows) {
      for (int64_t j = 0; j < T; j++) {
        ir[j] = 0, lr[j] = (int32_t)c->m->ignore_index;
        if (sr) sr[j] = 0;
      }
      continue;
    }
    mmrt_loader_row(l, mmrt_iter_index(it, k), ir, lr, sr);
  }
}

static void close_(MmrtTaskCtx *c) {
  mmrt_loader_close(c->priv);
  c->priv = NULL;
}

const MmrtTask mmrt_task_text = {
    .name = "text",
    .inputs = "ids and labels I32[B, T] (and seg) with --data FILE.jsonl|PREFIX",
    .bind = bind,
    .open = open,
    .fill = fill,
    .close = close_,
};
