#!/usr/bin/env bash
# The docs' reference sections are the output of the commands they quote:
# between `<!-- mmc ARGS -->` and `<!-- end -->` a page holds exactly
# ```text, the output of `mmc ARGS`, ```. The table below is every
# (arguments, page) pair; a section that differs from the command's output,
# a page in the table without its section, or a section in any page of
# README.md, docs/ or lang/ that the table does not list fails.
# `bash tests/docs_sync.sh --write` (MMC=build/mmc) rewrites the sections.
set -uo pipefail
SRC=${MMC_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
MMC=${MMC:-$SRC/build/mmc}
WRITE=0
[ "${1:-}" = --write ] && WRITE=1
# arguments        | page (from the source folder)
TABLE='
--list-passes      | docs/architecture.md
--list-passes      | docs/guide.md
--list-ops         | docs/ops.md
'
/usr/bin/python3 - "$MMC" "$SRC" "$WRITE" "$TABLE" <<'PY'
import glob, os, re, subprocess, sys
mmc, src, write, table = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
rows = [tuple(x.strip() for x in line.split("|")) for line in table.strip().splitlines()]
section = re.compile(r"<!-- mmc (.+?) -->\n(.*?)<!-- end -->", re.S)
fails, checked = [], 0
out = {}
for args, _ in rows:
    if args not in out:
        r = subprocess.run([mmc] + args.split(), capture_output=True, text=True)
        if r.returncode != 0 or not r.stdout:
            sys.exit("FAIL: mmc %s: exit %d, %d bytes of output\n%s" % (args, r.returncode, len(r.stdout), r.stderr))
        out[args] = "```text\n" + r.stdout + "```\n"
for args, page in rows:
    path = os.path.join(src, page)
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        fails.append("%s: cannot read it (%s)" % (page, e.strerror)); continue
    found = [m for m in section.finditer(text) if m.group(1) == args]
    if not found:
        fails.append("%s: no section <!-- mmc %s --> ... <!-- end -->" % (page, args)); continue
    for m in found:
        checked += 1
        if m.group(2) == out[args]:
            continue
        if write:
            text = text.replace(m.group(0), "<!-- mmc %s -->\n%s<!-- end -->" % (args, out[args]), 1)
            continue
        have, want = m.group(2).splitlines(), out[args].splitlines()
        diff = next((i for i in range(max(len(have), len(want)))
                     if i >= len(have) or i >= len(want) or have[i] != want[i]), 0)
        line = text[:m.start(2)].count("\n") + 1 + diff
        fails.append("%s:%d: the section <!-- mmc %s --> differs from `mmc %s`:\n  page: %s\n  mmc:  %s"
                     % (page, line, args, args, have[diff] if diff < len(have) else "(ends)",
                        want[diff] if diff < len(want) else "(ends)"))
    if write:
        open(path, "w", encoding="utf-8").write(text)
listed = {(a, p) for a, p in rows}
pages = ["README.md"] + glob.glob("docs/**/*.md", root_dir=src, recursive=True) + \
        glob.glob("lang/*.md", root_dir=src)
for page in pages:
    for m in section.finditer(open(os.path.join(src, page), encoding="utf-8").read()):
        if (m.group(1), page) not in listed:
            fails.append("%s: section <!-- mmc %s --> is not in tests/docs_sync.sh's table" % (page, m.group(1)))
for f in fails:
    print("FAIL: " + f)
if fails:
    print("(MMC=build/mmc bash tests/docs_sync.sh --write rewrites the sections from the commands)")
    sys.exit(1)
print("docs_sync: %d sections of %d pages %s their commands' output"
      % (checked, len({p for _, p in rows}), "rewritten from" if write else "equal"))
PY
