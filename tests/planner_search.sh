#!/usr/bin/env bash
# mmc plan --search's stage splits and per-sub-model plans (issue 32,
# docs/planner.md "Stage splits" and "Plans per sub-model"):
#   - a GPT built to need an uneven split (8 layers, a 256,000-row head on
#     the last of 4 stages): #1 lists its stages (stages = [...]) and is not
#     the even cut; pasted back into the file, `mmc plan` predicts #1's
#     step exactly, and the same section without its stage list (the
#     pipeline pass's even cut) predicts a slower step;
#   - InternVL2Tiny on 4 devices: a plan with vision and llm blocks is
#     ranked, and pasted back predicts its own step; the compiler's
#     refusals are counted by reason;
#   - a stage list the search did not write (a bad layer count) is refused
#     by the compiler as written.
# Under ASan the same, the models being small (a few seconds).
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
plain_script
I=(-I "$MMC_SOURCE_DIR/stdlib_models")

# the step `mmc plan` predicts for FILE on DEVICE x N
step_of() {
  "$MMC" plan "$1" "${I[@]}" --device "$2" --devices "$3" --json 2> "$T/e" | predicted_step
}
# FILE with its parallel line replaced by SECTION (a search's printed line)
paste_plan() { $PY -c "
import re, sys
t = open(sys.argv[1]).read()
print(re.sub(r'^  parallel \{.*\}$', sys.argv[2], t, flags=re.M), end='')" "$1" "$2" > "$3"; }

# ---- a split that needs to be uneven ----
gpt_model Uneven 64 1024 "vocab = 256000, ctx = 1024, dim = 1024, depth = 8, heads = 16" \
  "precision = bf16; optimizer = adamw(lr = 1e-4, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)" \
  "pp = 4; micro_batches = 16; recompute = full" > "$T/uneven.mm"
"$MMC" plan "$T/uneven.mm" "${I[@]}" --device a100 --devices 4 --tp 1 --pp 4 --search \
  > "$T/u.txt" 2> "$T/e" || { bad "--search (uneven)"; cat "$T/e"; }
top=$(grep -m1 -A1 "^#1 " "$T/u.txt" | tail -1)
want=$(grep -m1 "^#1 " "$T/u.txt" | sed -E 's/^#1  step (\S+) s.*/\1/')
case "$top" in
  *"stages = ["*) ;;
  *) bad "#1 lists no stages: $top" ;;
esac
grep -q "stages = \[2, 2, 2, 2\]" <<< "$top" && bad "#1 is the even cut"
grep -Eq "^  stage splits: [1-9][0-9]* tried for [1-9]" "$T/u.txt" || bad "no stage-split count"
paste_plan "$T/uneven.mm" "$top" "$T/paste.mm"
got=$(step_of "$T/paste.mm" a100 4) || { bad "#1 pasted back: refused"; cat "$T/e"; }
[ "$got" = "$want" ] || bad "#1 pasted back predicts $got s, the search said $want s"
paste_plan "$T/uneven.mm" "$(sed -E 's/; stages = \[[^]]*\]//' <<< "$top")" "$T/even.mm"
even=$(step_of "$T/even.mm" a100 4) || { bad "#1 without its stages: refused"; cat "$T/e"; }
$PY -c "import sys; sys.exit(0 if float('$want') < float('$even') else 1)" ||
  bad "the uneven split ($want s) is not faster than the pass's even cut ($even s)"
echo "uneven: #1 $want s ($top), the even cut $even s"

# ---- a plan per sub-model ----
cat > "$T/vl.mm" <<'MM'
import "internvl2.mm"
model VL extends InternVL2Tiny {
  parallel { recompute = full }
}
MM
"$MMC" plan "$T/vl.mm" "${I[@]}" --device h100 --devices 4 --search > "$T/v.txt" 2> "$T/e" ||
  { bad "--search (InternVL2Tiny)"; cat "$T/e"; }
grep -Eq "^  per-sub-model plans: [1-9][0-9]* tried \(vision and llm blocks" "$T/v.txt" ||
  bad "no per-sub-model count"
grep -Eq "^  dropped +[0-9]+: " "$T/v.txt" || bad "no refusals counted by reason"
sub=$(grep -A1 -E "^#[0-9]+ " "$T/v.txt" | grep -m1 "^  parallel { vision {")
[ -n "$sub" ] || bad "no per-sub-model plan ranked"
sstep=$(grep -B1 -F -- "$sub" "$T/v.txt" | head -1 | sed -E 's/^#[0-9]+ .*step (\S+) s.*/\1/')
paste_plan "$T/vl.mm" "$sub" "$T/vpaste.mm"
got=$(step_of "$T/vpaste.mm" h100 4) || { bad "the sub-model plan pasted back: refused"; cat "$T/e"; }
[ "$got" = "$sstep" ] || bad "the sub-model plan pasted back predicts $got s, the search said $sstep s"
echo "per sub-model: $sub at $sstep s"

# ---- a layer count that does not add up is the compiler's error ----
paste_plan "$T/uneven.mm" "  parallel { pp = 4; micro_batches = 16; stages = [2, 2, 2, 1] }" "$T/badst.mm"
"$MMC" plan "$T/badst.mm" "${I[@]}" > /dev/null 2> "$T/e" && bad "a stage list of 7 of 8 layers accepted"
grep -q "add up to 7, but gpt.h has 8 layers" "$T/e" || { bad "no message for the bad list"; cat "$T/e"; }

[ "$fail" = 0 ] && echo "planner_search: ok"
exit $((fail > 0))
