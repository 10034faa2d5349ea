#!/usr/bin/env bash
# `mmc check` passes on every file of stdlib_models, and `mmc stats` gives the
# published parameter counts.
set -euo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
fail=0
for f in "$S"/*.mm; do
  if ! "$MMC" check "$f"; then echo "FAIL: mmc check $f"; fail=1; fi
done
count() { "$MMC" stats "$S/$1" --model "$2" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_params"])'; }
within() { # name got want tolerance
  /usr/bin/python3 - "$@" <<'PY'
import sys
name, got, want, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rel = abs(got - want) / want
print("%s: %d parameters (%.3f%% from %d)" % (name, got, rel * 100, want))
sys.exit(0 if rel <= tol else 1)
PY
}
g=$(count gpt2.mm GPT2)
if [ "$g" != 124439808 ]; then echo "FAIL: GPT2 has $g parameters, expected 124439808"; fail=1; else echo "GPT2: $g parameters (exact)"; fi
within InternViT-300M "$(count internvit.mm InternViT)" 304e6 0.005 || fail=1
within Qwen2-0.5B "$(count llm.mm Qwen2_0_5B)" 494e6 0.005 || fail=1
if [ $fail -ne 0 ]; then echo "0 passed, 1 failed"; exit 1; fi
echo "1 passed, 0 failed"
