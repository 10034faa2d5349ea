#!/usr/bin/python3
"""A pipeline memory plan against the trainer's order of events, rank by rank.

Reads the plan `MMC_TEST_MEMPLAN_DUMP=1 mmc plan ...` writes on stderr
(passes/memplan.c dump_live) and replays each rank's part of a step the way
runtime/comm/mmrt_pp.c runs it: the schedule's actions, each micro-batch in
the lowest free slot, a stage part's receives (blocking) at its start and its
sends (MPI_Isend) at its end, the waits for them by the descriptor's
pp_xfer_how (codegen/cg_pp.c): MMRT_XFER_SLOT before the slot's next part but
the W of one B action, MMRT_XFER_WS before the rank's next part,
MMRT_XFER_FWD (sent from the sender's send room) before its next forward,
MMRT_XFER_LATE when another micro-batch takes the slot or the step ends, a
summed transfer not sent. A send's buffer is alive on its sender until the
wait for it, or until the first part there that happens after every receive
of it (the parts' order on each rank and the transfers make the
happens-before relation). Each buffer is alive on a rank from its first touch
there (a received value: from the start of the part that receives it) to its
last, or to its sends' completion; in its micro-batch's slot (act) or the
rank's working set (grad). Two different buffers alive at once at
overlapping bytes of one slot or working set are reported, and the exit
status is 1.

Usage: pp_live.py DUMP [NAME]"""
import sys
from collections import defaultdict

INF = 1 << 60
PPN_F, PPN_I, PPN_W, PPN_U = range(4)
PP_F, PP_B, PP_I, PP_W = range(4)
ZBH1 = 3  # ir/settings.h MM_SCHEDULE_VALUES


def load(path):
    d = dict(acts=defaultdict(list), nodes={}, bufs={}, uses=[])
    for line in open(path):
        t = line.split()
        if not t:
            continue
        if t[0] == "S":
            d["P"], d["S"], d["sched"], d["M"] = map(int, t[1:5])
        elif t[0] == "A":
            d["acts"][int(t[1])].append(tuple(map(int, t[2:5])))
        elif t[0] == "N":
            d["nodes"][int(t[1])] = (int(t[2]), int(t[3]), int(t[4], 16))
        elif t[0] == "B":
            rr, twin = {}, None
            for x in t[8:]:
                if x.startswith("twin="):  # its send room on the makers (memplan pp_send_room)
                    twin = int(x[5:])
                    continue
                r, rg = x.split(":")
                lo, hi = rg[0] + rg[1:].split("-", 1)[0], rg[1:].split("-", 1)[1]
                rr[int(r)] = (int(lo), int(hi))
            d["bufs"][int(t[1])] = dict(arena=t[2], off=int(t[3]), size=int(t[4]), start=int(t[5]),
                                        end=int(t[6]), ranks=int(t[7], 16), rr=rr, twin=twin)
        elif t[0] == "U":
            d["uses"].append((int(t[1]), int(t[2]), t[3], t[4], t[5] == "1"))
    return d


def ranks_of(mask, P):
    return [r for r in range(P) if mask >> r & 1]


def check(d, name):
    P, S, M, nodes = d["P"], d["S"], d["M"], d["nodes"]
    nn = len(nodes)
    upd = lambda i: nodes[i][1] == PPN_U
    has_i = {s for (s, q, _) in nodes.values() if q == PPN_I}
    # each rank's parts in the order they run: (stage, q, mb, in_b), the slots
    inst, idx, slot, firstj = {}, {}, {}, {}
    for r in range(P):
        seq = []
        for kind, s, mb in d["acts"][r]:
            parts = {PP_F: [PPN_F], PP_B: [PPN_I, PPN_W], PP_I: [PPN_I], PP_W: [PPN_W]}.get(kind, [])
            seq += [(s, q, mb, kind == PP_B and q == PPN_W) for q in parts]
        inst[r] = seq
        idx[r] = {(s, q, mb): j for j, (s, q, mb, _) in enumerate(seq)}
        last = {mb: j for j, (_, _, mb, _) in enumerate(seq)}
        firstj[r] = {mb: j for j, (_, _, mb, _) in reversed(list(enumerate(seq)))}
        held, slot[r] = {}, {}
        for j, (_, _, mb, _) in enumerate(seq):
            if mb not in slot[r]:
                k = min(set(range(M + 1)) - set(held.values()))
                held[mb] = slot[r][mb] = k
            if last[mb] == j:
                del held[mb]
    J = {r: len(inst[r]) for r in range(P)}

    def bufr(b, r):  # buffer b on rank r: its send room there if it has one
        t = d["bufs"][b].get("twin") if b in d["bufs"] else None
        return t if t is not None and d["bufs"][t]["ranks"] >> r & 1 else b
    # the values: writer, readers, buffer, summed
    writer, readers, vbuf, summed = {}, defaultdict(list), {}, set()
    for i, b, rw, v, sm in d["uses"]:
        vbuf[v] = b
        if sm:
            summed.add(v)
        if rw == "w":
            writer[v] = i
        else:
            readers[v].append(i)
    # the transfers (codegen/cg_pp.c: a value once per receiving rank, to its first reader there)
    xfers = []  # (value, sender, from (s, q), receiver, to (s, q), how)
    for v, i in writer.items():
        if upd(i):
            continue
        rs = ranks_of(nodes[i][2], P)[0]
        first = {}
        for k in sorted(readers[v]):
            if upd(k):
                continue
            for rv in ranks_of(nodes[k][2], P):
                if rv != rs and rv not in first:
                    first[rv] = k
        for rv, k in first.items():
            fr, to = nodes[i][:2], nodes[k][:2]
            if v in summed:
                how = "sum"
            elif S != P:
                how = "late"
            elif d["bufs"][vbuf[v]].get("twin") is not None:
                how = "fwd"  # MMRT_XFER_FWD: from its send room, waited before the next forward
            else:
                how = "ws" if d["bufs"][vbuf[v]]["arena"] == "grad" else "slot"
                if how == "ws" and fr[1] == PPN_F:
                    how = "late"  # kept for the whole step (ZeRO's gather once a step)
                if to[1] == PPN_W and (d["sched"] == ZBH1 or fr[1] != PPN_I or to[0] in has_i):
                    how = "late"  # passes/pp_stage.c pp_xfer_unwaited
            xfers.append((v, rs, fr, rv, to, how))
    # happens-before: the parts' order on each rank, a send before its receive
    succ = defaultdict(set)
    for r in range(P):
        for j in range(J[r] - 1):
            succ[(r, j)].add((r, j + 1))
    for v, rs, fr, rv, to, how in xfers:
        for mb in slot[rs]:
            if how != "sum" and fr + (mb,) in idx[rs] and to + (mb,) in idx[rv]:
                succ[(rs, idx[rs][fr + (mb,)])].add((rv, idx[rv][to + (mb,)]))
    memo = {}

    def after(a):
        if a not in memo:
            seen, st = {a}, [a]
            while st:
                for w in succ[st.pop()]:
                    if w not in seen:
                        seen.add(w)
                        st.append(w)
            memo[a] = seen
        return memo[a]

    def wait_point(r, js, mb, how):  # the part before which the trainer waits for a send
        k = slot[r][mb]
        for j in range(js + 1, J[r]):
            s, q, m2, in_b = inst[r][j]
            if how == "fwd":
                if q == PPN_F:
                    return j  # wait_before a forward part
                continue
            if slot[r][m2] == k and firstj[r][m2] == j:
                return j  # take_slot: another micro-batch in the slot
            if how == "ws" or (how == "slot" and slot[r][m2] == k and not in_b):
                return j
        return J[r]

    # on each rank, each buffer's life per micro-batch: (lo, hi, buf, mb, why)
    life = defaultdict(list)  # (rank, memory) -> [...]
    touch = defaultdict(lambda: defaultdict(list))  # buf -> rank -> nodes
    for i, b, rw, v, sm in d["uses"]:
        for r in ranks_of(nodes[i][2], P):
            touch[bufr(b, r)][r].append(i)
    recv_at = defaultdict(list)  # (buf, rank) -> receiving parts
    send_of = defaultdict(list)  # (buf, rank) -> (from, receiver, to, how)
    for v, rs, fr, rv, to, how in xfers:
        recv_at[(bufr(vbuf[v], rv), rv)].append(to)
        send_of[(bufr(vbuf[v], rs), rs)].append((fr, rv, to, how))
        if how == "sum":  # summed_xfers: its place in the working set once a step
            b = d["bufs"][vbuf[v]]
            life[(rv, "ws")].append(((J[rv], -3), (J[rv], -3), vbuf[v], -1, b, "the step's sum"))
    for b, x in d["bufs"].items():
        if x["arena"] not in ("act", "grad"):
            continue
        for r, ns in touch[b].items():
            if not x["ranks"] >> r & 1:
                continue  # an update node all ranks run touches the holders' copy only
            mem = lambda mb: "ws" if x["arena"] == "grad" else ("slot", 0 if mb < 0 else slot[r][mb])
            if x["start"] == 0 and x["end"] >= nn:  # a gradient sum: the whole step
                life[(r, mem(-1))].append(((-1, -1), (INF, INF), b, -1, x, "whole step"))
                continue
            us = [i for i in ns if upd(i)]
            ps = [i for i in ns if not upd(i)]
            if us:  # the update's (what it reads from the parts: their sums, put in slot 0)
                lo = (J[r], min(us)) if not ps else (J[r], -1)
                life[(r, mem(-1))].append((lo, (J[r], max(us)), b, -1, x, "update"))
            if not ps:
                continue
            for mb in slot[r]:
                ts = [(idx[r][nodes[i][:2] + (mb,)], i) for i in ps if nodes[i][:2] + (mb,) in idx[r]]
                if not ts:
                    continue
                lo, hi = min(ts), max(ts)
                for to in recv_at[(b, r)]:
                    lo = min(lo, (idx[r][to + (mb,)], -1))
                why = ""
                for fr, rv, to, how in send_of[(b, r)]:
                    if how == "sum":
                        continue
                    js, jr = idx[r][fr + (mb,)], (rv, idx[rv][to + (mb,)])
                    hb = after(jr)
                    done = next((j for j in range(js + 1, J[r]) if (r, j) in hb), J[r])
                    done = min(done, wait_point(r, js, mb, how))
                    if (done - 1, INF) > hi:
                        hi = (done - 1, INF)
                        why = " (its %s send to rank %d done before part %s)" % (
                            how, rv, "%dS%dQ%dM%d" % ((done,) + inst[r][done][:3]) if done < J[r] else "end")
                life[(r, mem(mb))].append((lo, hi, b, mb, x, why))
    bad = 0
    for key in sorted(life, key=str):
        L = life[key]
        for a in range(len(L)):
            for c in range(a + 1, len(L)):
                A, C = L[a], L[c]
                # one buffer: of two micro-batches (a send room's next forward)
                if (A[2] == C[2] and A[3] == C[3]) or not (A[0] <= C[1] and C[0] <= A[1]):
                    continue
                xa, xc = A[4], C[4]
                if xa["off"] < xc["off"] + xc["size"] and xc["off"] < xa["off"] + xa["size"]:
                    bad += 1
                    if bad <= 20:
                        print("%s: rank %d %s: buffer %d (bytes %d+%d, micro-batch %d, alive %s..%s%s) and "
                              "buffer %d (bytes %d+%d, micro-batch %d, alive %s..%s%s) overlap" % (
                                  name, key[0], key[1], A[2], xa["off"], xa["size"], A[3], A[0], A[1], A[5],
                                  C[2], xc["off"], xc["size"], C[3], C[0], C[1], C[5]))
    nx = len([x for x in xfers if x[5] != "sum"])
    print("%s: %d ranks, %d transfers, %d buffer lives: %d overlaps" % (
        name, P, nx, sum(len(v) for v in life.values()), bad))
    return bad


if __name__ == "__main__":
    d = load(sys.argv[1])
    if "P" not in d or not d["uses"]:
        print("%s: no pipeline plan in the dump" % sys.argv[1])
        sys.exit(1)
    sys.exit(1 if check(d, sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]) else 0)
