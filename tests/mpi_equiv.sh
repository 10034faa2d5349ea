#!/usr/bin/env bash
# Equivalence of the multi-rank trainers with the one-rank trainer under
# real mpirun ranks: GPT2Tiny, ViTFashion and InternVL2Tiny compiled for
# tp=2, tp=2+sp, tp=4+sp, dp=2, dp=2+ZeRO-1/2/3 and tp=2 x dp=2+sp+ZeRO-1
# give the serial trainer's loss at each of 5 steps (1e-5 relative: only
# the order of sums differs) and, gathered on rank 0 by --save-weights, its
# final weights: each trained tensor within 1e-3 of the size of its update
# (|w_ranks - w_serial| <= 1e-3 |w_serial - w_init| + 1e-7, norms per
# tensor; the key biases, whose update is at rounding level, by their
# elements' step sizes: tests/torch/mmtrain.py, as in tests/torch_parity.sh).
# Every plan must run and agree, except those in REFUSED, which the compiler
# must refuse with exactly the message given there (InternVL2Tiny's 2 KV
# heads under tp=4); a refused plan that compiles, another message, or any
# plan missing from the count fails.
# Under the sanitizer build a reduced subset runs.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np)
pass=0; fail=0; skip=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

close() { # name serial.jsonl ranks.jsonl init.st serial.st ranks.st file.mm model
  /usr/bin/python3 "$MMC_SOURCE_DIR/tests/tools/close_runs.py" "$@"
}

# plans the compiler refuses: name -> the exact error message (after "error: ")
declare -A REFUSED=(
  [internvl2tiny.tp4.sp]="tp = 4 is more than the 2 key/value heads of 'llm.blocks.0.attn'"
)
expected=0

check() { # name ranks file model steps plan-flags...
  local name=$1 np=$2 file=$3 model=$4 steps=$5; shift 5
  expected=$((expected+1))
  [ -x "$T/$model.serial" ] || "$MMC" compile "$S/$file" --model "$model" -o "$T/$model.serial" || { bad "$model: compile"; return; }
  [ -s "$T/$model.init.st" ] || "$T/$model.serial" --steps 0 --eval-batches 1 --quiet --save-weights "$T/$model.init.st" > /dev/null ||
    { bad "$model: serial init"; return; }
  [ -s "$T/$model.serial.st" ] || "$T/$model.serial" --steps "$steps" --eval-batches 1 --quiet --log "$T/$model.serial.jsonl" \
    --save-weights "$T/$model.serial.st" > /dev/null || { bad "$model: serial run"; return; }
  local want=${REFUSED[$name]:-}
  if ! "$MMC" compile "$S/$file" --model "$model" "$@" -o "$T/$name" 2> "$T/$name.cc"; then
    local got
    got=$(sed -n 's/^.*: error: //p' "$T/$name.cc")
    if [ -n "$want" ] && [ "$got" = "$want" ]; then echo "refused $name, as expected: $got"; skip=$((skip+1))
    else bad "$name: compile${want:+ (expected exactly one error: $want)}"; head -3 "$T/$name.cc"; fi
    return
  fi
  [ -z "$want" ] || { bad "$name: compiled, but the compiler should refuse it: $want"; return; }
  if ! "${MPIRUN[@]}" "$np" "$T/$name" --steps "$steps" --eval-batches 1 --quiet --log "$T/$name.jsonl" \
       --save-weights "$T/$name.st" > "$T/$name.out" 2>&1; then
    bad "$name: mpirun"; tail -5 "$T/$name.out"; return
  fi
  close "$name" "$T/$model.serial.jsonl" "$T/$name.jsonl" "$T/$model.init.st" "$T/$model.serial.st" "$T/$name.st" \
    "$S/$file" "$model" && ok || bad "$name: differs from one rank"
}

PLANS=("tp2:2:--tp 2" "tp2.sp:2:--tp 2 --sp" "tp4.sp:4:--tp 4 --sp" "dp2:2:--dp 2" "dp2.zero1:2:--dp 2 --zero 1"
       "dp2.zero2:2:--dp 2 --zero 2" "dp2.zero3:2:--dp 2 --zero 3" "tp2.dp2.sp.zero1:4:--tp 2 --dp 2 --sp --zero 1")
MODELS=("gpt2tiny:gpt2.mm:GPT2Tiny:5" "vit:vit_fashion.mm:ViTFashion:5" "internvl2tiny:internvl2.mm:InternVL2Tiny:5")
if [ $SAN = 1 ]; then # ten times slower: GPT2Tiny, 3 steps, three plans
  PLANS=("tp2.sp:2:--tp 2 --sp" "dp2.zero3:2:--dp 2 --zero 3" "tp2.dp2.sp.zero1:4:--tp 2 --dp 2 --sp --zero 1")
  MODELS=("gpt2tiny:gpt2.mm:GPT2Tiny:3")
fi
for mo in "${MODELS[@]}"; do
  IFS=: read -r short file model steps <<< "$mo"
  for pl in "${PLANS[@]}"; do
    IFS=: read -r pname np flags <<< "$pl"
    # shellcheck disable=SC2086
    check "$short.$pname" "$np" "$file" "$model" "$steps" $flags
  done
done
echo "$pass passed, $fail failed, $skip refused as expected, of $expected plans"
[ $fail -eq 0 ] && [ $((pass + skip)) -eq $expected ]
