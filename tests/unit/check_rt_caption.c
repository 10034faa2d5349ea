/* check_rt_caption.c: Fashion-MNIST captions for InternVL2: the vocabulary
 * (deterministic, fits InternVL2Tiny's 64), encode/decode, the sequence
 * layout and its -100 positions against hand-written ids, the phrasing
 * choice (deterministic, rank-split invariant, the stated rates), errors,
 * and exact-match scoring.  Uses the real Debian Fashion-MNIST when
 * installed, and a small in-memory split always. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_caption.h"
#include "mmrt_data.h"
#include "mmrt_log.h"

#define IGN MMRT_IGNORE_INDEX

/* The vocabulary in id order, written out by hand (strcmp order). */
static const char *const expected_words[] = {
    "<pad>",   "<bos>", "<eos>", "<img>", ".",        "?",        "a",     "an",    "ankle",
    "are",     "bag",   "boot",  "coat",  "describe", "dress",    "image", "is",    "it",
    "item",    "name",  "of",    "pair",  "pullover", "sandal",   "shirt", "shown", "sneaker",
    "t-shirt", "the",   "these", "they",  "this",     "trousers", "what",
};
#define NWORDS ((int)(sizeof expected_words / sizeof *expected_words))

/* ids of some words, from the list above */
enum {
  W_DOT = 4,
  W_Q = 5,
  W_A = 6,
  W_AN = 7,
  W_ANKLE = 8,
  W_BOOT = 11,
  W_IS = 16,
  W_IT = 17,
  W_THIS = 31,
  W_WHAT = 33
};

static int have_real(void) {
  struct stat st;
  return stat(MMRT_FMNIST_DEFAULT_DIR "/train-labels-idx1-ubyte.gz", &st) == 0;
}

/* A small split: n images, image i filled with i, label i % 10. */
static MmrtImages small_split(int64_t n) {
  MmrtImages ds = {.n = n, .rows = 28, .cols = 28};
  ds.pixels = malloc((size_t)n * 784);
  ds.labels = malloc((size_t)n);
  ck_assert_ptr_nonnull(ds.pixels);
  ck_assert_ptr_nonnull(ds.labels);
  for (int64_t i = 0; i < n; i++) {
    memset(ds.pixels + i * 784, (int)(i & 0xff), 784);
    ds.labels[i] = (uint8_t)(i % 10);
  }
  return ds;
}

static void free_small(MmrtImages *ds) {
  free(ds->pixels);
  free(ds->labels);
}

START_TEST(vocab_deterministic_and_fits) {
  MmrtTokenizer a, b;
  char err[512];
  ck_assert_int_eq(mmrt_tok_build(&a, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_tok_build(&b, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(a.size, NWORDS);
  ck_assert_int_eq(a.size, 34);
  ck_assert(memcmp(&a, &b, sizeof a) == 0);
  for (int i = 0; i < NWORDS; i++) {
    ck_assert_str_eq(mmrt_tok_word(&a, i), expected_words[i]);
    ck_assert_int_eq(mmrt_tok_id(&a, expected_words[i], strlen(expected_words[i])), i);
  }
  for (int i = MMRT_TOK_FIRST_WORD + 1; i < a.size; i++)
    ck_assert(strcmp(a.words[i - 1], a.words[i]) < 0);
  ck_assert_ptr_null(mmrt_tok_word(&a, -1));
  ck_assert_ptr_null(mmrt_tok_word(&a, a.size));
  ck_assert_int_eq(mmrt_tok_id(&a, "boots", 5), -1);
  ck_assert_int_eq(mmrt_tok_id(&a, "boots", 4), W_BOOT);
  ck_assert_int_eq(mmrt_tok_id(&a, "", 0), -1);

  /* InternVL2Tiny: LLM(vocab = 64) */
  ck_assert_int_eq(mmrt_tok_fits(&a, 64, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_tok_fits(&a, 34, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_tok_fits(&a, 32, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "34 tokens") && strstr(err, "vocab is 32") &&
                    strstr(err, "expected vocab >= 34"),
                "%s", err);

  /* every word of every caption is in the vocabulary, and only those */
  int used[MMRT_TOK_MAX] = {0};
  for (int k = 0; k < MMRT_CAPTION_PROMPTS + MMRT_FMNIST_CLASSES * MMRT_CAPTION_ANSWERS; k++) {
    const char *text = k < MMRT_CAPTION_PROMPTS
                           ? mmrt_caption_prompt(k)
                           : mmrt_caption_answer((k - MMRT_CAPTION_PROMPTS) / MMRT_CAPTION_ANSWERS,
                                                 (k - MMRT_CAPTION_PROMPTS) % MMRT_CAPTION_ANSWERS);
    ck_assert_ptr_nonnull(text);
    int32_t ids[16];
    int n;
    ck_assert_int_eq(mmrt_words_encode(&a, text, ids, 16, &n, err, sizeof err), MMRT_OK);
    for (int i = 0; i < n; i++) used[ids[i]] = 1;
  }
  for (int i = 0; i < a.size; i++) ck_assert_int_eq(used[i], i >= MMRT_TOK_FIRST_WORD);
  ck_assert_ptr_null(mmrt_caption_prompt(MMRT_CAPTION_PROMPTS));
  ck_assert_ptr_null(mmrt_caption_answer(10, 0));
  ck_assert_ptr_null(mmrt_caption_answer(0, MMRT_CAPTION_ANSWERS));
  ck_assert_str_eq(mmrt_caption_answer(9, 0), "an ankle boot");
  ck_assert_str_eq(mmrt_caption_prompt(0), "what is this ?");
}
END_TEST

START_TEST(encode_decode_round_trip) {
  MmrtTokenizer tok;
  char err[512], buf[256];
  ck_assert_int_eq(mmrt_tok_build(&tok, err, sizeof err), MMRT_OK);
  for (int c = 0; c < MMRT_FMNIST_CLASSES; c++)
    for (int k = 0; k < MMRT_CAPTION_ANSWERS; k++) {
      const char *text = mmrt_caption_answer(c, k);
      int32_t ids[16];
      int n;
      ck_assert_int_eq(mmrt_words_encode(&tok, text, ids, 16, &n, err, sizeof err), MMRT_OK);
      ck_assert_int_eq(mmrt_words_decode(&tok, ids, n, buf, sizeof buf, err, sizeof err), MMRT_OK);
      ck_assert_str_eq(buf, text);
    }
  int32_t ids[16];
  int n;
  /* extra whitespace is only a separator */
  ck_assert_int_eq(mmrt_words_encode(&tok, "  what is\tthis ?\n", ids, 16, &n, err, sizeof err),
                   MMRT_OK);
  const int32_t want[] = {W_WHAT, W_IS, W_THIS, W_Q};
  ck_assert_int_eq(n, 4);
  ck_assert(memcmp(ids, want, sizeof want) == 0);
  ck_assert_int_eq(mmrt_words_encode(&tok, "", ids, 16, &n, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(n, 0);

  /* specials by name; decode stops at EOS */
  ck_assert_int_eq(mmrt_words_encode(&tok, "<bos> <img> what is this ? an ankle boot <eos> <pad>",
                                     ids, 16, &n, err, sizeof err),
                   MMRT_OK);
  ck_assert_int_eq(n, 11);
  ck_assert_int_eq(ids[0], MMRT_TOK_BOS);
  ck_assert_int_eq(ids[1], MMRT_TOK_IMG);
  ck_assert_int_eq(ids[9], MMRT_TOK_EOS);
  ck_assert_int_eq(ids[10], MMRT_TOK_PAD);
  ck_assert_int_eq(mmrt_words_decode(&tok, ids, n, buf, sizeof buf, err, sizeof err), MMRT_OK);
  ck_assert_str_eq(buf, "<bos> <img> what is this ? an ankle boot");
  ck_assert_int_eq(mmrt_words_decode(&tok, ids + 9, 2, buf, sizeof buf, err, sizeof err), MMRT_OK);
  ck_assert_str_eq(buf, "");

  /* too small a buffer, bad ids, too little room for ids */
  ck_assert_int_eq(mmrt_words_decode(&tok, ids, n, buf, 10, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "10 bytes"), "%s", err);
  int32_t bad[] = {W_AN, 34};
  ck_assert_int_eq(mmrt_words_decode(&tok, bad, 2, buf, sizeof buf, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "id 34 at position 1") && strstr(err, "[0, 34)"), "%s", err);
  bad[1] = -100;
  ck_assert_int_eq(mmrt_words_decode(&tok, bad, 2, buf, sizeof buf, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_int_eq(mmrt_words_encode(&tok, "it is an ankle boot", ids, 3, &n, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "more than 3 tokens"), "%s", err);
}
END_TEST

START_TEST(unknown_word) {
  MmrtTokenizer tok;
  char err[1024];
  ck_assert_int_eq(mmrt_tok_build(&tok, err, sizeof err), MMRT_OK);
  int32_t ids[16];
  int n = -1;
  ck_assert_int_eq(mmrt_words_encode(&tok, "what is this hat ?", ids, 16, &n, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_int_eq(n, 0);
  ck_assert_msg(strstr(err, "unknown word \"hat\"") && strstr(err, "word 4 of") &&
                    strstr(err, "30 words: . ? a an ankle") && strstr(err, "trousers what"),
                "%s", err);
  /* case matters: the vocabulary is lower case */
  ck_assert_int_eq(mmrt_words_encode(&tok, "What", ids, 16, &n, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "\"What\""), "%s", err);
  /* a word longer than any slot is simply unknown */
  ck_assert_int_eq(mmrt_words_encode(&tok, "a supercalifragilistic", ids, 16, &n, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "\"supercalifragilistic\""), "%s", err);
  int32_t lab[12];
  ck_assert_int_eq(
      mmrt_caption_layout(&tok, "what is this ?", "a boat", 12, 0, ids, lab, err, sizeof err),
      MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "\"boat\""), "%s", err);
}
END_TEST

/* the layout with the image tokens before the text (InternVL2Tiny) */
static const int32_t ex_ids[12] = {MMRT_TOK_BOS, W_WHAT,       W_IS,         W_THIS,
                                   W_Q,          W_AN,         W_ANKLE,      W_BOOT,
                                   MMRT_TOK_EOS, MMRT_TOK_PAD, MMRT_TOK_PAD, MMRT_TOK_PAD};
static const int32_t ex_labels[12] = {IGN,    IGN,          IGN, IGN, W_AN, W_ANKLE,
                                      W_BOOT, MMRT_TOK_EOS, IGN, IGN, IGN,  IGN};
/* the same caption with 4 IMG tokens inside the text */
static const int32_t ex_ids_img[16] = {MMRT_TOK_BOS, MMRT_TOK_IMG, MMRT_TOK_IMG, MMRT_TOK_IMG,
                                       MMRT_TOK_IMG, W_WHAT,       W_IS,         W_THIS,
                                       W_Q,          W_AN,         W_ANKLE,      W_BOOT,
                                       MMRT_TOK_EOS, MMRT_TOK_PAD, MMRT_TOK_PAD, MMRT_TOK_PAD};
static const int32_t ex_labels_img[16] = {IGN,  IGN,     IGN,    IGN,          IGN, IGN, IGN, IGN,
                                          W_AN, W_ANKLE, W_BOOT, MMRT_TOK_EOS, IGN, IGN, IGN, IGN};

static void assert_ids(const int32_t *got, const int32_t *want, int n) {
  for (int t = 0; t < n; t++)
    ck_assert_msg(got[t] == want[t], "position %d: %d, expected %d", t, (int)got[t], (int)want[t]);
}

START_TEST(layout_hand_written) {
  MmrtTokenizer tok;
  char err[512];
  ck_assert_int_eq(mmrt_tok_build(&tok, err, sizeof err), MMRT_OK);
  int32_t ids[16], lab[16];
  ck_assert_int_eq(mmrt_caption_layout(&tok, "what is this ?", "an ankle boot", 12, 0, ids, lab,
                                       err, sizeof err),
                   MMRT_OK);
  assert_ids(ids, ex_ids, 12);
  assert_ids(lab, ex_labels, 12);
  ck_assert_int_eq(mmrt_caption_layout(&tok, "what is this ?", "an ankle boot", 16, 4, ids, lab,
                                       err, sizeof err),
                   MMRT_OK);
  assert_ids(ids, ex_ids_img, 16);
  assert_ids(lab, ex_labels_img, 16);
  /* exactly full: no PAD, the last position has no target */
  ck_assert_int_eq(mmrt_caption_layout(&tok, "what item is shown ?", "it is an ankle boot", 12, 0,
                                       ids, lab, err, sizeof err),
                   MMRT_OK);
  ck_assert_int_eq(ids[11], MMRT_TOK_EOS);
  ck_assert_int_eq(lab[11], IGN);
  ck_assert_int_eq(lab[10], MMRT_TOK_EOS);
  ck_assert_int_eq(lab[4], IGN);
  ck_assert_int_eq(lab[5], W_IT);
  /* labels may be NULL */
  ck_assert_int_eq(mmrt_caption_layout(&tok, "what is this ?", "an ankle boot", 12, 0, ids, NULL,
                                       err, sizeof err),
                   MMRT_OK);
  assert_ids(ids, ex_ids, 12);

  /* the captioner gives the same row: eval mode (canonical), prompt 0 */
  MmrtCaptioner c;
  ck_assert_int_eq(mmrt_caption_init(&c, 12, 0, MMRT_CAPTION_EVAL, 7, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_set_prompt(&c, 0, err, sizeof err), MMRT_OK);
  mmrt_caption_row(&c, 0, 123, 9, ids, lab);
  assert_ids(ids, ex_ids, 12);
  assert_ids(lab, ex_labels, 12);
  int32_t lab2[12];
  mmrt_caption_row(&c, 0, 123, 9, NULL, lab2);
  assert_ids(lab2, ex_labels, 12);
  ck_assert_int_eq(mmrt_caption_init(&c, 16, 4, MMRT_CAPTION_EVAL, 7, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_set_prompt(&c, 0, err, sizeof err), MMRT_OK);
  mmrt_caption_row(&c, 0, 5, 9, ids, lab);
  assert_ids(ids, ex_ids_img, 16);
  assert_ids(lab, ex_labels_img, 16);
  /* a padding row */
  mmrt_caption_row(&c, 0, 5, -1, ids, lab);
  for (int t = 0; t < 16; t++) {
    ck_assert_int_eq(ids[t], MMRT_TOK_PAD);
    ck_assert_int_eq(lab[t], IGN);
  }
  ck_assert_int_eq(mmrt_caption_set_prompt(&c, 4, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "prompt 4") && strstr(err, "0..3"), "%s", err);
  ck_assert_int_eq(mmrt_caption_set_prompt(&c, -1, err, sizeof err), MMRT_OK);
}
END_TEST

START_TEST(caption_too_long) {
  MmrtTokenizer tok;
  MmrtCaptioner c;
  char err[512];
  ck_assert_int_eq(mmrt_tok_build(&tok, err, sizeof err), MMRT_OK);
  int32_t ids[16], lab[16];
  ck_assert_int_eq(
      mmrt_caption_layout(&tok, "what is this ?", "an ankle boot", 8, 0, ids, lab, err, sizeof err),
      MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "\"what is this ?\" -> \"an ankle boot\"") &&
                    strstr(err, "needs 9 text positions") && strstr(err, "prompt 4 + answer 3") &&
                    strstr(err, "T = 8") && strstr(err, "expected T >= 9"),
                "%s", err);
  /* InternVL2Tiny's T = 12 holds the longest caption exactly... */
  ck_assert_int_eq(mmrt_caption_init(&c, 12, 0, MMRT_CAPTION_TRAIN, 1, err, sizeof err), MMRT_OK);
  /* ...but not one more position, and not with the IMG tokens inline */
  ck_assert_int_eq(mmrt_caption_init(&c, 11, 0, MMRT_CAPTION_TRAIN, 1, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "\"what item is shown ?\" -> \"it is an ankle boot\"") &&
                    strstr(err, "needs 12 text positions") && strstr(err, "T = 11"),
                "%s", err);
  ck_assert_int_eq(mmrt_caption_init(&c, 12, 4, MMRT_CAPTION_TRAIN, 1, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "needs 16 text positions") && strstr(err, "IMG 4") &&
                    strstr(err, "T = 12"),
                "%s", err);
  ck_assert_int_eq(mmrt_caption_init(&c, 16, 4, MMRT_CAPTION_TRAIN, 1, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_init(&c, 0, 0, MMRT_CAPTION_TRAIN, 1, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_int_eq(mmrt_caption_init(&c, 12, -1, MMRT_CAPTION_TRAIN, 1, err, sizeof err),
                   MMRT_ERR_ARG);
}
END_TEST

START_TEST(choice_deterministic_and_rates) {
  MmrtCaptioner a, b, other, ev;
  char err[512];
  ck_assert_int_eq(mmrt_caption_init(&a, 12, 0, MMRT_CAPTION_TRAIN, 42, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_init(&b, 12, 0, MMRT_CAPTION_TRAIN, 42, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_init(&other, 12, 0, MMRT_CAPTION_TRAIN, 43, err, sizeof err),
                   MMRT_OK);
  ck_assert_int_eq(mmrt_caption_init(&ev, 12, 0, MMRT_CAPTION_EVAL, 42, err, sizeof err), MMRT_OK);
  enum { N = 60000 };
  int prompt_count[MMRT_CAPTION_PROMPTS] = {0}, answer_count[MMRT_CAPTION_ANSWERS] = {0};
  int seed_diff = 0, epoch_diff = 0, eval_prompts[MMRT_CAPTION_PROMPTS] = {0};
  for (int64_t i = 0; i < N; i++) {
    MmrtCaptionChoice x = mmrt_caption_choose(&a, 3, i), y = mmrt_caption_choose(&b, 3, i);
    ck_assert_int_eq(x.prompt, y.prompt);
    ck_assert_int_eq(x.answer, y.answer);
    MmrtCaptionChoice z = mmrt_caption_choose(&other, 3, i);
    seed_diff += z.prompt != x.prompt || z.answer != x.answer;
    MmrtCaptionChoice e4 = mmrt_caption_choose(&a, 4, i);
    epoch_diff += e4.prompt != x.prompt || e4.answer != x.answer;
    ck_assert(x.prompt >= 0 && x.prompt < MMRT_CAPTION_PROMPTS);
    ck_assert(x.answer >= 0 && x.answer < MMRT_CAPTION_ANSWERS);
    prompt_count[x.prompt]++;
    answer_count[x.answer]++;
    /* eval: canonical answer, prompt independent of the epoch */
    MmrtCaptionChoice e = mmrt_caption_choose(&ev, 0, i), e9 = mmrt_caption_choose(&ev, 9, i);
    ck_assert_int_eq(e.answer, 0);
    ck_assert_int_eq(e.prompt, e9.prompt);
    eval_prompts[e.prompt]++;
  }
  /* canonical 1/2, each other phrasing 1/4, each prompt 1/4 (+- ~5 sigma) */
  ck_assert_msg(answer_count[0] > 0.49 * N && answer_count[0] < 0.51 * N, "%d", answer_count[0]);
  for (int k = 1; k < MMRT_CAPTION_ANSWERS; k++)
    ck_assert_msg(answer_count[k] > 0.24 * N && answer_count[k] < 0.26 * N, "%d", answer_count[k]);
  for (int p = 0; p < MMRT_CAPTION_PROMPTS; p++) {
    ck_assert_msg(prompt_count[p] > 0.24 * N && prompt_count[p] < 0.26 * N, "%d", prompt_count[p]);
    ck_assert(eval_prompts[p] > 0.24 * N && eval_prompts[p] < 0.26 * N);
  }
  /* another seed or epoch changes about 1 - (1/4 * (1/2 + 2/16)) of choices */
  ck_assert_msg(seed_diff > 0.8 * N && epoch_diff > 0.8 * N, "%d %d", seed_diff, epoch_diff);

  /* a fixed prompt */
  ck_assert_int_eq(mmrt_caption_set_prompt(&a, 2, err, sizeof err), MMRT_OK);
  for (int64_t i = 0; i < 100; i++) {
    ck_assert_int_eq(mmrt_caption_choose(&a, 3, i).prompt, 2);
    ck_assert_int_eq(mmrt_caption_choose(&a, 3, i).answer, mmrt_caption_choose(&b, 3, i).answer);
  }
}
END_TEST

/* Every row of a filled batch is a well-formed caption of its image's
 * class: labels[t] = text[t + 1] exactly on the answer and EOS targets. */
static void check_rows(const MmrtCaptioner *c, const MmrtBatchIter *it, int64_t rows,
                       const int32_t *text, const int32_t *labels) {
  char err[256], buf[256];
  int T = c->T;
  for (int64_t r = 0; r < rows; r++) {
    const int32_t *x = text + r * T, *y = labels + r * T;
    int64_t idx = mmrt_iter_index(it, r);
    if (idx < 0) {
      for (int t = 0; t < T; t++) ck_assert(x[t] == MMRT_TOK_PAD && y[t] == IGN);
      continue;
    }
    MmrtCaptionChoice ch = mmrt_caption_choose(c, it->epoch, idx);
    int label = it->ds->labels[idx];
    int32_t want[16], wlab[16];
    ck_assert_int_eq(mmrt_caption_layout(&c->tok, mmrt_caption_prompt(ch.prompt),
                                         mmrt_caption_answer(label, ch.answer), T, c->img_in_text,
                                         want, wlab, err, sizeof err),
                     MMRT_OK);
    assert_ids(x, want, T);
    assert_ids(y, wlab, T);
    int targets = 0, eos = -1;
    for (int t = 0; t < T; t++) {
      if (y[t] != IGN) {
        ck_assert(t + 1 < T && y[t] == x[t + 1]);
        targets++;
      }
      if (x[t] == MMRT_TOK_EOS) eos = t;
    }
    /* the answer text is the class phrasing */
    int first = eos - (targets - 1);
    ck_assert_int_eq(
        mmrt_words_decode(&c->tok, x + first, T - first, buf, sizeof buf, err, sizeof err),
        MMRT_OK);
    ck_assert_str_eq(buf, mmrt_caption_answer(label, ch.answer));
  }
}

/* Slices [lo, hi) of 1..5 ranks equal the serial batch's rows. */
static void check_split_invariance(const MmrtImages *ds, int shuffle, int64_t B, int nbatches,
                                   int img_in_text, MmrtCaptionMode mode) {
  char err[512];
  MmrtCaptioner c;
  int T = 12 + img_in_text;
  ck_assert_int_eq(mmrt_caption_init(&c, T, img_in_text, mode, 1234, err, sizeof err), MMRT_OK);
  MmrtBatchIter it;
  ck_assert_int_eq(mmrt_iter_init(&it, ds, B, shuffle, 99, err, sizeof err), MMRT_OK);
  float *px = malloc((size_t)B * 784 * sizeof *px), *px_r = malloc((size_t)B * 784 * sizeof *px);
  float *px_ref = malloc((size_t)B * 784 * sizeof *px);
  int32_t *text = malloc((size_t)(B * T) * sizeof *text),
          *lab = malloc((size_t)(B * T) * sizeof *lab);
  int32_t *text_r = malloc((size_t)(B * T) * sizeof *text),
          *lab_r = malloc((size_t)(B * T) * sizeof *lab);
  for (int b = 0; b < nbatches; b++) {
    int64_t rows = mmrt_iter_next(&it);
    if (rows == 0) break;
    mmrt_caption_fill(&c, &it, 0, B, px, text, lab);
    mmrt_iter_fill(&it, 0, B, px_ref, NULL);
    ck_assert(memcmp(px, px_ref, (size_t)B * 784 * sizeof *px) == 0);
    check_rows(&c, &it, B, text, lab);
    for (int nr = 1; nr <= 5; nr++) {
      memset(text_r, 0x7f, (size_t)(B * T) * sizeof *text_r);
      for (int rank = 0; rank < nr; rank++) {
        int64_t lo, hi;
        mmrt_batch_slice(B, nr, rank, &lo, &hi);
        mmrt_caption_fill(&c, &it, lo, hi, px_r + lo * 784, text_r + lo * T, lab_r + lo * T);
      }
      ck_assert(memcmp(px, px_r, (size_t)B * 784 * sizeof *px) == 0);
      ck_assert(memcmp(text, text_r, (size_t)(B * T) * sizeof *text) == 0);
      ck_assert(memcmp(lab, lab_r, (size_t)(B * T) * sizeof *lab) == 0);
    }
    /* NULL outputs are allowed */
    mmrt_caption_fill(&c, &it, 0, B, NULL, NULL, lab_r);
    ck_assert(memcmp(lab, lab_r, (size_t)(B * T) * sizeof *lab) == 0);
    mmrt_caption_fill(&c, &it, 0, B, NULL, text_r, NULL);
    ck_assert(memcmp(text, text_r, (size_t)(B * T) * sizeof *text) == 0);
  }
  free(px), free(px_r), free(px_ref), free(text), free(lab), free(text_r), free(lab_r);
  mmrt_iter_free(&it);
}

START_TEST(split_invariant_small) {
  MmrtImages ds = small_split(50);
  check_split_invariance(&ds, 1, 8, 20, 0, MMRT_CAPTION_TRAIN); /* crosses epochs */
  check_split_invariance(&ds, 1, 7, 10, 4, MMRT_CAPTION_TRAIN);
  check_split_invariance(&ds, 0, 16, 5, 0, MMRT_CAPTION_EVAL); /* short last batch */
  free_small(&ds);
}
END_TEST

START_TEST(split_invariant_real) {
  if (!have_real()) {
    fprintf(stderr, "skip: %s not installed\n", MMRT_FMNIST_DEFAULT_DIR);
    return;
  }
  MmrtImages tr, te;
  char err[512];
  int rc = mmrt_fmnist_load(&tr, NULL, MMRT_SPLIT_TRAIN, err, sizeof err);
  ck_assert_msg(rc == MMRT_OK, "%s", err);
  rc = mmrt_fmnist_load(&te, NULL, MMRT_SPLIT_TEST, err, sizeof err);
  ck_assert_msg(rc == MMRT_OK, "%s", err);
  check_split_invariance(&tr, 1, 64, 4, 0, MMRT_CAPTION_TRAIN);
  check_split_invariance(&tr, 1, 8, 4, 4, MMRT_CAPTION_TRAIN);
  check_split_invariance(&te, 0, 3000, 5, 0, MMRT_CAPTION_EVAL); /* 3000 x 3 + 1000 */

  /* the first training image (label 9) captioned for evaluation */
  MmrtCaptioner c;
  ck_assert_int_eq(mmrt_caption_init(&c, 12, 0, MMRT_CAPTION_EVAL, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_set_prompt(&c, 0, err, sizeof err), MMRT_OK);
  MmrtBatchIter it;
  ck_assert_int_eq(mmrt_iter_init(&it, &tr, 4, 0, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_iter_next(&it), 4);
  int32_t text[4 * 12], lab[4 * 12];
  float px[4 * 784];
  mmrt_caption_fill(&c, &it, 0, 4, px, text, lab);
  assert_ids(text, ex_ids, 12);
  assert_ids(lab, ex_labels, 12);
  ck_assert(px[0] == mmrt_fmnist_normalize(tr.pixels[0]));
  mmrt_iter_free(&it);
  mmrt_images_free(&tr);
  mmrt_images_free(&te);
}
END_TEST

START_TEST(prefix_and_exact_match) {
  MmrtCaptioner c;
  char err[512];
  ck_assert_int_eq(mmrt_caption_init(&c, 12, 0, MMRT_CAPTION_EVAL, 5, err, sizeof err), MMRT_OK);
  int32_t ids[16];
  /* the prefix is the start of the training layout, up to the prompt */
  for (int64_t i = 0; i < 200; i++) {
    int n = mmrt_caption_prefix(&c, i, ids);
    ck_assert_int_eq(mmrt_caption_prefix(&c, i, NULL), n);
    int32_t row[12];
    mmrt_caption_row(&c, 0, i, 3, row, NULL);
    assert_ids(ids, row, n);
    ck_assert_int_eq(n, 1 + c.prompts[mmrt_caption_choose(&c, 0, i).prompt].n);
    ck_assert_int_eq(row[n], W_A); /* "a dress" starts right after */
  }
  ck_assert_int_eq(mmrt_caption_set_prompt(&c, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_prefix(&c, 77, ids), 5);
  assert_ids(ids, ex_ids, 5);
  MmrtCaptioner ci;
  ck_assert_int_eq(mmrt_caption_init(&ci, 16, 4, MMRT_CAPTION_EVAL, 5, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_set_prompt(&ci, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_caption_prefix(&ci, 77, ids), 9);
  assert_ids(ids, ex_ids_img, 9);

  /* targets: canonical answer + EOS */
  ck_assert_int_eq(mmrt_caption_target(&c, 9, ids), 4);
  const int32_t boot[] = {W_AN, W_ANKLE, W_BOOT, MMRT_TOK_EOS};
  assert_ids(ids, boot, 4);
  ck_assert_int_eq(mmrt_caption_target(&c, 10, ids), 0);
  ck_assert_int_eq(mmrt_caption_target(&c, 1, ids), 5); /* a pair of trousers */

  /* exact match */
  const int32_t good[] = {W_AN, W_ANKLE, W_BOOT, MMRT_TOK_EOS, MMRT_TOK_PAD, W_DOT};
  const int32_t no_eos[] = {W_AN, W_ANKLE, W_BOOT, W_BOOT};
  const int32_t other[] = {W_IT, W_IS, W_AN, W_ANKLE, W_BOOT, MMRT_TOK_EOS};
  const int32_t wrong[] = {W_A, W_ANKLE, W_BOOT, MMRT_TOK_EOS};
  ck_assert_int_eq(mmrt_caption_match(&c, 9, good, 6), 1);
  ck_assert_int_eq(mmrt_caption_match(&c, 9, good, 4), 1);
  ck_assert_int_eq(mmrt_caption_match(&c, 9, good, 3), 0); /* EOS not generated */
  ck_assert_int_eq(mmrt_caption_match(&c, 9, no_eos, 4), 0);
  ck_assert_int_eq(mmrt_caption_match(&c, 9, other, 6), 0); /* strict: not canonical */
  ck_assert_int_eq(mmrt_caption_match(&c, 9, wrong, 4), 0);
  ck_assert_int_eq(mmrt_caption_match(&c, 8, good, 6), 0);
  ck_assert_int_eq(mmrt_caption_match(&c, -1, good, 6), 0);

  /* a batch: rows of stride 6, one padding row */
  int32_t gen[4 * 6] = {0};
  memcpy(gen, good, sizeof good);
  memcpy(gen + 6, other, sizeof other);
  memcpy(gen + 12, good, sizeof good);
  memcpy(gen + 18, good, sizeof good);
  const int32_t labels[4] = {9, 9, 9, -1}, lens[4] = {6, 6, 3, 6};
  int64_t counted = 0;
  ck_assert_int_eq(mmrt_caption_count_matches(&c, labels, gen, NULL, 4, 6, &counted), 2);
  ck_assert_int_eq(counted, 3);
  ck_assert_int_eq(mmrt_caption_count_matches(&c, labels, gen, lens, 4, 6, NULL), 1);
}
END_TEST

START_TEST(fill_prefix_batch) {
  MmrtImages ds = small_split(10);
  MmrtCaptioner c;
  MmrtBatchIter it;
  char err[512];
  ck_assert_int_eq(mmrt_caption_init(&c, 12, 0, MMRT_CAPTION_EVAL, 3, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_iter_init(&it, &ds, 4, 0, 0, err, sizeof err), MMRT_OK);
  int32_t prefix[4 * 12], plen[4], lab[4], p2[4 * 12], plen2[4], lab2[4];
  float px[4 * 784];
  ck_assert_int_eq(mmrt_iter_next(&it), 4);
  ck_assert_int_eq(mmrt_iter_next(&it), 4);
  ck_assert_int_eq(mmrt_iter_next(&it), 2); /* images 8, 9 and two padding rows */
  mmrt_caption_fill_prefix(&c, &it, 0, 4, px, prefix, plen, lab);
  ck_assert_int_eq(lab[0], 8);
  ck_assert_int_eq(lab[1], 9);
  ck_assert_int_eq(lab[2], -1);
  ck_assert_int_eq(lab[3], -1);
  ck_assert_int_eq(plen[2], 0);
  ck_assert_int_eq(plen[3], 0);
  for (int r = 0; r < 4; r++) {
    int32_t want[12];
    int n = r < 2 ? mmrt_caption_prefix(&c, 8 + r, want) : 0;
    ck_assert_int_eq(plen[r], n);
    assert_ids(prefix + r * 12, want, n);
    for (int t = n; t < 12; t++) ck_assert_int_eq(prefix[r * 12 + t], MMRT_TOK_PAD);
  }
  ck_assert(px[0] == mmrt_fmnist_normalize(8) && px[784] == mmrt_fmnist_normalize(9) &&
            px[2 * 784] == 0.0f);
  /* rank slices agree */
  mmrt_caption_fill_prefix(&c, &it, 0, 1, NULL, p2, plen2, lab2);
  mmrt_caption_fill_prefix(&c, &it, 1, 4, NULL, p2 + 12, plen2 + 1, lab2 + 1);
  ck_assert(memcmp(prefix, p2, sizeof p2) == 0);
  ck_assert(memcmp(plen, plen2, sizeof plen) == 0);
  ck_assert(memcmp(lab, lab2, sizeof lab) == 0);
  mmrt_caption_fill_prefix(&c, &it, 0, 4, NULL, NULL, plen2, NULL);
  ck_assert(memcmp(plen, plen2, sizeof plen) == 0);
  mmrt_iter_free(&it);
  free_small(&ds);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_caption");
  TCase *tc = tcase_create("tokens");
  tcase_add_test(tc, vocab_deterministic_and_fits);
  tcase_add_test(tc, encode_decode_round_trip);
  tcase_add_test(tc, unknown_word);
  suite_add_tcase(s, tc);
  tc = tcase_create("layout");
  tcase_add_test(tc, layout_hand_written);
  tcase_add_test(tc, caption_too_long);
  suite_add_tcase(s, tc);
  tc = tcase_create("batches");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, choice_deterministic_and_rates);
  tcase_add_test(tc, split_invariant_small);
  tcase_add_test(tc, split_invariant_real);
  tcase_add_test(tc, fill_prefix_batch);
  suite_add_tcase(s, tc);
  tc = tcase_create("eval");
  tcase_add_test(tc, prefix_and_exact_match);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
