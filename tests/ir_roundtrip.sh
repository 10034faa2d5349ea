#!/usr/bin/env bash
# print -> parse -> print of the IR of every stdlib model is byte-identical.
set -euo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
n=0; fail=0
for f in "$S"/*.mm; do
  for m in $(grep -oE '^model [A-Za-z0-9_]+' "$f" | awk '{print $2}'); do
    "$MMC" dump-ir "$f" --model "$m" > "$T/a.mmir"
    if ! "$MMC" dump-ir "$T/a.mmir" > "$T/b.mmir" || ! cmp -s "$T/a.mmir" "$T/b.mmir"; then
      echo "FAIL: $f $m does not round-trip"; diff "$T/a.mmir" "$T/b.mmir" | head -20 || true; fail=$((fail+1))
    fi
    n=$((n+1))
  done
done
echo "$((n-fail)) passed, $fail failed"
[ $fail -eq 0 ] && [ $n -gt 0 ]
