#!/usr/bin/env bash
# The parallel passes seen from outside:
#  1. golden: `mmc dump-ir --rank 1` of GPT2Tiny (two layers) under tp = 2 with
#     sequence parallel, after the collectives pass, against
#     tests/golden/gpt2tiny_tp2_sp.rank1.mmir (MMC_UPDATE_GOLDEN=1 rewrites it);
#     and the collectives of `mmc plan --json` for the same plan against
#     tests/golden/gpt2tiny_tp2_sp.plan_collectives.json;
#  2. every sharded module prints, parses back (placements, collectives and
#     all) and prints the same bytes, after `collectives` and at the end of
#     the pipeline;
#  3. plan errors and --rank misuse exit 1 with a located message.
set -euo pipefail
cd "$MMC_SOURCE_DIR"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0

golden=tests/golden/gpt2tiny_tp2_sp.rank1.mmir
"$MMC" dump-ir stdlib_models/gpt2.mm --model GPT2Tiny --tp 2 --sp --after collectives --rank 1 > "$T/rank1.mmir"
if [ "${MMC_UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$T/rank1.mmir" "$golden"
elif ! cmp -s "$T/rank1.mmir" "$golden"; then
  echo "FAIL: dump-ir --rank 1 differs from $golden"; diff "$golden" "$T/rank1.mmir" | head -30 || true; fail=$((fail+1))
fi

gplan=tests/golden/gpt2tiny_tp2_sp.plan_collectives.json
"$MMC" plan stdlib_models/gpt2.mm --model GPT2Tiny --tp 2 --sp --json |
  python3 -c 'import json, sys; p = json.load(sys.stdin); print(json.dumps({k: p[k] for k in ("mesh", "collective_totals", "collectives")}, indent=1))' \
  > "$T/plan.json"
if [ "${MMC_UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$T/plan.json" "$gplan"
elif ! cmp -s "$T/plan.json" "$gplan"; then
  echo "FAIL: the collectives of mmc plan --json differ from $gplan"; diff "$gplan" "$T/plan.json" | head -30 || true
  fail=$((fail+1))
fi

n=0
for plan in "--tp 2" "--tp 2 --sp" "--tp 4 --sp" "--dp 2" "--dp 2 --zero 1" "--dp 2 --zero 2" "--dp 2 --zero 3" \
            "--tp 2 --dp 2 --sp --zero 1"; do
  for m in "gpt2.mm GPT2Tiny" "vit_fashion.mm ViTFashion" "internvl2.mm InternVL2Tiny"; do
    set -- $m
    [ "$2" = InternVL2Tiny ] && [ "$plan" = "--tp 4 --sp" ] && continue # 2 KV heads: a plan error
    for after in collectives memplan; do
      # shellcheck disable=SC2086
      "$MMC" dump-ir "stdlib_models/$1" --model "$2" $plan --after $after > "$T/a.mmir" 2> "$T/err"
      if ! "$MMC" dump-ir "$T/a.mmir" > "$T/b.mmir" || ! cmp -s "$T/a.mmir" "$T/b.mmir"; then
        echo "FAIL: $2 $plan (after $after) does not round-trip"; diff "$T/a.mmir" "$T/b.mmir" | head -10 || true
        fail=$((fail+1))
      fi
      n=$((n+1))
    done
  done
done

expect_error() { # expected-message command...
  local want="$1"; shift
  if "$@" > /dev/null 2> "$T/err"; then echo "FAIL: '$*' succeeded"; fail=$((fail+1)); return; fi
  grep -qF -- "$want" "$T/err" || { echo "FAIL: '$*' did not say: $want"; cat "$T/err"; fail=$((fail+1)); }
}
expect_error "stdlib_models/gpt2.mm:52:11: error: data parallel: dp = 3 does not divide the batch of 4 of input 'ids'" \
  "$MMC" dump-ir stdlib_models/gpt2.mm --model GPT2Tiny --dp 3
expect_error "error: tp = 3 does not divide the 4 attention heads" \
  "$MMC" dump-ir stdlib_models/gpt2.mm --model GPT2Tiny --tp 3
expect_error "error: --rank 2 is not a rank of the mesh (dp = 1, cp = 1, tp = 2: 2 ranks)" \
  "$MMC" dump-ir stdlib_models/gpt2.mm --model GPT2Tiny --tp 2 --rank 2
expect_error "--rank prints the text form" \
  "$MMC" dump-ir stdlib_models/gpt2.mm --model GPT2Tiny --tp 2 --rank 1 --format dot

echo "$n round trips, $fail failures"
[ $fail -eq 0 ]
