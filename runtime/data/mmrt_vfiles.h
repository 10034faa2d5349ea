/* mmrt_vfiles.h: a dataset of video files for training and feature
 * extraction (docs/video.md "Training from video files"): OpenSoraPlan's
 * JSON list (or JSON Lines) of {path, cap, num_frames, fps, resolution}
 * read with mmrt_vdec_json_read_ex, each sample's video decoded with
 * mmrt_vdec_read when its batch is filled -- or, one batch ahead, on a
 * loader thread while the step runs -- sampled to the model's frame count
 * at the wanted fps, center-cropped and resized to the model's H x W, and
 * made grey (C = 1: round((299 R + 587 G + 114 B) / 1000) of the bytes,
 * ITU-R BT.601's luma as PIL's convert("L") takes it; R = G = B stays the
 * same byte) or kept RGB (C = 3).
 *
 * Order: training sample i is entry perm_e[i mod n] with e = i / n and
 * perm_e = mmrt_rng_permutation(n, seed ^ MMRT_VFILES_SALT, e): every
 * entry once an epoch, a pure function of (seed, i), so ranks fill their
 * rows alone and a resumed run reads what the straight run read.
 * Evaluation row i is entry i (file order).
 *
 * Bad samples: an entry that fails the JSON checks (a missing file, too
 * few frames declared), a video that does not decode (corrupt, truncated,
 * fewer frames than needed), or whose frames are not the JSON's declared
 * resolution or are smaller than the model's: with skip = 0 an error "FILE:
 * entry I (sample S): what"; with skip = 1 the sample takes the next good
 * entry in file order (cyclically) instead, counted in `skipped`. Which
 * entry replaces a bad one depends on the data only, never on ranks or
 * history. Nothing here prints. */
#ifndef MMRT_VFILES_H
#define MMRT_VFILES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mmrt_vdec.h"

#define MMRT_VFILES_SALT 0x7666696c65736571ull /* "vfileseq" */
#define MMRT_VFILES_ERR  1024

/* The decoder (FFmpeg's libraries) is linked into a trainer only when its
 * model takes a video, a 5-D input: codegen/cg_emit.c then names
 * MMRT_VFILES_SYMBOLS to the linker (-u). Elsewhere these functions are
 * weak and NULL, so a trainer for text or images does not load FFmpeg's
 * ~140 shared objects; callers check mmrt_vfiles_open before a list is
 * opened. */
#define MMRT_VFILES_WEAK __attribute__((weak))

typedef struct MmrtVfilesAhead MmrtVfilesAhead;

typedef struct MmrtVfiles {
  char *json;
  MmrtVdecEntry *e;
  int n;
  MmrtVdecSpec spec;   /* frames, fps, h, w */
  int C;               /* 1 (grey) or 3 (RGB) */
  int skip;            /* --bad-samples skip */
  int64_t bad_at_read; /* entries the JSON checks refused (skip) */
  int64_t skipped;     /* samples that took another entry, this process */
  size_t per;          /* C * T * H * W */
  uint32_t *perm;      /* the epoch's order */
  int64_t perm_epoch;
  MmrtVfilesAhead *ahead; /* the loader thread's batch, or NULL */
} MmrtVfiles;

/* Reads the list (every entry checked before any video is decoded; with
 * skip the bad ones are kept, marked). C 1 or 3; T, H, W the model's
 * clip; fps 0: the source's. */
int mmrt_vfiles_open(MmrtVfiles *v, const char *json, int C, int T, int H, int W, double fps,
                     int skip, char *err, size_t errlen) MMRT_VFILES_WEAK;
void mmrt_vfiles_close(MmrtVfiles *v) MMRT_VFILES_WEAK;

/* 1 when spec names a video dataset: a file ending in .json or .jsonl
 * (inline: asking does not link the decoder). */
static inline int mmrt_vfiles_is(const char *spec) {
  size_t n = spec ? strlen(spec) : 0;
  return (n > 5 && !strcmp(spec + n - 5, ".json")) || (n > 6 && !strcmp(spec + n - 6, ".jsonl"));
}

/* The entry of training sample i under seed. */
int64_t mmrt_vfiles_entry(MmrtVfiles *v, uint64_t seed, uint64_t i);

/* The clips of n samples (their entries and sample numbers, for messages)
 * into out (n * per floats); used[k]: the entry each came from (NULL: not
 * wanted). Takes the loader thread's batch when it was started for the
 * same entries, else decodes them now. MMRT_OK, or an error naming the
 * file, entry and sample (skip = 0, or every entry bad). */
int mmrt_vfiles_batch(MmrtVfiles *v, const int64_t *entries, const uint64_t *samples, int64_t n,
                      float *out, int64_t *used, char *err, size_t errlen) MMRT_VFILES_WEAK;

/* Starts decoding the n entries on the loader thread (a copy is kept), for
 * the next mmrt_vfiles_batch; waits for one still running first. */
void mmrt_vfiles_ahead(MmrtVfiles *v, const int64_t *entries, const uint64_t *samples, int64_t n);

#endif
