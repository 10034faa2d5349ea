#!/usr/bin/python3
"""PyTorch parity of an mmc trainer: the same model (mmref.py, written from
the .mm definitions), the trainer's initial weights (safetensors, by name),
the same batches (dumped by the trainer), and AdamW with the settings and the
per-step learning rate this script reads from the model's train section
(mmtrain.py; nothing is taken from the trainer but its batches, its initial
weights and, to compare, its losses and final weights).
The losses must agree at every step, and every trained tensor's final value
within 1e-3 of the size of its update (mmtrain.compare_weights).
Usage: parity.py FILE.mm MODEL INIT.safetensors INPUTS_DIR LOG.jsonl FINAL.safetensors STEPS [bf16]
With bf16 (a trainer compiled with --precision bf16, or a model whose train
section says precision = bf16), the reference's forward runs under
torch.autocast("cpu", dtype=torch.bfloat16) with fp32 master weights and
AdamW, and the losses must agree to 1e-2 relative (BF16_LOSS_RTOL); the
weights are then only reported (bf16 rounding is larger than an update).
Prints one line per step and exits 1 on a mismatch."""
import json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmref, mmtrain

LOSS_RTOL = 1e-5
BF16_LOSS_RTOL = 1e-2


def main():
    mm, model, init, inputs_dir, log, final, steps = sys.argv[1:8]
    steps = int(steps)
    bf16 = sys.argv[8:9] == ["bf16"]
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    try:
        cfg = mmtrain.train_settings(mm, model)
    except mmtrain.SettingsError as e:
        print("parity.py: %s" % e)
        return 1
    print("%s: adamw(lr = %g, betas = [%g, %g], eps = %g, weight_decay = %g), clip %g, schedule %s(warmup = %d, "
          "min_lr = %g)%s, %d steps (from %s)" %
          (model, cfg["lr"], cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"], cfg["clip"],
           cfg["schedule"], cfg["warmup"], cfg["min_lr"],
           (", LoRA scale %g" % cfg["lora_scale"] if cfg["lora_scale"] is not None else "") +
           (", freeze [%s]" % ", ".join(cfg["freeze"]) if cfg["freeze"] else ""), steps, os.path.basename(mm)))
    w, _ = mmref.st_load(init)
    names = sorted(k for k in w if not k.startswith(("adamw.", "sgd.")))
    mmref.LORA_SCALE = cfg["lora_scale"] if cfg["lora_scale"] is not None else 1.0
    P = {k: torch.tensor(w[k], requires_grad=mmtrain.trained(cfg, k)) for k in names}
    trained = [k for k in names if P[k].requires_grad]
    logged = [json.loads(l) for l in open(log) if l.strip()]
    mmc_loss = {r["step"]: r["loss"] for r in logged if "loss" in r}
    mmc_lr = {r["step"]: r["lr"] for r in logged if "lr" in r}
    opt = torch.optim.AdamW([P[k] for k in trained], lr=1.0, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"])
    fn = mmref.MODELS[model]
    bf16 = bf16 or cfg["precision"] == "bf16"
    rtol = BF16_LOSS_RTOL if bf16 else LOSS_RTOL
    if bf16:
        print("%s: forward under torch.autocast(cpu, bfloat16), losses to %g relative" % (model, rtol))
    bad = 0
    lrs = []
    for s in range(1, steps + 1):
        batch, _ = mmref.st_load(os.path.join(inputs_dir, "step-%06d.safetensors" % s))
        if hasattr(fn, "inputs"):  # a reference that names its inputs (videoditref.py)
            args = [torch.tensor(batch[k]) for k in fn.inputs]
        elif model == "ViTFashion":
            args = [torch.tensor(batch["pixels"]), torch.tensor(batch["labels"])]
        elif model.startswith("InternVL2Tiny"):
            args = [torch.tensor(batch[k]) for k in ("pixels", "text", "labels")]
        else:
            args = [torch.tensor(batch["ids"]), torch.tensor(batch["labels"])]
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = fn(P, *args)
        else:
            loss = fn(P, *args)
        loss.backward()
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_([P[k] for k in trained], cfg["clip"])
        lr = mmtrain.lr_at(cfg, s, steps)
        lrs.append(lr)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        if s not in mmc_loss:
            print("step %d: not in the trainer's log %s" % (s, log))
            bad += 1
            continue
        theirs = mmc_loss[s]
        if abs(mmc_lr.get(s, float("nan")) - lr) > 1e-6 * lr:  # the trainer's lr (f32) against the formula
            print("step %d: the trainer's lr %r, the schedule of the train section gives %r" % (s, mmc_lr.get(s), lr))
            bad += 1
        rel = abs(loss.item() - theirs) / max(abs(theirs), 1e-30)
        ok = rel <= rtol
        bad += not ok
        print("step %d: lr %.6g; loss pytorch %.9f mmc %.9f rel %.2e %s" %
              (s, lr, loss.item(), theirs, rel, "ok" if ok else "MISMATCH"))
    fw, _ = mmref.st_load(final)
    ref = {k: P[k].detach().numpy() for k in names}
    if bf16:  # report only: the largest difference of a tensor, relative to its update
        worst = max((float(abs(fw[k] - ref[k]).max() / max(abs(ref[k] - w[k]).max(), 1e-30)), k) for k in trained)
        print("%s: weights after %d steps: largest max|mmc - pytorch| / max|update| %.3g (%s)" %
              (model, steps, worst[0], worst[1]))
    else:
        bad += mmtrain.compare_weights(w, ref, fw, cfg, lrs, "mmc", names)
    print("%s: %s" % (model, "ok" if not bad else "%d failures" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
