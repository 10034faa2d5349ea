/* mmrt_generate.c: the generate and eval executables of a captioning model
 * (mmc compile --task generate|eval): load weights by name, build each
 * image's prompt ([BOS, IMG x n, prompt words]), run @prefill once on the
 * whole text, then @decode one token per row with the KV cache, greedily,
 * until EOS or the cache is full.  --no-cache runs @prefill on the grown
 * text for every token instead (the reference the cache must agree with).
 *
 *   generate: captions of the images given (--images: PNG files of 28x28,
 *             or IDX image files), one line each: "source<TAB>caption".
 *   eval:     exact-match caption accuracy on the Fashion-MNIST test split
 *             (the canonical answer, then EOS), as the trainer scores it;
 *             a model of data format conversation has its own evaluator
 *             and generator (mmrt_conv_eval.c).
 *
 * Runs on one rank; every buffer is in the arenas of the memory plan.  A
 * progress line with an ETA on stderr; SIGINT/SIGTERM stop it between
 * batches: exit 130 / 143, no figure, no --out/--ids file (each is written
 * beside as FILE.tmp and renamed when complete). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stddef.h>

#include "mmrt_caption.h"
#include "mmrt_data.h"
#include "mmrt_flags.h"
#include "mmrt_main.h"
#include "mmrt_png.h"
#include "mmrt_mem.h"

#define ERRLEN      1024
#define MAX_SOURCES 4096

typedef struct GenArgs {
  const char *weights, *adapters, *data, *out, *prompt, *ids_out;
  const char *images[MAX_SOURCES];
  int nimages;
  int64_t limit;
  uint64_t seed;
  int no_cache, quiet;
} GenArgs;

typedef struct Gen {
  const MmrtModelDesc *m;
  GenArgs a;
  char *arenas[MMRT_NARENAS];
  const MmrtTensorDesc *pixels, *text, *pos, *token;
  int64_t B, T, V, C, H, W; /* batch, text positions, vocabulary, image channels and size */
  MmrtCaptioner cap;
  /* the images to caption: bytes (n, H, W), labels (-1 unknown), names; room for cap */
  int64_t n, cap_images;
  uint8_t *px;
  int32_t *label;
  char **source;
  MmrtImages test;
  int32_t *len, *done;   /* per row of a batch: text length, finished */
  int64_t tokens, steps; /* generated tokens, step calls */
  double seconds;        /* in the step functions */
} Gen;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("generator: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* The flags; variant GEN is the generator's, EVAL the evaluator's. */
enum { GEN = 1, EVAL = 2 };
#define AT(f) offsetof(GenArgs, f)
static const MmrtFlag gen_flags[] = {
    MMRT_FLAG_S("--weights", "PATH", AT(weights),
                "the parameters by name: a safetensors file (the trainer's --save-weights,\n"
                "or one exported from PyTorch with the same names), a checkpoint folder\n"
                "or a Hugging Face directory (config.json; mmc import)"),
    MMRT_FLAG_S("--load-adapters", "FILE", AT(adapters),
                "LoRA adapters saved by the trainer's --save-adapters"),
    MMRT_FLAG_L("--images", "PATH...", AT(images), AT(nimages), MAX_SOURCES, 1,
                "%F: at most %H files", "%F needs at least one PNG or IDX file",
                "PNG files (28x28) or IDX image files (raw or gzip)", .variants = GEN),
    MMRT_FLAG_S("--out", "FILE", AT(out), "the captions (default: standard output)",
                .variants = GEN),
    MMRT_FLAG_S("--data", "DIR", AT(data),
                "Fashion-MNIST (default $MMRT_FMNIST_DIR, else " MMRT_FMNIST_DEFAULT_DIR ")",
                .variants = EVAL),
    MMRT_FLAG_I("--limit", "N", AT(limit), 1, INT64_MAX, "%F takes a positive integer, not '%V'",
                "the first N images only"),
    MMRT_FLAG_S("--prompt", "TEXT", AT(prompt),
                "the prompt for every image (default: \"what is this ?\")", .variants = GEN),
    MMRT_FLAG_S("--prompt", "TEXT", AT(prompt),
                "the prompt for every image (default: one per image, as the trainer's "
                "evaluation picks it)",
                .variants = EVAL),
    MMRT_FLAG_I("--seed", "S", AT(seed), 0, INT64_MAX, "%F takes a non-negative integer, not '%V'",
                "the seed that picks each test image's prompt (default 42)"),
    MMRT_FLAG_B("--no-cache", AT(no_cache),
                "recompute the whole text for every token (no KV cache)"),
    MMRT_FLAG_S("--ids", "FILE", AT(ids_out),
                "also write, one line per image: source, TAB, the prompt's token ids, TAB, the\n"
                "generated ids"),
    MMRT_FLAG_B("--quiet", AT(quiet), "no progress on stderr"),
    MMRT_FLAG_END,
};
#undef AT

/* 0 ok, 1 error (printed), -1 --help. */
static int parse_args(int argc, char **argv, const MmrtModelDesc *m, GenArgs *a) {
  memset(a, 0, sizeof *a);
  a->limit = -1;
  a->seed = 42;
  int gen = m->task == MMRT_TASK_GENERATE;
  const MmrtFlagSet set = {.who = "generator",
                           .flags = gen_flags,
                           .needs_value = "option %F needs a value",
                           .variant = gen ? GEN : EVAL,
                           .col = 24};
  char head[512];
  snprintf(
      head, sizeof head,
      "usage: %s --weights FILE|DIR [options]\n%s of model %s with a KV cache (greedy decoding).\n",
      gen ? "generator" : "evaluator", gen ? "Captions" : "Exact-match caption accuracy", m->name);
  int rc = mmrt_flags_parse(&set, argc, argv, a, head);
  if (rc) return rc;
  if (!a->weights)
    return fail(
        "--weights FILE|DIR is required (the trainer writes them with --save-weights or --ckpt)");
  if (gen && !a->nimages)
    return fail("--images PATH... is required: PNG files or IDX image files to caption");
  return 0;
}

/* A conversation model's evaluator and generator are mmrt_conv_eval.c's. */
static int conv_eval(const MmrtModelDesc *m) {
  return m->data_format && !strcmp(m->data_format, "conversation");
}

int mmrt_generate_parse(int argc, char **argv, const MmrtModelDesc *m) {
  if (conv_eval(m)) return mmrt_conv_eval_parse(argc, argv, m);
  GenArgs a;
  return parse_args(argc, argv, m, &a);
}

static void *at(Gen *g, const MmrtTensorDesc *d) {
  return g->arenas[d->arena] + d->offset;
}

static int bind(Gen *g) {
  const MmrtModelDesc *m = g->m;
  if (!m->prefill_step || !m->decode_step || m->prefill_logits_offset < 0 ||
      m->decode_logits_offset < 0)
    return fail("model %s was not compiled for generation (mmc compile --task generate|eval)",
                m->name);
  if (mmrt_desc_ranks(m, MESH_NIR) != 1)
    return fail("model %s is compiled for %lld ranks; generation runs on one", m->name,
                (long long)mmrt_desc_ranks(m, MESH_NIR));
  g->pixels = mmrt_desc_input(m, "pixels"), g->text = mmrt_desc_input(m, "text");
  g->pos = mmrt_desc_input(m, "pos"), g->token = mmrt_desc_input(m, "token");
  if (!g->pixels || !g->text || !g->pos || !g->token || g->pixels->ndim != 4 ||
      g->text->ndim != 2 || g->token->ndim != 2 || g->token->shape[1] != 1 ||
      g->text->dtype != MMRT_ST_I32)
    return fail("model %s: generation needs inputs pixels f32[B, C, H, W], text i32[B, T], token "
                "i32[B, 1] and "
                "pos i32[B]",
                m->name);
  g->B = g->text->shape[0], g->T = g->text->shape[1], g->V = m->vocab;
  g->C = g->pixels->shape[1], g->H = g->pixels->shape[2], g->W = g->pixels->shape[3];
  if (g->C != 1 || g->H != MMRT_FMNIST_SIDE || g->W != MMRT_FMNIST_SIDE)
    return fail("model %s takes images of %lld x %lld x %lld; this generator reads one-channel %d "
                "x %d images",
                m->name, (long long)g->C, (long long)g->H, (long long)g->W, MMRT_FMNIST_SIDE,
                MMRT_FMNIST_SIDE);
  if (m->cache_len != g->T)
    return fail("model %s: the KV cache holds %lld positions, the text %lld", m->name,
                (long long)m->cache_len, (long long)g->T);
  char err[ERRLEN];
  if (mmrt_caption_init(&g->cap, (int)g->T, (int)m->image_tokens, MMRT_CAPTION_EVAL, g->a.seed, err,
                        sizeof err) ||
      mmrt_tok_fits(&g->cap.tok, (int)g->V, err, sizeof err))
    return fail("model %s cannot caption: %s", m->name, err);
  if (m->image_tokens > 0 && m->image_token != MMRT_TOK_IMG)
    return fail("model %s places its image at token %lld; the caption tokenizer's <img> is %d",
                m->name, (long long)m->image_token, MMRT_TOK_IMG);
  return 0;
}

static int alloc_arenas(Gen *g) {
  char err[ERRLEN];
  return mmrt_alloc_arenas(g->m, g->arenas, err, sizeof err) == MMRT_OK ? 0 : fail("%s", err);
}

/* The parameters (which = 0: base, 1: adapters), every one required. */
static int load(Gen *g, const char *flag, const char *path, int which) {
  char err[ERRLEN];
  int n = 0;
  if (mmrt_load_params(g->m, g->arenas, path, which, &n, err, sizeof err) != MMRT_OK)
    return fail("%s %s: %s", flag, path, err);
  if (!g->a.quiet)
    fprintf(stderr, "generator: %d %s loaded from %s\n", n, which ? "adapters" : "parameters",
            path);
  return 0;
}

/* ---- the images ---- */

static int add_image(Gen *g, const uint8_t *px, int label, const char *source) {
  int64_t k = g->n, hw = g->H * g->W;
  if (g->a.limit >= 0 && k >= g->a.limit) return 0;
  if (k == g->cap_images) { /* doubling: one realloc an image copied the whole set each time */
    int64_t c = k ? 2 * k : 64;
    uint8_t *p = realloc(g->px, (size_t)(c * hw));
    int32_t *l = p ? realloc(g->label, (size_t)c * sizeof *l) : NULL;
    char **s = l ? realloc(g->source, (size_t)c * sizeof *s) : NULL;
    if (p) g->px = p;
    if (l) g->label = l;
    if (s) g->source = s;
    if (!p || !l || !s) return fail("out of memory reading the images");
    g->cap_images = c;
  }
  if (!(g->source[k] = strdup(source))) return fail("out of memory reading the images");
  memcpy(g->px + k * hw, px, (size_t)hw);
  g->label[k] = label;
  g->n = k + 1;
  return 0;
}

static int is_png(const char *path) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  unsigned char b[8];
  FILE *f;
  if (mmrt_fopen_read(path, &f, NULL, 0) != MMRT_OK) return 0;
  size_t n = fread(b, 1, 8, f);
  fclose(f);
  return n == 8 && !memcmp(b, sig, 8);
}

static int read_images(Gen *g) {
  char err[ERRLEN], src[4200];
  if (g->m->task == MMRT_TASK_EVAL) {
    const char *dir = g->a.data ? g->a.data : mmrt_fmnist_dir();
    if (mmrt_fmnist_load(&g->test, dir, MMRT_SPLIT_TEST, err, sizeof err) != MMRT_OK)
      return fail("%s %s: %s", mmrt_fmnist_dir_source(dir), dir, err);
    for (int64_t i = 0; i < g->test.n; i++) {
      snprintf(src, sizeof src, "test:%lld", (long long)i);
      if (add_image(g, g->test.pixels + i * g->H * g->W, g->test.labels[i], src)) return 1;
    }
    return 0;
  }
  for (int k = 0; k < g->a.nimages; k++) {
    const char *path = g->a.images[k];
    if (is_png(path)) {
      uint8_t px[MMRT_FMNIST_SIDE * MMRT_FMNIST_SIDE];
      if (mmrt_png_read_gray(path, (int)g->H, (int)g->W, px, err, sizeof err) != MMRT_OK)
        return fail("--images: %s", err);
      if (add_image(g, px, -1, path)) return 1;
      continue;
    }
    MmrtIdx idx;
    if (mmrt_idx_read(path, MMRT_IDX_MAGIC_IMAGES, &idx, err, sizeof err) != MMRT_OK)
      return fail("--images %s: neither a PNG file nor an IDX image file: %s", path, err);
    if (idx.ndim != 3 || idx.dims[1] != g->H || idx.dims[2] != g->W) {
      mmrt_idx_free(&idx);
      return fail("--images %s: IDX images must be N x %lld x %lld", path, (long long)g->H,
                  (long long)g->W);
    }
    int rc = 0;
    for (uint32_t i = 0; i < idx.dims[0] && !rc; i++) {
      snprintf(src, sizeof src, "%s:%u", path, i);
      rc = add_image(g, idx.data + (size_t)i * g->H * g->W, -1, src);
    }
    mmrt_idx_free(&idx);
    if (rc) return 1;
  }
  return 0;
}

/* ---- decoding ---- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int step(Gen *g, MmrtStepFn fn, const char *what) {
  double t0 = now();
  int rc = fn(g->arenas, g->a.seed, NULL);
  g->seconds += now() - t0;
  g->steps++;
  if (rc) return fail("%s failed (status %d; the kernel's message is above)", what, rc);
  return 0;
}

/* The most likely token that generation may pick: never PAD, BOS or the
 * image-context token (a row must hold exactly the image's <img> tokens). */
static int32_t argmax(const float *row, int64_t V) {
  int64_t best = MMRT_TOK_EOS;
  for (int64_t v = 0; v < V; v++)
    if (v != MMRT_TOK_PAD && v != MMRT_TOK_BOS && v != MMRT_TOK_IMG && row[v] > row[best]) best = v;
  return (int32_t)best;
}

/* The prompt of image k: --prompt, or the one the trainer's evaluation
 * gives test image k; ids = [BOS, IMG x n, prompt], returns its length. */
static int prefix(Gen *g, int64_t k, const int32_t *prompt, int nprompt, int32_t *ids) {
  if (!prompt) return mmrt_caption_prefix(&g->cap, k, ids);
  int len = 1 + (int)g->m->image_tokens + nprompt;
  if (len >= g->T) /* no room: the caller says so; nothing is written past the row */
    return len;
  int n = 0;
  ids[n++] = MMRT_TOK_BOS;
  for (int64_t i = 0; i < g->m->image_tokens; i++) ids[n++] = MMRT_TOK_IMG;
  for (int i = 0; i < nprompt; i++) ids[n++] = prompt[i];
  return n;
}

/* Captions of images [k0, k0 + rows): gen (B, T) tokens after each prefix,
 * ng (B) their counts. */
static int generate_batch(Gen *g, int64_t k0, int64_t rows, const int32_t *prompt, int nprompt,
                          int32_t *gen, int32_t *ng, int32_t *plen) {
  const int64_t B = g->B, T = g->T, V = g->V, hw = g->H * g->W;
  float *x = at(g, g->pixels);
  int32_t *text = at(g, g->text), *pos = at(g, g->pos), *tok = at(g, g->token);
  int32_t *len = g->len, *done = g->done;
  for (int64_t r = 0; r < B; r++) {
    int32_t *row = text + r * T;
    for (int64_t t = 0; t < T; t++) row[t] = MMRT_TOK_PAD;
    ng[r] = 0;
    done[r] = r >= rows;
    if (r < rows) {
      mmrt_fmnist_normalize_image(g->px + (k0 + r) * hw, (size_t)hw, x + r * hw);
      len[r] = prefix(g, k0 + r, prompt, nprompt, row);
    } else { /* padding rows: a zero image and a prefix of the right form */
      memset(x + r * hw, 0, sizeof(float) * (size_t)hw);
      len[r] = prefix(g, 0, prompt, nprompt, row);
    }
    plen[r] = len[r];
    if (len[r] >= T)
      return fail("the prompt of image %lld takes %d of the %lld text positions (<bos>, %lld "
                  "<img>, the prompt): "
                  "no room for a caption",
                  (long long)(k0 + r), len[r], (long long)T, (long long)g->m->image_tokens);
    pos[r] = 0;
  }
  const float *pl = (const float *)(g->arenas[MMRT_ARENA_ACT] + g->m->prefill_logits_offset);
  const float *dl = (const float *)(g->arenas[MMRT_ARENA_ACT] + g->m->decode_logits_offset);
  if (step(g, g->m->prefill_step, "the prefill step")) return 1;
  for (int64_t r = 0; r < B; r++) tok[r] = argmax(pl + (r * T + len[r] - 1) * V, V);
  for (;;) {
    int active = 0;
    for (int64_t r = 0; r < B; r++) {
      if (done[r]) continue;
      gen[r * T + ng[r]++] = tok[r];
      if (tok[r] == MMRT_TOK_EOS || len[r] == T) {
        done[r] = 1;
        continue;
      }
      g->tokens++;
      text[r * T + len[r]] = tok[r];
      pos[r] = len[r]++;
      active = 1;
    }
    if (!active) return 0;
    for (int64_t r = 0; r < B; r++)
      if (done[r]) /* a finished row rewrites a position nobody reads again */
        tok[r] = MMRT_TOK_PAD, pos[r] = (int32_t)T - 1;
    if (g->a.no_cache) { /* the whole text again, from position 0 */
      for (int64_t r = 0; r < B; r++) pos[r] = 0;
      if (step(g, g->m->prefill_step, "the prefill step")) return 1;
      for (int64_t r = 0; r < B; r++)
        if (!done[r]) tok[r] = argmax(pl + (r * T + len[r] - 1) * V, V);
    } else {
      if (step(g, g->m->decode_step, "the decode step")) return 1;
      for (int64_t r = 0; r < B; r++)
        if (!done[r]) tok[r] = argmax(dl + r * V, V);
    }
  }
}

static int run(Gen *g) {
  char err[ERRLEN];
  int32_t prompt[MMRT_CAPTION_MAX_WORDS * 4];
  int nprompt = 0;
  const char *ptext = g->a.prompt                        ? g->a.prompt
                      : g->m->task == MMRT_TASK_GENERATE ? mmrt_caption_prompt(0)
                                                         : NULL;
  if (ptext && mmrt_words_encode(&g->cap.tok, ptext, prompt, (int)(sizeof prompt / sizeof *prompt),
                                 &nprompt, err, sizeof err) != MMRT_OK)
    return fail("--prompt \"%s\": %s", ptext, err);
  MmrtOut o_out = {0}, o_ids = {0}; /* written beside, renamed over --out / --ids when complete */
  if (g->a.out && mmrt_out_begin(&o_out, g->a.out, err, sizeof err) != MMRT_OK)
    return fail("--out %s", err);
  if (g->a.ids_out && mmrt_out_begin(&o_ids, g->a.ids_out, err, sizeof err) != MMRT_OK) {
    mmrt_out_finish(&o_out, 0, err, sizeof err);
    return fail("--ids %s", err);
  }
  FILE *out = g->a.out ? o_out.f : stdout, *ids = o_ids.f;
  int32_t *gen = calloc((size_t)(g->B * g->T), sizeof *gen), *ng = calloc((size_t)g->B, sizeof *ng),
          *plen = calloc((size_t)g->B, sizeof *plen);
  g->len = calloc((size_t)g->B, sizeof *g->len), g->done = calloc((size_t)g->B, sizeof *g->done);
  int64_t matches = 0, counted = 0, per_class[MMRT_FMNIST_CLASSES][2] = {{0}}; /* images, matches */
  int rc = gen && ng && plen && g->len && g->done ? 0 : fail("out of memory");
  double t0 = now();
  MmrtProgress pr;
  mmrt_progress_begin(&pr, g->m->task == MMRT_TASK_EVAL ? "evaluator: image" : "generator: image",
                      0, g->n, "images", !g->a.quiet);
  int64_t k0 = 0;
  for (; k0 < g->n && !rc && !mmrt_stop_signal; k0 += g->B) {
    int64_t rows = g->n - k0 < g->B ? g->n - k0 : g->B;
    rc = generate_batch(g, k0, rows, ptext ? prompt : NULL, nprompt, gen, ng, plen);
    for (int64_t r = 0; r < rows && !rc; r++) {
      const int32_t *gr = gen + r * g->T;
      if (ids) { /* source, TAB, the prefix's ids, TAB, the generated ids */
        const int32_t *text = at(g, g->text);
        fprintf(ids, "%s\t", g->source[k0 + r]);
        for (int i = 0; i < plen[r]; i++)
          fprintf(ids, "%s%d", i ? " " : "", (int)text[r * g->T + i]);
        fputc('\t', ids);
        for (int i = 0; i < ng[r]; i++) fprintf(ids, "%s%d", i ? " " : "", (int)gr[i]);
        fputc('\n', ids);
      }
      if (g->m->task == MMRT_TASK_EVAL) {
        int lb = g->label[k0 + r], hit = mmrt_caption_match(&g->cap, lb, gr, ng[r]);
        matches += hit;
        counted++;
        if (lb >= 0 && lb < MMRT_FMNIST_CLASSES) per_class[lb][0]++, per_class[lb][1] += hit;
        continue;
      }
      char cap[512];
      if (mmrt_words_decode(&g->cap.tok, gr, ng[r], cap, sizeof cap, err, sizeof err) != MMRT_OK)
        rc = fail("%s", err);
      else
        fprintf(out, "%s\t%s\n", g->source[k0 + r], cap);
    }
    mmrt_progress_tick(&pr, k0 + rows, (double)(k0 + rows), NULL);
  }
  mmrt_progress_break(&pr);
  if (!rc && mmrt_stop_signal) { /* exit 128 + the signal: no figure, no files of part */
    fprintf(stderr, "%s: stopped by %s after %lld of %lld images%s\n",
            g->m->task == MMRT_TASK_EVAL ? "evaluator" : "generator",
            mmrt_stop_name(mmrt_stop_signal), (long long)(k0 < g->n ? k0 : g->n), (long long)g->n,
            g->a.out || g->a.ids_out ? " (no --out/--ids file written)" : "");
    rc = 128 + mmrt_stop_signal;
  }
  double wall = now() - t0;
  if (mmrt_out_finish(&o_ids, !rc, err, sizeof err) != MMRT_OK) rc = fail("--ids %s", err);
  if (mmrt_out_finish(&o_out, !rc, err, sizeof err) != MMRT_OK) rc = fail("--out %s", err);
  free(gen), free(ng), free(plen), free(g->len), free(g->done);
  g->len = g->done = NULL;
  if (rc) return rc;
  if (g->m->task == MMRT_TASK_EVAL) {
    printf("eval: caption exact match %.4f (%lld of %lld test images)\n",
           counted ? (double)matches / counted : 0.0, (long long)matches, (long long)counted);
    for (int c = 0; c < MMRT_FMNIST_CLASSES; c++) /* which classes the captioner confuses */
      if (per_class[c][0])
        printf("  %-12s %.4f (%lld of %lld)\n", mmrt_fmnist_class_name(c),
               (double)per_class[c][1] / (double)per_class[c][0], (long long)per_class[c][1],
               (long long)per_class[c][0]);
    int64_t total = 0;
    for (int r = 0; r < MMRT_NARENAS; r++) total += g->m->arena_bytes[r];
    printf("allocated arena bytes: param=%lld grad=%lld opt=%lld act=%lld input=%lld total=%lld\n",
           (long long)g->m->arena_bytes[MMRT_ARENA_PARAM],
           (long long)g->m->arena_bytes[MMRT_ARENA_GRAD],
           (long long)g->m->arena_bytes[MMRT_ARENA_OPT],
           (long long)g->m->arena_bytes[MMRT_ARENA_ACT],
           (long long)g->m->arena_bytes[MMRT_ARENA_INPUT], (long long)total);
  }
  if (!g->a.quiet)
    fprintf(stderr,
            "generator: %lld images, %lld tokens generated %s KV cache in %.3f s (%.0f tokens/s; "
            "%lld step calls, "
            "%.3f s in them)\n",
            (long long)g->n, (long long)g->tokens, g->a.no_cache ? "without the" : "with the", wall,
            wall > 0 ? (double)g->tokens / wall : 0.0, (long long)g->steps, g->seconds);
  return 0;
}

int mmrt_generate_main(int argc, char **argv, const MmrtModelDesc *m) {
  if (conv_eval(m)) return mmrt_conv_eval_main(argc, argv, m);
  Gen g;
  memset(&g, 0, sizeof g);
  g.m = m;
  int rc = parse_args(argc, argv, m, &g.a);
  if (rc) return rc < 0 ? 0 : rc;
  char err[ERRLEN];
  const char *in[] = {g.a.weights, g.a.adapters, g.a.data};
  if ((g.a.out &&
       mmrt_probe_output("--out", g.a.out, MMRT_OUT_FILE, in, 3, err, sizeof err) != MMRT_OK) ||
      (g.a.ids_out &&
       mmrt_probe_output("--ids", g.a.ids_out, MMRT_OUT_FILE, in, 3, err, sizeof err) != MMRT_OK))
    return fail("%s", err);
  mmrt_mem_start_threads();
  rc = bind(&g) || alloc_arenas(&g) || load(&g, "--weights", g.a.weights, 0) ||
       (g.a.adapters && load(&g, "--load-adapters", g.a.adapters, 1)) || read_images(&g);
  if (!rc && !g.n) rc = fail("no images to caption");
  mmrt_stop_install();
  if (!rc) rc = run(&g);
  for (int r = 0; r < MMRT_NARENAS; r++) free(g.arenas[r]);
  for (int64_t k = 0; k < g.n; k++) free(g.source[k]);
  free(g.source), free(g.px), free(g.label);
  mmrt_images_free(&g.test);
  mmrt_kernels_shutdown();
  return rc;
}
