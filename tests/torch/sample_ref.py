#!/usr/bin/python3
"""The text-to-video sampler's arithmetic (runtime/programs/mmrt_sample.c) against
diffusers' DDIMScheduler / DDPMScheduler step for v-prediction, written out
in numpy float64, given the same model outputs (the sampler's --dump: per
step t, t_prev, the table's rows it used, the guidance scale, then x_t, the
conditional and unconditional predictions v_c, v_u and the ancestral noise
z; after the steps the final latents).
Checks, each to 1e-5 (absolute, on latents of size ~1) or 1e-6 (the
schedule):
  - the timesteps are diffusers' "trailing" spacing,
    round(arange(T, 0, -T / N)) - 1 (Lin et al. 2024, with zero-SNR);
  - the rows used equal the zero-terminal-SNR schedule (tests/torch/
    videoditref.py's ddpm_schedule, here in numpy) at t and t_prev (abar = 1 after the last);
  - one step: x_{i+1} from the dumped x_i, v = v_u + S (v_c - v_u),
        ddim: x0 = sqrt(abar_t) x - sqrt(1 - abar_t) v,
              eps = sqrt(abar_t) v + sqrt(1 - abar_t) x,
              x' = sqrt(abar_p) x0 + sqrt(1 - abar_p) eps  (eta 0);
        ddpm: x' = sqrt(abar_p) b / (1 - abar_t) x0
                   + sqrt(1 - b) (1 - abar_p) / (1 - abar_t) x
                   + sqrt(max((1 - abar_p) / (1 - abar_t) b, 1e-20)) z,
              b = 1 - abar_t / abar_p (no z after the last step);
        euler (flow matching, diffusers' FlowMatchEulerDiscreteScheduler
              step): x' = x + (sigma_p - sigma_t) v, sigma_i = 1 - i / N
              (uniform from 1 to 0), x_t = (1 - sigma) x0 + sigma noise;
  - several steps: the whole chain run here from the first x (the
    initial noise) with the dumped predictions, to the final latents;
  - the guidance does something (v_c differs from v_u), the initial noise
    and z look standard normal (|mean| < 0.1, |std - 1| < 0.1), z drawn
    afresh at every step (correlations between steps below 0.2).
Usage: sample_ref.py DUMP N_STEPS N_CLIPS P ddim|ddpm|euler GUIDANCE"""
import sys

import numpy as np

TOL, TOL_TABLE = 1e-5, 1e-6


def ddpm_schedule(steps=1000, beta_start=1e-4, beta_end=0.02):
    """diffusers DDPMScheduler(beta_schedule="linear", rescale_betas_zero_snr=True)'s
    alphas_cumprod in float64 (as tests/torch/videoditref.py, without torch)."""
    betas = np.linspace(beta_start, beta_end, steps, dtype=np.float64)
    sq = np.sqrt(np.cumprod(1.0 - betas))
    sq = (sq - sq[-1]) * sq[0] / (sq[0] - sq[-1])  # Lin et al. 2024, Algorithm 1
    abar = sq ** 2
    alphas = np.concatenate([abar[0:1], abar[1:] / abar[:-1]])
    return np.cumprod(alphas)


def step(kind, x, v, abar_t, abar_p, z):
    if kind == "euler":  # abar_t, abar_p: here the flow times sigma_t, sigma_p
        return x + (abar_p - abar_t) * v
    x0 = np.sqrt(abar_t) * x - np.sqrt(1 - abar_t) * v
    if kind == "ddim":
        eps = np.sqrt(abar_t) * v + np.sqrt(1 - abar_t) * x
        return np.sqrt(abar_p) * x0 + np.sqrt(1 - abar_p) * eps
    beta = 1 - abar_t / abar_p
    mean = (np.sqrt(abar_p) * beta / (1 - abar_t)) * x0 + \
        (np.sqrt(1 - beta) * (1 - abar_p) / (1 - abar_t)) * x
    var = max((1 - abar_p) / (1 - abar_t) * beta, 1e-20)
    return mean + np.sqrt(var) * z


def main():
    path, N, n, P, kind, S = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
    d = np.fromfile(path, dtype="<f4").astype(np.float64)
    per = 8 + 4 * n * P
    if d.size != N * per + n * P:
        print(f"FAIL: {path} holds {d.size} values, expected {N * per + n * P}")
        return 1
    abar = ddpm_schedule()
    T = abar.size
    want_t = np.round(np.arange(T, 0, -T / N)).astype(np.int64) - 1
    bad = 0

    def check(what, got, want, tol):
        nonlocal bad
        err = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
        ok = err <= tol
        bad += not ok
        print(f"{'ok' if ok else 'FAIL'}: {what}: max |difference| {err:.3g} (tolerance {tol:g})")

    steps = []
    for i in range(N):
        b = d[i * per:(i + 1) * per]
        h = b[:8]
        x, vc, vu, z = (b[8 + k * n * P:8 + (k + 1) * n * P] for k in range(4))
        steps.append((h, x, vc, vu, z))
    final = d[N * per:]
    if kind == "euler":
        sig = 1.0 - np.arange(N + 1) / N
        check("flow times 1 - i / N", [s[0][0] for s in steps], sig[:N], 1e-7)
        check("next flow times", [s[0][1] for s in steps], sig[1:], 1e-7)
        rows = np.array([s[0][2:6] for s in steps])
        check("rows used: (1 - sigma_t, sigma_t, 1 - sigma_p, sigma_p)", rows,
              np.stack([1 - sig[:N], sig[:N], 1 - sig[1:], sig[1:]], 1), TOL_TABLE)
        ab_t, ab_p = sig[:N], sig[1:]
    t = np.array([int(s[0][0]) for s in steps])
    tp = np.array([int(s[0][1]) for s in steps])
    if kind != "euler":
        check("timesteps (trailing spacing)", t, want_t, 0)
        check("previous timesteps", tp, np.append(want_t[1:], -1), 0)
        ab_t = abar[t]
        ab_p = np.array([abar[k] if k >= 0 else 1.0 for k in tp])
        rows = np.array([s[0][2:6] for s in steps])
        check("schedule rows used: sqrt(abar_t), sqrt(1 - abar_t)", rows[:, 0:2],
              np.stack([np.sqrt(ab_t), np.sqrt(1 - ab_t)], 1), TOL_TABLE)
        check("schedule rows used: sqrt(abar_p), sqrt(1 - abar_p)", rows[:, 2:4],
              np.stack([np.sqrt(ab_p), np.sqrt(1 - ab_p)], 1), TOL_TABLE)
    check("guidance scale", [s[0][6] for s in steps], [S] * N, 1e-6)
    one = 0.0
    chain = steps[0][1].copy()
    for i, (h, x, vc, vu, z) in enumerate(steps):
        v = vu + S * (vc - vu)
        nxt = steps[i + 1][1] if i + 1 < N else final
        one = max(one, float(np.max(np.abs(step(kind, x, v, ab_t[i], ab_p[i], z) - nxt))))
        chain = step(kind, chain, v, ab_t[i], ab_p[i], z)
    check(f"one {kind} step from the dumped x_t (every step)", one, 0, TOL)
    check(f"{N} {kind} steps from the same noise (chain run here)", chain, final, TOL)
    gap = max(float(np.max(np.abs(s[2] - s[3]))) for s in steps)
    print(f"{'ok' if gap > 1e-4 else 'FAIL'}: max |v_c - v_u| = {gap:.3g} (the prompt matters)")
    bad += gap <= 1e-4
    draws = [("initial noise", steps[0][1])]
    if kind == "ddpm":
        draws.append(("ancestral z", np.concatenate([s[4] for s in steps[:-1]])))
    for what, v in draws:
        ok = abs(v.mean()) < 0.1 and abs(v.std() - 1) < 0.1
        print(f"{'ok' if ok else 'FAIL'}: {what}: mean {v.mean():.3f}, std {v.std():.3f}")
        bad += not ok
    if kind == "ddpm" and N > 2:  # a fresh z every step, not one draw again
        zs = np.stack([s[4] for s in steps[:-1]])
        c = np.corrcoef(zs)
        worst = float(np.max(np.abs(c - np.eye(len(zs)))))
        print(f"{'ok' if worst < 0.2 else 'FAIL'}: ancestral z of different steps: max |correlation| "
              f"{worst:.3f}")
        bad += worst >= 0.2
    if kind != "ddpm" and np.any(np.concatenate([s[4] for s in steps])):
        print(f"FAIL: {kind} dumped a nonzero z")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
