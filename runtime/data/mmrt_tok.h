/* mmrt_tok.h: text tokenizers read from a Hugging Face `tokenizer.json`
 * (the `tokenizers` library's format): encode UTF-8 text to token ids and
 * decode ids back to text, with the same ids as `tokenizers`.
 *
 * Supported (anything else in the file is refused by its JSON path and type):
 *   models          BPE (byte-level as GPT-2/Qwen2, SentencePiece-style with
 *                   byte_fallback as Llama), Unigram (T5/mT5)
 *   normalizers     NFC NFD NFKC NFKD Lowercase Strip StripAccents Replace
 *                   Prepend ByteLevel Precompiled (SentencePiece's) Sequence
 *   pre_tokenizers  ByteLevel Split Metaspace Whitespace WhitespaceSplit
 *                   Digits Punctuation Sequence
 *   post_processors TemplateProcessing ByteLevel RobertaProcessing
 *                   BertProcessing Sequence (single sequences only)
 *   decoders        ByteLevel Metaspace ByteFallback Fuse Strip Replace BPEDecoder
 *                   WordPiece Sequence
 *   added_tokens    matched before the normalizer (normalized = false) or
 *                   after it (true), leftmost-longest, with lstrip, rstrip,
 *                   single_word and special
 * Regular expressions run on PCRE2 (UTF, Unicode properties); Unicode
 * normalisation, case mapping and character classes come from libunistring.
 *   truncation      max_length, strategy, stride, direction; padding: Fixed or
 *                   BatchLongest (of one sequence), pad_id, direction,
 *                   pad_to_multiple_of (applied by mmrt_tok_encode_opts only)
 * Nothing here exits: errors are returned as text naming the file and the
 * JSON field. The encoder is not thread-safe (it keeps a BPE word cache). */
#ifndef MMRT_TOK_H
#define MMRT_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct MmrtTok MmrtTok;

/* A growable list of ids and a growable byte string (owned, free with free()). */
typedef struct MmrtTokIds {
  int32_t *v;
  size_t n, cap;
} MmrtTokIds;

typedef struct MmrtTokText {
  char *p;
  size_t n, cap;
} MmrtTokText;

/* Reads PATH; NULL and a message in err ("PATH: FIELD: what") on failure. */
MmrtTok *mmrt_tok_load(const char *path, char *err, size_t errlen);
void mmrt_tok_free(MmrtTok *t);

/* Appends the ids of text[0..len) to out. The text must be valid UTF-8
 * (false with a message giving the byte offset otherwise). add_special
 * applies the post-processor's special tokens (BOS/EOS). */
bool mmrt_tok_encode(MmrtTok *t, const char *text, size_t len, bool add_special, MmrtTokIds *out,
                     char *err, size_t errlen);

/* mmrt_tok_encode with the file's truncation and padding when asked:
 * MMRT_TOK_TRUNCATE cuts the ids to the file's truncation.max_length (less
 * the special tokens MMRT_TOK_ADD_SPECIAL adds) before the post-processor,
 * MMRT_TOK_PAD pads after it, as tokenizers' Tokenizer.encode does for one
 * sequence. Without a truncation/padding in the file the flag does nothing.
 * On failure (a truncation tokenizers refuses) nothing is appended. */
enum { MMRT_TOK_ADD_SPECIAL = 1, MMRT_TOK_TRUNCATE = 2, MMRT_TOK_PAD = 4 };
bool mmrt_tok_encode_opts(MmrtTok *t, const char *text, size_t len, unsigned flags, MmrtTokIds *out,
                          char *err, size_t errlen);

/* Appends the text of ids[0..n) to out (not NUL-terminated). An id with no
 * token is an error. skip_special drops special added tokens. */
bool mmrt_tok_decode(const MmrtTok *t, const int32_t *ids, size_t n, bool skip_special,
                     MmrtTokText *out, char *err, size_t errlen);

/* One more than the largest id of the model or the added tokens. */
int32_t mmrt_tok_vocab_size(const MmrtTok *t);

/* The file's truncation.max_length (0: no truncation) and padding.pad_id
 * (-1: no padding). */
size_t mmrt_tok_max_length(const MmrtTok *t);
int32_t mmrt_tok_pad_id(const MmrtTok *t);

/* ---- chat formats (mmrt_tok_chat.c) ---- */
typedef struct MmrtTokMsg {
  const char *role;    /* "system", "user", "assistant" (chatml: any) */
  const char *content; /* UTF-8, content_len bytes */
  size_t content_len;
} MmrtTokMsg;

/* A growable byte mask, one 0/1 per id (free v with free()). */
typedef struct MmrtTokMask {
  uint8_t *v;
  size_t n, cap;
} MmrtTokMask;

/* The families known, for messages: "chatml, qwen2, internvl2, llama2, vicuna". */
const char *mmrt_tok_chat_families(void);

/* Appends the text FAMILY's template renders for msgs[0..n). */
bool mmrt_tok_chat_render(const char *family, const MmrtTokMsg *msgs, size_t n, MmrtTokText *out,
                          char *err, size_t errlen);

/* Appends the ids of the rendered conversation to ids and one mask byte per
 * id to mask: 1 on the tokens of the assistant replies and their end token
 * (what the loss is taken on), 0 elsewhere. The family's special tokens must
 * be added tokens of t. On failure nothing is appended. */
bool mmrt_tok_chat_encode(MmrtTok *t, const char *family, const MmrtTokMsg *msgs, size_t n,
                          MmrtTokIds *ids, MmrtTokMask *mask, char *err, size_t errlen);

#endif
