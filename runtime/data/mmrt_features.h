/* mmrt_features.h: what the DiT feeder (mmrt_feed_dit.c) and the feature
 * extractor (mmrt_extract.c) share: the captions as word ids, and the
 * features directory (docs/design/t2v.md "Offline features").
 *
 * A features directory DIR (written by the extractor, read by the trainer's
 * --features DIR):
 *   DIR/manifest.json            {"format": "mmc-features", "version": 1,
 *                                 "model", "fingerprint" (the model's,
 *                                 mmrt_features_fingerprint: the trainer
 *                                 must have the same), "seed" (the
 *                                 training clips'), "heldout_seed",
 *                                 "frames", "init_from", "encoder_crc32"
 *                                 (of the frozen parameters' bytes, in
 *                                 descriptor order), "tensors" {name:
 *                                 {"dtype", "shape"}} (one clip's),
 *                                 "train" and "heldout" {"clips", "shards":
 *                                 [{"file", "first", "clips", "crc32":
 *                                 {name: hex}}]}, "null" {"file",
 *                                 "crc32"}}
 *   DIR/train-NNNNN.safetensors  rows first .. first + clips - 1 of the
 *                                 training clips (clip i under "seed", as
 *                                 the trainer's sample i draws it):
 *                                 latents f32[n, C, T, H, W] (@latents, the
 *                                 WF-VAE posterior's mean), text_features
 *                                 f32[n, L, D] (@text_features of the
 *                                 caption), text i32[n, L] (the caption's
 *                                 ids), label i32[n] (the item's class);
 *                                 each tensor's CRC32 in the metadata too
 *   DIR/heldout-NNNNN.safetensors the same for the held-out clips (test
 *                                 split, MMRT_VIDEO_HELDOUT_SEED), in order
 *   DIR/null.safetensors         text_features f32[1, L, D], text i32[1, L]:
 *                                 the null caption [EOS, PAD...] (the
 *                                 caption drop of classifier-free guidance)
 * The features of clip i are computed in the batch of rows
 * [B floor(i / B), B floor(i / B) + B), as the trainer's step would. */
#ifndef MMRT_FEATURES_H
#define MMRT_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_caption.h"
#include "mmrt_main.h"
#include "mmrt_video.h"

#define MMRT_DIT_PAD 0
#define MMRT_DIT_EOS 1

/* (mmrt_dit_vocab, mmrt_caption.h: PAD, EOS, then every word of every clip
 * caption, sorted, once each; defined in mmrt_features.c.) */

/* The clip's caption as ids over tok, then EOS, then PAD to L; drop: the
 * null caption [EOS, PAD...]. */
void mmrt_dit_caption_ids(const MmrtTokenizer *tok, const MmrtClipInfo *ci, int drop, int32_t *ids,
                          int64_t L);
/* The same of any text (a video file's caption): its words split at
 * spaces, each word of tok an id, words not in tok left out (as the clips'
 * captions' are: every one of their words is in tok), at most L - 1; the
 * count of words left out. */
int mmrt_dit_text_ids(const MmrtTokenizer *tok, const char *text, int drop, int32_t *ids,
                      int64_t L);

/* "<model>-<16 hex>": FNV-1a of the model's name, its parameters (names,
 * dtypes, unpadded shapes, frozen; in any order) and its inputs latents and
 * text_features, the same for the extractor and for a trainer of any plan
 * (the descriptor's fingerprint differs between them: their inputs). */
void mmrt_features_fingerprint(const MmrtModelDesc *m, char *out, size_t n);

/* One split of a features directory, in memory. */
typedef struct MmrtFeatSplit {
  int64_t clips;
  float *latents, *text_features; /* [clips, lat], [clips, L * D] */
  int32_t *text, *label;          /* [clips, L], [clips] */
} MmrtFeatSplit;

typedef struct MmrtFeatures {
  int64_t lat, L, D; /* one clip's latents (elements), text positions, feature width */
  int64_t lat_shape[4];
  uint64_t seed;
  int frames;
  MmrtFeatSplit train, heldout;
  float *null_features; /* [L * D] */
  int32_t *null_text;   /* [L] */
} MmrtFeatures;

/* Allocates the splits for (train, heldout) clips; MMRT_OK or NOMEM. */
int mmrt_features_alloc(MmrtFeatures *f, int64_t train, int64_t heldout, char *err, size_t errlen);
void mmrt_features_free(MmrtFeatures *f);

/* Writes DIR (created if missing): the shards of at most `shard` clips,
 * null.safetensors, then manifest.json (last: a directory without one is
 * not a features directory). encoder_crc: of the frozen parameters. */
int mmrt_features_write(const char *dir, const MmrtFeatures *f, const MmrtModelDesc *m,
                        const char *init_from, uint32_t encoder_crc, int64_t shard, char *err,
                        size_t errlen);

/* Reads DIR for model m: the manifest's format, fingerprint (m's), and the
 * one-clip shapes (the model's inputs latents and text_features), then
 * every shard (each tensor's shape, the manifest's CRC32 against the file's
 * and the bytes against it). Errors name the file. */
int mmrt_features_read(const char *dir, MmrtFeatures *f, const MmrtModelDesc *m, char *err,
                       size_t errlen);

#endif
