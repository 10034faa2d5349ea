#!/usr/bin/python3
"""PyTorch side of bench/: ms per training step (forward, backward, AdamW) of
a stdlib model written in tests/torch/mmref.py, fp32, same threads and batch
as the mmc trainer it is compared with. Prints one JSON line.
Usage: torch_step.py MODEL B [T] [--steps N] [--threads N]"""
import argparse, json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import torch
import mmref
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_user

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("init", help="safetensors file of the mmc trainer's initial weights")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    w, _ = mmref.st_load(a.init)
    P = {k: torch.tensor(v, requires_grad=True) for k, v in w.items() if not k.startswith(("adamw.", "sgd."))}
    opt = torch.optim.AdamW(P.values(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    fn = mmref.MODELS[a.model]
    if a.model == "ViTFashion":
        x = torch.randn(a.batch, 1, 28, 28)
        y = torch.randint(0, 10, (a.batch,), dtype=torch.int32)
    else:
        vocab = P["gpt.wte.weight"].shape[0]
        x = torch.randint(0, vocab, (a.batch, a.seq), dtype=torch.int32)
        y = torch.randint(0, vocab, (a.batch, a.seq), dtype=torch.int32)

    ms = torch_user.measure(lambda: fn(P, x, y), list(P.values()), opt, a.steps)
    print(json.dumps({"model": a.model, "framework": "pytorch", "ms_per_step": ms, "threads": a.threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
