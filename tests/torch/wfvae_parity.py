#!/usr/bin/python3
"""PyTorch parity of a WF-VAE trainer (stdlib_models/wfvae.mm): the model
written from the reference in PyTorch (wfvae_ref.py), the trainer's initial
weights (safetensors, by name), the same clips (dumped by the trainer), the
same noise (the trainer's Philox stream, recomputed in numpy), AdamW with
the settings and per-step learning rates of the model's train section
(mmtrain.py). The losses must agree at every step to 1e-5 relative, and every
trained tensor's final value within 1e-3 of the size of its update.
Usage: wfvae_parity.py FILE.mm MODEL INIT.st INPUTS_DIR LOG.jsonl FINAL.st STEPS SEED"""
import json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmtrain, wfvae_ref

LOSS_RTOL = 1e-5
# the model-level lets of stdlib_models/wfvae.mm the reference needs
CONFIGS = {
    "WFVAETinyParity": dict(latent=4, base=16, groups=0, t_interpolation="trilinear", kl_weight=1e-6, wavelet_weight=0.1),
    "WFVAETinyParityGN": dict(latent=4, base=16, groups=4, t_interpolation="nearest", kl_weight=1e-6,
                              wavelet_weight=0.1),
    "WFVAETiny": dict(latent=4, base=16, groups=0, t_interpolation="trilinear", kl_weight=1e-6, wavelet_weight=0.1),
    # the adversarial option: a 2-layer discriminator (tests/wfvae.sh)
    "WFVAETinyGANParity": dict(latent=4, base=16, groups=0, t_interpolation="trilinear", kl_weight=1e-6,
                               wavelet_weight=0.1, disc_layers=2),
}


# tensors of a configuration whose update is partly at rounding level
# (mmtrain.ROUNDING_LEVEL: checked by their step sizes)
ROUNDING = {
    "WFVAETinyParityGN": {
        "encoder.mid0.conv2.bias": "every path from encoder.mid0's output to the loss passes a GroupNorm, which "
                                   "removes the group mean of a per-channel shift: that part of the gradient of the "
                                   "biases added there is 0 in exact arithmetic (seen: 1.5e-3 of the update)",
        "encoder.mid0.nin_shortcut.bias": "the same as encoder.mid0.conv2.bias",
    },
}


def main():
    mm, model, init, inputs_dir, log, final, steps, seed = sys.argv[1:9]
    steps, seed = int(steps), int(seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cfg = mmtrain.train_settings(mm, model)
    mc = CONFIGS[model]
    mmtrain.ROUNDING_LEVEL.update(ROUNDING.get(model, {}))
    w, _ = mmtrain.st_load(init)
    names = sorted(k for k in w if not k.startswith(("adamw.", "sgd.")))
    P = {k: torch.tensor(w[k], requires_grad=mmtrain.trained(cfg, k)) for k in names}
    trained = [k for k in names if P[k].requires_grad]
    logged = [json.loads(l) for l in open(log) if l.strip()]
    mmc_loss = {r["step"]: r["loss"] for r in logged if "loss" in r}
    mmc_disc = {r["step"]: r["disc_loss"] for r in logged if "disc_loss" in r}
    gan = cfg["gan"]
    # a gan (the reference's train_causalvae.py step): the generator's AdamW over every other tensor, the
    # discriminator's own AdamW (the same settings) stepped from global step `start` (0-based) on
    disc = [k for k in trained if gan and k.startswith(gan["discriminator"] + ".")]
    gen = [k for k in trained if k not in disc]
    opt = torch.optim.AdamW([P[k] for k in gen], lr=1.0, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"])
    dopt = torch.optim.AdamW([P[k] for k in disc], lr=1.0, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                             weight_decay=cfg["weight_decay"]) if disc else None
    print("%s: %d tensors (%d parameters), adamw(lr = %g, weight_decay = %g), %d steps, seed %d" %
          (model, len(names), sum(P[k].numel() for k in names), cfg["lr"], cfg["weight_decay"], steps, seed))
    bad, lrs = 0, []
    for s in range(1, steps + 1):
        batch, _ = mmtrain.st_load(os.path.join(inputs_dir, "step-%06d.safetensors" % s))
        video = torch.tensor(batch["video"])
        B, C, T, H, W = video.shape
        t2 = (T - 1) // 4 + 1
        noise = wfvae_ref.randn((B, mc["latent"], t2, H // 8, W // 8), seed, s)
        opt.zero_grad(set_to_none=True)
        lr = mmtrain.lr_at(cfg, s, steps)
        lrs.append(lr)
        if gan:
            loss, _, rec = wfvae_ref.wfvae_loss(P, video, noise, dict(mc, with_rec=True))
            on = s - 1 >= gan["start"]  # LPIPSWithDiscriminator3D: global_step >= discriminator_iter_start
            g_loss = -torch.mean(wfvae_ref.discriminator(P, rec, gan["discriminator"] + ".", mc["disc_layers"]))
            if on:
                loss = loss + gan["weight"] * g_loss
        else:
            loss, _ = wfvae_ref.wfvae_loss(P, video, noise, mc)
        loss.backward()
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_([P[k] for k in gen], cfg["clip"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        if gan:  # the discriminator's step on the detached reconstruction
            d_loss = torch.tensor(0.0)
            if on:
                dopt.zero_grad(set_to_none=True)
                d_loss = wfvae_ref.hinge_d_loss(
                    wfvae_ref.discriminator(P, video, gan["discriminator"] + ".", mc["disc_layers"]),
                    wfvae_ref.discriminator(P, rec.detach(), gan["discriminator"] + ".", mc["disc_layers"]))
                d_loss.backward()
                if cfg["clip"] > 0:
                    torch.nn.utils.clip_grad_norm_([P[k] for k in disc], cfg["clip"])
                for g in dopt.param_groups:
                    g["lr"] = lr
                dopt.step()
            theirs = mmc_disc.get(s)
            if theirs is None:
                print("step %d: no disc_loss in the trainer's log" % s)
                bad += 1
            else:
                rel = abs(d_loss.item() - theirs) / max(abs(theirs), abs(d_loss.item()), 1e-30)
                ok = rel <= LOSS_RTOL or (d_loss.item() == 0 and theirs == 0)
                bad += not ok
                print("step %d: disc_loss pytorch %.9g mmc %.9g rel %.2e %s" %
                      (s, d_loss.item(), theirs, rel, "ok" if ok else "MISMATCH"))
        theirs = mmc_loss.get(s)
        if theirs is None:
            print("step %d: not in the trainer's log" % s)
            bad += 1
            continue
        rel = abs(loss.item() - theirs) / max(abs(theirs), 1e-30)
        bad += rel > LOSS_RTOL
        print("step %d: loss pytorch %.9g mmc %.9g rel %.2e %s" %
              (s, loss.item(), theirs, rel, "ok" if rel <= LOSS_RTOL else "MISMATCH"))
    fw, _ = mmtrain.st_load(final)
    ref = {k: P[k].detach().numpy() for k in names}
    bad += mmtrain.compare_weights(w, ref, fw, cfg, lrs, "mmc", names)
    print("%s: %s" % (model, "ok" if not bad else "%d failures" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
