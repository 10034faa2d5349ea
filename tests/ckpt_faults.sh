#!/usr/bin/env bash
# Faults a training run survives (GPT2Tiny):
#   - SIGKILL at 5 random moments of a one-rank run with --ckpt-every 2, each
#     followed by --resume: the live checkpoint is always whole and the last
#     one completed, and the run ends on the straight run's losses and final
#     checkpoint, bit for bit (tests/tools/kill_resume.sh; 20 kills by hand:
#     bash tests/tools/kill_resume.sh TRAINER DIR 20);
#   - a full disk during a checkpoint write (a 2.5 MiB tmpfs holding one
#     checkpoint but not two, or `ulimit -f` where mounting is not allowed):
#     an error naming the file, DIR/latest still naming the previous
#     checkpoint, whole, and resuming from it gives the straight run;
#   - under mpirun -np 2 (dp=2): a rank killed (SIGKILL) mid-run ends the job
#     within 30 s; a rank stopped (SIGSTOP) makes the other exit non-zero
#     within --comm-timeout 5 plus the watchdog's grace, naming the
#     collective and the rank that did not arrive.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
HERE="$MMC_SOURCE_DIR/tests/tools"
T=$(mktemp -d)
MNT=""
VICTIMS=()
cleanup() {
  for p in "${VICTIMS[@]}"; do kill -KILL "$p" 2> /dev/null; done
  [ -n "$MNT" ] && umount "$MNT" 2> /dev/null
  rm -rf "$T"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o "$T/g" || { echo "FAIL: compile"; exit 1; }
"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --dp 2 -o "$T/g2" || { echo "FAIL: compile dp2"; exit 1; }
Q=(--eval-batches 1 --quiet)

# ---- SIGKILL at random moments, resume ----
mkdir "$T/kill"
if bash "$HERE/kill_resume.sh" "$T/g" "$T/kill" 5 "${KILL_SEED:-$$}"; then ok "5 random kills, resumed to the straight run"
else bad "random kills"; fi

# ---- --keep, and a flipped byte in a tensor ----
"$T/g" --steps 10 --ckpt-every 2 --keep 3 --ckpt "$T/keep" "${Q[@]}" > /dev/null 2>&1
if [ "$(cd "$T/keep" && echo step-*)" = "step-000006 step-000008 step-000010" ] && [ "$(cat "$T/keep/latest")" = step-000010 ]; then
  ok "--keep 3: steps 6, 8, 10 kept, latest names step 10"
else bad "--keep 3: $(ls "$T/keep")"; fi
"$T/g" --steps 1 --keep 0 --ckpt "$T/k0" "${Q[@]}" > /dev/null 2> "$T/k0.err"; a=$?
"$T/g" --steps 1 --keep 2 "${Q[@]}" > /dev/null 2> "$T/k1.err"; b=$?
if [ $a = 1 ] && grep -q "^trainer: error: --keep takes a whole number >= 1, not '0'" "$T/k0.err" &&
   [ $b = 1 ] && grep -q "^trainer: error: --keep needs --ckpt DIR" "$T/k1.err"; then ok "--keep 0 and --keep without --ckpt refused"
else bad "--keep refusals: $(cat "$T/k0.err" "$T/k1.err")"; fi
"$T/g" --steps 1 --comm-timeout 5 "${Q[@]}" > /dev/null 2> "$T/ct.err"; a=$?
if [ $a = 1 ] && grep -q "error: --comm-timeout: model GPT2Tiny runs on one rank" "$T/ct.err"; then ok "--comm-timeout on a one-rank trainer refused"
else bad "--comm-timeout on one rank: exit $a, $(cat "$T/ct.err")"; fi
f="$T/keep/step-000008/rank-00000.safetensors"
name=$(/usr/bin/python3 - "$f" <<'PY'
import json, random, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__")
k = random.Random(7).choice(sorted(k for k in h if h[k]["data_offsets"][1] > h[k]["data_offsets"][0]))
lo, hi = h[k]["data_offsets"]
b[8 + n + (lo + hi) // 2] ^= 0x01
open(p, "wb").write(b)
print(k)
PY
)
echo step-000008 > "$T/keep/latest"
"$T/g" --steps 10 --ckpt "$T/keep" --resume "${Q[@]}" > /dev/null 2> "$T/flip.err"; a=$?
if [ $a = 1 ] && grep -qF "$f: tensor '$name': the data's CRC32 is" "$T/flip.err"; then ok "a flipped byte in '$name': $(grep -o 'the data.*' "$T/flip.err")"
else bad "flipped byte in '$name': exit $a, $(cat "$T/flip.err")"; fi

# ---- a full disk ----
mkdir -p "$T/disk"
if mount -t tmpfs -o size=2560k tmpfs "$T/disk" 2> /dev/null; then MNT="$T/disk" how="a 2.5 MiB tmpfs"; limit=()
else how="ulimit -f 1024"; limit=(1024); fi
D="$T/disk/ck"
"$T/g" --steps 8 --ckpt-every 4 --ckpt "$T/st8" --log "$T/st8.jsonl" "${Q[@]}" > /dev/null 2>&1 || bad "straight 8 steps"
if [ ${#limit[@]} = 0 ]; then
  "$T/g" --steps 4 --ckpt-every 4 --ckpt "$D" "${Q[@]}" > /dev/null 2>&1 || bad "disk: 4 steps"
  "$T/g" --steps 8 --ckpt-every 4 --ckpt "$D" --resume "${Q[@]}" > "$T/full.out" 2>&1; st=$?
else
  "$T/g" --steps 4 --ckpt-every 4 --ckpt "$D" "${Q[@]}" > /dev/null 2>&1 || bad "disk: 4 steps"
  (ulimit -f "${limit[0]}"; trap '' XFSZ; exec "$T/g" --steps 8 --ckpt-every 4 --ckpt "$D" --resume "${Q[@]}") > "$T/full.out" 2>&1; st=$?
fi
want="$D/step-000008/rank-00000.safetensors"
if [ $st = 1 ] && grep -qF "error: writing the checkpoint of step 8 failed: $want" "$T/full.out" &&
   grep -Eq "No space left on device|File too large" "$T/full.out"; then ok "full disk ($how): the error names $want"
else bad "full disk ($how): exit $st, $(cat "$T/full.out")"; fi
got=$(/usr/bin/python3 "$HERE/ckpt_check.py" "$D")
if [ "${got% *}" = 4 ] && [ "$(cat "$D/latest")" = step-000004 ] && [ ! -e "$D/step-000008" ]; then
  ok "full disk: latest still names step 4, whole ($got tensors checked), the failed step-000008 removed"
else bad "full disk: after the failure: '$got', $(ls -R "$D")"; fi
cp -r "$D" "$T/ck8"
[ -n "$MNT" ] && umount "$MNT" && MNT=""
if "$T/g" --steps 8 --ckpt-every 4 --ckpt "$T/ck8" --resume --log "$T/r8.jsonl" "${Q[@]}" > /dev/null 2>&1 &&
   cmp -s "$T/st8/step-000008/rank-00000.safetensors" "$T/ck8/step-000008/rank-00000.safetensors" &&
   cmp -s <(grep -o '"step": [5-8], "loss": [^,]*' "$T/st8.jsonl") <(grep -o '"step": [5-8], "loss": [^,]*' "$T/r8.jsonl"); then
  ok "full disk: resumed from step 4 to the straight run's steps 5-8 and final checkpoint"
else bad "full disk: the resume from step 4 differs from the straight run"; fi

# ---- under mpirun: a rank killed, a rank stopped ----
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
rank_pid() { # mpirun pid, rank: the trainer process of that rank
  for p in $(pgrep -P "$1"); do
    [ "$(readlink "/proc/$p/exe")" = "$T/g2" ] && tr '\0' '\n' < "/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
  done
}
start_dp2() { # name, extra flags...: starts the job, waits for 3 logged steps
  rm -f "$T/$1.jsonl"
  "${MPIRUN[@]}" "$T/g2" --steps 1000000 "${Q[@]}" --log "$T/$1.jsonl" "${@:2}" > "$T/$1.out" 2>&1 &
  MP=$!
  for _ in $(seq 1200); do [ "$(cat "$T/$1.jsonl" 2> /dev/null | wc -l)" -ge 3 ] && break; sleep 0.05; done
  VICTIM=$(rank_pid "$MP" 1)
  VICTIMS+=("$VICTIM" $(rank_pid "$MP" 0))
}
finish() { # waits for mpirun at most 60 s; sets rc and secs
  local t0=$SECONDS
  for _ in $(seq 600); do kill -0 "$MP" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "$MP" 2> /dev/null; then kill -KILL "$MP"; rc=124; else wait "$MP"; rc=$?; fi
  secs=$((SECONDS - t0))
}
start_dp2 killed
if [ -n "$VICTIM" ]; then
  kill -KILL "$VICTIM"; finish
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -lt 30 ]; then ok "dp=2, rank 1 SIGKILLed: the job ended in ${secs}s (exit $rc)"
  else bad "dp=2, rank 1 SIGKILLed: exit $rc after ${secs}s"; fi
else bad "dp=2: no rank 1 process found under mpirun"; kill -KILL "$MP"; fi

TO=5; [ $SAN = 1 ] && TO=15
start_dp2 stopped --comm-timeout $TO
if [ -n "$VICTIM" ]; then
  kill -STOP "$VICTIM"; finish
  msg=$(grep -m1 "trainer (rank 0): error:" "$T/stopped.out")
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -lt 30 ] &&
     echo "$msg" | grep -Eq "on axis (dp|world) \(2 ranks; .*\): did not finish within $TO.0 s: world rank 1 did not arrive"; then
    ok "dp=2, rank 1 SIGSTOPped: rank 0 exited in ${secs}s (exit $rc): ${msg#*error: }"
  else bad "dp=2, rank 1 SIGSTOPped: exit $rc after ${secs}s: $(grep -v '^\s*$' "$T/stopped.out" | head -5)"; fi
  # mpirun's SIGTERM waits for a SIGCONT that a stuck node never gets: the
  # stopped process stays (cleanup() kills it); the job itself has ended
  grep -q '^State:.*stopped' "/proc/$VICTIM/status" 2> /dev/null && echo "note: the stopped rank stays stopped after the job ended (killed by this test)"
else bad "dp=2: no rank 1 process found under mpirun"; kill -KILL "$MP"; fi

echo "ckpt_faults: $pass passed, $fail failed"
[ $fail -eq 0 ]
