/* mmrt_sample.c: the text-to-video sampler (mmc compile --task sample; the
 * model's forwards denoise, table and decode, README "Sampling").
 *
 *   sampler --weights PATH [--weights PATH ...] --prompt TEXT [--prompt ...]
 *           [--prompts FILE] [--clips K] [--guidance S] [--steps N]
 *           [--scheduler ddim|ddpm|euler] [--seed N] [--out DIR] [--show K]
 *           [--raw FILE] [--dump FILE] [--quiet]
 *
 * Loads the parameters by name, each from the first --weights source that
 * holds it (the DiT trainer's weights, a WF-VAE's for the decoder), reads
 * the schedule once from @table (DDPM's ddpm_table: row t sqrt(abar_t),
 * sqrt(1 - abar_t)) and samples K clips per prompt (clip j of the run is
 * copy j % K of prompt j / K):
 *   - the prompt as caption ids (mmrt_dit_vocab, then EOS, then PAD; a word
 *     outside the vocabulary is an error naming it), the null caption [EOS,
 *     PAD...] for the unconditional prediction;
 *   - x = noise, element k of clip j element j P + k of Philox stream
 *     "sample/noise" under --seed (P the latent values of a clip), so a
 *     clip depends on (seed, j) only, never on the batch;
 *   - N steps at the trailing timesteps t_i = rint(T - i T / N) - 1, i = 0 ..
 *     N - 1 (T the table's rows; t_0 = T - 1, the zero-SNR step), each
 *     t_{i+1} (or -1, abar = 1, after the last): v = v_u + S (v_c - v_u)
 *     (classifier-free guidance; v_c, v_u @denoise's predictions with the
 *     prompt and the null caption), x0 = a_t x - s_t v, and
 *       ddim (eta 0): x' = a_p x0 + s_p (s_t x + a_t v);
 *       ddpm (ancestral, variance "fixed small", no clipping):
 *         x' = a_p b / (1 - abar_t) x0 + sqrt(r) (1 - abar_p) / (1 - abar_t) x
 *              + sqrt((1 - abar_p) / (1 - abar_t) b) z,  r = abar_t / abar_p,
 *         b = 1 - r, z element (i C + j) P + k of stream "sample/z" (none
 *         after the last step);
 *     with a = sqrt(abar), s = sqrt(1 - abar) the table's rows of t (_t)
 *     and of the next step (_p), in double;
 *   - a flow-matching model (table() [2, 2]: the rows (1, 0) and (0, 1), the
 *     coefficients of x0 and noise at t = 0 and 1 of x_t = (1 - t) x0 +
 *     t noise; stdlib_models/diffusion.mm FlowMatching) takes euler (its
 *     default; ddim and ddpm are refused, as euler is for a DDPM model):
 *     N uniform steps from t_0 = 1 to t_N = 0, t_i = 1 - i / N, @denoise
 *     given t_i itself (its forward scales it as training does), and
 *       euler: x' = x + (t_{i+1} - t_i) v,  v = v_u + S (v_c - v_u)
 *     (diffusers' FlowMatchEulerDiscreteScheduler step); the dump's header
 *     holds t_i, t_{i+1} and the rows (1 - t, t) of both;
 *   - the latents through @decode; OUT/sample_<j>.gif (every frame) and
 *     OUT/sample_<j>.png (the frames side by side) for the first --show K
 *     clips (default 4), OUT/samples.tsv (clip, copy, prompt) for all.
 * --raw FILE writes every decoded clip as bytes (round(255 v), clamped)
 * [clips, F, H, W], clip after clip. --dump FILE writes the sampler's
 * arithmetic for checking it elsewhere (tests/torch/sample_ref.py), raw f32
 * little-endian, per group of clips (the clips @denoise takes at once: B / 2,
 * rows 2c and 2c + 1 the prompt and the null caption) and step: 8 values t,
 * t_p, a_t, s_t, a_p, s_p, S, 0, then x, v_c, v_u and z [n, P] (n the
 * group's clips), and after a group's steps its final latents [n, P].
 * With a forward classify (frames [N, 1, H, W] in [0, 1] -> logits, a frame
 * classifier: stdlib_models/frame_classifier.mm), every frame of every
 * decoded clip is classified (argmax over the first 10 logits) and the
 * sampler prints the fraction named as the prompt's class (each prompt must
 * then be a clip caption, "a <class> moving <direction>") and, per prompted
 * class, how many frames were named as each class (the confusion rows).
 * Prints "sample: K clips ... in X s (Y clips/s)". Runs on one rank. A
 * progress line with an ETA on stderr (denoising steps of all the groups);
 * SIGINT/SIGTERM stop it between steps: exit 130 / 143, the clips written
 * so far listed in samples.tsv, the partial --dump and --raw files removed. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "mmrt_caption.h"
#include "mmrt_flags.h"
#include "mmrt_gif.h"
#include "mmrt_main.h"
#include "mmrt_png.h"
#include "mmrt_video.h"
#include "mmrt_mem.h"

#define ERRLEN      1024
#define MAX_PROMPTS 1024

typedef struct Smp {
  const MmrtModelDesc *m;
  const char *weights[MMRT_MAX_WEIGHTS];
  int nweights;
  char *prompts[MAX_PROMPTS];
  int nprompts;
  const char *prompt_args[MAX_PROMPTS]; /* --prompt's, before they are copied to prompts */
  int nprompt_args;
  const char *prompts_file, *out, *raw, *dump;
  int64_t clips, steps, seed, show;
  double guidance;
  int ddpm, euler, flow, quiet;
  const char *scheduler; /* as given, or NULL: the model's default */
  char *arenas[MMRT_NARENAS];
  const MmrtTensorDesc *t; /* m->sample_tensors */
  int64_t B, P, L, F, H, W, T, cols;
  MmrtTokenizer tok;
  int32_t *ids; /* [nprompts, L] */
  /* @classify: N frames a call, K classes; the prompts' classes; per class
   * the frames sampled for it and those the classifier named so, and the
   * frames named as each class (named[prompted][named]) */
  int64_t N, K;
  int label[MAX_PROMPTS];
  int64_t frames[MMRT_FMNIST_CLASSES], hits[MMRT_FMNIST_CLASSES];
  int64_t named[MMRT_FMNIST_CLASSES][MMRT_FMNIST_CLASSES];
  MmrtProgress pr; /* denoising steps over all groups */
  int64_t written; /* clips written (and listed in samples.tsv) */
} Smp;

#define fail(...) mmrt_fail("sampler", __VA_ARGS__)

#define AT(f)    offsetof(Smp, f)
#define COUNT    100000000
#define IN_RANGE "%F takes an integer in [%L, %H], not '%V'"
static const MmrtFlag smp_flags[] = {
    MMRT_FLAG_L("--weights", "PATH", AT(weights), AT(nweights), MMRT_MAX_WEIGHTS, 0,
                "%F: at most %H sources", NULL,
                "parameters by name (safetensors or a checkpoint folder); again for\n"
                "more sources (each parameter from the first that holds it)"),
    MMRT_FLAG_L("--prompt", "TEXT", AT(prompt_args), AT(nprompt_args), MAX_PROMPTS, 0,
                "%F: at most %H prompts", NULL,
                "a caption such as \"a sneaker moving left\" (again for more)"),
    MMRT_FLAG_S("--prompts", "FILE", AT(prompts_file), "prompts, one a line"),
    MMRT_FLAG_I("--clips", "K", AT(clips), 1, COUNT, IN_RANGE, "clips per prompt (default %D)"),
    MMRT_FLAG_F("--guidance", "S", AT(guidance), -INFINITY, 0,
                "%F takes a number (the classifier-free guidance scale), not '%V'",
                "classifier-free guidance scale (default %D; 1: the prompt alone)"),
    MMRT_FLAG_I("--steps", "N", AT(steps), 1, COUNT, IN_RANGE, "sampling steps (default %D)"),
    MMRT_FLAG_E("--scheduler", "K", AT(scheduler), "ddim|ddpm|euler",
                "%F takes ddim, ddpm or euler, not '%V'",
                "ddim (default) or ddpm (ancestral) for a DDPM model; euler (the\n"
                "default and only one) for a flow-matching model"),
    MMRT_FLAG_I("--seed", "N", AT(seed), 0, INT64_MAX, IN_RANGE,
                "the noise (default %D): the same seed gives the same clips"),
    MMRT_FLAG_S("--out", "DIR", AT(out), "GIFs, PNG strips and samples.tsv (default %D)"),
    MMRT_FLAG_I("--show", "K", AT(show), 0, COUNT, IN_RANGE,
                "write GIF and PNG of the first K clips (default %D)"),
    MMRT_FLAG_S("--raw", "FILE", AT(raw), "every decoded clip as bytes [clips, F, H, W]"),
    MMRT_FLAG_S("--dump", "FILE", AT(dump), "the sampler's arithmetic as raw f32 (mmrt_sample.c)"),
    MMRT_FLAG_B("--quiet", AT(quiet), "no progress on stderr"),
    MMRT_FLAG_END,
};
#undef IN_RANGE
#undef COUNT
#undef AT

static int read_prompts(Smp *s) {
  FILE *f;
  char oerr[ERRLEN];
  if (mmrt_fopen_read(s->prompts_file, &f, oerr, sizeof oerr) != MMRT_OK)
    return fail("--prompts %s", oerr);
  char line[512];
  int rc = 0, n = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    n++;
    size_t k = strlen(line);
    while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ')) line[--k] = 0;
    if (!k) continue;
    if (s->nprompts >= MAX_PROMPTS)
      rc = fail("--prompts %s: more than %d prompts", s->prompts_file, MAX_PROMPTS);
    else if (!(s->prompts[s->nprompts++] = strdup(line)))
      rc = fail("out of memory");
  }
  if (!rc && ferror(f))
    rc = fail("--prompts %s: cannot read: %s", s->prompts_file, strerror(errno));
  fclose(f);
  if (!rc && !n) rc = fail("--prompts %s: no prompt in it", s->prompts_file);
  return rc;
}

/* 0 ok, 1 error (printed), -1 --help. */
static int parse_args(Smp *s, int argc, char **argv) {
  s->clips = 1, s->steps = 50, s->show = 4, s->guidance = 4, s->out = "samples";
  static const MmrtFlagSet set = {
      .who = "sampler", .flags = smp_flags, .needs_value = "option %F needs a value", .col = 19};
  char head[512];
  snprintf(head, sizeof head,
           "usage: sampler --weights FILE|DIR --prompt TEXT [options]\n"
           "Samples clips of model %s from text prompts: classifier-free guidance, DDIM or DDPM\n"
           "over the trained v-prediction schedule (Euler for a flow-matching model), the latents\n"
           "decoded, animated GIFs and PNG strips.\n",
           s->m->name);
  int rc = mmrt_flags_parse(&set, argc, argv, s, head);
  if (rc) return rc;
  for (int p = 0; p < s->nprompt_args; p++)
    if (!(s->prompts[s->nprompts++] = strdup(s->prompt_args[p]))) return fail("out of memory");
  if (s->scheduler)
    s->ddpm = !strcmp(s->scheduler, "ddpm"), s->euler = !strcmp(s->scheduler, "euler");
  if (!s->nweights)
    return fail("--weights FILE|DIR is required (the trainer writes them with --save-weights or "
                "--ckpt)");
  if (s->prompts_file && read_prompts(s)) return 1;
  if (!s->nprompts) return fail("--prompt TEXT (or --prompts FILE) is required");
  return 0;
}

int mmrt_sample_parse(int argc, char **argv, const MmrtModelDesc *m) {
  Smp *s = calloc(1, sizeof *s); /* large: the prompts */
  if (!s) return fail("out of memory");
  s->m = m;
  int rc = parse_args(s, argc, argv);
  for (int p = 0; p < s->nprompts; p++) free(s->prompts[p]);
  free(s);
  return rc;
}

static float *at(const Smp *s, int k) {
  return (float *)(s->arenas[s->t[k].arena] + s->t[k].offset);
}

static int64_t numel(const MmrtTensorDesc *d) {
  int64_t n = 1;
  for (int64_t i = 0; i < d->ndim; i++) n *= d->shape[i];
  return n;
}

static int same(const MmrtTensorDesc *a, const MmrtTensorDesc *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int64_t i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

static int bind(Smp *s) {
  const MmrtModelDesc *m = s->m;
  if (!m->sample_denoise_step || !m->sample_table_step || !m->vae_decode_step || !m->sample_tensors)
    return fail("model %s was not compiled for sampling (mmc compile --task sample)", m->name);
  const MmrtTensorDesc *t = s->t = m->sample_tensors, *x = &t[MMRT_SAMPLE_X];
  const MmrtTensorDesc *tt = &t[MMRT_SAMPLE_T], *tx = &t[MMRT_SAMPLE_TEXT],
                       *tab = &t[MMRT_SAMPLE_TABLE], *c = &t[MMRT_SAMPLE_CLIPS];
  s->B = x->shape[0];
  if (x->dtype != MMRT_ST_F32 || x->ndim < 2 || !same(x, &t[MMRT_SAMPLE_PRED]) ||
      !same(x, &t[MMRT_SAMPLE_DEC_IN]))
    return fail("model %s: denoise(x, t, text) must take f32 latents x and return their shape, and "
                "decode take that shape",
                m->name);
  if (tt->dtype != MMRT_ST_F32 || tt->ndim != 1 || tt->shape[0] != s->B)
    return fail("model %s: denoise's second input (the step) must be f32[%lld]", m->name,
                (long long)s->B);
  if (tx->dtype != MMRT_ST_I32 || tx->ndim != 2 || tx->shape[0] != s->B || tx->shape[1] < 2)
    return fail("model %s: denoise's third input (the caption ids) must be i32[%lld, L >= 2]",
                m->name, (long long)s->B);
  if (tab->dtype != MMRT_ST_F32 || tab->ndim != 2 || tab->shape[1] < 2 ||
      (tab->shape[1] == 2 && tab->shape[0] != 2))
    return fail("model %s: table() must return f32[steps, >= 3] (DDPM: sqrt(abar), sqrt(1 - "
                "abar), ...) or f32[2, 2] (flow matching: the rows (1, 0), (0, 1))",
                m->name);
  s->flow = tab->shape[1] == 2;
  if (s->flow && s->scheduler && !s->euler)
    return fail("--scheduler %s: model %s is a flow-matching model (table() [2, 2]); it takes "
                "--scheduler euler",
                s->scheduler, m->name);
  if (!s->flow && s->euler)
    return fail("--scheduler euler: model %s is a DDPM v-prediction model (table() [%lld, %lld]); "
                "euler is for flow matching (ddim or ddpm here)",
                m->name, (long long)tab->shape[0], (long long)tab->shape[1]);
  s->euler = s->flow;
  if (c->dtype != MMRT_ST_F32 || c->ndim != 5 || c->shape[0] != s->B || c->shape[1] != 1)
    return fail("model %s: decode must return clips f32[%lld, 1, F, H, W]", m->name,
                (long long)s->B);
  s->P = numel(x) / s->B, s->L = tx->shape[1], s->T = tab->shape[0], s->cols = tab->shape[1];
  s->F = c->shape[2], s->H = c->shape[3], s->W = c->shape[4];
  if (m->sample_classify_step) {
    const MmrtTensorDesc *fr = &t[MMRT_SAMPLE_FRAMES], *lg = &t[MMRT_SAMPLE_LOGITS];
    if (fr->dtype != MMRT_ST_F32 || fr->ndim != 4 || fr->shape[1] != 1 || fr->shape[2] != s->H ||
        fr->shape[3] != s->W || lg->dtype != MMRT_ST_F32 || lg->ndim != 2 ||
        lg->shape[0] != fr->shape[0] || lg->shape[1] < MMRT_FMNIST_CLASSES)
      return fail("model %s: classify must take frames f32[N, 1, %lld, %lld] and return logits "
                  "f32[N, >= %d]",
                  m->name, (long long)s->H, (long long)s->W, MMRT_FMNIST_CLASSES);
    s->N = fr->shape[0], s->K = lg->shape[1];
  }
  if (!s->flow && s->steps > s->T)
    return fail("--steps %lld: the schedule has %lld steps", (long long)s->steps, (long long)s->T);
  return 0;
}

/* The prompts as caption ids: the words, EOS, PAD. */
static int tokenize(Smp *s) {
  mmrt_dit_vocab(&s->tok);
  if (!(s->ids = malloc(sizeof *s->ids * (size_t)(s->nprompts * s->L))))
    return fail("out of memory");
  for (int p = 0; p < s->nprompts; p++) {
    int32_t *ids = s->ids + p * s->L;
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s->prompts[p]);
    for (char *w = strtok(buf, " \t"); w; w = strtok(NULL, " \t")) {
      int k = 2;
      while (k < s->tok.size && strcmp(s->tok.words[k], w)) k++;
      if (k == s->tok.size) {
        char known[MMRT_TOK_MAX * MMRT_TOK_WORD] = "";
        for (int i = 2; i < s->tok.size; i++)
          snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i > 2 ? " " : "",
                   s->tok.words[i]);
        return fail("--prompt \"%s\": the word \"%s\" is not in the caption vocabulary; expected "
                    "words of: %s",
                    s->prompts[p], w, known);
      }
      if (n >= s->L - 1)
        return fail("--prompt \"%s\": more than %lld words (the model's captions have %lld "
                    "positions with EOS)",
                    s->prompts[p], (long long)(s->L - 1), (long long)s->L);
      ids[n++] = k;
    }
    if (!n) return fail("--prompt \"%s\": no word", s->prompts[p]);
    s->label[p] = -1;
    for (int l = 0; l < MMRT_FMNIST_CLASSES && s->label[p] < 0; l++)
      for (int dir = 0; dir < MMRT_VIDEO_NDIRS; dir++) {
        char cap[96];
        MmrtClipInfo ci = {.label = l, .dir = dir};
        mmrt_video_caption(&ci, cap, sizeof cap);
        if (!strcmp(cap, s->prompts[p])) s->label[p] = l;
      }
    if (s->label[p] < 0 && s->m->sample_classify_step)
      return fail("--prompt \"%s\": not a clip caption (\"a sneaker moving left\"): the "
                  "classifier needs the prompted class",
                  s->prompts[p]);
    ids[n] = 1; /* EOS */
    for (int64_t i = n + 1; i < s->L; i++) ids[i] = 0;
  }
  return 0;
}

static int run_step(Smp *s, MmrtStepFn fn, const char *what) {
  return fn(s->arenas, (uint64_t)s->seed, NULL) == 0 ? 0 : fail("%s failed", what);
}

/* The predictions of the group's n clips x [n, P] at step t: cond into vc,
 * null caption into vu (rows 2c and 2c + 1 of the jobs, B rows a call). */
static int predict(Smp *s, const int64_t *prompt, int64_t n, const float *x, double t, float *vc,
                   float *vu) {
  float *X = at(s, MMRT_SAMPLE_X), *Tt = at(s, MMRT_SAMPLE_T), *pred = at(s, MMRT_SAMPLE_PRED);
  int32_t *text = (int32_t *)at(s, MMRT_SAMPLE_TEXT);
  const size_t P = (size_t)s->P, L = (size_t)s->L;
  for (int64_t j0 = 0; j0 < 2 * n; j0 += s->B) {
    for (int64_t r = 0; r < s->B; r++) {
      int64_t j = j0 + r, c = j / 2;
      Tt[r] = (float)t;
      if (j >= 2 * n) { /* padding */
        memset(X + r * P, 0, sizeof *X * P);
        for (size_t q = 0; q < L; q++) text[r * L + q] = q ? 0 : 1;
        continue;
      }
      memcpy(X + r * P, x + c * P, sizeof *X * P);
      if (j % 2 == 0)
        memcpy(text + r * L, s->ids + prompt[c] * s->L, sizeof *text * L);
      else
        for (size_t q = 0; q < L; q++) text[r * L + q] = q ? 0 : 1;
    }
    if (run_step(s, s->m->sample_denoise_step, "@denoise")) return 1;
    for (int64_t r = 0; r < s->B && j0 + r < 2 * n; r++) {
      int64_t j = j0 + r;
      memcpy((j % 2 ? vu : vc) + j / 2 * P, pred + r * P, sizeof *pred * P);
    }
  }
  return 0;
}

static int write_clip(const Smp *s, int64_t j, const float *clip, FILE *raw) {
  const int64_t F = s->F, H = s->H, W = s->W, per = F * H * W;
  uint8_t *px = malloc((size_t)per), *strip = malloc((size_t)per);
  if (!px || !strip) {
    free(px), free(strip);
    return fail("out of memory");
  }
  for (int64_t t = 0; t < F; t++)
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++)
        px[(t * H + y) * W + x] = strip[y * F * W + t * W + x] =
            mmrt_video_byte(clip[(t * H + y) * W + x]);
  int rc = 0;
  if (raw && fwrite(px, 1, (size_t)per, raw) != (size_t)per)
    rc = fail("--raw %s: cannot write: %s", s->raw, strerror(errno));
  char path[4200], err[ERRLEN];
  if (!rc && j < s->show) {
    snprintf(path, sizeof path, "%s/sample_%05lld.png", s->out, (long long)j);
    int e = mmrt_png_write_gray(path, (int)H, (int)(F * W), strip, err, sizeof err);
    snprintf(path, sizeof path, "%s/sample_%05lld.gif", s->out, (long long)j);
    if (e == MMRT_OK) e = mmrt_gif_write_gray(path, (int)F, (int)H, (int)W, px, err, sizeof err);
    if (e != MMRT_OK) rc = fail("%s", err);
  }
  free(px), free(strip);
  return rc;
}

static int dump_f32(const Smp *s, FILE *f, const float *v, size_t n) {
  return f && fwrite(v, sizeof *v, n, f) != n
             ? fail("--dump %s: cannot write: %s", s->dump, strerror(errno))
             : 0;
}

/* @classify on every frame of one decoded clip [F, H, W] of class `label`. */
static int classify(Smp *s, const float *clip, int label) {
  float *fr = at(s, MMRT_SAMPLE_FRAMES), *lg = at(s, MMRT_SAMPLE_LOGITS);
  const size_t hw = (size_t)(s->H * s->W);
  for (int64_t f0 = 0; f0 < s->F; f0 += s->N) {
    for (int64_t r = 0; r < s->N; r++)
      if (f0 + r < s->F)
        for (size_t k = 0; k < hw; k++) /* the clip as the classifier was trained on: in [0, 1] */
          fr[r * (int64_t)hw + (int64_t)k] =
              fminf(fmaxf(clip[(f0 + r) * (int64_t)hw + (int64_t)k], 0), 1);
      else
        memset(fr + r * (int64_t)hw, 0, sizeof *fr * hw);
    if (run_step(s, s->m->sample_classify_step, "@classify")) return 1;
    for (int64_t r = 0; r < s->N && f0 + r < s->F; r++) {
      int64_t best = 0;
      for (int64_t k = 1; k < MMRT_FMNIST_CLASSES; k++)
        if (lg[r * s->K + k] > lg[r * s->K + best]) best = k;
      s->frames[label]++, s->hits[label] += best == label, s->named[label][best]++;
    }
  }
  return 0;
}

/* One group of n clips (first clip j0): the steps, then decode. */
static int group(Smp *s, const float *tab, const int64_t *ts, int64_t j0, int64_t n, float *buf,
                 FILE *dump, FILE *raw, FILE *tsv) {
  const size_t P = (size_t)s->P, nP = (size_t)n * P;
  float *x = buf, *vc = x + nP, *vu = vc + nP, *z = vu + nP;
  int64_t prompt[MAX_PROMPTS];
  const int64_t total = s->clips * s->nprompts;
  for (int64_t c = 0; c < n; c++) {
    prompt[c] = (j0 + c) / s->clips;
    mmrt_rng_normal(x + c * P, (uint64_t)s->seed, mmrt_rng_stream("sample/noise", 0),
                    (uint64_t)(j0 + c) * P, (uint64_t)(j0 + c + 1) * P, 0, 1);
  }
  for (int64_t i = 0; i < s->steps; i++) {
    if (mmrt_stop_signal) return 0; /* the group unfinished: nothing of it is written */
    const int64_t t = ts[i], tp = i + 1 < s->steps ? ts[i + 1] : -1;
    /* flow: the time itself, 1 - i / N, and the rows (1 - t, t) */
    const double ft = 1.0 - (double)i / (double)s->steps,
                 fp = 1.0 - (double)(i + 1) / (double)s->steps;
    if (predict(s, prompt, n, x, s->euler ? ft : (double)t, vc, vu)) return 1;
    const double at_ = s->euler ? 1 - ft : tab[t * s->cols],
                 st = s->euler ? ft : tab[t * s->cols + 1];
    const double ap = s->euler  ? 1 - fp
                      : tp >= 0 ? tab[tp * s->cols]
                                : 1,
                 sp = s->euler  ? fp
                      : tp >= 0 ? tab[tp * s->cols + 1]
                                : 0;
    memset(z, 0, sizeof *z * nP);
    if (s->ddpm && tp >= 0)
      for (int64_t c = 0; c < n; c++)
        mmrt_rng_normal(z + c * P, (uint64_t)s->seed, mmrt_rng_stream("sample/z", 0),
                        (uint64_t)(i * total + j0 + c) * P, (uint64_t)(i * total + j0 + c + 1) * P,
                        0, 1);
    const float head[8] = {s->euler ? (float)ft : (float)t,
                           s->euler ? (float)fp : (float)tp,
                           (float)at_,
                           (float)st,
                           (float)ap,
                           (float)sp,
                           (float)s->guidance,
                           0};
    if (dump_f32(s, dump, head, 8) || dump_f32(s, dump, x, nP) || dump_f32(s, dump, vc, nP) ||
        dump_f32(s, dump, vu, nP) || dump_f32(s, dump, z, nP))
      return 1;
    /* DDPM's posterior: abar from the rows, 1 - abar as s^2 */
    const double abt = at_ * at_, abp = ap * ap, r = abt / abp, b = 1 - r, omt = st * st,
                 omp = sp * sp;
    const double c0 = ap * b / omt, c1 = sqrt(r) * omp / omt, sd = sqrt(fmax(omp / omt * b, 1e-20));
    for (size_t k = 0; k < nP; k++) {
      const double v = vu[k] + s->guidance * ((double)vc[k] - vu[k]), xt = x[k];
      const double x0 = at_ * xt - st * v;
      x[k] = (float)(s->euler  ? xt + (fp - ft) * v
                     : s->ddpm ? c0 * x0 + c1 * xt + (tp >= 0 ? sd * z[k] : 0)
                               : ap * x0 + sp * (st * xt + at_ * v));
    }
    int64_t g = j0 / (s->B >= 2 ? s->B / 2 : 1); /* the group's index */
    mmrt_progress_tick(&s->pr, g * s->steps + i + 1, (double)(j0 + n) * (double)(i + 1) / s->steps,
                       NULL);
  }
  if (dump_f32(s, dump, x, nP)) return 1;
  float *din = at(s, MMRT_SAMPLE_DEC_IN);
  const size_t per = (size_t)(s->F * s->H * s->W);
  /* @decode's clips copied out of the arenas: they are a value of the
   * activation arena, which @classify (run on each clip in turn) reuses */
  float *clips = malloc(sizeof *clips * per * (size_t)s->B);
  int rc = clips ? 0 : fail("out of memory");
  for (int64_t c0 = 0; !rc && c0 < n; c0 += s->B) {
    for (int64_t r = 0; r < s->B; r++)
      if (c0 + r < n)
        memcpy(din + r * P, x + (c0 + r) * P, sizeof *din * P);
      else
        memset(din + r * P, 0, sizeof *din * P);
    rc = run_step(s, s->m->vae_decode_step, "@decode");
    if (!rc) memcpy(clips, at(s, MMRT_SAMPLE_CLIPS), sizeof *clips * per * (size_t)s->B);
    for (int64_t r = 0; !rc && r < s->B && c0 + r < n; r++) {
      int64_t j = j0 + c0 + r;
      rc = write_clip(s, j, clips + r * per, raw) ||
           (s->m->sample_classify_step && classify(s, clips + r * per, s->label[j / s->clips]));
      if (!rc)
        fprintf(tsv, "%lld\t%lld\t%s\n", (long long)j, (long long)(j % s->clips),
                s->prompts[j / s->clips]);
      s->written += !rc;
    }
  }
  free(clips);
  return rc;
}

static int run(Smp *s) {
  if (run_step(s, s->m->sample_table_step, "@table")) return 1;
  const MmrtTensorDesc *td = &s->t[MMRT_SAMPLE_TABLE];
  float *tab = malloc(sizeof *tab * (size_t)numel(td));
  int64_t *ts = malloc(sizeof *ts * (size_t)s->steps);
  const int64_t ng = s->B >= 2 ? s->B / 2 : 1, total = s->clips * s->nprompts;
  float *buf = malloc(sizeof *buf * (size_t)(4 * ng * s->P));
  int rc = tab && ts && buf ? 0 : fail("out of memory");
  if (!rc) memcpy(tab, at(s, MMRT_SAMPLE_TABLE), sizeof *tab * (size_t)numel(td));
  if (!rc && s->flow && (tab[0] != 1 || tab[1] != 0 || tab[2] != 0 || tab[3] != 1))
    rc = fail("model %s: a table() of f32[2, 2] is flow matching's rows (1, 0), (0, 1); it gave "
              "(%g, %g), (%g, %g)",
              s->m->name, tab[0], tab[1], tab[2], tab[3]);
  for (int64_t i = 0; !rc && i < s->steps; i++)
    ts[i] = (int64_t)rint((double)s->T - (double)i * (double)s->T / (double)s->steps) - 1;
  FILE *dump = NULL, *raw = NULL, *tsv = NULL;
  if (!rc && mkdir(s->out, 0777) != 0 && errno != EEXIST)
    rc = fail("--out %s: cannot create: %s", s->out, strerror(errno));
  char path[4200];
  snprintf(path, sizeof path, "%s/samples.tsv", s->out);
  MmrtOut o_tsv = {0}, o_dump = {0}, o_raw = {0};
  char oerr[ERRLEN];
  if (!rc && mmrt_out_begin(&o_tsv, path, oerr, sizeof oerr) != MMRT_OK)
    rc = fail("--out %s", oerr);
  if (!rc && s->dump && mmrt_out_begin(&o_dump, s->dump, oerr, sizeof oerr) != MMRT_OK)
    rc = fail("--dump %s", oerr);
  if (!rc && s->raw && mmrt_out_begin(&o_raw, s->raw, oerr, sizeof oerr) != MMRT_OK)
    rc = fail("--raw %s", oerr);
  tsv = o_tsv.f, dump = o_dump.f, raw = o_raw.f;
  if (!rc) fprintf(tsv, "clip\tcopy\tprompt\n");
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  mmrt_progress_begin(&s->pr, "sampler: denoising step", 0, (total + ng - 1) / ng * s->steps,
                      "clips", !s->quiet);
  for (int64_t j0 = 0; !rc && j0 < total && !mmrt_stop_signal; j0 += ng)
    rc = group(s, tab, ts, j0, total - j0 < ng ? total - j0 : ng, buf, dump, raw, tsv);
  clock_gettime(CLOCK_MONOTONIC, &b);
  mmrt_progress_break(&s->pr);
  if (!rc && mmrt_stop_signal) { /* exit 128 + the signal; no figures of part of the clips */
    fprintf(stderr, "sampler: stopped by %s; %lld of %lld clips written (listed in %s)%s\n",
            mmrt_stop_name(mmrt_stop_signal), (long long)s->written, (long long)total, path,
            dump || raw ? "; the partial --dump/--raw files removed" : "");
    rc = 128 + mmrt_stop_signal;
  }
  double sec = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  char sched[128];
  if (s->euler)
    snprintf(sched, sizeof sched, "euler, %lld steps (flow t 1 .. %g)", (long long)s->steps,
             1.0 / (double)s->steps);
  else
    snprintf(sched, sizeof sched, "%s, %lld steps of %lld (t %lld .. %lld)",
             s->ddpm ? "ddpm" : "ddim", (long long)s->steps, (long long)s->T,
             (long long)(ts ? ts[0] : 0), (long long)(ts ? ts[s->steps - 1] : 0));
  if (!rc)
    printf(
        "sample: %lld clips (%d prompts x %lld) of %lld x %lld x %lld, %s, guidance %g, seed "
        "%lld, in %.3f s (%.3f clips/s); wrote %s/samples.tsv and the GIF and PNG of %lld clips\n",
        (long long)total, s->nprompts, (long long)s->clips, (long long)s->F, (long long)s->H,
        (long long)s->W, sched, s->guidance, (long long)s->seed, sec, (double)total / sec, s->out,
        (long long)(s->show < total ? s->show : total));
  if (!rc && s->m->sample_classify_step) {
    int64_t fr = 0, hit = 0;
    printf("classify: by prompted class (frames named so / frames):");
    for (int l = 0; l < MMRT_FMNIST_CLASSES; l++) {
      fr += s->frames[l], hit += s->hits[l];
      if (s->frames[l]) printf(" %d %lld/%lld", l, (long long)s->hits[l], (long long)s->frames[l]);
    }
    printf("\nclassify: %lld of %lld frames (%.2f%%) recognised as the prompted class\n",
           (long long)hit, (long long)fr, fr ? 100.0 * (double)hit / (double)fr : 0.0);
    printf("classify: frames named as class 0 .. 9, by prompted class:");
    for (int l = 0; l < MMRT_FMNIST_CLASSES; l++) {
      if (!s->frames[l]) continue;
      printf(" %d:", l);
      for (int k = 0; k < MMRT_FMNIST_CLASSES; k++)
        printf("%s%lld", k ? "," : "", (long long)s->named[l][k]);
    }
    printf("\n");
  }
  if (mmrt_out_finish(&o_dump, !rc, oerr, sizeof oerr) != MMRT_OK) rc = fail("--dump %s", oerr);
  if (mmrt_out_finish(&o_raw, !rc, oerr, sizeof oerr) != MMRT_OK) rc = fail("--raw %s", oerr);
  if (mmrt_out_finish(&o_tsv, !rc, oerr, sizeof oerr) != MMRT_OK) rc = fail("--out %s", oerr);
  free(tab), free(ts), free(buf);
  return rc;
}

int mmrt_sample_main(int argc, char **argv, const MmrtModelDesc *m) {
  static Smp s; /* large (the prompts); one sampler a process */
  s.m = m;
  char err[ERRLEN];
  int n = 0, bad = -1, rc = parse_args(&s, argc, argv);
  const char *in[MMRT_MAX_WEIGHTS + 1] = {s.prompts_file};
  for (int i = 0; i < s.nweights; i++) in[i + 1] = s.weights[i];
  if (!rc && (mmrt_probe_output("--out", s.out, MMRT_OUT_DIR, in, s.nweights + 1, err,
                                sizeof err) != MMRT_OK ||
              (s.dump && mmrt_probe_output("--dump", s.dump, MMRT_OUT_FILE, in, s.nweights + 1, err,
                                           sizeof err) != MMRT_OK) ||
              (s.raw && mmrt_probe_output("--raw", s.raw, MMRT_OUT_FILE, in, s.nweights + 1, err,
                                          sizeof err) != MMRT_OK)))
    rc = fail("%s", err);
  if (!rc) mmrt_mem_start_threads();
  if (!rc) rc = bind(&s);
  if (!rc) rc = tokenize(&s);
  if (!rc && mmrt_alloc_arenas(m, s.arenas, err, sizeof err) != MMRT_OK) rc = fail("%s", err);
  if (!rc && mmrt_load_params_any(m, s.arenas, s.weights, s.nweights, &n, &bad, err, sizeof err) !=
                 MMRT_OK) {
    char list[2048] = "";
    for (int i = 0; i < s.nweights && bad < 0; i++) /* else err names the file */
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : " ",
               s.weights[i]);
    rc = fail("--weights%s: %s", list, err);
  }
  if (!rc && !s.quiet) fprintf(stderr, "sampler: %d parameters loaded\n", n);
  mmrt_stop_install();
  if (!rc) rc = run(&s);
  for (int k = 0; k < MMRT_NARENAS; k++) free(s.arenas[k]);
  for (int p = 0; p < s.nprompts; p++) free(s.prompts[p]);
  free(s.ids);
  mmrt_kernels_shutdown();
  return rc < 0 ? 0 : rc;
}
