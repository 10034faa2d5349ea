#!/usr/bin/env bash
# Overlapped gradient buckets (issue 15 item 6): GPT2Tiny and ViTFashion
# under dp = 2 on real mpirun ranks (one OpenMP thread each), their
# --trace read by bench/overlap.py: per rank and step the buckets'
# reduction time, the part hidden behind the backward's compute and the
# exposed wait, and the totals. ZERO=3 runs the same models under ZeRO-3,
# adds the prefetched parameter gathers' figures and, for the prefetch's
# effect, the median step of the same run with --no-overlap (blocking
# buckets and gathers). A benchmark, not a test:
# on a shared 2-core machine the figures move with the load (printed).
# Usage: bench/overlap.sh  (needs build/mmc; STEPS, default 10; ZERO)
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
ROOT=$(cd "$(dirname "$0")/.." && pwd) zero=()
[ -n "${ZERO:-}" ] && zero=(--zero "$ZERO")
MMC=${MMC:-$ROOT/build/mmc} STEPS=${STEPS:-10} S="$ROOT/stdlib_models" T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
echo "cpu: $(lscpu | sed -n "s/^Model name: *//p"), $(getconf _NPROCESSORS_ONLN) CPUs, load $(cut -d" " -f1-3 /proc/loadavg)"
for mm in gpt2.mm:GPT2Tiny vit_fashion.mm:ViTFashion; do
  f=${mm%%:*} model=${mm#*:}
  "$MMC" compile "$S/$f" --model "$model" --dp 2 "${zero[@]}" -o "$model"
  mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np 2 ./"$model" --steps "$STEPS" \
    --eval-batches 1 --quiet --trace "$model.json" > "$model.out"
  grep -E "^overlapped|^prefetched" "$model.out" || true
  /usr/bin/python3 "$ROOT/bench/overlap.py" "$model.json" | sed "s|^$model.json|$model dp=2 ${zero[*]}|"
  if [ "${ZERO:-}" = 3 ]; then # the prefetch's effect: the same run with --no-overlap
    "$MMC" compile "$S/$f" --model "$model" --dp 2 "${zero[@]}" --no-overlap -o "$model.no"
    mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np 2 ./"$model.no" --steps "$STEPS" \
      --eval-batches 1 --quiet --trace "$model.no.json" > "$model.no.out"
    /usr/bin/python3 "$ROOT/bench/overlap.py" "$model.no.json" | grep median | sed "s|^$model.no.json|$model --no-overlap|"
  fi
done
echo "load after: $(cut -d" " -f1-3 /proc/loadavg)"
