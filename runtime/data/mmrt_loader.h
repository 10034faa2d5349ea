/* mmrt_loader.h: the text loader behind the trainer's text task
 * (mmrt_feed_text.c): datasets named by --data (JSONL or a Megatron indexed
 * dataset, or a weighted blend of several), their documents laid out into
 * rows of T tokens (packed, or one document a row), and a row's ids,
 * labels and document segments on demand.
 *
 * A JSONL file is read and tokenized when the loader opens: the lines are
 * read and checked on the calling thread while a pool of loader threads
 * (--loader-threads), each with its own tokenizer, tokenizes chunks of
 * documents; the ids are appended in file order, so the rows are the same
 * for any number of threads. An indexed dataset is mapped and read row by
 * row as the rows are asked for. A sample of the trainer is a
 * row; its iterator (mmrt_data.h) shuffles the rows per epoch from the
 * seed, and each rank fills only its rows.
 *
 * Layout. Each document of n tokens (after the tokenizer's post-processor:
 * BOS/EOS as it declares them) gives n ids and n - 1 next-token labels; the
 * label of its last token is the ignore index (the boundary: never the
 * next document's first token). A chat document ("messages") labels only
 * the assistant replies' tokens. Longer than T: truncated to its first T
 * tokens, or dropped (--too-long). Packed: documents in file order, each
 * into the current row while it fits, else into a new one (a document is
 * never split); unpacked: one document a row. The rest of a row is padding
 * (the tokenizer's pad id or 0; labels the ignore index; a segment of its
 * own). Documents of fewer than two tokens are left out (nothing to learn).
 * Blend: the blended sample i comes from the dataset whose count is
 * furthest below weight * (i + 1) (each dataset's rows cycling), as
 * Megatron's blended dataset assigns them; an epoch has as many samples as
 * the datasets have rows together.
 * Held-out split (--eval-split F): document d of each dataset (its index
 * in the file, or its sequence) is held out for evaluation when
 * floor((d + 1) F) > floor(d F) (every 1/F-th: round(F D) of D documents,
 * the same for any seed); the held-out documents are laid out into rows
 * of their own (the evaluation split, the datasets' in turn) and are in no
 * training row. Nothing here prints or exits. */
#ifndef MMRT_LOADER_H
#define MMRT_LOADER_H
#include <stddef.h>
#include <stdint.h>

#include "mmrt_flags.h"

/* The trainer's text flags (mmrt_feed_text.c parses them). */
typedef struct MmrtTextOpts {
  const char *tokenizer;   /* --tokenizer FILE (JSONL needs it) */
  int64_t seq_len;         /* --seq-len N (0: not given) */
  int pack;                /* --pack 1, --no-pack -1, 0: not given (from pack_on, pack_off) */
  int pack_on, pack_off;   /* --pack, --no-pack given */
  const char *too_long;    /* --too-long truncate|drop (NULL: truncate) */
  const char *bad_samples; /* --bad-samples fail|skip (NULL: fail) */
  /* conversations (mmrt_feed_conv.c) */
  const char *images;    /* --images DIR: the folder image names are relative to */
  const char *chat;      /* --chat FAMILY (NULL: internvl2) */
  const char *eval_data; /* --eval-data FILE: the final evaluation's conversations */
  int64_t max_tiles;     /* --max-tiles N (0: the model's tiles per sample - 1) */
  int no_tile_balance;   /* --no-tile-balance: a tile pool's samples not dealt by tiles */
  int given;             /* any of them was given (the flag named in first) */
  int at[16];            /* each text flag's first position in argv, 0: not given (the
                          * trainer's table: MMRT_FLAG_SEEN of its text rows) */
  int64_t threads;       /* --loader-threads N (-1: not given, min(2, CPUs)) */
  double eval_split;     /* --eval-split F: the fraction held out (0: none) */
  const char *first;
} MmrtTextOpts;

/* The text flags the trainer (mmrt_main.c) and the conversation evaluator
 * (mmrt_conv_eval.c) both take, as rows of their flag tables
 * (mmrt_flags.h): each row's flag, value and checks, its destination in the
 * program's MmrtTextOpts (o: that struct's offsetof in the program's
 * arguments) and its first position in argv (o.at, for mmrt_text_settle);
 * the help text is the program's. */
#define MMRT_TEXT_AT(o, f)   ((o) + offsetof(MmrtTextOpts, f))
#define MMRT_TEXT_SEEN(o, k) MMRT_FLAG_SEEN(MMRT_TEXT_AT(o, at[k]))
#define MMRT_TEXT_FLAG_TOKENIZER(o, help)                                                          \
  MMRT_FLAG_S("--tokenizer", "FILE", MMRT_TEXT_AT(o, tokenizer), help, MMRT_TEXT_SEEN(o, 0))
#define MMRT_TEXT_FLAG_TOO_LONG(o, help)                                                           \
  MMRT_FLAG_E("--too-long", "M", MMRT_TEXT_AT(o, too_long), "truncate|drop",                       \
              "%F takes truncate or drop, not '%V'", help, MMRT_TEXT_SEEN(o, 4))
#define MMRT_TEXT_FLAG_BAD_SAMPLES(o, help)                                                        \
  MMRT_FLAG_E("--bad-samples", "M", MMRT_TEXT_AT(o, bad_samples), "fail|skip",                     \
              "%F takes fail or skip, not '%V'", help, MMRT_TEXT_SEEN(o, 5))
#define MMRT_TEXT_FLAG_IMAGES(o, help)                                                             \
  MMRT_FLAG_S("--images", "DIR", MMRT_TEXT_AT(o, images), help, MMRT_TEXT_SEEN(o, 6))
#define MMRT_TEXT_FLAG_CHAT(o, help)                                                               \
  MMRT_FLAG_S("--chat", "FAMILY", MMRT_TEXT_AT(o, chat), help, MMRT_TEXT_SEEN(o, 7))
#define MMRT_TEXT_FLAG_EVAL_DATA(o, help)                                                          \
  MMRT_FLAG_S("--eval-data", "FILE", MMRT_TEXT_AT(o, eval_data), help, MMRT_TEXT_SEEN(o, 8))
#define MMRT_TEXT_FLAG_MAX_TILES(o, help)                                                          \
  MMRT_FLAG_I("--max-tiles", "N", MMRT_TEXT_AT(o, max_tiles), 1, INT64_MAX,                        \
              "%F takes a whole number >= %L, not '%V'", help, MMRT_TEXT_SEEN(o, 9))

typedef struct MmrtLoader MmrtLoader;

/* 1 when SPEC names text data (a blend, a file, PREFIX.bin/.idx, or a
 * missing *.jsonl), 0 when it is a directory or nothing (Fashion-MNIST's
 * meaning). */
int mmrt_loader_is_text(const char *spec);

/* Opens SPEC for rows of T tokens with a vocabulary of `vocab` (ids at or
 * past it are bad samples); ignore: the labels' ignore index. NULL with
 * "FILE[:LINE]: what" in err. */
MmrtLoader *mmrt_loader_open(const char *spec, const MmrtTextOpts *o, int64_t T, int64_t vocab,
                             int32_t ignore, char *err, size_t errlen);
void mmrt_loader_close(MmrtLoader *l);

/* The splits: the training rows, and the held-out ones (--eval-split;
 * without it the evaluation split is the training rows). */
enum { MMRT_TEXT_TRAIN, MMRT_TEXT_EVAL };

/* Samples (rows) of a split. */
int64_t mmrt_loader_samples(const MmrtLoader *l, int split);
/* Row `sample` of a split into ids, labels, seg (each token's document in
 * the row: 0, 1, ...; the padding one more) and pos (its position in its
 * document, or in the padding); T each; seg and pos may be NULL. */
void mmrt_loader_row(const MmrtLoader *l, int split, int64_t sample, int32_t *ids, int32_t *labels,
                     int32_t *seg, int32_t *pos);
/* Where token `at` of row `sample` comes from: "FILE: sequence S, token
 * K" (indexed; JSONL: "document D", 0-based). */
void mmrt_loader_where(const MmrtLoader *l, int split, int64_t sample, int64_t at, char *buf,
                       size_t n);
/* Tokens of the documents read (all of them: before truncation, either split). */
int64_t mmrt_loader_tokens(const MmrtLoader *l);
/* Bad samples skipped (--bad-samples skip) and documents dropped as too long. */
int64_t mmrt_loader_skipped(const MmrtLoader *l);
/* One line: datasets, documents, rows, tokens used of the row slots. */
void mmrt_loader_describe(const MmrtLoader *l, char *buf, size_t n);

#endif
