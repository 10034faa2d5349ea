/* mmrt_conv.h: conversation datasets in the LLaVA/InternVL format, read,
 * checked and turned into token ids with a label mask.
 *
 * The file is a JSON list of samples or JSON Lines (one sample a line; the
 * first non-blank byte '[' tells a list); a sample is
 *   {"id": "s1", "image": "a.jpg" | ["a.jpg", "b.png"],
 *    "conversations": [{"from": "human", "value": "<image>\nWhat is it?"},
 *                      {"from": "gpt", "value": "A cat."}, ...]}
 * "id" may be a string or a number (absent: the sample's index); "image"
 * may be absent or null (a text-only sample). Images are relative to the
 * image folder (an absolute name is taken as it is).
 *
 * Each sample is checked, and refused with a message
 *   FILE[:LINE]: sample INDEX (id "ID"): FIELD: what
 * when: it is not an object; "conversations" is not a non-empty list of
 * {"from", "value"} strings; a role is not human/user, gpt/assistant or
 * system (system only first); the turns do not alternate human, gpt from a
 * human one and end with a gpt one; the count of "<image>" placeholders in
 * the values differs from the count of images; an image is missing or does
 * not decode (mmrt_image: JPEG, PNG, WebP); the sample's ids exceed the
 * sequence length under MMRT_CONV_FAIL.
 *
 * Each placeholder, in order, becomes image k's tokens:
 *   START + N x CONTEXT + END
 * (InternVL2: <img>, <IMG_CONTEXT>, </img>; others: N x <image>, no start
 * or end), N = a fixed count per image (LLaVA), or tiles x tokens per tile
 * with tiles = cols * rows (+ 1 thumbnail when more than one) of
 * mmrt_image_tile_grid on the decoded (EXIF-rotated) size. The messages
 * are then rendered and encoded by mmrt_tok_chat_encode (roles human ->
 * user, gpt -> assistant), whose mask (1 on the assistant replies and
 * their end token) gives the labels: the id where 1, -100 elsewhere.
 * START, CONTEXT and END must each be one added token of the tokenizer.
 * Nothing here exits. */
#ifndef MMRT_CONV_H
#define MMRT_CONV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mmrt_tok.h"

/* What a sample longer than seq_len becomes. */
typedef enum MmrtConvTooLong {
  MMRT_CONV_FAIL,     /* a bad sample */
  MMRT_CONV_TRUNCATE, /* cut to seq_len; dropped if the cut would lose image tokens */
  MMRT_CONV_DROP,     /* dropped (counted) */
} MmrtConvTooLong;

typedef struct MmrtConvOpts {
  const char *family;                            /* a chat family of mmrt_tok_chat_families() */
  const char *image_dir;                         /* NULL: the current directory */
  int image_tokens;                              /* > 0: this many tokens per image; 0: by tiles */
  int tile, max_tiles, tokens_per_tile;          /* tiling: tile size, 1..max_tiles */
  const char *img_start, *img_context, *img_end; /* NULL: the family's */
  size_t seq_len;                                /* 0: no limit */
  MmrtConvTooLong too_long;
  int64_t max_pixels; /* <= 0: mmrt_image's default */
} MmrtConvOpts;

typedef struct MmrtConvSample {
  size_t index; /* 0-based, in the file */
  size_t line;  /* its line in a JSONL file (0: a JSON list) */
  char *id;
  MmrtTokIds ids;
  MmrtTokMask mask; /* 1: a label (ids[i]), 0: -100 */
  int nimages;
  int *tiles;        /* per image (1 with a fixed count) */
  int *image_tokens; /* per image */
  char **paths;      /* per image: the file read (the folder joined) */
  bool truncated;
} MmrtConvSample;

typedef enum MmrtConvStatus {
  MMRT_CONV_OK,      /* *s holds the sample */
  MMRT_CONV_EOF,     /* no more samples */
  MMRT_CONV_BAD,     /* this sample is bad (err says why); the next call reads on */
  MMRT_CONV_DROPPED, /* too long and dropped (err says why); the next call reads on */
  MMRT_CONV_ERROR,   /* the file cannot be read or parsed: stop */
} MmrtConvStatus;

typedef struct MmrtConv MmrtConv;

/* Reads PATH and checks the options against tok (borrowed: it must outlive
 * the reader). NULL and a message on failure. */
MmrtConv *mmrt_conv_open(const char *path, MmrtTok *tok, const MmrtConvOpts *o, char *err,
                         size_t errlen);
MmrtConvStatus mmrt_conv_next(MmrtConv *c, MmrtConvSample *s, char *err, size_t errlen);
void mmrt_conv_sample_free(MmrtConvSample *s);
/* The id of the image context token (each image's N tokens). */
int32_t mmrt_conv_context_id(const MmrtConv *c);
void mmrt_conv_close(MmrtConv *c);

#endif
