/* mmrt_conv_eval.c: the evaluator (mmc compile --task eval) of a model whose
 * data section says `format = conversation` (InternVL2TinyConv and the
 * models extending it): loads the weights by name, reads a conversation
 * file (docs/conversations.md) with the data section's settings or the
 * flags over them, and scores each sample's last assistant reply two ways:
 *
 *   reply exact match  the reply generated greedily from the text before
 *                      it (@prefill once, then @decode a token at a time
 *                      with the KV cache; --no-cache: @prefill on the grown
 *                      text) equals the file's, token for token, up to and
 *                      with its end token -- the trainer's final
 *                      evaluation's rule (runtime/feeders/mmrt_feed_conv.c);
 *   token accuracy     teacher-forced: over every label token of the sample
 *                      (each assistant reply and its end token), the share
 *                      whose id is the argmax of @prefill's logits at the
 *                      position before it (one @prefill on the whole text).
 *
 * The generator (mmc compile --task generate of such a model) runs the same
 * generation with no length cap and prints, per sample, its id, a tab and
 * the reply it generated in place of the file's last one (decoded by the
 * tokenizer, special tokens left out): a user's own questions are a
 * conversation file whose last reply is a placeholder.
 *
 * The tiles of each sample's images are laid out as the trainer's feeder
 * lays them (its first K slots, InternVL's tiling at the model's tile size,
 * ImageNet's mean and std, zero past them). Runs on one rank. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "mmrt_conv.h"
#include "mmrt_flags.h"
#include "mmrt_image.h"
#include "mmrt_loader.h"
#include "mmrt_main.h"
#include "mmrt_mem.h"
#include "mmrt_tok.h"

#define ERRLEN 2048

typedef struct CeArgs {
  const char *weights, *data;
  MmrtTextOpts text; /* the flags the trainer takes too (mmrt_loader.h) */
  int64_t limit;
  int no_cache, quiet;
} CeArgs;

typedef struct Ce {
  const MmrtModelDesc *m;
  CeArgs a;
  char *arenas[MMRT_NARENAS];
  const MmrtTensorDesc *pixels, *text, *pos, *token;
  int64_t B, T, V, K, S;
  int32_t pad;
  MmrtConvSample *s; /* the samples kept */
  int64_t n, skipped;
  MmrtTok *tok;
  int gen; /* the generate task: print the replies, score nothing */
} Ce;

static const char *who = "evaluator"; /* "generator" for the generate task */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

#define AT(f) offsetof(CeArgs, f)
static const MmrtFlag ce_flags[] = {
    MMRT_FLAG_S("--weights", "PATH", AT(weights),
                "the parameters by name: a safetensors file (the trainer's --save-weights)\n"
                "or a checkpoint folder"),
    MMRT_FLAG_S("--data", "FILE", AT(data),
                "the conversations to score or answer (.json or .jsonl; default: the data\n"
                "section's eval_data, else its source)"),
    MMRT_TEXT_FLAG_EVAL_DATA(AT(text), "the same as --data (the data section's key)"),
    MMRT_TEXT_FLAG_IMAGES(AT(text), "the folder the samples' image names are relative to"),
    MMRT_TEXT_FLAG_TOKENIZER(AT(text), "tokenizer.json (its added image tokens)"),
    MMRT_TEXT_FLAG_CHAT(AT(text), "the chat format (internvl2 default, chatml, ...)"),
    MMRT_TEXT_FLAG_MAX_TILES(AT(text),
                             "1 to N tiles an image, plus a thumbnail (default: the model's "
                             "tiles - 1)"),
    MMRT_TEXT_FLAG_TOO_LONG(AT(text),
                            "a sample longer than T: truncate or drop (default: a bad sample)"),
    MMRT_TEXT_FLAG_BAD_SAMPLES(AT(text), "a bad sample: fail (default) or skip (counted)"),
    MMRT_FLAG_I("--limit", "N", AT(limit), 1, INT64_MAX, "%F takes a positive integer, not '%V'",
                "the first N samples only"),
    MMRT_FLAG_B("--no-cache", AT(no_cache),
                "recompute the whole text for every token (no KV cache)"),
    MMRT_FLAG_B("--quiet", AT(quiet), "no summary on stderr"),
    MMRT_FLAG_END,
};
#undef AT

static const MmrtFlagSet ce_set = {
    .who = "evaluator", .flags = ce_flags, .needs_value = "option %F needs a value", .col = 22};

/* 0 ok, 1 error (printed), -1 --help. The data section's keys (the
 * descriptor's data_flags) are parsed first, the command line over them. */
static int parse_args(int argc, char **argv, const MmrtModelDesc *m, CeArgs *a) {
  memset(a, 0, sizeof *a);
  who = m->task == MMRT_TASK_GENERATE ? "generator" : "evaluator";
  MmrtFlagSet set = ce_set;
  set.who = who;
  a->limit = -1;
  if (mmrt_desc_data_flags(m, &set, a)) return 1;
  char head[512];
  snprintf(head, sizeof head,
           "usage: %s --weights FILE|DIR [options]\n%s of model %s on "
           "conversations, with a KV cache (greedy decoding).\n",
           m->task == MMRT_TASK_GENERATE ? "generator" : "evaluator",
           m->task == MMRT_TASK_GENERATE ? "The last replies"
                                         : "Reply exact match and token accuracy",
           m->name);
  int rc = mmrt_flags_parse(&set, argc, argv, a, head);
  if (rc) return rc;
  if (!a->weights)
    return fail("--weights FILE|DIR is required (the trainer's --save-weights or --ckpt)");
  if (!a->data)
    a->data = a->text.eval_data ? a->text.eval_data : m->data_source[0] ? m->data_source : NULL;
  if (!a->data) return fail("--data FILE.jsonl is required: the conversations to score");
  if (!a->text.tokenizer) return fail("--tokenizer tokenizer.json is required (conversations)");
  return 0;
}

int mmrt_conv_eval_parse(int argc, char **argv, const MmrtModelDesc *m) {
  CeArgs a;
  return parse_args(argc, argv, m, &a);
}

static void *at(Ce *g, const MmrtTensorDesc *d) {
  return g->arenas[d->arena] + d->offset;
}

static int bind(Ce *g) {
  const MmrtModelDesc *m = g->m;
  if (!m->prefill_step || !m->decode_step || m->prefill_logits_offset < 0 ||
      m->decode_logits_offset < 0)
    return fail("model %s was not compiled for evaluation (mmc compile --task eval)", m->name);
  if (mmrt_desc_ranks(m, MESH_NIR) != 1)
    return fail("model %s is compiled for %lld ranks; the evaluator runs on one", m->name,
                (long long)mmrt_desc_ranks(m, MESH_NIR));
  g->pixels = mmrt_desc_input(m, "pixels"), g->text = mmrt_desc_input(m, "text");
  g->pos = mmrt_desc_input(m, "pos"), g->token = mmrt_desc_input(m, "token");
  if (!g->pixels || !g->text || !g->pos || !g->token || g->pixels->ndim != 5 ||
      g->pixels->shape[2] != 3 || g->pixels->shape[3] != g->pixels->shape[4] ||
      g->text->ndim != 2 || g->text->dtype != MMRT_ST_I32 || g->token->ndim != 2)
    return fail("model %s: the conversation evaluator needs inputs pixels f32[B, K, 3, S, S], "
                "text i32[B, T], token i32[B, 1] and pos i32[B]",
                m->name);
  g->B = g->text->shape[0], g->T = g->text->shape[1], g->V = m->vocab;
  g->K = g->pixels->shape[1], g->S = g->pixels->shape[3];
  if (m->cache_len != g->T)
    return fail("model %s: the KV cache holds %lld positions, the text %lld", m->name,
                (long long)m->cache_len, (long long)g->T);
  if (m->image_token < 0 || m->image_tokens <= 0 || m->image_tokens % g->K)
    return fail("model %s places %lld image rows, not a multiple of its %lld tiles a sample",
                m->name, (long long)m->image_tokens, (long long)g->K);
  return 0;
}

/* Every sample of --data, as the trainer's feeder reads them. */
static int read_samples(Ce *g) {
  char e[ERRLEN];
  MmrtTok *tok = g->tok = mmrt_tok_load(g->a.text.tokenizer, e, sizeof e);
  if (!tok) return fail("--tokenizer %s", e);
  g->pad = mmrt_tok_pad_id(tok) >= 0 ? mmrt_tok_pad_id(tok) : 0;
  if (g->pad == g->m->image_token) g->pad = g->pad ? 0 : 1;
  MmrtConvOpts o = {.family = g->a.text.chat ? g->a.text.chat : "internvl2",
                    .image_dir = g->a.text.images,
                    .tile = (int)g->S,
                    .max_tiles = g->a.text.max_tiles ? (int)g->a.text.max_tiles
                                                     : (int)(g->K > 1 ? g->K - 1 : 1),
                    .tokens_per_tile = (int)(g->m->image_tokens / g->K),
                    .seq_len = (size_t)g->T,
                    .too_long = !g->a.text.too_long                   ? MMRT_CONV_FAIL
                                : !strcmp(g->a.text.too_long, "drop") ? MMRT_CONV_DROP
                                                                      : MMRT_CONV_TRUNCATE};
  int skip = g->a.text.bad_samples && !strcmp(g->a.text.bad_samples, "skip"), rc = 0;
  MmrtConv *cv = mmrt_conv_open(g->a.data, tok, &o, e, sizeof e);
  if (!cv) return fail("--data %s", e);
  if (mmrt_conv_context_id(cv) != g->m->image_token)
    rc = fail("%s: the tokenizer's image context token is id %d, but model %s places its image "
              "features at token %lld",
              g->a.data, mmrt_conv_context_id(cv), g->m->name, (long long)g->m->image_token);
  int64_t cap = 0;
  while (!rc && (g->a.limit < 0 || g->n < g->a.limit)) {
    MmrtConvSample s;
    MmrtConvStatus st = mmrt_conv_next(cv, &s, e, sizeof e);
    if (st == MMRT_CONV_EOF) break;
    if (st == MMRT_CONV_ERROR || (st == MMRT_CONV_BAD && !skip)) {
      rc = fail("--data %s", e);
      break;
    }
    if (st != MMRT_CONV_OK) {
      fprintf(stderr, "%s: %s (skipped)\n", who, e);
      g->skipped++;
      continue;
    }
    int tiles = 0;
    for (int k = 0; k < s.nimages; k++) tiles += s.tiles[k];
    for (size_t j = 0; j < s.ids.n && tiles <= g->K; j++)
      if (s.ids.v[j] < 0 || s.ids.v[j] >= g->V) tiles = (int)g->K + 1;
    if (tiles > g->K) { /* more tiles than the model's slots, or an id past its vocabulary */
      snprintf(e, sizeof e,
               "%s: sample %zu (id \"%s\"): %d tiles or ids past the model's %lld "
               "tiles and %lld ids",
               g->a.data, s.index, s.id, tiles, (long long)g->K, (long long)g->V);
      mmrt_conv_sample_free(&s);
      if (!skip) {
        rc = fail("%s", e);
        break;
      }
      fprintf(stderr, "%s: %s (skipped)\n", who, e);
      g->skipped++;
      continue;
    }
    if (g->n == cap) {
      cap = cap ? 2 * cap : 64;
      MmrtConvSample *p = realloc(g->s, (size_t)cap * sizeof *p);
      if (!p) {
        mmrt_conv_sample_free(&s);
        rc = fail("out of memory");
        break;
      }
      g->s = p;
    }
    g->s[g->n++] = s;
  }
  mmrt_conv_close(cv);
  return rc;
}

/* The start of the last run of label tokens (the last reply), 0: none. */
static int64_t last_reply(const MmrtConvSample *s) {
  int64_t j = (int64_t)s->ids.n;
  while (j > 0 && !s->mask.v[j - 1]) j--;
  while (j > 0 && s->mask.v[j - 1]) j--;
  return j;
}

/* The row r of the inputs: sample s's first n ids (padded) and its tiles. */
static void lay(Ce *g, int64_t r, const MmrtConvSample *s, int64_t n) {
  int32_t *text = (int32_t *)at(g, g->text) + r * g->T;
  size_t tile = 3 * (size_t)g->S * (size_t)g->S;
  float *px = (float *)at(g, g->pixels) + (size_t)r * (size_t)g->K * tile;
  for (int64_t j = 0; j < g->T; j++) text[j] = s && j < n ? s->ids.v[j] : g->pad;
  memset(px, 0, (size_t)g->K * tile * sizeof *px);
  int64_t used = 0;
  int max_tiles = g->a.text.max_tiles ? (int)g->a.text.max_tiles : (int)(g->K > 1 ? g->K - 1 : 1);
  if (s) mmrt_image_tiles_into(s->paths, s->nimages, (int)g->S, max_tiles, px, &used, g->K, who);
}

static int32_t argmax(const float *row, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; v++)
    if (row[v] > row[best]) best = v;
  return (int32_t)best;
}

static int step(Ce *g, MmrtStepFn fn, const char *what) {
  int rc = fn(g->arenas, 0, NULL);
  return rc ? fail("%s failed (status %d; the kernel's message is above)", what, rc) : 0;
}

static int run(Ce *g) {
  const int64_t B = g->B, T = g->T, V = g->V;
  const float *pl = (const float *)(g->arenas[MMRT_ARENA_ACT] + g->m->prefill_logits_offset);
  const float *dl = (const float *)(g->arenas[MMRT_ARENA_ACT] + g->m->decode_logits_offset);
  int32_t *text = at(g, g->text), *pos = at(g, g->pos), *tok = at(g, g->token);
  int64_t *len = calloc((size_t)B, sizeof *len), *ng = calloc((size_t)B, sizeof *ng);
  int32_t *gen = calloc((size_t)(B * T), sizeof *gen);
  int64_t matches = 0, counted = 0, hits = 0, labels = 0;
  int rc = len && ng && gen ? 0 : fail("out of memory");
  for (int64_t k0 = 0; k0 < g->n && !rc; k0 += B) {
    int64_t rows = g->n - k0 < B ? g->n - k0 : B;
    /* teacher-forced: the whole text, the argmax before each label token */
    for (int64_t r = 0; r < B && !g->gen; r++) {
      lay(g, r, r < rows ? &g->s[k0 + r] : NULL, r < rows ? (int64_t)g->s[k0 + r].ids.n : 0);
      pos[r] = 0;
    }
    if (!g->gen && (rc = step(g, g->m->prefill_step, "the prefill step"))) break;
    for (int64_t r = 0; r < rows && !g->gen; r++) {
      const MmrtConvSample *s = &g->s[k0 + r];
      for (int64_t j = 0; j + 1 < (int64_t)s->ids.n && j + 1 < T; j++)
        if (s->mask.v[j + 1]) labels++, hits += argmax(pl + (r * T + j) * V, V) == s->ids.v[j + 1];
    }
    /* generation: the text before the last reply, then greedy tokens */
    int active = 0;
    for (int64_t r = 0; r < B; r++) {
      const MmrtConvSample *s = r < rows ? &g->s[k0 + r] : NULL;
      len[r] = s ? last_reply(s) : 0;
      ng[r] = 0;
      lay(g, r, len[r] > 0 ? s : NULL, len[r]);
      pos[r] = 0;
    }
    if ((rc = step(g, g->m->prefill_step, "the prefill step"))) break;
    for (int64_t r = 0; r < B; r++)
      if (len[r] > 0) tok[r] = argmax(pl + (r * T + len[r] - 1) * V, V), active = 1;
    while (active && !rc) {
      active = 0;
      for (int64_t r = 0; r < B; r++) {
        if (len[r] <= 0 || len[r] > T) continue;
        const MmrtConvSample *s = &g->s[k0 + r];
        int32_t end = s->ids.v[s->ids.n - 1];
        gen[r * T + ng[r]++] = tok[r];
        /* past the reply's length it can match no more: stop there */
        if (tok[r] != end && len[r] < T && (g->gen || ng[r] < (int64_t)s->ids.n - last_reply(s))) {
          text[r * T + len[r]] = tok[r];
          pos[r] = (int32_t)len[r]++;
          active = 1;
        } else
          len[r] = T + 1;
      }
      if (!active) break;
      for (int64_t r = 0; r < B; r++)
        if (len[r] <= 0 || len[r] > T) tok[r] = g->pad, pos[r] = (int32_t)T - 1;
      if (g->a.no_cache) {
        for (int64_t r = 0; r < B; r++) pos[r] = 0;
        rc = step(g, g->m->prefill_step, "the prefill step");
        for (int64_t r = 0; r < B && !rc; r++)
          if (len[r] > 0 && len[r] <= T) tok[r] = argmax(pl + (r * T + len[r] - 1) * V, V);
      } else {
        rc = step(g, g->m->decode_step, "the decode step");
        for (int64_t r = 0; r < B && !rc; r++)
          if (len[r] > 0 && len[r] <= T) tok[r] = argmax(dl + r * V, V);
      }
    }
    for (int64_t r = 0; r < rows && !rc; r++) {
      const MmrtConvSample *s = &g->s[k0 + r];
      int64_t a = last_reply(s), n = (int64_t)s->ids.n - a;
      if (a == 0) continue;
      if (g->gen) { /* the reply's text, without its end token */
        MmrtTokText txt = {0};
        char e[ERRLEN];
        int64_t k =
            ng[r] > 0 && gen[r * T + ng[r] - 1] == s->ids.v[s->ids.n - 1] ? ng[r] - 1 : ng[r];
        if (!mmrt_tok_decode(g->tok, gen + r * T, (size_t)k, true, &txt, e, sizeof e))
          rc = fail("sample %s: decoding its reply: %s", s->id, e);
        else
          printf("%s\t%.*s\n", s->id, (int)txt.n, txt.p ? txt.p : "");
        free(txt.p);
        continue;
      }
      counted++;
      matches += ng[r] == n && !memcmp(gen + r * T, s->ids.v + a, (size_t)n * sizeof *gen);
    }
  }
  free(len), free(ng), free(gen);
  if (rc || g->gen) return rc;
  printf("eval: reply exact match %.4f (%lld of %lld conversations), token accuracy %.4f (%lld "
         "of %lld label tokens, teacher-forced)\n",
         counted ? (double)matches / (double)counted : 0.0, (long long)matches, (long long)counted,
         labels ? (double)hits / (double)labels : 0.0, (long long)hits, (long long)labels);
  if (!g->a.quiet)
    fprintf(stderr, "%s: %lld conversations from %s, %lld skipped, %s KV cache\n", who,
            (long long)g->n, g->a.data, (long long)g->skipped,
            g->a.no_cache ? "without the" : "with the");
  return 0;
}

int mmrt_conv_eval_main(int argc, char **argv, const MmrtModelDesc *m) {
  Ce g;
  memset(&g, 0, sizeof g);
  g.m = m;
  g.gen = m->task == MMRT_TASK_GENERATE;
  int rc = parse_args(argc, argv, m, &g.a);
  if (rc) return rc < 0 ? 0 : rc;
  char err[ERRLEN];
  int n = 0;
  mmrt_mem_start_threads();
  rc = bind(&g) || read_samples(&g);
  if (!rc && !g.n) rc = fail("--data %s: no conversation to score", g.a.data);
  if (!rc && mmrt_alloc_arenas(m, g.arenas, err, sizeof err) != MMRT_OK) rc = fail("%s", err);
  if (!rc && mmrt_load_params(m, g.arenas, g.a.weights, 0, &n, err, sizeof err) != MMRT_OK)
    rc = fail("--weights %s: %s", g.a.weights, err);
  if (!rc) rc = run(&g);
  for (int r = 0; r < MMRT_NARENAS; r++) free(g.arenas[r]);
  for (int64_t k = 0; k < g.n; k++) mmrt_conv_sample_free(&g.s[k]);
  free(g.s);
  if (g.tok) mmrt_tok_free(g.tok);
  mmrt_kernels_shutdown();
  return rc;
}
