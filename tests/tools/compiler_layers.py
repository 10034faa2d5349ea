#!/usr/bin/env python3
"""The compiler's layering: each folder may #include "..." only the folders
below it. The IR is the vocabulary every stage shares, so it sits under the
stages that make it (the frontend) and rewrite it (the passes):

    support <- ir <- frontend (+ lang, its grammar) | passes <- codegen

No folder includes the frontend (only tools/ and the grammar do), the IR
includes no stage, the passes include neither the frontend nor codegen nor
the runtime, and codegen includes the runtime's ABI headers (runtime/*,
the target it emits calls to). tools/ may include everything.

usage: compiler_layers.py SOURCE_DIR
Prints each violating #include as file:line; exits 1 if any (or if it
found no include at all to check)."""
import os
import re
import sys

ALLOWED = {
    "support": {"support"},
    "ir": {"ir", "support"},
    "lang": {"lang", "frontend", "ir", "support"},
    "frontend": {"frontend", "lang", "ir", "support"},
    "passes": {"passes", "ir", "support"},
    "codegen": {"codegen", "passes", "ir", "support", "runtime"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(root, path):
    rel = os.path.relpath(path, root)
    return rel.split(os.sep)[0] if os.sep in rel else None


def main():
    root = os.path.realpath(sys.argv[1])
    bad, checked = [], 0
    for folder in sorted(ALLOWED):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".def", ".y", ".l")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        # as the compiler finds it: beside the file, then from the top
                        for base in (dirpath, root):
                            target = os.path.realpath(os.path.join(base, m.group(1)))
                            if os.path.exists(target):
                                break
                        else:
                            continue  # generated (parser.tab.h) or a system header
                        checked += 1
                        to = folder_of(root, target)
                        if to is not None and to not in ALLOWED[folder]:
                            bad.append("%s:%d: includes %s (%s/ may include only %s)" %
                                       (os.path.relpath(path, root), n, m.group(1), folder,
                                        ", ".join(sorted(ALLOWED[folder]))))
    for b in bad:
        print(b)
    if checked == 0:
        print("no #include found to check under", root)
        return 1
    print("%d includes checked, %d across the layers" % (checked, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
