#!/usr/bin/env bash
# Long work is visible and can be stopped (runtime/core/mmrt_log.c MmrtProgress,
# mmrt_stop_signal), and no reader waits on a FIFO:
#  1. a trainer's final evaluation is bounded by default (its start line and
#     eval line say how much) and prints progress lines with an ETA;
#  2. SIGINT / SIGTERM during the evaluation of a trainer (--eval-batches
#     all), an extractor, a sampler, a reconstructor and the captioner's
#     evaluator end it within seconds with exit 130 / 143, a "stopped by"
#     line, the trainer's checkpoint complete, and no partial or *.tmp file;
#  3. under mpirun, SIGINT to one rank of a dp=2 trainer in its evaluation
#     stops both ranks (no rank left in a collective);
#  4. a FIFO given as --data files, --init-from or --prompts is refused by
#     name at once (exit 1), never waited on;
#  5. the reconstructor's GIF declares GIF89a;
#  6. a trainer under several address-space limits (ulimit -v) ends with
#     exit 0 or exit 1 and an out-of-memory message, never by a signal.
# Models are compiled at -O0 (the kernels are libmmrt's): fast to compile.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
S="$MMC_SOURCE_DIR/stdlib_models"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

# stopped NAME SIGNAL RC PATTERN OUTFILE CMD...: runs CMD (stderr to
# NAME.err), sends SIGNAL once PATTERN shows in its stderr, and checks it
# ended with exit RC within 8 s (the line is awaited 30 s, 180 s under the
# sanitizers), saying so, after a progress line with an ETA.
stopped() {
  local name=$1 sig=$2 want=$3 pat=$4 out=$5
  shift 5
  "$@" > "$out" 2> "$name.err" &
  local pid=$! k=0 lim=600
  [ "$SAN" = 1 ] && lim=3600 # the sanitizers under a busy suite: a 2-CPU machine took over 30 s
  while ! grep -q -- "$pat" "$name.err" && kill -0 $pid 2> /dev/null && [ $k -lt $lim ]; do
    sleep 0.05; k=$((k + 1))
  done
  if ! grep -q -- "$pat" "$name.err"; then
    kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
    bad "$name: no '$pat' progress line within $((lim / 20)) s: $(tail -c 300 "$name.err")"; return 1
  fi
  kill -"$sig" $pid
  local t0=$SECONDS
  while kill -0 $pid 2> /dev/null && [ $((SECONDS - t0)) -lt 8 ]; do sleep 0.05; done
  if kill -0 $pid 2> /dev/null; then
    kill -9 $pid; wait $pid 2> /dev/null
    bad "$name: still running 8 s after SIG$sig"; return 1
  fi
  wait $pid
  local rc=$?
  if [ $rc = "$want" ] && grep -q "stopped by SIG$sig" "$name.err" &&
     grep -- "$pat" "$name.err" | grep -q "| eta [0-9]:[0-9][0-9]:[0-9][0-9] |"; then
    ok "$name: SIG$sig in its long phase: exit $rc in $((SECONDS - t0)) s, progress with an ETA"
  else
    bad "$name: SIG$sig: exit $rc (want $want): $(tail -c 400 "$name.err")"; return 1
  fi
}
no_tmp() { # NAME DIR...: no *.tmp left anywhere
  local left
  left=$(find "${@:2}" -name '*.tmp*' 2> /dev/null)
  [ -z "$left" ] && ok "$1: no temporary file left" || bad "$1: left $left"
}

"$MMC" compile "$S/vit_fashion.mm" --model ViTFashion -O0 -o vit || { echo "FAIL: compile"; exit 1; }

# ---- 1. the default evaluation: bounded, said so, with progress ----
if ./vit --steps 2 --log d.jsonl > d.out 2> d.err; then
  grep -q "evaluation on 20 of the 157 test batches (--eval-batches all: every one)" d.err &&
    grep -q "^eval: loss .* (test split: first 20 of 157 batches; --eval-batches all for the whole)$" d.out &&
    grep -q "^eval batch 20/20 (100.0%) | .* samples/s | elapsed .* | eta 0:00:00 |" d.err &&
    ok "default evaluation: 20 of 157 batches, in the start and eval lines, progress to 20/20" ||
    bad "default evaluation: $(grep -h "evaluation on\|^eval" d.err d.out)"
else bad "vit --steps 2: $(tail -3 d.err)"; fi
./vit --steps 0 --eval-batches 2x > /dev/null 2> e.err
[ $? = 1 ] && grep -q -- "--eval-batches takes a whole number >= 0 or all, not '2x'" e.err &&
  ok "--eval-batches 2x refused" || bad "--eval-batches 2x: $(cat e.err)"

# ---- 2. stopping each program in its long phase ----
if stopped trainer INT 130 "^eval batch" t.out ./vit --steps 2 --eval-batches all --ckpt ck; then
  [ "$(cat ck/latest)" = step-000002 ] && [ -f ck/step-000002/manifest.json ] &&
    grep -q "stopped by SIGINT after step 2 (checkpoint written)" trainer.err &&
    ! grep -q "^eval:" t.out && ok "trainer: checkpoint of step 2 complete, no eval figure" ||
    bad "trainer: checkpoint/eval line: $(ls ck; grep eval: t.out)"
  no_tmp trainer ck
fi
stopped trainer-term TERM 143 "^eval batch" t2.out ./vit --steps 1 --eval-batches all

"$MMC" compile "$S/t2v.mm" --model T2VTiny --task extract -O0 -o t2vx || bad "compile extract"
stopped extractor INT 130 "^extractor: training clip" x.out ./t2vx --out F --clips 20000 --heldout 4 &&
  { [ ! -e F/manifest.json ] && ok "extractor: no features directory written" || bad "extractor: F/ $(ls F)"; }

"$MMC" compile "$MMC_SOURCE_DIR/tests/dit/sample.mm" --model T2VSampleTest -O0 -o dit || bad "compile sample.mm"
"$MMC" compile "$MMC_SOURCE_DIR/tests/dit/sample.mm" --model T2VSampleTest --task sample -O0 -o sampler || bad "compile sampler"
./dit --steps 0 --save-weights dit.st --eval-batches 1 --quiet > /dev/null 2>&1 || bad "dit weights"
if stopped sampler TERM 143 "^sampler: denoising step" s.out ./sampler --weights dit.st \
     --prompt "a bag moving up" --clips 64 --steps 200 --out so --dump s.bin --raw s.raw; then
  [ ! -e s.bin ] && [ ! -e s.raw ] && [ ! -e so/samples.tsv ] &&
    ok "sampler: no --dump, --raw or samples.tsv written (each goes through a temporary)" ||
    bad "sampler: $(ls . so)"
  no_tmp sampler so
fi

V="$MMC_SOURCE_DIR/tests/video/clipvae.mm"
"$MMC" compile "$V" -O0 -o ae && "$MMC" compile "$V" --task reconstruct -O0 -o rec || bad "compile clipvae"
./ae --steps 0 --save-weights ae.st --eval-batches 1 --quiet > /dev/null 2>&1 || bad "clipvae weights"
stopped reconstructor TERM 143 "^reconstructor: clip" r.out ./rec --weights ae.st --clips 5000 \
  --show 1 --out img --dump r.bin &&
  { [ ! -e r.bin ] && ! grep -q "^reconstruct:" r.out && ok "reconstructor: no --dump file, no figure" ||
    bad "reconstructor: $(ls; cat r.out)"; }
no_tmp reconstructor img .
# 5. the GIF it wrote before the stop (clip 0) is GIF89a
[ "$(head -c 6 img/recon_00000.gif 2> /dev/null)" = GIF89a ] && ok "recon GIF declares GIF89a" ||
  bad "recon GIF header: $(head -c 6 img/recon_00000.gif 2>&1)"

"$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny -O0 -o cap &&
  "$MMC" compile "$S/internvl2.mm" --model InternVL2Tiny --task eval -O0 -o ev || bad "compile captioner"
./cap --steps 0 --save-weights cap.st --eval-batches 1 --quiet > /dev/null 2>&1 || bad "captioner weights"
stopped evaluator INT 130 "^evaluator: image" ev.out ./ev --weights cap.st --ids ids.txt &&
  { [ ! -e ids.txt ] && [ ! -e ids.txt.tmp ] && ! grep -q "^eval:" ev.out &&
    ok "evaluator: no --ids file, no figure" || bad "evaluator: $(ls; cat ev.out)"; }

# ---- 3. one rank of two signalled: both stop at the same batch ----
if [ $SAN = 0 ] && command -v mpirun > /dev/null; then
  "$MMC" compile "$S/vit_fashion.mm" --model ViTFashion --dp 2 -O0 -o vit2 || bad "compile dp2"
  timeout 60 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np 2 ./vit2 --steps 2 \
    --eval-batches all --ckpt ck2 > m.out 2> m.err &
  mpid=$! k=0
  while ! grep -q "^eval batch" m.err && [ $k -lt 600 ]; do sleep 0.05; k=$((k + 1)); done
  r0=$(pgrep -P $mpid -f vit2 | head -1) # one rank (whichever is listed first)
  [ -n "$r0" ] && kill -INT "$r0"
  wait $mpid
  rc=$?
  [ $rc != 124 ] && grep -q "stopped by SIG" m.err && [ "$(cat ck2/latest 2> /dev/null)" = step-000002 ] &&
    ok "dp=2: SIGINT to rank pid $r0 in the evaluation: both ranks stopped (mpirun exit $rc)" ||
    bad "dp=2 stop: exit $rc: $(tail -c 600 m.err)"
fi

# ---- 4. FIFOs are refused by name, not waited on ----
mkdir fifo
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  mkfifo "fifo/$f"
done
mkfifo w.fifo p.fifo
timeout 20 ./vit --steps 1 --data fifo > /dev/null 2> f1.err
rc=$?
[ $rc = 1 ] && grep -q "fifo/t.*-ubyte: not a regular file (a FIFO)" f1.err &&
  ok "--data with FIFOs: exit 1 naming one" || bad "--data FIFO: exit $rc: $(cat f1.err)"
timeout 20 ./vit --steps 1 --init-from w.fifo > /dev/null 2> f2.err
rc=$?
[ $rc = 1 ] && grep -q "w.fifo: not a regular file (a FIFO)" f2.err &&
  ok "--init-from a FIFO: exit 1 naming it" || bad "--init-from FIFO: exit $rc: $(cat f2.err)"
timeout 20 ./sampler --weights dit.st --prompts p.fifo --out so2 > /dev/null 2> f3.err
rc=$?
[ $rc = 1 ] && grep -q "p.fifo: not a regular file (a FIFO)" f3.err &&
  ok "--prompts a FIFO: exit 1 naming it" || bad "--prompts FIFO: exit $rc: $(cat f3.err)"
timeout 20 ./ev --weights w.fifo > /dev/null 2> f4.err
rc=$?
[ $rc = 1 ] && grep -q "w.fifo: not a regular file (a FIFO)" f4.err &&
  ok "--weights a FIFO: exit 1 naming it" || bad "--weights FIFO: exit $rc: $(cat f4.err)"

# ---- 6. under an address-space limit: exit 0, or exit 1 saying out of memory, never a signal ----
# (oneDNN crashed inside dnnl_primitive_create when its kernel code could not
# be mapped; a kernel's malloc aborted.) ASan reserves terabytes: no ulimit -v.
if [ $SAN = 0 ]; then
  oom=0 fine=0 sig=""
  for v in 100000 130000 150000 158000 164000 168000 172000 176000 180000 190000 400000; do
    (ulimit -v $v; OMP_NUM_THREADS=2 exec ./vit --steps 2 --eval-batches 1 --quiet) > /dev/null 2> lim.err
    rc=$?
    if [ $rc = 0 ]; then fine=$((fine + 1))
    elif [ $rc = 1 ] && grep -Eq "out of memory|cannot allocate" lim.err; then oom=$((oom + 1))
    else sig="$sig $v:exit $rc($(tail -c 160 lim.err | tr '\n' ' '))"; fi
  done
  [ -z "$sig" ] && [ $oom -ge 3 ] && [ $fine -ge 1 ] &&
    ok "ulimit -v sweep: $oom out-of-memory messages (exit 1), $fine runs fine, no signal" ||
    bad "ulimit -v sweep: $oom oom, $fine fine, otherwise:$sig"
fi

echo "long_work: $pass passed, $fail failed"
[ $fail = 0 ]
