#!/usr/bin/env bash
# Measured memory against the plan: GPT2Tiny, ViTFashion and InternVL2Tiny,
# serial, tp=2 and dp=2 with ZeRO-3 (real mpirun), each train a few steps
# and evaluate; every rank's measured peak (the kernel's high-water mark of
# resident memory above the trainer's baseline, less code: runtime/mmrt_mem.h)
# must lie within 5% of `mmc plan`'s "trainer" figure (the arenas plus the
# data set), which the compiler computed without running anything.  The
# trainer's own copy of the plan figure must also equal mmc plan's, the
# code it leaves out is bounded, so it cannot swallow a real regression, and
# oneDNN's largest scratchpad (queried per primitive; the plan has none)
# stays under 5% of the plan.
# Release builds only: under ASan the shadow memory and quarantine are
# resident too, and the heap is not glibc's.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np 2)
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
TOL=${MMC_MEM_TOLERANCE:-0.05}
CODE_MAX=$((32 << 20)) # code left out of the comparison, per rank

ldd "$MMC" > "$T/ldd" 2>&1 || true
if grep -q "libasan\|libubsan" "$T/ldd"; then
  echo "skipped: a sanitizer build (resident memory includes the sanitizer's shadow)"; exit 0
fi

printf "%-14s %-10s %14s %14s %8s\n" model plan "planned B" "measured B" ratio | tee "$T/table"
run() { # file model plan-name ranks flags...
  local file=$1 model=$2 plan=$3 np=$4; shift 4
  local exe="$T/$model.$plan"
  if ! "$MMC" compile "$S/$file" --model "$model" "$@" -o "$exe" 2> "$T/cerr"; then
    bad "$model $plan: mmc compile"; cat "$T/cerr"; return
  fi
  local want
  want=$("$MMC" plan "$S/$file" --model "$model" "$@" --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["trainer_bytes"])')
  local args=(--steps 3 --lr 1e-3 --eval-batches 2)
  if [ "$np" = 1 ]; then OMP_NUM_THREADS=2 "$exe" "${args[@]}" > "$T/out" 2> "$T/err"
  else OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$exe" "${args[@]}" > "$T/out" 2> "$T/err"; fi
  local rc=$?
  [ $rc -eq 0 ] && ok || { bad "$model $plan: the trainer failed ($rc)"; tail -5 "$T/err"; return; }
  /usr/bin/python3 - "$model" "$plan" "$np" "$want" "$TOL" "$CODE_MAX" "$T/out" >> "$T/table" <<'PY'
import re, sys
model, plan, np, want, tol, code_max, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
pat = re.compile(r"^memory(?: of rank (\d+) of \d+)?: measured peak (-?\d+) bytes, plan (\d+) bytes .*"
                 r"largest scratchpad (\d+) bytes.*"
                 r"library pages (-?\d+) bytes, generated kernels (-?\d+) bytes, their objects (-?\d+) bytes")
rows = [pat.match(l) for l in open(out)]
rows = [r for r in rows if r]
errs = []
if len(rows) != np: errs.append("%d memory lines, expected one per rank (%d)" % (len(rows), np))
worst = None
for r in rows:
    got, told = int(r.group(2)), int(r.group(3))
    scratch = int(r.group(4))
    code = sum(int(r.group(k)) for k in (5, 6, 7))
    ratio = got / want
    if worst is None or abs(ratio - 1) > abs(worst[1] - 1): worst = (got, ratio)
    who = "rank %s" % (r.group(1) or "0")
    if told != want: errs.append("%s: the trainer's plan figure %d differs from mmc plan's %d" % (who, told, want))
    if abs(ratio - 1) > tol: errs.append("%s: measured %d bytes, plan %d: ratio %.4f outside 1 +- %g" % (who, got, want, ratio, tol))
    # oneDNN allocates its scratchpads itself and the plan has none: they must stay small
    if scratch > tol * want: errs.append("%s: a oneDNN scratchpad of %d bytes, more than %g of the plan: plan it" % (who, scratch, tol))
    if not 0 <= code <= code_max: errs.append("%s: %d bytes of code left out, expected 0..%d" % (who, code, code_max))
if worst: print("%-14s %-10s %14d %14d %8.4f" % (model, plan, want, worst[0], worst[1]))
for e in errs: print("FAIL: %s %s: %s" % (model, plan, e), file=sys.stderr)
sys.exit(1 if errs else 0)
PY
  [ $? -eq 0 ] && ok || bad "$model $plan: measured memory"
  tail -1 "$T/table"
}

for m in "gpt2.mm GPT2Tiny" "vit_fashion.mm ViTFashion" "internvl2.mm InternVL2Tiny"; do
  set -- $m
  run "$1" "$2" serial 1
  run "$1" "$2" tp2 2 --tp 2
  run "$1" "$2" dp2-zero3 2 --dp 2 --zero 3
done
echo "--- measured peak (worst rank) against mmc plan's trainer bytes"
cat "$T/table"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
