#!/usr/bin/python3
"""Runs `mmc check` on .mm files whose expected diagnostics are written inline:

    // expected-error@+1:7 {{unknown name 'foo'}}     error on the next line, column 7
    // expected-error@-2:3 {{...}}                     two lines up
    // expected-error:5 {{...}}                        on this line, column 5
    // expected-note@+1:3 {{...}}                      a note (optional to list)
    // RUN-ARGS: --tp 3                                extra arguments to mmc check

Every expected error must appear exactly (file of the test, line, column, and
the text as a substring); every error printed must be expected; the exit
status must be 1 when errors are expected and 0 otherwise."""
import os, re, subprocess, sys

EXP = re.compile(r"expected-(error|note)(@([+-]\d+))?(:(\d+))?\s*\{\{(.*?)\}\}")
DIAG = re.compile(r"^(.*?):(\d+):(\d+): (error|note): (.*)$")

def run_one(mmc, path):
    text = open(path, encoding="utf-8", errors="replace").read().split("\n")
    expected = []
    args = []
    for i, line in enumerate(text, start=1):
        m = re.search(r"RUN-ARGS:(.*)$", line)
        if m:
            args += m.group(1).split()
        for m in EXP.finditer(line):
            kind, off, col, msg = m.group(1), m.group(3), m.group(5), m.group(6)
            expected.append((kind, i + int(off or 0), int(col) if col else None, msg))
    try:
        r = subprocess.run([mmc, "check", *args, path], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return ["timed out"]
    out = r.stderr + r.stdout
    got = []
    for line in out.split("\n"):
        m = DIAG.match(line)
        if m and os.path.basename(m.group(1)) == os.path.basename(path):
            got.append((m.group(4), int(m.group(2)), int(m.group(3)), m.group(5)))
        elif m and m.group(4) == "error":
            got.append((m.group(4), -1, -1, line))
        elif line.startswith("mmc: error:"):
            got.append(("error", -1, -1, line))
    problems = []
    if r.returncode < 0:
        problems.append("killed by signal %d" % -r.returncode)
    want_errors = any(k == "error" for k, *_ in expected)
    if r.returncode != (1 if want_errors else 0):
        problems.append("exit status %d, expected %d" % (r.returncode, 1 if want_errors else 0))
    used = set()
    for kind, line, col, msg in expected:
        hit = None
        for j, (gk, gl, gc, gm) in enumerate(got):
            if j in used or gk != kind or gl != line or (col is not None and gc != col) or msg not in gm:
                continue
            hit = j
            break
        if hit is None:
            problems.append("missing %s at %d:%s {{%s}}" % (kind, line, col if col else "*", msg))
        else:
            used.add(hit)
    for j, (gk, gl, gc, gm) in enumerate(got):
        if gk == "error" and j not in used:
            problems.append("unexpected error at %d:%d: %s" % (gl, gc, gm))
    if problems:
        problems.append("--- output ---\n" + out)
    return problems

def main():
    mmc = os.environ.get("MMC") or sys.argv[1]
    files = sys.argv[2:] if len(sys.argv) > 2 else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "diag"))
        for f in fs if f.endswith(".mm"))
    files = [f for f in files if "DIAG-SKIP" not in open(f, errors="replace").readline()]
    failed = 0
    for f in files:
        probs = run_one(mmc, f)
        if probs:
            failed += 1
            print("FAIL %s" % f)
            for p in probs:
                print("  " + p)
    print("%d passed, %d failed" % (len(files) - failed, failed))
    return 1 if failed or not files else 0

if __name__ == "__main__":
    sys.exit(main())
