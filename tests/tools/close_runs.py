#!/usr/bin/python3
"""Two runs of one model agree: the losses of every logged step within 1e-5
relative, the same step count, and every trained tensor's final value within
1e-3 of its update (tests/torch/mmtrain.py's compare_weights), with the same
tensor names. Used by the multi-rank equivalence tests (mpi_equiv, mpi_cp,
mpi_pp) to compare a plan's run with the serial one.
Usage: close_runs.py NAME SERIAL.jsonl RANKS.jsonl INIT.st SERIAL.st RANKS.st FILE.mm MODEL [LABEL]
LABEL names the second run in mismatch messages (default "ranks").
Exits 1 when they differ."""
import json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import mmtrain


def main():
    name, pa, pb, w0, wa, wb, mm, model = sys.argv[1:9]
    label = sys.argv[9] if len(sys.argv) > 9 else "ranks"
    def rows(p): return [json.loads(l) for l in open(p)]
    la, lb = [r["loss"] for r in rows(pa) if "loss" in r], [r["loss"] for r in rows(pb) if "loss" in r]
    lw = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if la and len(la) == len(lb) else float("inf")
    print("%s: %d steps, loss largest relative difference %.2e" % (name, len(lb), lw))
    cfg = mmtrain.train_settings(mm, model)
    (I, _), (A, _), (B, _) = (mmtrain.st_load(p) for p in (w0, wa, wb))
    bad = mmtrain.compare_weights(I, A, B, cfg, [mmtrain.lr_at(cfg, s, len(la)) for s in range(1, len(la) + 1)], label)
    bad += sorted(k for k in A if not k.startswith("adamw.")) != sorted(k for k in B if not k.startswith("adamw."))
    return 0 if not bad and lw <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
