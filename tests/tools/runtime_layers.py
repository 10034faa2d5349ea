#!/usr/bin/env python3
"""The runtime's layering: no cycle among runtime/*.c and *.h through
#include "...", and none among libmmrt's objects through the symbols one
uses and another defines (main() may call the trainer and the generator,
but neither of those calls into the other, and a task file may use the
task helpers without the helpers reaching back to the task table).

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


def include_graph(rt):
    g = {}
    where = {f: d for d in sorted(os.listdir(rt)) if os.path.isdir(os.path.join(rt, d))
             for f in os.listdir(os.path.join(rt, d))}
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
