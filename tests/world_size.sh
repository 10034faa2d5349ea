#!/usr/bin/env bash
# A trainer compiled for N ranks refuses any other world size, N = 1
# included, before it touches a file: under a real mpirun, a one-rank
# GPT2Tiny trainer at -np 2, a dp=2 one at -np 1 and -np 4, and a one-rank
# InternVL2Tiny generator at -np 2 each exit non-zero, every rank says how
# many ranks it was compiled for and how many mpirun started, and no log,
# checkpoint, weights or output file appears. The same trainers at their
# own world size do write those files (so their absence above means
# something).
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 120 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS)
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o one 2> c.err || bad "compile GPT2Tiny: $(cat c.err)"
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --dp 2 -o two 2> c.err || bad "compile GPT2Tiny --dp 2: $(cat c.err)"
"$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny --task generate -o gen 2> c.err ||
  bad "compile InternVL2Tiny --task generate: $(cat c.err)"
FILES=(run/log.jsonl run/ckpt run/w.safetensors run/caps.txt)
TRAIN=(--steps 1 --eval-batches 1 --quiet --log run/log.jsonl --ckpt run/ckpt --save-weights run/w.safetensors)

refused() { # name np expected-message program args...
  local name=$1 np=$2 want=$3
  shift 3
  rm -rf run && mkdir run
  # the job: mpirun's exit status and the message
  "${MPIRUN[@]}" -np "$np" "$@" > job.out 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- "$want" job.out; then ok
  else bad "$name: mpirun exit $rc, expected non-zero and '$want'; got: $(head -3 job.out)"; fi
  # each rank on its own: mpirun told not to end the job at the first failure,
  # every rank's exit status and message
  "${MPIRUN[@]}" --mca orte_abort_on_non_zero_status 0 -np "$np" \
    bash -c '"$@" > rank-$OMPI_COMM_WORLD_RANK.out 2>&1; echo "exit $?" >> rank-$OMPI_COMM_WORLD_RANK.out' _ "$@" > /dev/null 2>&1
  local r ranks_ok=0
  for r in $(seq 0 $((np - 1))); do
    if grep -qF -- "(rank $r): error: $want" "rank-$r.out" && grep -qx "exit 1" "rank-$r.out"; then
      ranks_ok=$((ranks_ok + 1))
    else echo "  rank $r: $(tr '\n' ' ' < "rank-$r.out" 2>/dev/null)"; fi
  done
  rm -f rank-*.out
  if [ $ranks_ok -eq "$np" ]; then ok; else bad "$name: $ranks_ok of $np ranks exited 1 with the message"; fi
  local f left=""
  for f in "${FILES[@]}"; do [ -e "$f" ] && left="$left $f"; done
  if [ -z "$left" ]; then ok; echo "$name: refused on all $np ranks, no file written: $want"
  else bad "$name: files written:$left"; fi
}

refused "one-rank trainer at -np 2" 2 \
  "the trainer was compiled for 1 rank (no parallelism), but mpirun started 2" ./one "${TRAIN[@]}"
refused "dp=2 trainer at -np 1" 1 \
  "the trainer was compiled for dp=2 = 2 ranks, but mpirun started 1 (start it with mpirun -np 2)" ./two "${TRAIN[@]}"
refused "dp=2 trainer at -np 4" 4 \
  "the trainer was compiled for dp=2 = 2 ranks, but mpirun started 4 (start it with mpirun -np 2)" ./two "${TRAIN[@]}"
refused "one-rank generator at -np 2" 2 \
  "the generator was compiled for 1 rank (no parallelism), but mpirun started 2" \
  ./gen --weights run/w.safetensors --images "$S/gpt2.mm" --out run/caps.txt --quiet

# the controls: at their own world size the trainers write what was refused above
for c in "1 one" "2 two"; do
  set -- $c
  rm -rf run && mkdir run
  if "${MPIRUN[@]}" -np "$1" "./$2" "${TRAIN[@]}" > job.out 2>&1 && [ -s run/log.jsonl ] &&
     [ -e run/ckpt ] && [ -s run/w.safetensors ]; then ok; echo "$2 at -np $1: trains and writes the log, checkpoint and weights"
  else bad "$2 at -np $1: $(tail -3 job.out)"; fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
