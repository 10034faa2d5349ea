/* libFuzzer target: the compiled programs' command lines and the trainer's
 * data directories. The first byte picks the mode (low 3 bits) and a model
 * variant (the rest):
 *   0-4  argv for the trainer, generator/evaluator, reconstructor, sampler
 *        or extractor parser (mmrt_*_parse): the bytes after the first are
 *        the arguments, NUL-separated, up to an empty one; what follows it
 *        is written to TMP/f, and an argument starting with '/' is taken
 *        under TMP (so "/f" names that file and nothing outside is read).
 *        The parser must return 0, 1 after an "error:" line on stderr, or
 *        -1 after "usage:" on stdout; on 0 it prints nothing.
 *   5    a Fashion-MNIST directory TMP/d: the trainer's open
 *        (mmrt_feed_open_fmnist), then its iterators over both splits.
 *   6    a features directory TMP/d for --features: the DiT task's bind,
 *        start (mmrt_features_read) and fill of a training batch and of
 *        every evaluation batch, for a small composed model.
 *   7    as 5, the directory named with a trailing slash.
 * A data directory is built from records, each after the marker "\n#!":
 * kind, name (index into names[]) and the bytes up to the next marker. An
 * open must succeed with consistent data or fail with a message naming
 * TMP; ASan/UBSan and libFuzzer's leak and timeout checks do the rest.
 * TMP is /dev/shm/fuzz-trainer-args.PID (or under $TMPDIR), emptied before
 * each input and removed at exit (or by the next run, when libFuzzer
 * ended without exit handlers). FUZZ_VERBOSE=1 prints each outcome. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <sanitizer/common_interface_defs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mmrt_data.h"
#include "mmrt_features.h"
#include "mmrt_main.h"
#include "mmrt_feed.h"

#define MAX_ARGS 64
#define MAX_BODY (256 << 10) /* a generated IDX body */

static char tmp[256], root[300];
static int out_fd = -1, err_fd = -1, cap_out = -1, cap_err = -1;

static void die(const char *what) {
  perror(what);
  abort(); /* a harness failure, not a finding */
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag;
  if (f->level > 0) remove(p);
  return 0;
}

static void empty_tmp(void) {
  nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_tmp(void) {
  empty_tmp();
  rmdir(tmp);
}

/* The TMP of runs that ended without exit handlers (libFuzzer ends with
 * _Exit after a crash, a timeout or -max_total_time): those whose process
 * is gone. */
static void remove_stale(const char *base) {
  DIR *d = opendir(base);
  struct dirent *e;
  char keep[sizeof tmp];
  memcpy(keep, tmp, sizeof tmp);
  while (d && (e = readdir(d))) {
    int pid;
    char end;
    if (sscanf(e->d_name, "fuzz-trainer-args.%d%c", &pid, &end) != 1 || pid <= 0 ||
        kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    snprintf(tmp, sizeof tmp, "%s/%s", base, e->d_name);
    remove_tmp();
  }
  if (d) closedir(d);
  memcpy(tmp, keep, sizeof tmp);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  base = base ? base : "/tmp";
  remove_stale(base);
  snprintf(tmp, sizeof tmp, "%s/fuzz-trainer-args.%d", base, (int)getpid());
  snprintf(root, sizeof root, "%s/d", tmp);
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST) die(tmp);
  atexit(remove_tmp);
  /* the parsers print: capture stdout and stderr per input, and send the
   * sanitizers' reports to the real stderr */
  if ((out_fd = dup(1)) < 0 || (err_fd = dup(2)) < 0) die("dup");
  if ((cap_out = memfd_create("fuzz-stdout", 0)) < 0 ||
      (cap_err = memfd_create("fuzz-stderr", 0)) < 0)
    die("memfd_create");
  __sanitizer_set_report_fd((void *)(intptr_t)err_fd);
  return 0;
}

/* ---- mode 0-4: argv ---- */

static void capture(int on) {
  fflush(stdout), fflush(stderr);
  if (on && (ftruncate(cap_out, 0) || ftruncate(cap_err, 0) || lseek(cap_out, 0, SEEK_SET) ||
             lseek(cap_err, 0, SEEK_SET)))
    die("ftruncate"); /* (each write goes at the offset the last one left) */
  if (dup2(on ? cap_out : out_fd, 1) < 0 || dup2(on ? cap_err : err_fd, 2) < 0) die("dup2");
}

/* What the parser wrote to fd (its start), NUL-terminated. */
static const char *captured(int fd, char *buf, size_t n) {
  ssize_t k = pread(fd, buf, n - 1, 0);
  buf[k > 0 ? k : 0] = 0;
  return buf;
}

static void parse_argv(int mode, int variant, const uint8_t *data, size_t size) {
  static const char *const prog[] = {"trainer", "generator", "reconstructor", "sampler",
                                     "extractor"};
  char *copy = malloc(size + 1), *args[MAX_ARGS + 1];
  int owned[MAX_ARGS + 1] = {0};
  if (!copy) die("malloc");
  memcpy(copy, data, size);
  copy[size] = 0;
  int argc = 0;
  args[argc++] = (char *)prog[mode];
  size_t at = 0;
  while (at < size && argc < MAX_ARGS) {
    char *a = copy + at;
    size_t n = strlen(a);
    at += n + 1;
    if (!n) break; /* the file's bytes follow */
    if (a[0] == '/') {
      char *p = malloc(strlen(tmp) + n + 1);
      if (!p) die("malloc");
      sprintf(p, "%s%s", tmp, a);
      a = p, owned[argc] = 1;
    }
    args[argc++] = a;
  }
  args[argc] = NULL;
  char fpath[300];
  snprintf(fpath, sizeof fpath, "%s/f", tmp);
  FILE *f = fopen(fpath, "wb");
  if (!f) die(fpath);
  if (at < size) fwrite(copy + at, 1, size - at, f);
  fclose(f);

  MmrtTensorDesc none[1] = {{.name = "x"}};
  MmrtModelDesc m = {.abi_version = MMRT_ABI_VERSION,
                     .name = "FuzzModel",
                     .ninputs = 0,
                     .inputs = none,
                     .lr = 1e-3,
                     .steps = variant & 4 ? 0 : 10,
                     .batch = 4,
                     .mesh = {variant & 2 ? 2 : 1, 1, 1},
                     .lora_rank = variant & 1 ? 4 : 0,
                     .task = variant & 8 ? MMRT_TASK_GENERATE : MMRT_TASK_EVAL};
  int (*parse[])(int, char **, const MmrtModelDesc *) = {mmrt_train_parse, mmrt_generate_parse,
                                                         mmrt_reconstruct_parse, mmrt_sample_parse,
                                                         mmrt_extract_parse};
  capture(1);
  int rc = parse[mode](argc, args, &m);
  capture(0);
  char out[256], err[256];
  captured(cap_out, out, sizeof out), captured(cap_err, err, sizeof err);
  if (getenv("FUZZ_VERBOSE")) dprintf(err_fd, "%s: %d %s%s", prog[mode], rc, out, err);
  if (rc < -1 || rc > 1 || (rc == 1 && !strstr(err, "error: ")) ||
      (rc == -1 && strncmp(out, "usage:", 6) != 0) || (rc == 0 && (out[0] || err[0]))) {
    fprintf(stderr, "%s: rc %d, stdout '%s', stderr '%s'\n", prog[mode], rc, out, err);
    abort();
  }
  for (int i = 1; i < argc; i++)
    if (owned[i]) free(args[i]);
  free(copy);
}

/* ---- modes 5-7: data directories ---- */

static const char *const names[] = {
    "", /* the directory itself */
    "train-images-idx3-ubyte",
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte",
    "t10k-labels-idx1-ubyte.gz",
    "manifest.json",
    "train-00000.safetensors",
    "train-00001.safetensors",
    "heldout-00000.safetensors",
    "null.safetensors",
    "sub",
    "sub/x",
};
#define NNAMES (sizeof names / sizeof names[0])

/* A composed text-to-video model of batch 2: latents f32[2, 2, 1, 2, 2]
 * and text_features f32[2, 7, 2]; its inputs in one arena. */
#define FB 2
static const MmrtTensorDesc feat_inputs[] = {
    {.name = "latents",
     .dtype = MMRT_ST_F32,
     .ndim = 5,
     .shape = {FB, 2, 1, 2, 2},
     .arena = MMRT_ARENA_INPUT,
     .offset = 0,
     .rows = FB},
    {.name = "text_features",
     .dtype = MMRT_ST_F32,
     .ndim = 3,
     .shape = {FB, 7, 2},
     .arena = MMRT_ARENA_INPUT,
     .offset = 4 * FB * 8,
     .rows = FB},
};
static const MmrtModelDesc feat_model = {.abi_version = MMRT_ABI_VERSION,
                                         .name = "FuzzDiT",
                                         .ninputs = 2,
                                         .inputs = feat_inputs,
                                         .batch = FB,
                                         .mesh = {1, 1, 1},
                                         .lr = 1e-3,
                                         .task = MMRT_TASK_TRAIN};

enum { K_FILE, K_GZIP, K_DIR, K_SYMLINK, K_IDX, K_IDX_GZIP, K_NKINDS };

static void write_file(const char *path, const uint8_t *p, size_t n, int gz) {
  if (gz) {
    gzFile g = gzopen(path, "wb");
    if (!g) return; /* e.g. under a file */
    if (n) gzwrite(g, p, (unsigned)n);
    gzclose(g);
    return;
  }
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(p, 1, n, f);
  fclose(f);
}

/* A file whose "@FP@" stand for the features fingerprint of feat_model
 * (a manifest must name it; no mutation would find it). */
static void write_text(const char *path, const uint8_t *p, size_t n, int gz) {
  char fp[160];
  mmrt_features_fingerprint(&feat_model, fp, sizeof fp);
  size_t fl = strlen(fp), k = 0;
  uint8_t *buf = malloc(n / 4 * fl + n + 1);
  if (!buf) die("malloc");
  for (size_t i = 0; i < n;)
    if (i + 4 <= n && !memcmp(p + i, "@FP@", 4))
      memcpy(buf + k, fp, fl), k += fl, i += 4;
    else
      buf[k++] = p[i++];
  write_file(path, buf, k, gz);
  free(buf);
}

/* An IDX file from a short description: magic (4 bytes, big-endian), dims
 * (4 each, as many as the magic's low byte, at most 3), one signed byte
 * added to the body length the dims give, then a pattern cycled over the
 * body (labels mod 11 when the magic is the labels': 10 is one too many). */
static void write_idx(const char *path, const uint8_t *p, size_t n, int gz) {
  uint8_t hdr[16] = {0};
  size_t h = n < 4 ? n : 4;
  memcpy(hdr, p, h);
  int ndim = hdr[3] >= 1 && hdr[3] <= 3 ? hdr[3] : 1;
  size_t hn = 4 + 4 * (size_t)ndim;
  if (n < hn) hn = n;
  memcpy(hdr, p, hn);
  uint64_t body = 1;
  for (int d = 0; d < ndim; d++) {
    const uint8_t *q = hdr + 4 + 4 * d;
    body *= (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
    if (body > MAX_BODY) body = MAX_BODY;
  }
  int adj = hn < n ? (int8_t)p[hn] : 0;
  const uint8_t *pat = hn < n ? p + hn + 1 : NULL;
  size_t npat = hn < n ? n - hn - 1 : 0;
  int64_t len = (int64_t)body + adj;
  len = len < 0 ? 0 : len > MAX_BODY ? MAX_BODY : len;
  uint8_t *buf = malloc(hn + (size_t)len + 1);
  if (!buf) die("malloc");
  memcpy(buf, hdr, hn);
  int labels = hdr[2] == 8 && hdr[3] == 1;
  for (int64_t i = 0; i < len; i++) {
    uint8_t b = npat ? pat[i % (int64_t)npat] : (uint8_t)i;
    buf[hn + (size_t)i] = labels ? b % 11 : b; /* 10: a bad label */
  }
  write_file(path, buf, hn + (size_t)len, gz);
  free(buf);
}

/* One record: kind, name, the bytes up to the next MARK (a length field
 * would let one inserted byte garble every later record). */
#define MARK "\n#!"
static void make_entry(const uint8_t *p, size_t n, int *made_root) {
  if (n < 2) return;
  int kind = p[0] % K_NKINDS;
  size_t which = p[1] % NNAMES, len = n - 2;
  const uint8_t *c = p + 2;
  char path[600];
  snprintf(path, sizeof path, "%s%s%s", root, which ? "/" : "", names[which]);
  if (which == 0 && !*made_root) {
    *made_root = 1;
  } else if (!*made_root) {
    *made_root = 1;
    if (mkdir(root, 0700) != 0) die(root);
  }
  remove(path); /* an earlier record's entry (an empty directory only) */
  switch (kind) {
    case K_FILE:
    case K_GZIP: write_text(path, c, len, kind == K_GZIP); break;
    case K_DIR: mkdir(path, 0700); break;
    case K_SYMLINK: { /* an absolute target is taken under TMP, as the argv modes do */
      char target[600];
      int t = (int)(len < 255 ? len : 255);
      snprintf(target, sizeof target, "%s%.*s", t && c[0] == '/' ? tmp : "", t, (const char *)c);
      if (symlink(target, path) != 0) break; /* under a file, or a NUL-only target */
      break;
    }
    case K_IDX: write_idx(path, c, len, 0); break;
    case K_IDX_GZIP: write_idx(path, c, len, 1); break;
  }
}

static void build_dir(const uint8_t *data, size_t size) {
  int made_root = 0;
  const uint8_t *end = data + size, *at = memmem(data, size, MARK, 3);
  while (at) {
    at += 3;
    const uint8_t *next = memmem(at, (size_t)(end - at), MARK, 3);
    make_entry(at, (size_t)((next ? next : end) - at), &made_root);
    at = next;
  }
  if (!made_root && mkdir(root, 0700) != 0) die(root);
}

/* A failure names the file or directory at fault. */
static void check_err(int rc, const char *err, const char *what) {
  if (getenv("FUZZ_VERBOSE")) dprintf(err_fd, "%s: %s\n", what, rc == MMRT_OK ? "ok" : err);
  if (rc != MMRT_OK && (!err[0] || !strstr(err, tmp))) {
    fprintf(stderr, "%s: error %d without naming %s: '%s'\n", what, rc, tmp, err);
    abort();
  }
}

static void check_split(const MmrtImages *s) {
  if (s->n < 0 || (s->n > 0 && (!s->pixels || !s->labels)) || s->rows != 28 || s->cols != 28)
    abort();
  for (int64_t i = 0; i < s->n; i++)
    if (s->labels[i] >= MMRT_FMNIST_CLASSES) abort();
}

static void open_fmnist(const char *dir, int variant) {
  MmrtFeedCtx c = {.B = 1 + variant % 3, .eval_batches = -1};
  char err[1024] = "";
  int rc = mmrt_feed_open_fmnist(&c, dir, err, sizeof err);
  check_err(rc, err, "open");
  if (rc == MMRT_OK) {
    check_split(&c.train), check_split(&c.test);
    /* the trainer's iterators: a training batch or an error, then an evaluation pass */
    float x[3 * 28 * 28];
    int32_t y[3];
    rc = mmrt_iter_init(&c.it, &c.train, c.B, 1, 42, err, sizeof err);
    if (rc == MMRT_OK) {
      for (int k = 0; k < 2; k++) {
        if (mmrt_iter_next(&c.it) != c.B) abort();
        mmrt_iter_fill(&c.it, 0, c.B, x, y);
      }
    } else if (c.train.n >= c.B && c.train.n <= UINT32_MAX) {
      abort(); /* refused a usable split */
    }
    if (mmrt_feed_restart_eval(&c, err, sizeof err) == MMRT_OK) {
      int64_t seen = 0, r;
      while ((r = mmrt_iter_next(&c.eval_it)) > 0) {
        mmrt_iter_fill(&c.eval_it, 0, c.B, x, y);
        seen += r;
      }
      if (seen != c.test.n) abort();
    }
  }
  mmrt_iter_free(&c.it), mmrt_iter_free(&c.eval_it);
  mmrt_images_free(&c.train), mmrt_images_free(&c.test);
}

static void open_features(int variant, uint64_t sample0) {
  static float input[FB * 8 + FB * 14];
  char *arenas[MMRT_NARENAS] = {[MMRT_ARENA_INPUT] = (char *)input};
  MmrtFeedCtx c = {.m = &feat_model,
                   .B = FB,
                   .eval_batches = variant & 4 ? 1 : -1,
                   .features = root,
                   .arenas = arenas,
                   .seed = 42};
  char err[1024] = "";
  const MmrtFeeder *t = mmrt_feed_bind(&c, err, sizeof err);
  if (t != &mmrt_feed_dit || !c.features_used) {
    fprintf(stderr, "bind: %s\n", err);
    abort();
  }
  c.lo = 0, c.rows = FB;
  c.test.n = variant % 4; /* the evaluation's clips; the pixels are not read */
  int rc = t->start(&c, err, sizeof err);
  check_err(rc, err, "start");
  if (rc == MMRT_OK) {
    t->fill(&c, NULL, FB, 0, sample0);
    if (c.test.n && mmrt_feed_restart_eval(&c, err, sizeof err) == MMRT_OK) {
      int64_t r, b = 0;
      while ((r = mmrt_iter_next(&c.eval_it)) > 0 && (c.eval_batches < 0 || b++ < c.eval_batches))
        t->fill(&c, &c.eval_it, r, 1, 0);
    }
  }
  mmrt_iter_free(&c.eval_it);
  t->close(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0] & 7, variant = data[0] >> 3;
  empty_tmp();
  if (mode <= 4) {
    parse_argv(mode, variant, data + 1, size - 1);
  } else if (mode == 6) {
    build_dir(data + 1, size - 1);
    open_features(variant, (uint64_t)variant * 7);
  } else {
    build_dir(data + 1, size - 1);
    char dir[320];
    snprintf(dir, sizeof dir, "%s%s", root, mode == 7 ? "/" : "");
    open_fmnist(dir, variant);
  }
  return 0;
}
