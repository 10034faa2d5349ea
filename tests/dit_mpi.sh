#!/usr/bin/env bash
# VideoDiTTiny (stdlib_models/videodit.mm) under real mpirun ranks: tp=2,
# tp=2+sp, dp=2+ZeRO-2 and dp=2+ZeRO-3 (all compiled at -O0) give the
# serial trainer's loss at each of 10 steps (1e-5 relative) and its final
# weights, gathered by --save-weights: each trained tensor within 1e-3 of the
# size of its update (tests/torch/mmtrain.py compare_weights, as
# tests/mpi_equiv.sh), the frozen T5 bit for bit. Under the sanitizer build
# tp=2+sp alone runs.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
A=(--steps 10 --eval-batches 1 --quiet)
fail=0

close() { # name model serial.jsonl ranks.jsonl init.st serial.st ranks.st
  /usr/bin/python3 - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MMC_SOURCE_DIR"], "tests", "torch"))
import mmtrain
name, model, pa, pb, w0, wa, wb = sys.argv[1:8]
rows = lambda p: [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
la, lb = rows(pa), rows(pb)
lw = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if la and len(la) == len(lb) == 10 else float("inf")
print("%s: %d steps, loss largest relative difference %.2e" % (name, len(lb), lw))
cfg = mmtrain.train_settings(os.path.join(os.environ["MMC_SOURCE_DIR"], "stdlib_models", "videodit.mm"), model)
(I, _), (W, _), (R, _) = (mmtrain.st_load(p) for p in (w0, wa, wb))
bad = mmtrain.compare_weights(I, W, R, cfg, [mmtrain.lr_at(cfg, s, 10) for s in range(1, 11)], "ranks")
sys.exit(0 if not bad and lw <= 1e-5 else 1)
PY
}

SPECS=("VideoDiTTiny tp2 --tp 2" "VideoDiTTiny tp2sp --tp 2 --sp" "VideoDiTTiny dp2z2 --dp 2 --zero 2"
       "VideoDiTTiny dp2z3 --dp 2 --zero 3")
# under the sanitizer build, tp=2+sp alone
[ "$SAN" = 1 ] && SPECS=("${SPECS[1]}")
# both builds compile serial and ranks at -O0 (o0_compiles: LLVM's -O3 took
# 11 of a VideoDiTTiny compile's 12 s); dit_videodit keeps -O3 against PyTorch.
for spec in "${SPECS[@]}"; do
  set -- $spec
  m=$1 name=$1.$2; shift 2
  if [ ! -x $m.serial ]; then
    "$MMC" compile "$S/videodit.mm" --model $m -o $m.serial || { echo "FAIL: $m: compile"; fail=1; continue; }
    ./$m.serial --steps 0 --eval-batches 1 --quiet --save-weights $m.init.st > /dev/null
    ./$m.serial "${A[@]}" --log $m.serial.jsonl --save-weights $m.serial.st > /dev/null
  fi
  "$MMC" compile "$S/videodit.mm" --model $m "$@" -o $name || { echo "FAIL: $name: compile"; fail=1; continue; }
  "${MPIRUN[@]}" ./$name "${A[@]}" --log $name.jsonl --save-weights $name.st > $name.out 2>&1 ||
    { echo "FAIL: $name: the run failed"; tail -5 $name.out; fail=1; continue; }
  close $name $m $m.serial.jsonl $name.jsonl $m.init.st $m.serial.st $name.st || { echo "FAIL: $name"; fail=1; }
done
exit $fail
