/* mmrt_dit.c: the tables text and video diffusion read (ir/ops.def
 * rel_buckets, timestep_embedding, ddpm_table): T5's relative-position
 * buckets, the sinusoidal timestep embedding and the DDPM schedule with its
 * min-SNR weights. Computed in double, stored as the IR types. */
#include <math.h>
#include <stdint.h>

#include "mmrt_kernels.h"

void mmrt_rel_buckets(int32_t *y, int32_t L, int32_t buckets, int32_t max_distance) {
  int32_t half = buckets / 2, exact = half / 2;
  double span = log((double)max_distance / exact);
  for (int32_t q = 0; q < L; q++)
    for (int32_t k = 0; k < L; k++) {
      int32_t rel = k - q, dist = rel < 0 ? -rel : rel, side = rel > 0 ? half : 0, b = dist;
      if (dist >= exact) {
        b = exact + (int32_t)(log((double)dist / exact) / span * (half - exact));
        if (b > half - 1) b = half - 1;
      }
      y[(int64_t)q * L + k] = side + b;
    }
}

void mmrt_timestep_embed(float *y, const float *t, int64_t n, int32_t dim, double theta) {
  int32_t half = dim / 2;
  for (int64_t r = 0; r < n; r++) {
    float *row = y + r * dim;
    for (int32_t k = 0; k < half; k++) {
      double f = exp(-log(theta) * k / half), a = (double)t[r] * f;
      row[k] = (float)cos(a);
      row[half + k] = (float)sin(a);
    }
  }
}

/* alphas_bar from linear betas; with zero_snr its square root shifted so
 * the last step is 0 and scaled so the first stays (Lin et al. 2024, Alg. 1) */
void mmrt_ddpm_table(float *y, int32_t steps, double beta_start, double beta_end, int32_t zero_snr,
                     double gamma) {
  double prod = 1, sq0 = sqrt(1 - beta_start), sqT;
  for (int32_t t = 0; t < steps; t++)
    prod *= 1 - (beta_start + (beta_end - beta_start) * t / (steps - 1));
  sqT = sqrt(prod);
  prod = 1;
  for (int32_t t = 0; t < steps; t++) {
    prod *= 1 - (beta_start + (beta_end - beta_start) * t / (steps - 1));
    double sq = zero_snr ? (sqrt(prod) - sqT) * sq0 / (sq0 - sqT) : sqrt(prod);
    double ab = sq * sq, snr = ab / (1 - ab), w = (snr < gamma ? snr : gamma) / (snr + 1);
    y[3 * t] = (float)sq, y[3 * t + 1] = (float)sqrt(1 - ab), y[3 * t + 2] = (float)w;
  }
}
