#!/usr/bin/python3
"""PyTorch parity of an mmc trainer: the same model (mmref.py, written from
the .mm definitions), the trainer's initial weights (safetensors, by name),
the same batches (dumped by the trainer), and AdamW with the model's
settings; the losses must agree at every step and the final weights at the end.
Usage: parity.py MODEL INIT.safetensors INPUTS_DIR LOG.jsonl FINAL.safetensors STEPS
Prints one line per step and exits 1 on a mismatch."""
import json, os, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmref

LOSS_RTOL, W_RTOL = 1e-5, 1e-4
ROUNDING = 1e-4  # a gradient element below this fraction of its tensor's largest is at rounding level

# The train sections of stdlib_models/vit_fashion.mm and gpt2.mm (AdamW's eps is the default 1e-8).
OPT = {
    "ViTFashion": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.05, "clip": 1.0},
    "GPT2Tiny": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip": 1.0},
    "InternVL2Tiny": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "clip": 1.0},
    "InternVL2TinyLoRA": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "clip": 1.0,
                          "lora_scale": 8 / 4},
}


def main():
    model, init, inputs_dir, log, final, steps = sys.argv[1:7]
    steps = int(steps)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    w, meta = mmref.st_load(init)
    names = sorted(k for k in w if not k.startswith(("adamw.", "sgd.")))
    cfg = OPT[model]
    mmref.LORA_SCALE = cfg.get("lora_scale", 1.0)
    lora = "lora_scale" in cfg  # LoRA: the base is frozen, only the adapters train
    P = {k: torch.tensor(w[k], requires_grad=not lora or ".lora_" in k) for k in names}
    trained = [k for k in names if P[k].requires_grad]
    logged = [json.loads(l) for l in open(log) if l.strip()]
    by_step = {r["step"]: r for r in logged if "loss" in r and "lr" in r}
    opt = torch.optim.AdamW([P[k] for k in trained], lr=1.0, betas=(cfg.get("beta1", 0.9), cfg.get("beta2", 0.999)),
                            eps=cfg.get("eps", 1e-8), weight_decay=cfg.get("weight_decay", 0.0))
    fn = mmref.MODELS[model]
    bad = 0
    noisy = {}
    for s in range(1, steps + 1):
        batch, _ = mmref.st_load(os.path.join(inputs_dir, "step-%06d.safetensors" % s))
        if model == "ViTFashion":
            args = [torch.tensor(batch["pixels"]), torch.tensor(batch["labels"])]
        elif model.startswith("InternVL2Tiny"):
            args = [torch.tensor(batch[k]) for k in ("pixels", "text", "labels")]
        else:
            args = [torch.tensor(batch["ids"]), torch.tensor(batch["labels"])]
        opt.zero_grad(set_to_none=True)
        loss = fn(P, *args)
        loss.backward()
        if cfg.get("clip", 0) > 0:
            torch.nn.utils.clip_grad_norm_([P[k] for k in trained], cfg["clip"])
        for k in trained:  # elements whose gradient is at rounding level next to the tensor's largest
            g = np.abs(P[k].grad.numpy())
            tiny = g < ROUNDING * max(float(g.max()), 1e-30)
            noisy[k] = tiny if k not in noisy else noisy[k] | tiny
        lr = by_step[s]["lr"]
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        theirs = by_step[s]["loss"]
        rel = abs(loss.item() - theirs) / max(abs(theirs), 1e-30)
        ok = rel <= LOSS_RTOL
        bad += not ok
        print("step %d: pytorch %.9f mmc %.9f rel %.2e %s" % (s, loss.item(), theirs, rel, "ok" if ok else "MISMATCH"))
    fw, _ = mmref.st_load(final)
    worst, worst_name, worst_elem = 0.0, "", 0.0
    n_noisy = [0]
    # A key projection's bias has an exactly zero gradient (softmax is invariant to adding q.b to a
    # whole row of scores); each side's rounding noise there is normalised by AdamW into lr-sized
    # steps of arbitrary sign, so those tensors are compared as "both moved by at most lr per step".
    for k in names:
        if k.endswith(".k_proj.bias"):
            lr_max = max(r["lr"] for s_, r in by_step.items() if s_ <= steps)
            dev = float(np.max(np.abs(P[k].detach().numpy() - w[k]))), float(np.max(np.abs(fw[k] - w[k])))
            if max(dev) > lr_max * steps * 1.001:
                print("%s moved by %g / %g, more than lr x steps" % (k, dev[0], dev[1]))
                bad += 1
            continue
        a, b = P[k].detach().numpy().astype(np.float64), fw[k].astype(np.float64)
        # An element whose gradient was at rounding level at some step (below ROUNDING x the tensor's
        # largest) is moved by AdamW by up to ~lr in a direction set by that rounding, on either side:
        # those may differ by at most lr per step and side; the rest is compared norm-wise per tensor.
        mask = noisy.get(k, np.zeros(b.shape, dtype=bool))
        if mask.any():
            lr_sum = sum(r["lr"] for s_, r in by_step.items() if s_ <= steps)
            dev = float(np.max(np.abs(a - b)[mask]))
            if dev > 2 * lr_sum * 1.001:
                print("%s: %d elements with a rounding-level gradient differ by %g, more than 2 x lr x steps" %
                      (k, int(mask.sum()), dev))
                bad += 1
            a, b = a[~mask], b[~mask]
            n_noisy[0] += int(mask.sum())
            if a.size == 0:
                continue
        rel = float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
        elem = float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))
        if elem > worst_elem:
            worst_elem = elem
        if rel > worst:
            worst, worst_name = rel, k
    ok = worst <= W_RTOL
    bad += not ok
    print("final weights: worst norm-wise relative difference %.2e (%s) %s; worst element %.2e of the tensor's max; "
          "%d elements with a rounding-level gradient compared by step size" % (worst, worst_name, "ok" if ok else "MISMATCH",
                                                                              worst_elem, n_noisy[0]))
    print("%d passed, %d failed" % (steps + 1 - bad, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
