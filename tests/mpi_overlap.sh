#!/usr/bin/env bash
# Overlapped gradient buckets (passes/bucket.c; runtime mmrt_*_bucket_start
# and mmrt_bucket_wait): under dp a bucket's collective only starts when its
# last gradient is ready, and a bucket_wait, placed by the compiler before
# the first reader of the bucket's results, finishes it.
#  - dump-ir (GPT2Tiny dp=2): every bucket's wait comes after its call and
#    before the first reader of its results, bucket 0's wait after later
#    backward compute (linear_grad_w); --no-overlap has no wait.
#  - real mpirun -np 2, dp=2 and dp=2+ZeRO-3 (reduce-scatter buckets and the
#    parameter gathers prefetched one layer ahead): the overlapped trainer gives the
#    losses and the checkpointed weights of the --no-overlap (blocking) one
#    bit for bit, with the same communication table; its runtime started
#    every bucket and waited for each once, and ran, per step, as many
#    kernels with a bucket in flight as dump-ir has nodes between the
#    buckets' calls and their waits; its --trace (bench/overlap.py --check)
#    has per step and rank the dump-ir's bucket count of bucket_start events,
#    inside the backward, in bucket order, each bucket_reduce posted in its
#    start and seen complete by its wait, compute between bucket 0's start
#    and wait; under ZeRO-3 as many gather events per step as dump-ir has
#    prefetched gathers, each posted before its wait, some inside compute.
#  - ViTFashion tp=2 x dp=2 + sp + ZeRO-1 (mpirun -np 4): every reader of a
#    bucket's results after its own wait in dump-ir; overlapped = blocking.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
STEPS=4

# the IR: prints "<buckets> <nodes between the calls and the waits>"
order() { # dump-ir file
  /usr/bin/python3 - "$1" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
a = lines.index(next(l for l in lines if l.startswith("func @train(")))
body = []
for l in lines[a + 1:]:
    if l.startswith("}") or l.strip().startswith("return"): break
    body.append(l.strip())
op = lambda l: re.match(r"(?:%\S+(?:, %\S+)* = )?(\w+)\(", l).group(1)
start, wait, members = {}, {}, {}
for i, l in enumerate(body):
    m = re.search(r"\bbucket = (\d+)", l)
    if not m: continue
    k = int(m.group(1))
    if op(l) == "bucket_wait":
        if k in wait: sys.exit("bucket %d has two waits" % k)
        wait[k] = i
    else:
        start.setdefault(k, i)
        members.setdefault(k, []).append(re.match(r"(%\d+) =", l).group(1))
if not start: sys.exit("no buckets")
if not wait: print(len(start), 0); sys.exit(0)
if set(wait) != set(start): sys.exit("buckets %s, waits %s" % (sorted(start), sorted(wait)))
collectives = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "bucket_wait"}
# codegen folds a residual add into the layer_norm_grad before it (cg_ops.c
# residual_of_next): add(r, dx) right after the norm's backward, dx (its
# first result) read by the add alone, the add in place onto r; no kernel
# runs for it
mem, res = {}, {}
for i, l in enumerate(body):
    m = re.match(r"((?:%\d+)(?:, %\d+)*) = ", l)
    if not m: continue
    res[i] = m.group(1).split(", ")
    for v, a in zip(res[i], re.findall(r"mem\((\w+, \d+)\)", l)): mem[v] = a
def reads(l): return re.findall(r"%\d+", l.split("=", 1)[-1])
nuses = {}
for l in body:
    for v in reads(l): nuses[v] = nuses.get(v, 0) + 1
def folded(i):
    if i == 0 or op(body[i]) != "add" or op(body[i - 1]) != "layer_norm_grad": return False
    dx, ins = res[i - 1][0], reads(body[i])[:2]
    if dx not in ins or nuses.get(dx) != 1: return False
    r = ins[1] if ins[0] == dx else ins[0]
    return r != dx and mem.get(res[i][0]) == mem.get(r)
for k in start:
    if not start[k] < wait[k]: sys.exit("bucket %d: wait at %d before its call at %d" % (k, wait[k], start[k]))
    uses = [i for i, l in enumerate(body) if i != start[k] and any(re.search(re.escape(v) + r"\b", l.split("=", 1)[-1]) for v in members[k]) and op(l) not in collectives]
    if uses and min(uses) < wait[k]: sys.exit("bucket %d: read at node %d before its wait at %d" % (k, min(uses), wait[k]))
between = [op(l) for l in body[start[0] + 1:wait[0]] if op(l) not in collectives]
if "linear_grad_w" not in between: sys.exit("bucket 0: no backward compute between its call and its wait: %s" % between)
inflight = sum(1 for i, l in enumerate(body) if op(l) not in collectives and not folded(i) and any(start[k] < i < wait[k] for k in start))
print(len(start), inflight)
PY
}
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --dp 2 > "$T/ov.ir" && read -r NB POLLS < <(order "$T/ov.ir")
if [ "${POLLS:-0}" -gt 0 ]; then ok "dump-ir: $NB buckets, each wait after its call and before its first reader; $POLLS kernels between the calls and the waits"
else bad "dump-ir order: $(order "$T/ov.ir" 2>&1 | tail -1)"; fi
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --dp 2 --no-overlap > "$T/no.ir"
if ! grep -q bucket_wait "$T/no.ir" && [ "$(grep -c 'bucket = ' "$T/no.ir")" = "$(grep 'bucket = ' "$T/ov.ir" | grep -vc bucket_wait)" ]; then
  ok "--no-overlap: the same buckets, no wait"
else bad "--no-overlap still has waits or other buckets"; fi
"$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny --no-overlap > "$T/dp1.ir" 2> "$T/dp1.err"
if [ $? -ne 0 ] && grep -q "no-overlap.*dp = 1" "$T/dp1.err"; then ok "--no-overlap without dp refused"
else bad "--no-overlap on dp=1: $(cat "$T/dp1.err")"; fi

# rank 0's table (rank 1's own lines may come in between)
table() { sed -n '/^collective /,/^total /p' "$1" | grep -E '^(collective|all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|send|recv|barrier|total) '; }
check() { # name plan-flags...
  local name=$1; shift
  for v in ov no; do
    local f=(); [ $v = no ] && f=(--no-overlap)
    local tr=(); [ $v = ov ] && tr=(--trace "$T/$name.trace.json")
    "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny "$@" "${f[@]}" -o "$T/$name.$v" || { bad "$name.$v: compile"; return; }
    "${MPIRUN[@]}" "$T/$name.$v" --steps $STEPS --eval-batches 1 --ckpt "$T/$name.$v.ck" --log "$T/$name.$v.jsonl" "${tr[@]}" > "$T/$name.$v.out" 2>&1 ||
      { bad "$name.$v: mpirun"; tail -5 "$T/$name.$v.out"; return; }
  done
  local ck=$T/$name.ov.ck/step-00000$STEPS ckn=$T/$name.no.ck/step-00000$STEPS
  if [ "$(grep -c '"loss"' "$T/$name.ov.jsonl")" -ge $STEPS ] &&
     cmp -s <(grep -o '"loss": [^,]*' "$T/$name.ov.jsonl") <(grep -o '"loss": [^,]*' "$T/$name.no.jsonl") &&
     cmp -s "$ck/rank-00000.safetensors" "$ckn/rank-00000.safetensors" && cmp -s "$ck/rank-00001.safetensors" "$ckn/rank-00001.safetensors"; then
    ok "$name: losses and both ranks' weights equal the blocking trainer's bit for bit"
  else bad "$name: overlapped and blocking trainers differ"; fi
  # the same calls, elements and bytes; the phase split (forward/backward/
  # update calls, column 5) moves under ZeRO-3, whose prefetch posts the
  # first backward layer's gathers during the forward
  local nophase='{ $5 = ""; print }'
  if [ -n "$(table "$T/$name.ov.out")" ] && cmp -s <(table "$T/$name.ov.out" | awk "$nophase") <(table "$T/$name.no.out" | awk "$nophase"); then ok "$name: the same communication counts"
  else bad "$name: communication tables differ"; diff <(table "$T/$name.ov.out") <(table "$T/$name.no.out"); fi
  local n=$((NB * STEPS)) p=$((POLLS * STEPS))
  if grep -q "^overlapped gradient buckets: $n started, $n waited for, [0-9]* complete at their wait, $p kernels ran while one was in flight" "$T/$name.ov.out" &&
     ! grep -q "^blocking gradient buckets" "$T/$name.ov.out" &&
     grep -q "^blocking gradient buckets: $n calls" "$T/$name.no.out" && ! grep -q "^overlapped" "$T/$name.no.out"; then
    ok "$name: $(grep '^overlapped' "$T/$name.ov.out")"
  else bad "$name: expected $n started and waited buckets, $p kernels in flight: $(grep 'gradient buckets' "$T/$name.ov.out" "$T/$name.no.out")"; fi
  # --trace: per step and rank, the dump-ir's NB buckets started inside the
  # backward in bucket order, each reduction posted in its start and seen
  # complete by its wait, backward compute between bucket 0's start and wait
  # ZeRO-3: the prefetched gathers (prefetch = K in dump-ir) as many per
  # step in the trace, each posted before its wait, some overlapping compute
  local ng=() NG
  NG=$("$MMC" dump-ir "$S/gpt2.mm" --model GPT2Tiny "$@" | awk '/^func @train\(/,/^}/' | grep -c 'prefetch = ')
  case " $* " in *" --zero 3 "*) if [ "$NG" -gt 0 ]; then ng=(--gathers "$NG"); else bad "$name: dump-ir has no prefetched gather"; fi ;; esac
  if /usr/bin/python3 "$MMC_SOURCE_DIR/bench/overlap.py" --check "$NB" $STEPS "${ng[@]}" "$T/$name.trace.json" > "$T/$name.trace.txt"; then
    ok "$name --trace: $(tail -1 "$T/$name.trace.txt"); $(grep 'rank 0 total' "$T/$name.trace.txt" | sed 's/^ *//')"
  else bad "$name --trace: $(tail -1 "$T/$name.trace.txt")"; fi
}
check dp2 --dp 2
# ZeRO-3: the reduce-scatter buckets of ZeRO-2 and the parameter gathers
# prefetched one layer ahead (passes/bucket.c): bit for bit the blocking
# trainer's (--no-overlap: no bucket overlap, no prefetch)
check dp2.zero3 --dp 2 --zero 3

# tp x dp + sp + ZeRO-1 (ViTFashion): two bucket streams (reduce-scatters,
# and all-reduces of the gradients ZeRO leaves replicated) and chains of tp
# collectives after the dp reduction. Every reader of a bucket's results,
# the chains' collectives included, must follow that bucket's own wait (a
# wait once carried the bucket's internal number, so vit.pos's gradient was
# gathered over tp while its bucket was in flight: 0.36 of an update off);
# then overlapped and blocking trainers on mpirun -np 4 agree bit for bit.
VIT=(--tp 2 --dp 2 --sp --zero 1)
"$MMC" dump-ir "$S/vit_fashion.mm" --model ViTFashion "${VIT[@]}" > "$T/vtp.ir"
if /usr/bin/python3 - "$T/vtp.ir" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
a = lines.index(next(l for l in lines if l.startswith("func @train(")))
body = []
for l in lines[a + 1:]:
    if l.startswith("}") or l.strip().startswith("return"): break
    body.append(l.strip())
start, wait, members = {}, {}, {}
for i, l in enumerate(body):
    m = re.search(r"\bbucket = (\d+)", l)
    if not m: continue
    k = int(m.group(1))
    if l.startswith("bucket_wait"): wait[k] = i
    else:
        start.setdefault(k, i)
        members.setdefault(k, set()).add(re.match(r"(%\d+) =", l).group(1))
kinds = {re.match(r"(?:%\S+ = )?(\w+)\(", body[start[k]]).group(1) for k in start}
if len(kinds) < 2: sys.exit("one bucket stream only (%s): the plan no longer tests two" % kinds)
for k in start:
    if k not in wait: sys.exit("bucket %d has no wait" % k)
    for i, l in enumerate(body):
        args = l.split("=", 1)[-1] if " = " in l else l
        if i not in (start[k],) and re.search(r"\bbucket = %d\b" % k, l) is None and \
           any(re.search(re.escape(v) + r"\b", args) for v in members[k]) and i < wait[k]:
            sys.exit("bucket %d: node %d (%s) reads its result before its wait at %d" % (k, i, l[:60], wait[k]))
print(len(start), "buckets,", " and ".join(sorted(kinds)))
PY
then ok "vit tp2.dp2.sp.zero1 dump-ir: every reader of a bucket, tp chains included, after its own wait"
else bad "vit tp2.dp2.sp.zero1 dump-ir order"; fi
MPI4=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 4)
for v in ov no; do
  f=(); [ $v = no ] && f=(--no-overlap)
  "$MMC" compile "$S/vit_fashion.mm" --model ViTFashion "${VIT[@]}" "${f[@]}" -o "$T/vtp.$v" &&
    "${MPI4[@]}" "$T/vtp.$v" --steps 3 --eval-batches 1 --quiet --log "$T/vtp.$v.jsonl" \
      --save-weights "$T/vtp.$v.st" > "$T/vtp.$v.out" 2>&1 || { bad "vtp.$v: compile or mpirun"; tail -3 "$T/vtp.$v.out"; }
done
if [ "$(grep -c '"loss"' "$T/vtp.ov.jsonl" 2> /dev/null)" -ge 3 ] &&
   cmp -s <(grep -o '"loss": [^,]*' "$T/vtp.ov.jsonl") <(grep -o '"loss": [^,]*' "$T/vtp.no.jsonl") &&
   cmp -s "$T/vtp.ov.st" "$T/vtp.no.st" && grep -q '^overlapped gradient buckets: [1-9]' "$T/vtp.ov.out"; then
  ok "vit tp2.dp2.sp.zero1: overlapped losses and weights equal the blocking trainer's bit for bit"
else bad "vit tp2.dp2.sp.zero1: overlapped and blocking trainers differ"; fi

echo "mpi_overlap: $pass passed, $fail failed"
[ $fail -eq 0 ]
