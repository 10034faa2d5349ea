/* mmrt_rng.h: counter-based random numbers for trainers (Philox4x32-10).
 *
 * Every random value is a pure function of (seed, stream, index): there is
 * no generator state to carry, split or checkpoint.  A rank that fills
 * elements [lo, hi) of a tensor gets exactly the values the serial run puts
 * there, so initialisation, dropout masks and shuffles do not depend on how
 * the work is divided.  `stream` separates independent uses (one per
 * parameter, per dropout site and step, per shuffle); pick it with
 * mmrt_rng_stream() from a name, or number streams by hand.
 *
 * Layout: element i of stream s under seed k is word (i % 4) of
 * philox(key = k, counter = (i / 4 as 64 bits, s as 64 bits)).  Normals use
 * Box-Muller on the two word pairs of the same block, so element i again
 * depends only on (seed, stream, i).
 */
#ifndef MMRT_RNG_H
#define MMRT_RNG_H

#include <stddef.h>
#include <stdint.h>

/* One Philox4x32-10 block: out = philox(key, ctr).  Matches Random123. */
void mmrt_philox(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);

/* Word i of stream `stream` under `seed` (the raw 32-bit value). */
uint32_t mmrt_rng_u32(uint64_t seed, uint64_t stream, uint64_t i);

/* out[k] = element lo + k of the stream, for k in [0, hi - lo).
 * uniform: [0, 1).  normal: mean + std * N(0, 1) via Box-Muller. */
void mmrt_rng_uniform(float *out, uint64_t seed, uint64_t stream, uint64_t lo, uint64_t hi);
void mmrt_rng_normal(float *out, uint64_t seed, uint64_t stream, uint64_t lo, uint64_t hi,
                     float mean, float std);

/* Dropout keep mask for elements [lo, hi): out[k] = 1 when the uniform of
 * element lo + k is >= p (kept), else 0. */
void mmrt_rng_keep_mask(uint8_t *out, uint64_t seed, uint64_t stream, uint64_t lo, uint64_t hi,
                        float p);

/* perm = a permutation of 0..n-1 that depends only on (seed, epoch):
 * Fisher-Yates with each swap index drawn from Philox (unbiased 64-bit
 * multiply-shift), on a stream reserved for shuffles. */
void mmrt_rng_permutation(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch);

/* The random numbers generated code draws: mmrt_abi.def. */
#define MMRT_ABI_SECTION_RNG
#include "mmrt_abi.h"

#endif
