/* mmrt_caption.c: Fashion-MNIST captions, the caption tokenizer, sequence
 * layout, batch fill and exact-match scoring.  See mmrt_caption.h for the
 * phrasing rule and the layout; this file assumes the tables below are the
 * whole vocabulary (the tokenizer is built from them alone). */
#include "mmrt_caption.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_rng.h"

static const char *const prompts[MMRT_CAPTION_PROMPTS] = {
    "what is this ?", "describe the image .", "what item is shown ?",
    "name this item .", /* "item", not "garment": bags and shoes are no garments */
};

/* Per class (mmrt_fmnist_class_name order), phrasing 0 first (canonical).
 * Trousers are plural in English, hence their own phrasings. */
static const char *const answers[MMRT_FMNIST_CLASSES][MMRT_CAPTION_ANSWERS] = {
    {"a t-shirt", "it is a t-shirt", "this is a t-shirt"},
    {"a pair of trousers", "these are trousers", "they are trousers"},
    {"a pullover", "it is a pullover", "this is a pullover"},
    {"a dress", "it is a dress", "this is a dress"},
    {"a coat", "it is a coat", "this is a coat"},
    {"a sandal", "it is a sandal", "this is a sandal"},
    {"a shirt", "it is a shirt", "this is a shirt"},
    {"a sneaker", "it is a sneaker", "this is a sneaker"},
    {"a bag", "it is a bag", "this is a bag"},
    {"an ankle boot", "it is an ankle boot", "this is an ankle boot"},
};

static const char *const specials[MMRT_TOK_FIRST_WORD] = {
    [MMRT_TOK_PAD] = "<pad>",
    [MMRT_TOK_BOS] = "<bos>",
    [MMRT_TOK_EOS] = "<eos>",
    [MMRT_TOK_IMG] = "<img>",
};

const char *mmrt_caption_prompt(int p) {
  return p >= 0 && p < MMRT_CAPTION_PROMPTS ? prompts[p] : NULL;
}

const char *mmrt_caption_answer(int label, int k) {
  if (label < 0 || label >= MMRT_FMNIST_CLASSES || k < 0 || k >= MMRT_CAPTION_ANSWERS) return NULL;
  return answers[label][k];
}

/* ---- tokenizer ---- */

/* Next whitespace-separated word of s at or after *pos: start and length,
 * 0 when none is left. */
static size_t next_word(const char *s, size_t *pos, const char **start) {
  size_t i = *pos;
  while (s[i] && isspace((unsigned char)s[i])) i++;
  size_t j = i;
  while (s[j] && !isspace((unsigned char)s[j])) j++;
  *start = s + i;
  *pos = j;
  return j - i;
}

static int add_words(MmrtTokenizer *tok, const char *text, char *err, size_t errlen) {
  size_t pos = 0, len;
  const char *w;
  while ((len = next_word(text, &pos, &w)) > 0) {
    if (len >= MMRT_TOK_WORD)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "caption vocabulary: word \"%.*s\" in \"%s\" has %zu bytes, "
                       "at most %d fit",
                       (int)len, w, text, len, MMRT_TOK_WORD - 1);
    if (tok->size >= MMRT_TOK_MAX)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "caption vocabulary: more than %d words",
                       MMRT_TOK_MAX);
    memcpy(tok->words[tok->size], w, len);
    tok->words[tok->size][len] = '\0';
    tok->size++;
  }
  return MMRT_OK;
}

static int cmp_word(const void *a, const void *b) {
  return strcmp(a, b);
}

int mmrt_tok_build(MmrtTokenizer *tok, char *err, size_t errlen) {
  memset(tok, 0, sizeof *tok);
  for (int i = 0; i < MMRT_TOK_FIRST_WORD; i++)
    snprintf(tok->words[i], MMRT_TOK_WORD, "%s", specials[i]);
  tok->size = MMRT_TOK_FIRST_WORD;
  int rc;
  for (int p = 0; p < MMRT_CAPTION_PROMPTS; p++)
    if ((rc = add_words(tok, prompts[p], err, errlen)) != MMRT_OK) return rc;
  for (int c = 0; c < MMRT_FMNIST_CLASSES; c++)
    for (int k = 0; k < MMRT_CAPTION_ANSWERS; k++)
      if ((rc = add_words(tok, answers[c][k], err, errlen)) != MMRT_OK) return rc;
  int nw = tok->size - MMRT_TOK_FIRST_WORD;
  qsort(tok->words[MMRT_TOK_FIRST_WORD], (size_t)nw, MMRT_TOK_WORD, cmp_word);
  int out = MMRT_TOK_FIRST_WORD;
  for (int i = MMRT_TOK_FIRST_WORD; i < tok->size; i++)
    if (out == MMRT_TOK_FIRST_WORD || strcmp(tok->words[i], tok->words[out - 1]) != 0)
      memmove(tok->words[out++], tok->words[i], MMRT_TOK_WORD);
  for (int i = out; i < tok->size; i++) memset(tok->words[i], 0, MMRT_TOK_WORD);
  tok->size = out;
  return MMRT_OK;
}

int mmrt_tok_fits(const MmrtTokenizer *tok, int vocab, char *err, size_t errlen) {
  if (tok->size > vocab)
    return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                     "caption vocabulary has %d tokens (4 special + %d words) but the "
                     "model's vocab is %d; expected vocab >= %d",
                     tok->size, tok->size - MMRT_TOK_FIRST_WORD, vocab, tok->size);
  return MMRT_OK;
}

int32_t mmrt_tok_id(const MmrtTokenizer *tok, const char *word, size_t len) {
  if (len >= MMRT_TOK_WORD) return -1;
  char key[MMRT_TOK_WORD];
  memcpy(key, word, len);
  key[len] = '\0';
  for (int i = 0; i < MMRT_TOK_FIRST_WORD; i++)
    if (strcmp(key, tok->words[i]) == 0) return i;
  int lo = MMRT_TOK_FIRST_WORD, hi = tok->size;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(key, tok->words[mid]);
    if (c == 0) return mid;
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return -1;
}

const char *mmrt_tok_word(const MmrtTokenizer *tok, int32_t id) {
  return id >= 0 && id < tok->size ? tok->words[id] : NULL;
}

int mmrt_words_encode(const MmrtTokenizer *tok, const char *text, int32_t *ids, int cap, int *n,
                      char *err, size_t errlen) {
  *n = 0;
  size_t pos = 0, len;
  const char *w;
  int k = 0;
  while ((len = next_word(text, &pos, &w)) > 0) {
    int32_t id = mmrt_tok_id(tok, w, len);
    if (id < 0) {
      char known[MMRT_TOK_MAX * MMRT_TOK_WORD];
      size_t used = 0;
      known[0] = '\0';
      for (int i = MMRT_TOK_FIRST_WORD; i < tok->size && used + 1 < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
                                 i > MMRT_TOK_FIRST_WORD ? " " : "", tok->words[i]);
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "caption vocabulary: unknown word \"%.*s\" (word %d of \"%s\"); "
                       "expected one of the %d words: %s",
                       (int)len, w, k + 1, text, tok->size - MMRT_TOK_FIRST_WORD, known);
    }
    if (k >= cap)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "caption text \"%s\" has more than %d tokens, the room given", text, cap);
    ids[k++] = id;
  }
  *n = k;
  return MMRT_OK;
}

int mmrt_words_decode(const MmrtTokenizer *tok, const int32_t *ids, int n, char *buf, size_t len,
                      char *err, size_t errlen) {
  if (!buf || len == 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "caption decode: no output buffer");
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && ids[i] != MMRT_TOK_EOS; i++) {
    const char *w = mmrt_tok_word(tok, ids[i]);
    if (!w)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "caption decode: id %d at position %d, expected an id in [0, %d)",
                       (int)ids[i], i, tok->size);
    size_t wl = strlen(w) + (used ? 1 : 0);
    if (used + wl + 1 > len)
      return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                       "caption decode: the text of %d ids needs more than the %zu "
                       "bytes given",
                       n, len);
    snprintf(buf + used, len - used, "%s%s", used ? " " : "", w);
    used += wl;
  }
  return MMRT_OK;
}

/* ---- layout ---- */

/* ids (T or NULL), labels (T or NULL) for the pieces; the caller checked
 * the length. */
static void lay_out(const int32_t *p, int np, const int32_t *a, int na, int T, int nimg,
                    int32_t *ids, int32_t *labels) {
  int first = 1 + nimg + np; /* position of the first answer word */
  if (ids) {
    int t = 0;
    ids[t++] = MMRT_TOK_BOS;
    for (int i = 0; i < nimg; i++) ids[t++] = MMRT_TOK_IMG;
    for (int i = 0; i < np; i++) ids[t++] = p[i];
    for (int i = 0; i < na; i++) ids[t++] = a[i];
    ids[t++] = MMRT_TOK_EOS;
    while (t < T) ids[t++] = MMRT_TOK_PAD;
  }
  if (labels) {
    /* the logits at t predict the token at t + 1: learned for the answer
     * words and the EOS only */
    for (int t = 0; t < T; t++) labels[t] = MMRT_IGNORE_INDEX;
    for (int i = 0; i < na; i++) labels[first - 1 + i] = a[i];
    labels[first - 1 + na] = MMRT_TOK_EOS;
  }
}

static int check_fits(const char *prompt, const char *answer, int np, int na, int T, int nimg,
                      char *err, size_t errlen) {
  int need = 1 + nimg + np + na + 1;
  if (need <= T) return MMRT_OK;
  return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                   "caption \"%s\" -> \"%s\" needs %d text positions (BOS 1 + IMG %d + "
                   "prompt %d + answer %d + EOS 1) but T = %d; expected T >= %d",
                   prompt, answer, need, nimg, np, na, T, need);
}

int mmrt_caption_layout(const MmrtTokenizer *tok, const char *prompt, const char *answer, int T,
                        int img_in_text, int32_t *ids, int32_t *labels, char *err, size_t errlen) {
  if (T <= 0 || img_in_text < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "caption layout: T = %d and img_in_text = %d, expected T > 0 and "
                     "img_in_text >= 0",
                     T, img_in_text);
  int32_t p[MMRT_CAPTION_MAX_WORDS * 4], a[MMRT_CAPTION_MAX_WORDS * 4];
  int np, na, rc;
  if ((rc = mmrt_words_encode(tok, prompt, p, (int)(sizeof p / sizeof *p), &np, err, errlen)) ||
      (rc = mmrt_words_encode(tok, answer, a, (int)(sizeof a / sizeof *a), &na, err, errlen)) ||
      (rc = check_fits(prompt, answer, np, na, T, img_in_text, err, errlen)))
    return rc;
  lay_out(p, np, a, na, T, img_in_text, ids, labels);
  return MMRT_OK;
}

/* ---- captioner ---- */

static int encode_piece(const MmrtTokenizer *tok, const char *text, MmrtCaptionTokens *out,
                        char *err, size_t errlen) {
  return mmrt_words_encode(tok, text, out->ids, MMRT_CAPTION_MAX_WORDS, &out->n, err, errlen);
}

int mmrt_caption_init(MmrtCaptioner *c, int T, int img_in_text, MmrtCaptionMode mode, uint64_t seed,
                      char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  if (T <= 0 || img_in_text < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "captioner: T = %d and img_in_text = %d, expected T > 0 and "
                     "img_in_text >= 0",
                     T, img_in_text);
  if (mode != MMRT_CAPTION_TRAIN && mode != MMRT_CAPTION_EVAL)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "captioner: mode %d, expected "
                     "MMRT_CAPTION_TRAIN or MMRT_CAPTION_EVAL",
                     (int)mode);
  int rc = mmrt_tok_build(&c->tok, err, errlen);
  if (rc) return rc;
  c->T = T;
  c->img_in_text = img_in_text;
  c->mode = mode;
  c->seed = seed;
  c->fixed_prompt = -1;
  int lp = 0, la = 0, la_class = 0, la_k = 0;
  for (int p = 0; p < MMRT_CAPTION_PROMPTS; p++) {
    if ((rc = encode_piece(&c->tok, prompts[p], &c->prompts[p], err, errlen))) return rc;
    if (c->prompts[p].n > c->prompts[lp].n) lp = p;
  }
  for (int k = 0; k < MMRT_FMNIST_CLASSES; k++)
    for (int j = 0; j < MMRT_CAPTION_ANSWERS; j++) {
      if ((rc = encode_piece(&c->tok, answers[k][j], &c->answers[k][j], err, errlen))) return rc;
      if (c->answers[k][j].n > la) la = c->answers[k][j].n, la_class = k, la_k = j;
    }
  return check_fits(prompts[lp], answers[la_class][la_k], c->prompts[lp].n, la, T, img_in_text, err,
                    errlen);
}

int mmrt_caption_set_prompt(MmrtCaptioner *c, int p, char *err, size_t errlen) {
  if (p < -1 || p >= MMRT_CAPTION_PROMPTS)
    return mmrt_errf(err, errlen, MMRT_ERR_ARG,
                     "captioner: prompt %d, expected -1 (per image) or 0..%d", p,
                     MMRT_CAPTION_PROMPTS - 1);
  c->fixed_prompt = p;
  return MMRT_OK;
}

/* Uniform in [0, n) from a 32-bit word (multiply-shift). */
static int pick(uint32_t u, int n) {
  return (int)(((uint64_t)u * (uint64_t)n) >> 32);
}

MmrtCaptionChoice mmrt_caption_choose(const MmrtCaptioner *c, int64_t epoch, int64_t index) {
  int eval = c->mode == MMRT_CAPTION_EVAL;
  uint64_t stream =
      eval ? mmrt_rng_stream("caption/eval", 0) : mmrt_rng_stream("caption/train", (uint64_t)epoch);
  /* words 4i .. 4i+2 of the stream: prompt, canonical coin, other phrasing */
  uint64_t base = 4 * (uint64_t)index;
  MmrtCaptionChoice ch;
  ch.prompt = c->fixed_prompt >= 0
                  ? c->fixed_prompt
                  : pick(mmrt_rng_u32(c->seed, stream, base), MMRT_CAPTION_PROMPTS);
  if (eval || mmrt_rng_uniform_at(c->seed, stream, base + 1) < 0.5f)
    ch.answer = 0;
  else
    ch.answer = 1 + pick(mmrt_rng_u32(c->seed, stream, base + 2), MMRT_CAPTION_ANSWERS - 1);
  return ch;
}

static void pad_row(int T, int32_t *ids, int32_t *labels) {
  for (int t = 0; t < T; t++) {
    if (ids) ids[t] = MMRT_TOK_PAD;
    if (labels) labels[t] = MMRT_IGNORE_INDEX;
  }
}

void mmrt_caption_row(const MmrtCaptioner *c, int64_t epoch, int64_t index, int label, int32_t *ids,
                      int32_t *labels) {
  if (label < 0 || label >= MMRT_FMNIST_CLASSES || index < 0) {
    pad_row(c->T, ids, labels);
    return;
  }
  MmrtCaptionChoice ch = mmrt_caption_choose(c, epoch, index);
  const MmrtCaptionTokens *p = &c->prompts[ch.prompt];
  const MmrtCaptionTokens *a = &c->answers[label][ch.answer];
  lay_out(p->ids, p->n, a->ids, a->n, c->T, c->img_in_text, ids, labels);
}

static int row_label(const MmrtBatchIter *it, int64_t idx) {
  return idx < 0 ? -1 : it->ds->labels[idx];
}

void mmrt_caption_fill(const MmrtCaptioner *c, const MmrtBatchIter *it, int64_t lo, int64_t hi,
                       float *pixels, int32_t *text, int32_t *labels) {
  if (pixels) mmrt_iter_fill(it, lo, hi, pixels, NULL);
  if (!text && !labels) return;
  for (int64_t r = lo; r < hi; r++) {
    int64_t idx = mmrt_iter_index(it, r);
    size_t off = (size_t)(r - lo) * (size_t)c->T;
    mmrt_caption_row(c, it->epoch, idx, row_label(it, idx), text ? text + off : NULL,
                     labels ? labels + off : NULL);
  }
}

/* ---- evaluation ---- */

int mmrt_caption_prefix(const MmrtCaptioner *c, int64_t index, int32_t *ids) {
  const MmrtCaptionTokens *p = &c->prompts[mmrt_caption_choose(c, 0, index).prompt];
  if (!ids) return 1 + c->img_in_text + p->n;
  int t = 0;
  ids[t++] = MMRT_TOK_BOS;
  for (int i = 0; i < c->img_in_text; i++) ids[t++] = MMRT_TOK_IMG;
  for (int i = 0; i < p->n; i++) ids[t++] = p->ids[i];
  return t;
}

void mmrt_caption_fill_prefix(const MmrtCaptioner *c, const MmrtBatchIter *it, int64_t lo,
                              int64_t hi, float *pixels, int32_t *prefix, int32_t *prefix_len,
                              int32_t *label) {
  if (pixels) mmrt_iter_fill(it, lo, hi, pixels, NULL);
  for (int64_t r = lo; r < hi; r++) {
    int64_t idx = mmrt_iter_index(it, r);
    int lab = row_label(it, idx);
    int32_t *row = prefix ? prefix + (size_t)(r - lo) * (size_t)c->T : NULL;
    if (row) pad_row(c->T, row, NULL);
    int n = lab >= 0 ? mmrt_caption_prefix(c, idx, row) : 0;
    if (prefix_len) prefix_len[r - lo] = n;
    if (label) label[r - lo] = lab;
  }
}

int mmrt_caption_target(const MmrtCaptioner *c, int label, int32_t *ids) {
  if (label < 0 || label >= MMRT_FMNIST_CLASSES) return 0;
  const MmrtCaptionTokens *a = &c->answers[label][0];
  memcpy(ids, a->ids, (size_t)a->n * sizeof *ids);
  ids[a->n] = MMRT_TOK_EOS;
  return a->n + 1;
}

int mmrt_caption_match(const MmrtCaptioner *c, int label, const int32_t *gen, int n) {
  int32_t want[MMRT_CAPTION_MAX_WORDS + 1];
  int m = mmrt_caption_target(c, label, want);
  if (m == 0 || n < m) return 0;
  return memcmp(gen, want, (size_t)m * sizeof *want) == 0;
}

int64_t mmrt_caption_count_matches(const MmrtCaptioner *c, const int32_t *label, const int32_t *gen,
                                   const int32_t *gen_len, int64_t rows, int64_t stride,
                                   int64_t *counted) {
  int64_t hits = 0, seen = 0;
  for (int64_t r = 0; r < rows; r++) {
    if (label[r] < 0) continue;
    seen++;
    int n = gen_len ? gen_len[r] : (int)stride;
    if (n > stride) n = (int)stride;
    hits += mmrt_caption_match(c, label[r], gen + r * stride, n);
  }
  if (counted) *counted = seen;
  return hits;
}
