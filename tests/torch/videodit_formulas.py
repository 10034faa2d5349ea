#!/usr/bin/python3
"""The DDPM module (stdlib_models/diffusion.mm) against independent
formulas in numpy float64, to 1e-6: tests/dit/ddpm_probe.mm after one SGD
step (lr 1) from zero holds 2 x_t, 2 v, 2 w v / (n B) and 2 * the table
(ddpm_table: sqrt(abar_t), sqrt(1 - abar_t), the min-SNR weight).
The formulas:
  betas linear, beta_t = 1e-4 + (0.02 - 1e-4) t / 999, abar_t = prod_{s<=t} (1 - beta_s);
  zero terminal SNR (Lin et al. 2024, "Common Diffusion Noise Schedules and
  Sample Steps are Flawed", Algorithm 1): sqrt(abar) <- (sqrt(abar) -
  sqrt(abar_T)) * sqrt(abar_0) / (sqrt(abar_0) - sqrt(abar_T));
  x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps; v = sqrt(abar_t) eps - sqrt(1 - abar_t) x0
  (Salimans & Ho 2022); w = min(SNR, 5) / (SNR + 1), SNR = abar / (1 - abar)
  (Hang et al. 2023, min-SNR for v-prediction).
With a third argument, the directory of the trainer's dumped inputs of
several steps: the captions (text) are words of the clip captions ending
in EOS (id 1) or, for about 10% of the rows (classifier-free guidance), the
null caption [EOS, PAD...]: the count must lie within 4 standard
deviations of 0.1 n.
Usage: videodit_formulas.py WEIGHTS.safetensors INPUTS.safetensors [INPUTS_DIR]"""
import os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mmtrain import st_load

TOL = 1e-6


def main():
    w, _ = st_load(sys.argv[1])
    x, _ = st_load(sys.argv[2])
    N = 1000
    t_all = np.arange(N, dtype=np.float64)
    beta = 1e-4 + (0.02 - 1e-4) * t_all / (N - 1)
    sq = np.sqrt(np.cumprod(1 - beta))
    sq = (sq - sq[-1]) * sq[0] / (sq[0] - sq[-1])
    abar = sq ** 2
    snr = abar / (1 - abar)
    weight = np.minimum(snr, 5.0) / (snr + 1)
    u = x["t_uniform"].astype(np.float32)
    t = (u * np.float32(N)).astype(np.int64)  # floor: u >= 0
    x0 = x["latents"].astype(np.float64)
    eps = x["noise"].astype(np.float64)
    a = sq[t].reshape(-1, 1, 1, 1, 1)
    s = np.sqrt(1 - abar[t]).reshape(-1, 1, 1, 1, 1)
    B = x0.shape[0]
    n = x0[0].size
    checks = [
        ("table: sqrt(abar_t)", w["table"][:, 0] / 2, sq),
        ("table: sqrt(1 - abar_t)", w["table"][:, 1] / 2, np.sqrt(1 - abar)),
        ("table: min-SNR weight", w["table"][:, 2] / 2, weight),
        ("x_t", w["xt"] / 2, a * x0 + s * eps),
        ("v-prediction target", w["v"] / 2, a * eps - s * x0),
        ("min-SNR weighted loss gradient (w v)", w["wv"] * (n * B) / 2,
         weight[t].reshape(-1, 1, 1, 1, 1) * (a * eps - s * x0)),
    ]
    bad = 0
    for what, got, want in checks:
        err = np.max(np.abs(got.astype(np.float64) - want))
        ok = err <= TOL
        bad += not ok
        print("%-40s max |mmc - formula| = %.2e over %d values %s" % (what, err, want.size, "ok" if ok else "FAIL"))
    print("timesteps of the batch: %s" % " ".join(str(v) for v in sorted(t)))
    print("terminal step: sqrt(abar) %.3g, SNR %.3g, weight %.3g; step 0: sqrt(abar) %.9f (1 - beta_0 = %.9f)" %
          (sq[-1], snr[-1], weight[-1], sq[0], np.sqrt(1 - beta[0])))
    if not (sq[-1] == 0 and weight[-1] == 0 and abs(w["table"][-1, 0]) == 0 and w["table"][-1, 2] == 0):
        print("FAIL: the terminal SNR is not zero")
        bad += 1
    if len(sys.argv) > 3:
        rows = np.concatenate([st_load(os.path.join(sys.argv[3], f))[0]["text"]
                               for f in sorted(os.listdir(sys.argv[3]))])
        null = int(np.sum((rows[:, 0] == 1) & np.all(rows[:, 1:] == 0, axis=1)))
        worded = [r for r in rows if r[0] >= 2]
        ended = all(1 in list(r) and all(v >= 2 for v in r[:list(r).index(1)]) and all(v == 0 for v in
                    r[list(r).index(1) + 1:]) for r in worded)
        n, sd = len(rows), (len(rows) * 0.1 * 0.9) ** 0.5
        ok = abs(null - 0.1 * n) <= 4 * sd and null + len(worded) == n and ended
        bad += not ok
        print("captions: %d rows, %d null (expected %.1f +- %.1f), %d of words then EOS then PAD %s" %
              (n, null, 0.1 * n, sd, len(worded), "ok" if ok else "FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
