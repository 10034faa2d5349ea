#!/usr/bin/env python3
"""How much of the gradient buckets' reduction the backward hides, from a
trainer's --trace (Chrome trace JSON, runtime/comm/mmrt_trace.c) under dp.

Per rank and step (the trainer's "step" events):
  reduction  the union of the "bucket_reduce" events (a bucket's
             non-blocking collective from its posting to the first time
             the runtime saw it complete: by an MPI_Test in
             mmrt_comm_progress after a kernel, or at the wait; an upper
             bound of the completion either way)
  hidden     the part of it that lies inside the backward's compute: the
             "backward" phase event (the loss's gradient seed to the first
             optimizer op, so the waits before the gradient norm are in it)
             less the "bucket_start" calls (packing and posting) and the
             "bucket_wait" calls in it
  exposed    the time the step was blocked in the waits ("bucket_wait"'s
             "blocked" argument; the rest of a wait unpacks)
  rest       reduction - hidden - exposed: in the start calls and the
             waits' unpacking, and the unobserved time between a bucket's
             completion and the poll or wait that saw it
hidden fraction = hidden / reduction. The reduction includes the time this
rank waits for a later peer to post the same bucket (rank skew, large under
load); "both posted" is the part after the last rank posted it (the ranks
share one node's CLOCK_MONOTONIC), and its hidden part.

  bench/overlap.py TRACE.json [...]              the table
  bench/overlap.py --check NB STEPS [--gathers NG] TRACE.json   also checks:
      NB buckets per step on every rank (NB from dump-ir), each started
      inside its step's backward, in bucket order (the order the backward
      completes the gradients), its reduction posted in its start call and
      seen complete no later than its wait's end, its wait after its start
      and inside the backward, and at least one backward compute span
      between bucket 0's start and its wait; with --gathers (ZeRO-3
      prefetch), NG gather_start, gather and gather_wait events per step
      and rank (NG from dump-ir's prefetch attributes), each gather posted
      in its start call, seen complete by its wait's end, the wait after
      the start, and some of the gathers' flight inside compute; exit 1
      naming the first failure.

ZeRO-3 (gather events present): per rank and step the prefetched gathers'
time in flight (posted to seen complete), the part inside the forward's
and backward's compute (the phases less every non-blocking call), and the
time blocked in their waits. Gathers left blocking (the first unit, a
bias no node reads) are not traced and count as compute.
"""
import json
import sys


def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def inter(xs, ys):
    """total length of the intersection of two unions of intervals"""
    tot, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            tot += b - a
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return tot


def minus(span, holes):
    """span [a, b] less the intervals holes"""
    a, b = span
    out, at = [], a
    for h0, h1 in union(holes):
        if h1 <= at or h0 >= b:
            continue
        if h0 > at:
            out.append([at, h0])
        at = max(at, h1)
    if at < b:
        out.append([at, b])
    return out


def iv(e):
    return (e["ts"], e["ts"] + e["dur"])


def steps_of(ev, tid):
    """per step of rank tid: its events (by the step events' spans)"""
    mine = [e for e in ev if e["tid"] == tid]
    spans = sorted(iv(e) for e in mine if e["name"] == "step")
    return [(s, [e for e in mine if e["ts"] >= s[0] - 1e-3 and e["ts"] + e["dur"] <= s[1] + 1e-3])
            for s in spans]


CALLS = ("bucket_start", "bucket_wait", "gather_start", "gather_wait")


def compute(step_events, phases):
    """the phases' spans less the non-blocking collectives' calls in them"""
    calls = [iv(e) for e in step_events if e["name"] in CALLS]
    comp = []
    for e in step_events:
        if e["name"] in phases and e["cat"] == "phase":
            comp += minus(iv(e), calls)
    return union(comp)


def gathers(step_events):
    """ZeRO-3's prefetched gathers: (time in flight, hidden behind the
    forward's and backward's compute, exposed in the waits)"""
    g = union([iv(e) for e in step_events if e["name"] == "gather"])
    comp = compute(step_events, ("forward", "backward"))
    x = sum(e["args"]["blocked"] for e in step_events if e["name"] == "gather_wait")
    return sum(b - a for a, b in g), inter(g, comp), x


def analyse(step_events, last_post):
    """(reduction, hidden, exposed, after both posted, its hidden part);
    last_post: bucket -> the latest posting of it on any rank this step"""
    by = lambda n: [e for e in step_events if e["name"] == n]
    bwd = by("backward")
    reds = by("bucket_reduce")
    red = union([iv(e) for e in reds])
    both = union([(max(e["ts"], last_post.get(int(e["args"]["bucket"]), e["ts"])), iv(e)[1])
                  for e in reds])
    comp = compute(step_events, ("backward",))
    r = sum(b - a for a, b in red)
    x = sum(e["args"]["blocked"] for e in by("bucket_wait"))
    return r, inter(red, comp), x, sum(b - a for a, b in both if b > a), inter(both, comp)


def check(ev, nb, nsteps, ng=None):
    tids = sorted({e["tid"] for e in ev})
    if len(tids) < 2:
        return "one rank's events only (tids %s)" % tids
    for tid in tids:
        st = steps_of(ev, tid)
        if len(st) != nsteps:
            return "rank %d: %d step events, expected %d" % (tid, len(st), nsteps)
        for k, (_, es) in enumerate(st):
            by = lambda n: [e for e in es if e["name"] == n]
            bwd = by("backward")
            if len(bwd) != 1:
                return "rank %d step %d: %d backward events" % (tid, k + 1, len(bwd))
            b0, b1 = iv(bwd[0])
            starts = sorted(by("bucket_start"), key=lambda e: e["ts"])
            if len(starts) != nb:
                return "rank %d step %d: %d bucket_start events, dump-ir has %d buckets" % (
                    tid, k + 1, len(starts), nb)
            order = [int(e["args"]["bucket"]) for e in starts]
            if order != list(range(nb)):
                return "rank %d step %d: buckets started in the order %s" % (tid, k + 1, order)
            red = {int(e["args"]["bucket"]): e for e in by("bucket_reduce")}
            wt = {int(e["args"]["bucket"]): e for e in by("bucket_wait")}
            for s in starts:
                q = int(s["args"]["bucket"])
                s0, s1 = iv(s)
                if not b0 <= s0 < b1:
                    return "rank %d step %d: bucket %d started at %.1f us, outside the backward " \
                           "[%.1f, %.1f]" % (tid, k + 1, q, s0, b0, b1)
                if q not in red or q not in wt:
                    return "rank %d step %d: bucket %d has no reduce or wait event" % (tid, k + 1, q)
                r0, r1 = iv(red[q])
                w0, w1 = iv(wt[q])
                if not (s0 <= r0 <= s1 + 1e-3 and r1 <= w1 + 1e-3 and s1 <= w0 + 1e-3 and
                        w1 <= b1 + 1e-3 and 0 <= red[q]["args"]["lo"] <= red[q]["dur"] + 1e-3):
                    return "rank %d step %d: bucket %d: start [%.1f, %.1f], reduce [%.1f, %.1f], " \
                           "wait [%.1f, %.1f], backward ends %.1f" % (tid, k + 1, q, s0, s1, r0,
                                                                      r1, w0, w1, b1)
            s0, w0 = iv(starts[0])[1], iv(wt[0])[0]
            comp = compute(es, ("backward",))
            if inter([[s0, w0]], comp) <= 0:
                return "rank %d step %d: no backward compute between bucket 0's start and its " \
                       "wait" % (tid, k + 1)
            if ng is None:
                continue
            gs, gw = by("gather_start"), {int(e["args"]["slot"]): e for e in by("gather_wait")}
            red = {int(e["args"]["slot"]): e for e in by("gather")}
            if len(gs) != ng or len(gw) != ng or len(red) != ng:
                return "rank %d step %d: %d gather_start, %d gather, %d gather_wait events, " \
                       "dump-ir has %d prefetched gathers" % (tid, k + 1, len(gs), len(red),
                                                               len(gw), ng)
            for e in gs:
                q = int(e["args"]["slot"])
                if q not in gw or q not in red or not (
                        iv(e)[0] <= red[q]["ts"] <= iv(e)[1] + 1e-3 and
                        iv(red[q])[1] <= iv(gw[q])[1] + 1e-3 and iv(e)[1] <= gw[q]["ts"] + 1e-3):
                    return "rank %d step %d: prefetched gather %d: start, gather and wait out " \
                           "of order" % (tid, k + 1, q)
            if gathers(es)[1] <= 0:
                return "rank %d step %d: no prefetched gather overlaps compute" % (tid, k + 1)
    return None


def main(argv):
    nb = nsteps = ng = None
    if argv[:1] == ["--check"]:
        nb, nsteps, argv = int(argv[1]), int(argv[2]), argv[3:]
    if argv[:1] == ["--gathers"]:
        ng, argv = int(argv[1]), argv[2:]
    if not argv:
        sys.exit(__doc__)
    bad = 0
    for path in argv:
        try:
            ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
        except (OSError, ValueError, KeyError) as err:
            sys.exit("%s: not a Chrome trace JSON with traceEvents (%s)" % (path, err))
        tids = sorted({e["tid"] for e in ev})
        for tid in tids:
            later = sorted(e["dur"] for e in sorted((e for e in ev if e["tid"] == tid and
                                                     e["name"] == "step"), key=lambda e: e["ts"])[1:])
            if later:
                print("%s: rank %d median step %.2f ms over the %d steps after the first" % (
                    path, tid, later[len(later) // 2] / 1e3, len(later)))
        if not any(e["name"] == "bucket_reduce" for e in ev):
            if nb is not None:
                sys.exit("%s: no bucket_reduce events (a dp run with overlapped buckets and --trace?)"
                         % path)
            print("%s: no overlapped buckets (--no-overlap?)" % path)
            continue
        print("%s: ms per step (reduction = buckets posted to seen complete)" % path)
        print("  rank step  reduction  hidden  exposed   rest  hidden%  | both posted  hidden")
        tot = {}
        steps = {tid: steps_of(ev, tid) for tid in tids}
        for tid in tids:
            for k, (_, es) in enumerate(steps[tid]):
                last = {}
                for t2 in tids:  # one node: one CLOCK_MONOTONIC for every rank
                    if k < len(steps[t2]):
                        for e in steps[t2][k][1]:
                            if e["name"] == "bucket_reduce":
                                q = int(e["args"]["bucket"])
                                last[q] = max(last.get(q, e["ts"]), e["ts"])
                v = analyse(es, last)
                r, h, x, rb, hb = v
                print("  %4d %4d  %9.2f %7.2f %8.2f %6.2f  %6.1f  | %11.2f %7.2f" % (
                    tid, k + 1, r / 1e3, h / 1e3, x / 1e3, (r - h - x) / 1e3,
                    100 * h / r if r else 0, rb / 1e3, hb / 1e3))
                t = tot.setdefault(tid, [0] * 5)
                for i in range(5):
                    t[i] += v[i]
        for tid, (r, h, x, rb, hb) in sorted(tot.items()):
            print("  rank %d total: reduction %.2f ms, hidden %.2f ms (%.1f%%), exposed %.2f ms, "
                  "rest %.2f ms; after the last rank posted: %.2f ms, hidden %.2f ms (%.1f%%)"
                  % (tid, r / 1e3, h / 1e3, 100 * h / r if r else 0, x / 1e3, (r - h - x) / 1e3,
                     rb / 1e3, hb / 1e3, 100 * hb / rb if rb else 0))
        if any(e["name"] == "gather" for e in ev):
            print("  ZeRO-3 prefetched gathers, ms per step: in flight, hidden behind compute, "
                  "exposed (blocked in the waits)")
            for tid in tids:
                t = [0, 0, 0]
                for k, (_, es) in enumerate(steps[tid]):
                    v = gathers(es)
                    print("  %4d %4d  %9.2f %7.2f %8.2f" % (tid, k + 1, v[0] / 1e3, v[1] / 1e3,
                                                           v[2] / 1e3))
                    t = [a + b for a, b in zip(t, v)]
                print("  rank %d gathers total: in flight %.2f ms, hidden %.2f ms (%.1f%%), "
                      "exposed %.2f ms" % (tid, t[0] / 1e3, t[1] / 1e3,
                                           100 * t[1] / t[0] if t[0] else 0, t[2] / 1e3))
        if nb is not None:
            why = check(ev, nb, nsteps, ng)
            print("check: %s" % ("ok: %d buckets per step on every rank, each started in its step's "
                                 "backward in bucket order, seen complete by its wait%s" % (
                                     nb, "; %d prefetched gathers per step, each posted before its "
                                     "wait, overlapping compute" % ng if ng else "")
                                 if why is None else "FAIL: " + why))
            bad |= why is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
