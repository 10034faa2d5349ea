/* mmc_data.c: `mmc data preprocess` (JSONL + tokenizer.json -> Megatron's
 * indexed dataset, as Megatron-LM's tools/preprocess_data.py writes it) and
 * `mmc data inspect` (its counts and first sequences).
 *
 * preprocess: each JSONL line is one document; its text's ids (no special
 * tokens unless --add-special; --append-eod adds the end-of-document id to
 * a non-empty one) are one sequence, and an empty document is an empty
 * document (a repeated document index), as preprocess_data.py does without
 * --split-sentences. Output: PREFIX_KEY_document.bin/.idx, dtype uint16
 * below 65500 ids, else int32. Worker threads tokenize a batch of lines,
 * each with its own tokenizer (the encoder is not thread-safe), while this
 * thread reads the next batch; the output order is the input's.
 * SIGINT/SIGTERM stop at the next batch with no files written (exit
 * 130/143). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mmc_cli.h"
#include "mmrt_indexed.h"
#include "mmrt_jsonl.h"
#include "mmrt_tok.h"
#include "tools/mmc_data.h"

enum { BATCH = 512, MAX_WORKERS = 64, SHOWN_SKIPS = 10 };

int mmc_data_usage(FILE *out, const char *args, const char *help, int rc) {
  fprintf(
      out,
      "usage: mmc data %s\n\n%s\n\n"
      "preprocess options:\n"
      "  --input FILE.jsonl     one JSON object a line (- reads stdin)\n"
      "  --tokenizer FILE.json  a Hugging Face tokenizer.json\n"
      "  --output-prefix P      writes P_KEY_document.bin and .idx (Megatron's names)\n"
      "  --json-key KEY         the text field (default text)\n"
      "  --append-eod           end each non-empty document with the --eod-token id\n"
      "  --eod-token TOKEN      the end-of-document token (default <|endoftext|>); it must\n"
      "                         encode to one id\n"
      "  --add-special          add the tokenizer's post-processor tokens (BOS/EOS), as\n"
      "                         Megatron's HuggingFaceTokenizer(include_special_tokens=True)\n"
      "  --workers N            tokenizing threads (default 1)\n"
      "  --bad-samples fail|skip  stop at a bad line (default) or skip and count it\n"
      "  --force                replace existing output files\n"
      "inspect options:\n"
      "  --show N|all           print the first N sequences' ids and N+1 document indices\n"
      "conv options (FILE: a LLaVA/InternVL conversation JSON or JSONL; docs/conversations.md):\n"
      "  --tokenizer FILE.json  a Hugging Face tokenizer.json\n"
      "  --chat FAMILY          the chat format (chatml, qwen2, internvl2, llama2, vicuna)\n"
      "  --images DIR           the folder the image names are relative to (default .)\n"
      "  --image-tokens N       N tokens for each image (LLaVA), or:\n"
      "  --tiles-from-images    tiles x tokens per tile for each image (InternVL2), with\n"
      "  --tile N               the tile size in pixels (default 448)\n"
      "  --max-tiles K          at most K tiles, the thumbnail apart (default 12)\n"
      "  --tokens-per-tile N    image tokens per tile (default 256)\n"
      "  --seq-len T            the most tokens a sample may have (default: no limit)\n"
      "  --too-long fail|truncate|drop  a sample over T: bad (default), cut, or dropped\n"
      "  --bad-samples fail|skip  stop at a bad sample (default) or skip and count it\n"
      "  -h, --help             this help\n",
      args, help);
  return rc;
}

static int bad(const char *args, const char *help, const char *fmt, const char *arg) {
  mmc_cli_refuse("data: ", fmt, arg);
  return mmc_data_usage(stderr, args, help, 2);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- inspect ---- */

static int inspect(const char *prefix_in, long show) {
  char prefix[4096], err[1024];
  snprintf(prefix, sizeof prefix, "%s", prefix_in);
  size_t n = strlen(prefix);
  if (n > 4 && (strcmp(prefix + n - 4, ".idx") == 0 || strcmp(prefix + n - 4, ".bin") == 0))
    prefix[n - 4] = 0;
  MmrtIndexed d;
  if (!mmrt_indexed_open(prefix, -1, &d, err, sizeof err)) {
    fprintf(stderr, "mmc: error: %s\n", err);
    return 1;
  }
  printf("dataset     %s (.bin/.idx, Megatron indexed, version 1)\n", prefix);
  printf("dtype       %s (code %d)\n", mmrt_idx_dtype_name((int)d.dtype), (int)d.dtype);
  printf("sequences   %" PRIu64 "\n", d.nseq);
  printf("documents   %" PRIu64 "\n", d.ndocidx - 1);
  printf("tokens      %" PRIu64 "\n", d.ntokens);
  printf("multimodal  %s\n", d.multimodal ? "yes (sequence modes)" : "no");
  uint64_t ns = show < 0 || (uint64_t)show > d.nseq ? d.nseq : (uint64_t)show;
  uint64_t nd = show < 0 || (uint64_t)show + 1 > d.ndocidx ? d.ndocidx : (uint64_t)show + 1;
  if (show != 0) {
    printf("document_indices");
    for (uint64_t j = 0; j < nd; j++) printf(" %" PRId64, mmrt_indexed_docidx(&d, j));
    printf("\n");
  }
  bool isint = mmrt_idx_dtype_is_int((int)d.dtype);
  for (uint64_t i = 0; i < ns; i++) {
    printf("sequence %" PRIu64, i);
    if (d.multimodal) printf(" mode %d", mmrt_indexed_mode(&d, i));
    printf(":");
    int32_t len = mmrt_indexed_length(&d, i);
    for (int32_t k = 0; k < len; k++)
      if (isint)
        printf(" %" PRId64, mmrt_indexed_token(&d, i, (uint64_t)k));
      else
        printf(" %.17g", mmrt_indexed_value(&d, i, (uint64_t)k));
    printf("\n");
  }
  mmrt_indexed_close(&d);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "mmc: error: cannot write the output\n");
    return 1;
  }
  return 0;
}

/* ---- preprocess ---- */

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) {
  stop_signal = sig;
}

typedef struct Sample {
  char *text; /* owned copy */
  size_t len, cap;
  uint64_t line;
  MmrtTokIds ids;
  bool ok;
  char err[512];
} Sample;

typedef struct Worker {
  pthread_t th;
  MmrtTok *tok;
  Sample *batch;
  size_t n, k, stride;
  bool add_special;
} Worker;

static void *work(void *arg) {
  Worker *w = arg;
  for (size_t i = w->k; i < w->n; i += w->stride) {
    Sample *s = &w->batch[i];
    s->ids.n = 0;
    s->ok =
        mmrt_tok_encode(w->tok, s->text, s->len, w->add_special, &s->ids, s->err, sizeof s->err);
  }
  return NULL;
}

static bool path_free(const char *path, bool force) {
  struct stat st;
  if (lstat(path, &st) != 0) return true;
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "mmc: error: %s: exists and is not a regular file\n", path);
    return false;
  }
  if (!force) {
    fprintf(stderr, "mmc: error: %s: exists (give --force to replace it)\n", path);
    return false;
  }
  return true;
}

/* The output folder exists and is writable; the outputs are free. */
static bool check_outputs(const char *base, bool force) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", base);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = 0;
  else if (slash)
    *slash = 0;
  else
    strcpy(dir, ".");
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mmc: error: --output-prefix %s: the folder %s does not exist\n", base, dir);
    return false;
  }
  if (access(dir, W_OK) != 0) {
    fprintf(stderr, "mmc: error: --output-prefix %s: the folder %s is not writable\n", base, dir);
    return false;
  }
  char p[4200];
  snprintf(p, sizeof p, "%s.bin", base);
  if (!path_free(p, force)) return false;
  snprintf(p, sizeof p, "%s.idx", base);
  return path_free(p, force);
}

typedef struct Pre {
  const char *input, *tokenizer, *prefix, *key, *eod_token;
  bool append_eod, add_special, skip_bad, force;
  long workers;
} Pre;

static void progress(const MmrtJsonl *r, uint64_t docs, uint64_t tokens, double t0, bool final,
                     int workers) {
  double dt = now() - t0;
  if (dt <= 0) dt = 1e-9;
  fprintf(stderr, "mmc: data: %" PRIu64 " documents, %" PRIu64 " tokens, %.1f MB/s, %.0f tokens/s",
          docs, tokens, (double)r->bytes / dt / 1e6, (double)tokens / dt);
  if (!final && r->size && r->bytes) {
    double frac = (double)r->bytes / (double)r->size;
    fprintf(stderr, ", %.0f%%, ETA %.0f s", 100 * frac, dt * (1 - frac) / frac);
  }
  if (final) fprintf(stderr, " in %.2f s, %d worker%s", dt, workers, workers == 1 ? "" : "s");
  fprintf(stderr, "\n");
}

/* The reader's side: fills up to BATCH samples (copies of their text). */
typedef struct Read {
  MmrtJsonl *r;
  bool skip_bad;
  bool eof, failed; /* failed: an error was printed */
  uint64_t skipped, lines;
} Read;

static size_t read_batch(Read *rd, Sample *batch) {
  char err[1024];
  size_t n = 0;
  while (n < BATCH && !stop_signal) {
    const char *text;
    size_t len;
    MmrtJsonlStatus st = mmrt_jsonl_next(rd->r, &text, &len, err, sizeof err);
    if (st == MMRT_JSONL_EOF) {
      rd->eof = true;
      break;
    }
    rd->lines++;
    if (st == MMRT_JSONL_BAD && rd->skip_bad) {
      if (++rd->skipped <= SHOWN_SKIPS)
        fprintf(stderr, "mmc: warning: %s (skipped)%s\n", err,
                rd->skipped == SHOWN_SKIPS ? "; further skips are counted only" : "");
      continue;
    }
    if (st == MMRT_JSONL_IO && stop_signal) break; /* a read interrupted by the signal */
    if (st != MMRT_JSONL_OK) {
      fprintf(stderr, "mmc: error: %s%s\n", err,
              st == MMRT_JSONL_BAD ? " (--bad-samples skip skips such lines)" : "");
      rd->failed = true;
      break;
    }
    Sample *s = &batch[n];
    if (len + 1 > s->cap) {
      char *p = realloc(s->text, len + 1);
      if (!p) {
        fprintf(stderr, "mmc: error: out of memory at %s:%" PRIu64 "\n", rd->r->path,
                rd->r->lineno);
        rd->failed = true;
        break;
      }
      s->text = p;
      s->cap = len + 1;
    }
    memcpy(s->text, text, len);
    s->len = len;
    s->line = rd->r->lineno;
    n++;
  }
  return n;
}

static int preprocess(const Pre *a) {
  char err[1024];
  char base[4096];
  if ((size_t)snprintf(base, sizeof base, "%s_%s_document", a->prefix, a->key) >= sizeof base) {
    fprintf(stderr, "mmc: error: --output-prefix: path too long\n");
    return 1;
  }
  if (!check_outputs(base, a->force)) return 1;
  int nw = (int)a->workers;
  MmrtTok *toks[MAX_WORKERS] = {0};
  int rc = 1;
  MmrtJsonl r = {0};
  MmrtIndexedWriter *w = NULL;
  /* two batches: the workers tokenize one while this thread reads the next */
  Sample *batch = calloc(2 * BATCH, sizeof *batch);
  if (!batch) {
    fprintf(stderr, "mmc: error: out of memory\n");
    return 1;
  }
  for (int k = 0; k < nw; k++) {
    toks[k] = mmrt_tok_load(a->tokenizer, err, sizeof err);
    if (!toks[k]) {
      fprintf(stderr, "mmc: error: %s\n", err);
      goto out;
    }
  }
  int32_t eod = -1;
  if (a->append_eod) {
    MmrtTokIds e = {0};
    bool ok =
        mmrt_tok_encode(toks[0], a->eod_token, strlen(a->eod_token), false, &e, err, sizeof err);
    if (ok && e.n == 1) eod = e.v[0];
    free(e.v);
    if (eod < 0) {
      fprintf(stderr,
              "mmc: error: --eod-token '%s' is not one token of %s (it encodes to %s ids); give "
              "the tokenizer's end-of-text token\n",
              a->eod_token, a->tokenizer, ok ? "several or no" : "no");
      goto out;
    }
  }
  /* mmrt_tok fills its byte-level tables (runtime/data/mmrt_tok_util.c byte_tables,
   * process-wide) on first use, unguarded: use them once here, before the
   * workers share them (ThreadSanitizer saw the race with 3 workers) */
  MmrtTokIds warm = {0};
  mmrt_tok_encode(toks[0], "warm up", 7, false, &warm, err, sizeof err);
  free(warm.v);
  int64_t vocab = mmrt_tok_vocab_size(toks[0]);
  MmrtIdxDtype dtype = mmrt_idx_dtype_for_vocab(vocab);
  if (!mmrt_jsonl_open(&r, a->input, a->key, err, sizeof err)) {
    fprintf(stderr, "mmc: error: %s\n", err);
    goto out;
  }
  w = mmrt_indexed_writer_open(base, dtype, false, err, sizeof err);
  if (!w) {
    fprintf(stderr, "mmc: error: %s\n", err);
    goto out;
  }
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  double t0 = now(), last = t0;
  Read rd = {.r = &r, .skip_bad = a->skip_bad};
  uint64_t docs = 0;
  bool stopped = false;
  int cur = 0;
  size_t n = read_batch(&rd, batch);
  stopped = rd.failed;
  while (n && !stopped && !stop_signal) {
    Sample *b = batch + cur * BATCH;
    Worker wk[MAX_WORKERS];
    int used = n < (size_t)nw ? (int)n : nw, started = 0;
    /* the workers take no SIGINT/SIGTERM: a signal must reach this thread's read */
    sigset_t block, prev;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &prev);
    for (; started < used; started++) {
      wk[started] = (Worker){.tok = toks[started],
                             .batch = b,
                             .n = n,
                             .k = (size_t)started,
                             .stride = (size_t)used,
                             .add_special = a->add_special};
      if (pthread_create(&wk[started].th, NULL, work, &wk[started]) != 0) break;
    }
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    size_t next = 0;
    if (started == used && !rd.eof) next = read_batch(&rd, batch + (1 - cur) * BATCH);
    for (int k = 0; k < started; k++) pthread_join(wk[k].th, NULL);
    if (started < used) {
      fprintf(stderr, "mmc: error: cannot start a worker thread\n");
      stopped = true;
    }
    for (size_t i = 0; i < n && !stopped && !stop_signal; i++) {
      Sample *s = &b[i];
      if (!s->ok) {
        if (a->skip_bad) {
          if (++rd.skipped <= SHOWN_SKIPS)
            fprintf(stderr, "mmc: warning: %s:%" PRIu64 ": %s (skipped)\n", r.path, s->line,
                    s->err);
          continue;
        }
        fprintf(stderr, "mmc: error: %s:%" PRIu64 ": %s\n", r.path, s->line, s->err);
        stopped = true;
        break;
      }
      if (s->ids.n && eod >= 0) {
        if (s->ids.n == s->ids.cap) {
          size_t cap = s->ids.cap * 2 + 1;
          int32_t *v = realloc(s->ids.v, cap * sizeof *v);
          if (!v) {
            fprintf(stderr, "mmc: error: out of memory\n");
            stopped = true;
            break;
          }
          s->ids.v = v;
          s->ids.cap = cap;
        }
        s->ids.v[s->ids.n++] = eod;
      }
      bool ok =
          s->ids.n == 0 || mmrt_indexed_writer_add32(w, s->ids.v, s->ids.n, 0, err, sizeof err);
      ok = ok && mmrt_indexed_writer_end_document(w, err, sizeof err);
      if (!ok) {
        fprintf(stderr, "mmc: error: %s:%" PRIu64 ": %s\n", r.path, s->line, err);
        stopped = true;
        break;
      }
      docs++;
    }
    stopped = stopped || rd.failed; /* this batch's errors come first, being earlier lines */
    double t = now();
    if (!stopped && !rd.eof && t - last >= 2) {
      progress(&r, docs, mmrt_indexed_writer_tokens(w), t0, false, nw);
      last = t;
    }
    cur = 1 - cur;
    n = next;
  }
  uint64_t skipped = rd.skipped, lines = rd.lines;
  if (stop_signal) {
    mmrt_indexed_writer_abort(w);
    w = NULL;
    fprintf(stderr, "mmc: data: stopped by %s at %s:%" PRIu64 "; no files written\n",
            stop_signal == SIGINT ? "SIGINT" : "SIGTERM", r.path, r.lineno);
    rc = 128 + stop_signal;
  } else if (!stopped && docs == 0) {
    fprintf(stderr, "mmc: error: %s: %s\n", r.path,
            lines == 0 ? "empty file: no JSON lines" : "no usable sample (every line was skipped)");
  } else if (!stopped) {
    uint64_t seqs = mmrt_indexed_writer_sequences(w), tokens = mmrt_indexed_writer_tokens(w);
    sigset_t block, prev;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &prev); /* the renames are not interrupted */
    bool ok = mmrt_indexed_writer_finish(w, err, sizeof err);
    w = NULL;
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    if (!ok) {
      fprintf(stderr, "mmc: error: %s\n", err);
    } else {
      progress(&r, docs, tokens, t0, true, nw);
      printf("wrote %s.bin and %s.idx: %" PRIu64 " documents, %" PRIu64 " sequences, %" PRIu64
             " tokens, dtype %s, %" PRIu64 " bad samples skipped\n",
             base, base, docs, seqs, tokens, mmrt_idx_dtype_name((int)dtype), skipped);
      rc = 0;
    }
  }
  if (rc != 0 && skipped) fprintf(stderr, "mmc: data: %" PRIu64 " bad samples skipped\n", skipped);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
out:
  mmrt_indexed_writer_abort(w);
  mmrt_jsonl_close(&r);
  for (int k = 0; k < nw; k++) mmrt_tok_free(toks[k]);
  for (size_t i = 0; i < 2 * BATCH; i++) free(batch[i].text), free(batch[i].ids.v);
  free(batch);
  return rc;
}

int mmc_data(int argc, char **argv, const char *args, const char *help) {
  if (argc < 1) return bad(args, help, "give a subcommand: preprocess, inspect or conv%s", "");
  const char *sub = argv[0];
  if (strcmp(sub, "conv") == 0) return mmc_data_conv(argc, argv, args, help);
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0)
    return mmc_data_usage(stdout, args, help, 0);
  bool is_pre = strcmp(sub, "preprocess") == 0, is_ins = strcmp(sub, "inspect") == 0;
  if (!is_pre && !is_ins)
    return bad(args, help, "unknown subcommand '%s' (preprocess, inspect or conv)", sub);
  Pre a = {.key = "text", .eod_token = "<|endoftext|>", .workers = 1};
  bool eod_given = false;
  const char *prefix = NULL;
  long show = 0;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0)
      return mmc_data_usage(stdout, args, help, 0);
    bool takes = strcmp(o, "--input") == 0 || strcmp(o, "--tokenizer") == 0 ||
                 strcmp(o, "--output-prefix") == 0 || strcmp(o, "--json-key") == 0 ||
                 strcmp(o, "--eod-token") == 0 || strcmp(o, "--workers") == 0 ||
                 strcmp(o, "--bad-samples") == 0 || strcmp(o, "--show") == 0;
    const char *v = NULL;
    if (takes) {
      if (i + 1 >= argc) return bad(args, help, "option '%s' needs a value", o);
      v = argv[++i];
    }
    bool pre_opt = takes ? strcmp(o, "--show") != 0
                         : strcmp(o, "--append-eod") == 0 || strcmp(o, "--add-special") == 0 ||
                               strcmp(o, "--force") == 0;
    if ((takes || pre_opt) && pre_opt != is_pre) {
      fprintf(stderr, "mmc: data: '%s' is not an option of %s\n", o, sub);
      return mmc_data_usage(stderr, args, help, 2);
    }
    if (strcmp(o, "--input") == 0)
      a.input = v;
    else if (strcmp(o, "--tokenizer") == 0)
      a.tokenizer = v;
    else if (strcmp(o, "--output-prefix") == 0)
      a.prefix = v;
    else if (strcmp(o, "--json-key") == 0) {
      if (!*v) return bad(args, help, "--json-key takes a field name, not an empty string%s", "");
      a.key = v;
    } else if (strcmp(o, "--eod-token") == 0)
      a.eod_token = v, eod_given = true;
    else if (strcmp(o, "--workers") == 0) {
      char *end;
      errno = 0;
      a.workers = strtol(v, &end, 10);
      if (errno || *end || end == v || a.workers < 1 || a.workers > MAX_WORKERS)
        return bad(args, help, "--workers takes a thread count from 1 to 64, not '%s'", v);
    } else if (strcmp(o, "--bad-samples") == 0) {
      if (strcmp(v, "fail") != 0 && strcmp(v, "skip") != 0)
        return bad(args, help, "--bad-samples takes fail or skip, not '%s'", v);
      a.skip_bad = strcmp(v, "skip") == 0;
    } else if (strcmp(o, "--show") == 0) {
      if (strcmp(v, "all") == 0)
        show = -1;
      else {
        char *end;
        errno = 0;
        show = strtol(v, &end, 10);
        if (errno || *end || end == v || show < 0)
          return bad(args, help, "--show takes a count of sequences (>= 0) or all, not '%s'", v);
      }
    } else if (strcmp(o, "--append-eod") == 0)
      a.append_eod = true;
    else if (strcmp(o, "--add-special") == 0)
      a.add_special = true;
    else if (strcmp(o, "--force") == 0)
      a.force = true;
    else if (o[0] == '-' && o[1])
      return bad(args, help, "unknown option '%s'", o);
    else if (is_ins && !prefix)
      prefix = o;
    else
      return bad(args, help, "unexpected argument '%s'", o);
  }
  if (is_ins) {
    if (!prefix) return bad(args, help, "inspect needs a dataset PREFIX (PREFIX.bin/.idx)%s", "");
    return inspect(prefix, show);
  }
  if (!a.input) return bad(args, help, "preprocess needs --input FILE.jsonl%s", "");
  if (!a.tokenizer) return bad(args, help, "preprocess needs --tokenizer FILE.json%s", "");
  if (!a.prefix) return bad(args, help, "preprocess needs --output-prefix PREFIX%s", "");
  if (eod_given && !a.append_eod)
    return bad(args, help, "--eod-token goes with --append-eod%s", "");
  return preprocess(&a);
}
