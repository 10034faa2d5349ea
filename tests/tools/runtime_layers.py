#!/usr/bin/env python3
"""The runtime's layering. runtime/ is rooms (folders by job), each with a
README.md whose line "May include: a, b." names the rooms its files may
#include besides its own; a file may include only those (headers are
included by name, so a name is in one room only), and the rooms' allowances
form no cycle. Then no cycle among the files through #include "...", and
none among libmmrt's objects through the symbols one uses and another
defines (main() may call the trainer and the generator, but neither of those
calls into the other, and a feeder may use the feeder helpers without the
helpers reaching back to the feeder table).

usage: runtime_layers.py RUNTIME_DIR LIBMMRT.a
Prints each cycle found, as a path a -> b -> ... -> a; exits 1 if any."""
import os
import re
import subprocess
import sys


def cycles(graph):
    """Every strongly connected component of more than one node (or with a
    self edge), each as one cycle through it."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(path_in(graph, set(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def path_in(graph, comp):
    """A cycle through the smallest node of comp, by breadth-first search."""
    start = min(comp)
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in comp and w not in prev:
                prev[w] = v
                todo.append(w)
    return [start, start]


def rooms(rt):
    """{room: set of rooms it may include}, and the problems found."""
    allow, bad = {}, []
    for f in sorted(os.listdir(rt)):
        if not os.path.isdir(os.path.join(rt, f)):
            if f != "README.md":
                bad.append("runtime/%s is in no room (a folder of runtime/)" % f)
            continue
        readme = os.path.join(rt, f, "README.md")
        text = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
        m = re.search(r"^May include: (.*?)\.?$", text, re.M)
        if not m:
            bad.append("runtime/%s/README.md: no line 'May include: ROOM, ...' (or 'nothing "
                       "outside %s')" % (f, f))
            allow[f] = set()
            continue
        names = set() if m.group(1).startswith("nothing") else \
            {w.strip() for w in m.group(1).split(",") if w.strip()}
        allow[f] = names
    for r, names in allow.items():
        for n in sorted(names - set(allow)):
            bad.append("runtime/%s/README.md: may include '%s', which is no room" % (r, n))
    return allow, bad


def room_check(rt):
    """Every quoted include of a runtime header stays in its room or in one
    the room's README allows; no header name in two rooms; the allowances
    acyclic. Returns the list of problems."""
    allow, bad = rooms(rt)
    where = {}
    for r in allow:
        for f in os.listdir(os.path.join(rt, r)):
            if f == "README.md":
                continue
            if f in where:
                bad.append("%s is in runtime/%s and runtime/%s (headers are included by name)" %
                           (f, where[f], r))
            where[f] = r
    n = 0
    for f, r in sorted(where.items()):
        if not f.endswith((".c", ".h", ".def")):
            continue
        text = open(os.path.join(rt, r, f), encoding="utf-8").read()
        for ln, h in ((text.count("\n", 0, m.start()) + 1, m.group(1)) for m in
                      re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)):
            n += 1
            if h not in where:
                continue
            if where[h] != r and where[h] not in allow[r]:
                bad.append("runtime/%s/%s:%d includes %s of room %s, which runtime/%s/README.md "
                           "does not allow (May include: %s)" %
                           (r, f, ln, h, where[h], r, ", ".join(sorted(allow[r])) or "nothing"))
    for c in cycles({r: sorted(a & set(allow)) for r, a in allow.items()}):
        bad.append("the rooms' allowances form a cycle: " + " -> ".join(c))
    print("rooms: %d, %d files, %d includes checked" % (len(allow), len(where), n))
    return bad


def include_graph(rt):
    g = {}
    where = {f: d for d in sorted(os.listdir(rt)) if os.path.isdir(os.path.join(rt, d))
             for f in os.listdir(os.path.join(rt, d)) if f != "README.md"}
    for f in sorted(where):
        if not f.endswith((".c", ".h")):
            continue
        text = open(os.path.join(rt, where[f], f), encoding="utf-8").read()
        g[f] = sorted({h for h in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)
                       if h in where})
    return g


def symbol_graph(lib):
    out = subprocess.run(["nm", "-A", "-g", lib], capture_output=True, text=True, check=True).stdout
    defs, uses = {}, {}
    for line in out.splitlines():
        m = re.match(r"^(.*):([^:]+\.o):\s*(.*)$", line)  # LIB:OBJ: [ADDR] TYPE NAME
        if not m:
            continue
        obj, parts = m.group(2), m.group(3).split()
        if len(parts) == 2 and parts[0] == "U":
            uses.setdefault(obj, set()).add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDRBCV":
            defs.setdefault(obj, set()).add(parts[2])
    owner = {s: o for o, ss in defs.items() for s in ss}
    return {o: sorted({owner[s] for s in uses.get(o, ()) if s in owner and owner[s] != o})
            for o in set(defs) | set(uses)}


def main():
    rt, lib = sys.argv[1], sys.argv[2]
    bad = 0
    for b in room_check(rt):
        print("FAIL: " + b)
        bad += 1
    inc = include_graph(rt)
    sym = symbol_graph(lib)
    for kind, g in (("#include", inc), ("symbol", sym)):
        found = cycles(g)
        for c in found:
            print("FAIL: %s cycle: %s" % (kind, " -> ".join(c)))
        bad += len(found)
        print("%s graph: %d files, %d edges, %d cycles" % (kind, len(g), sum(map(len, g.values())),
                                                            len(found)))
    if len(sym) < 10:
        print("FAIL: only %d objects in %s" % (len(sym), lib))
        bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
