#!/usr/bin/env bash
# op_files.sh OP [DIR]: the source files that name an op, as issue 9 counts
# them: tracked files under support, lang, frontend, ir, passes, codegen,
# runtime and tools (Markdown excluded: docs are not sources) whose text
# contains OP with or without its underscores, case-insensitive. Prints the
# files, then the count. DIR is the checkout (default: this script's).
set -euo pipefail
op=${1:?usage: op_files.sh OP [DIR]}
dir=${2:-$(cd "$(dirname "$0")/.." && pwd)}
plain=${op//_/}
cd "$dir"
files=$(git ls-files support lang frontend ir passes codegen runtime tools | grep -v '\.md$' |
  xargs grep -il -e "$op" -e "$plain" || true)
[ -n "$files" ] && printf '%s\n' "$files"
printf '%s: %d files\n' "$op" "$(printf '%s' "$files" | grep -c . || true)"
