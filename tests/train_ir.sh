#!/usr/bin/env bash
# The training IR of every stdlib model: `mmc dump-ir --after autodiff` and
# `--after optimizer` give a @train that round-trips (print -> parse ->
# print byte-identical), with one gradient and one update per trainable
# parameter and none for frozen ones.
set -euo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
n=0; fail=0
for f in "$S"/*.mm; do
  for m in $(grep -oE '^model [A-Za-z0-9_]+' "$f" | awk '{print $2}'); do
    for pass in autodiff optimizer; do
      "$MMC" dump-ir "$f" --model "$m" --after $pass > "$T/a.mmir"
      if ! "$MMC" dump-ir "$T/a.mmir" > "$T/b.mmir" || ! cmp -s "$T/a.mmir" "$T/b.mmir"; then
        echo "FAIL: $m --after $pass does not round-trip"; diff "$T/a.mmir" "$T/b.mmir" | head -10 || true
        fail=$((fail+1))
      fi
      grep -q '^func @train(' "$T/a.mmir" || { echo "FAIL: $m --after $pass has no @train"; fail=$((fail+1)); }
    done
    trainable=$(grep '^param' "$T/a.mmir" | grep -v ' role(opt)' | grep -vc ' frozen' || true)
    grads=$(grep -o ' grad(@[^)]*)' "$T/a.mmir" | sort -u | wc -l)
    updates=$(grep -cE '^  (adamw|sgd)\(' "$T/a.mmir" || true)
    if [ "$grads" -ne "$trainable" ] || [ "$updates" -ne "$trainable" ]; then
      echo "FAIL: $m: $trainable trainable params, $grads gradients, $updates updates"; fail=$((fail+1))
    fi
    n=$((n+1))
  done
done
echo "$((n-fail)) passed, $fail failed"
[ $fail -eq 0 ] && [ $n -gt 0 ]
