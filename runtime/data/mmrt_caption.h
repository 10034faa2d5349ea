/* mmrt_caption.h: caption data for vision-language models (InternVL2) made
 * from Fashion-MNIST labels: prompts and answers, a word-level tokenizer
 * over their vocabulary, the token and label layout of one text sequence,
 * a batch fill on top of MmrtBatchIter, and exact-match evaluation.
 *
 * Captions.  Each image gets a prompt (one of MMRT_CAPTION_PROMPTS, e.g.
 * "what is this ?") and an answer (one of MMRT_CAPTION_ANSWERS phrasings of
 * its class, e.g. "an ankle boot", "it is an ankle boot"; phrasing 0 is the
 * canonical one).  The choice is a pure function of (seed, epoch, dataset
 * index) through Philox, so every rank and every run agree, and a rank
 * filling rows [lo, hi) gets exactly the serial batch's rows.
 *   MMRT_CAPTION_TRAIN: the prompt is uniform; the answer is the canonical
 *     phrasing with probability 1/2 and otherwise one of the others,
 *     uniformly.  The canonical phrasing is then the single most likely
 *     answer under every prompt (1/2 against 1/4 each), so greedy decoding
 *     of a well-trained model has one right output: exact match is well
 *     posed while training still sees varied phrasings.
 *   MMRT_CAPTION_EVAL: the answer is always canonical; the prompt depends
 *     on (seed, index) only (the epoch is ignored, every pass is the same),
 *     or is one fixed prompt for all images (mmrt_caption_set_prompt), which
 *     gives every generation prefix the same length.
 *
 * Tokens.  Ids 0..3 are PAD, BOS, EOS and IMG (the image-context token);
 * the words of all prompts and answers follow from id 4, sorted by strcmp
 * so the vocabulary never depends on table order.  Text is split on
 * whitespace; punctuation ("?", ".") is written as separate words.
 *
 * Layout of one text sequence of T positions (the model shifts nothing:
 * labels[t] is the target of the logits at position t, i.e. the token at
 * t + 1, or -100 where nothing is learned):
 *   image tokens inside the text, img_in_text = n (InternVL2Tiny: n = 4,
 *   the model's `place` puts its image rows where the IMG tokens stand;
 *   the trainer takes n from the compiled model):
 *     ids    = [BOS, IMG x n, prompt..., answer..., EOS, PAD...]
 *   no image tokens in the text (a model that concatenates its image in
 *   front of the text embeddings), img_in_text = 0:
 *     ids    = [BOS, prompt..., answer..., EOS, PAD...]
 *   labels[t] = ids[t + 1] when position t + 1 holds an answer word or the
 *   EOS, else -100: nothing is learned where the next token is an image
 *   token, a prompt word, or padding.  Example (T = 12, img_in_text = 0):
 *     ids    = BOS what is this ? an ankle boot EOS PAD PAD PAD
 *     labels = -100 -100 -100 -100 an ankle boot EOS -100 -100 -100 -100
 */
#ifndef MMRT_CAPTION_H
#define MMRT_CAPTION_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_data.h"
#include "mmrt_log.h"

#define MMRT_CAPTION_PROMPTS   4
#define MMRT_CAPTION_ANSWERS   3 /* phrasings per class; 0 is canonical */
#define MMRT_CAPTION_MAX_WORDS 8 /* words in one prompt or one answer */
#define MMRT_IGNORE_INDEX      (-100)

enum {
  MMRT_TOK_PAD = 0,
  MMRT_TOK_BOS = 1,
  MMRT_TOK_EOS = 2,
  MMRT_TOK_IMG = 3,
  MMRT_TOK_FIRST_WORD = 4,
};

#define MMRT_TOK_MAX  128 /* room for ids; the caption vocabulary uses 34 */
#define MMRT_TOK_WORD 16  /* bytes per word, with the NUL */

/* ---- caption texts ---- */

/* Prompt p in [0, MMRT_CAPTION_PROMPTS), e.g. "what is this ?"; NULL
 * outside. */
const char *mmrt_caption_prompt(int p);

/* Phrasing k in [0, MMRT_CAPTION_ANSWERS) of class `label` in [0, 10),
 * e.g. (9, 0) -> "an ankle boot"; NULL outside. */
const char *mmrt_caption_answer(int label, int k);

/* ---- tokenizer ---- */

typedef struct MmrtTokenizer {
  int size;                                /* V: 4 specials + the words */
  char words[MMRT_TOK_MAX][MMRT_TOK_WORD]; /* (V) id -> "<pad>", "<bos>",
                                              "<eos>", "<img>", sorted words */
} MmrtTokenizer;

/* The text-to-video captions' vocabulary (mmrt_features.c: the DiT task's,
 * the extractor's and the sampler's): "<pad>" 0, "<eos>" 1, then every word of every clip
 * caption, sorted, from 2. */
void mmrt_dit_vocab(MmrtTokenizer *tok);

/* The caption vocabulary: specials, then every word of every prompt and
 * answer, sorted and without duplicates. */
int mmrt_tok_build(MmrtTokenizer *tok, char *err, size_t errlen);

/* MMRT_OK when the vocabulary fits a model with `vocab` embedding rows,
 * else MMRT_ERR_MISMATCH with both sizes in the message. */
int mmrt_tok_fits(const MmrtTokenizer *tok, int vocab, char *err, size_t errlen);

/* Id of word[0..len) (a special's name such as "<img>" included); -1 when
 * it is not in the vocabulary. */
int32_t mmrt_tok_id(const MmrtTokenizer *tok, const char *word, size_t len);

/* Text of id; NULL outside [0, V). */
const char *mmrt_tok_word(const MmrtTokenizer *tok, int32_t id);

/* ids[0..*n) = the words of `text` (split on whitespace).  Fails on an
 * unknown word (MMRT_ERR_ARG, naming the word and listing the vocabulary)
 * and when more than `cap` ids are needed. */
int mmrt_words_encode(const MmrtTokenizer *tok, const char *text, int32_t *ids, int cap, int *n,
                      char *err, size_t errlen);

/* The words of ids[0..n) joined by single spaces into buf, stopping before
 * the first EOS; PAD, BOS and IMG are written by name ("<pad>", ...).
 * Fails on an id outside [0, V) and when buf is too small. */
int mmrt_words_decode(const MmrtTokenizer *tok, const int32_t *ids, int n, char *buf, size_t len,
                      char *err, size_t errlen);

/* ---- one sequence ---- */

/* ids (T) and labels (T) of one caption given as text, per the layout
 * above.  Fails on unknown words and, with MMRT_ERR_ARG, when BOS + IMG x
 * img_in_text + prompt + answer + EOS exceeds T (the message gives each
 * count and T).  labels may be NULL. */
int mmrt_caption_layout(const MmrtTokenizer *tok, const char *prompt, const char *answer, int T,
                        int img_in_text, int32_t *ids, int32_t *labels, char *err, size_t errlen);

/* ---- the captioner: tokenizer, layout and phrasing choice together ---- */

typedef enum MmrtCaptionMode { MMRT_CAPTION_TRAIN, MMRT_CAPTION_EVAL } MmrtCaptionMode;

typedef struct MmrtCaptionTokens {
  int n;
  int32_t ids[MMRT_CAPTION_MAX_WORDS];
} MmrtCaptionTokens;

typedef struct MmrtCaptioner {
  MmrtTokenizer tok;
  int T;           /* text positions */
  int img_in_text; /* IMG tokens after BOS; 0 when the model puts its
                      image tokens before the text */
  MmrtCaptionMode mode;
  uint64_t seed;
  int fixed_prompt; /* -1: chosen per image; else this prompt always */
  MmrtCaptionTokens prompts[MMRT_CAPTION_PROMPTS];
  MmrtCaptionTokens answers[MMRT_FMNIST_CLASSES][MMRT_CAPTION_ANSWERS];
} MmrtCaptioner;

/* Build the tokenizer and encode every prompt and phrasing; checks that the
 * longest caption fits T (else MMRT_ERR_ARG naming that caption, its token
 * counts and T), so the fills below cannot fail. */
int mmrt_caption_init(MmrtCaptioner *c, int T, int img_in_text, MmrtCaptionMode mode, uint64_t seed,
                      char *err, size_t errlen);

/* Use prompt p for every image (p = -1: back to the per-image choice). */
int mmrt_caption_set_prompt(MmrtCaptioner *c, int p, char *err, size_t errlen);

/* The phrasing of dataset image `index` in `epoch` (epoch ignored in EVAL
 * mode): indexes into mmrt_caption_prompt and mmrt_caption_answer. */
typedef struct MmrtCaptionChoice {
  int prompt;
  int answer;
} MmrtCaptionChoice;
MmrtCaptionChoice mmrt_caption_choose(const MmrtCaptioner *c, int64_t epoch, int64_t index);

/* ids (T) and labels (T) of image `index` with class `label`; a label
 * outside [0, 10) (a padding row) gives all PAD and all -100.  labels may
 * be NULL. */
void mmrt_caption_row(const MmrtCaptioner *c, int64_t epoch, int64_t index, int label, int32_t *ids,
                      int32_t *labels);

/* Rows [lo, hi) of the iterator's current batch, in its current epoch:
 *   pixels (hi - lo, 1, 28, 28) normalised as mmrt_iter_fill does,
 *   text (hi - lo, T), labels (hi - lo, T).
 * Rows past the batch's row count are zero images, PAD text and all -100
 * labels.  Any pointer may be NULL. */
void mmrt_caption_fill(const MmrtCaptioner *c, const MmrtBatchIter *it, int64_t lo, int64_t hi,
                       float *pixels, int32_t *text, int32_t *labels);

/* ---- evaluation ---- */

/* ids (up to T) = [BOS, IMG x img_in_text, prompt...], the prefix greedy
 * generation starts from, with the prompt mmrt_caption_choose gives for
 * (epoch 0, index); returns its length (ids may be NULL to get only the
 * length). */
int mmrt_caption_prefix(const MmrtCaptioner *c, int64_t index, int32_t *ids);

/* Rows [lo, hi) of the current batch for generation:
 *   pixels (hi - lo, 1, 28, 28), prefix (hi - lo, T) PAD after the prefix,
 *   prefix_len (hi - lo), label (hi - lo) (class, -1 on padding rows, whose
 *   prefix_len is 0).  Any pointer may be NULL. */
void mmrt_caption_fill_prefix(const MmrtCaptioner *c, const MmrtBatchIter *it, int64_t lo,
                              int64_t hi, float *pixels, int32_t *prefix, int32_t *prefix_len,
                              int32_t *label);

/* ids = the canonical answer of `label` followed by EOS; returns its length
 * (0 for a label outside [0, 10)).  ids needs MMRT_CAPTION_MAX_WORDS + 1. */
int mmrt_caption_target(const MmrtCaptioner *c, int label, int32_t *ids);

/* 1 when the generated continuation gen[0..n) (the tokens after the
 * prefix) starts with exactly the canonical answer of `label` and then EOS
 * (what follows the EOS is ignored), else 0. */
int mmrt_caption_match(const MmrtCaptioner *c, int label, const int32_t *gen, int n);

/* Exact matches over `rows` generations: row r is gen[r * stride ..] with
 * gen_len[r] tokens (stride when gen_len is NULL) and class label[r]; rows
 * with label -1 are padding and not counted.  *counted (may be NULL) gets
 * the number of rows scored. */
int64_t mmrt_caption_count_matches(const MmrtCaptioner *c, const int32_t *label, const int32_t *gen,
                                   const int32_t *gen_len, int64_t rows, int64_t stride,
                                   int64_t *counted);

#endif
