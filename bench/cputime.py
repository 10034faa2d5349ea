#!/usr/bin/python3
"""CPU time per training step of a compiled mmc trainer against PyTorch as a
user writes it (bench/torch_user.py), for a loaded machine where wall-clock
times mean little: each program runs twice, with N1 and N2 steps, and the
difference of its user+sys CPU time (getrusage of the child) divided by
N2 - N1 is its CPU time per step (start-up, data loading, warm-up and the
final evaluation cancel). Both run at the same fixed thread count and wait
passively (OMP_WAIT_POLICY=passive: a spinning thread would count its
waiting as work). The programs alternate, RUNS times; prints per program
the median and min-max ms of CPU per step and the ratio of the medians
(mmc / PyTorch). A benchmark, not a test.
Usage: cputime.py TRAINER[,TRAINER2...] MODEL --batch B [--seq T] [--bf16] [--runs 5]
       [--steps 5,25] [--threads 2] [--trainer-only]"""
import argparse, os, resource, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_of(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainer")
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", default="5,25")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trainer-only", action="store_true")
    a = ap.parse_args()
    n1, n2 = (int(s) for s in a.steps.split(","))
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(a.threads))
    env.pop("GOMP_SPINCOUNT", None)

    def mmc(n, trainer):
        return cpu_of([trainer, "--steps", str(n), "--eval-batches", "1", "--quiet",
                       "--threads", str(a.threads), "--omp-wait", "passive"], env)

    def torch(n):
        cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_user.py"), a.model, "--batch",
               str(a.batch), "--steps", str(n), "--threads", str(a.threads)]
        if a.seq:
            cmd += ["--seq", str(a.seq)]
        if a.bf16:
            cmd += ["--bf16"]
        return cpu_of(cmd, env)

    trainers = a.trainer.split(",")
    progs = [(t if len(trainers) > 1 else "mmc", lambda n, t=t: mmc(n, t)) for t in trainers]
    progs += [] if a.trainer_only else [("torch", torch)]
    res = {name: [] for name, _ in progs}
    for _ in range(a.runs):
        for name, f in progs:
            res[name].append((f(n2) - f(n1)) / (n2 - n1) * 1000.0)
    for name, v in res.items():
        print("%-12s CPU ms/step median %.2f (min %.2f max %.2f) over %d runs, %d threads" %
              (name, statistics.median(v), min(v), max(v), len(v), a.threads))
    if not a.trainer_only:
        for t in trainers:
            name = t if len(trainers) > 1 else "mmc"
            print("ratio %s/torch (CPU time medians): %.3f" %
                  (name, statistics.median(res[name]) / statistics.median(res["torch"])))
    print("load average after: %s" % open("/proc/loadavg").read().split()[0])


if __name__ == "__main__":
    main()
