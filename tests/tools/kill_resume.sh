#!/usr/bin/env bash
# kill_resume.sh TRAINER WORKDIR KILLS [SEED]: SIGKILL a one-rank trainer
# (--ckpt-every 2) at KILLS random moments, resuming after each, and check
#   - after every kill, the checkpoint DIR/latest names is whole (an
#     independent reader, ckpt_check.py: manifest, metadata, every tensor's
#     CRC32) and is the last one completed: when the killed run logged step
#     L > X = the last multiple of 2 <= L, it is X; when L = X (killed while
#     writing X, perhaps) it is X or X - 2; it never goes back;
#   - the finished run logged every step, and every loss it ever logged
#     (killed segments included) is the straight run's loss of that step;
#   - its final checkpoint file is byte for byte the straight run's.
# Each kill comes after 0..3 further logged steps plus a random fraction
# (delay) of the last step's time, or (every other kill) 0-20 ms after an
# even step is logged, when its checkpoint is being written.  Prints one line per kill (delay, last
# step logged, checkpoint resumed from, what was on disk) and a summary;
# exit 1 on any failure.
set -uo pipefail
G=$1 W=$2 K=$3 SEED=${4:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
EVERY=2 N=$((20 * K + 6))
ARGS=(--steps "$N" --ckpt-every "$EVERY" --eval-batches 1 --quiet)
RANDOM=$SEED
die() { echo "FAIL kill_resume: $*"; exit 1; }
"$G" "${ARGS[@]}" --ckpt "$W/straight" --log "$W/straight.jsonl" > "$W/straight.out" 2>&1 ||
  die "the straight run failed: $(tail -3 "$W/straight.out")"
steps_logged() { # log file, from line: the last training step logged after that line
  tail -n +"$(($2 + 1))" "$1" 2> /dev/null | sed -n 's/.*"step": \([0-9]*\), "loss".*/\1/p' | tail -1
}
exec {nap}<> <(:) # `read -t` on it: a sleep without a fork
nlines() { local a=(); [ -e "$1" ] && mapfile -t a < "$1"; echo "${#a[@]}"; }
kills=0 runs=0 prev=0 during=0
printf "%-5s %-8s %-10s %-10s %s\n" kill "+delay_s" logged_to resumed_at "on disk"
while :; do
  lines=$(nlines "$W/k.jsonl")
  "$G" "${ARGS[@]}" --ckpt "$W/k" --resume --log "$W/k.jsonl" > "$W/run.out" 2>&1 &
  pid=$!
  runs=$((runs + 1))
  if [ "$kills" -ge "$K" ]; then
    wait "$pid" || die "the last run failed: $(tail -3 "$W/run.out")"
    break
  fi
  # the moment: after r in 0..3 more training steps (as logged), plus a
  # random fraction of the last step's time, so that it falls anywhere in
  # the timeline whatever the machine's load; every other kill aims at a
  # checkpoint write instead: 0-20 ms after an even step is logged
  r=$((RANDOM % 4)) frac=$((RANDOM % 1000)) aim=$((kills % 2)) t_last=0 dt=0 seen=$lines
  while kill -0 "$pid" 2> /dev/null; do
    now=$(nlines "$W/k.jsonl")
    if [ "$now" -gt "$seen" ]; then
      t=${EPOCHREALTIME/./}000
      [ "$t_last" != 0 ] && dt=$((t - t_last))
      t_last=$t seen=$now
      if [ $((seen - lines - 1)) -ge "$r" ]; then
        [ "$aim" = 0 ] && break
        s=$(steps_logged "$W/k.jsonl" "$lines")
        [ -n "$s" ] && [ $((s % EVERY)) = 0 ] && break
      fi
    fi
    read -r -t 0.005 -u "$nap"
  done
  if [ "$aim" = 1 ]; then delay=$(printf "0.%03d" $((frac % 21)))
  else
    [ "$dt" -gt 0 ] || dt=60000000
    delay=$(printf "%d.%03d" $((dt * frac / 1000 / 1000000000)) $((dt * frac / 1000 / 1000000 % 1000)))
  fi
  sleep "$delay"
  if ! kill -KILL "$pid" 2> /dev/null; then # it finished first
    wait "$pid" || die "a run failed: $(tail -3 "$W/run.out")"
    die "the run reached step $N after $kills of $K kills (the machine is slow?)"
  fi
  wait "$pid" 2> /dev/null
  kills=$((kills + 1))
  L=$(steps_logged "$W/k.jsonl" "$lines")
  [ -n "$L" ] || L=$prev
  if [ ! -e "$W/k/latest" ]; then
    [ "$L" -le "$EVERY" ] || die "kill $kills: no checkpoint after step $L"
    printf "%-5s %-8s %-10s %-10s %s\n" "$kills" "$delay" "$L" - "no checkpoint yet"
    continue
  fi
  got=$(/usr/bin/python3 "$HERE/ckpt_check.py" "$W/k") || die "kill $kills (after ${delay}s, step $L logged): $got"
  S=${got% *}
  X=$((L / EVERY * EVERY))
  if [ "$L" -gt "$X" ]; then ok=$([ "$S" -eq "$X" ] && echo 1)
  else ok=$([ "$S" -eq "$X" ] || [ "$S" -eq $((X - EVERY)) ] && echo 1); fi
  [ -n "$ok" ] && [ "$S" -ge "$prev" ] || die "kill $kills: step $L logged, step $X due, but latest is step $S (before: $prev)"
  disk=$(cd "$W/k" && ls -d step-* | tr '\n' ' ')
  partial=""
  d="$W/k/$(printf step-%06d "$L")" # a leftover of an earlier kill is not this one's
  [ "$L" -eq "$X" ] && [ "$S" -lt "$L" ] && [ -d "$d" ] && [ ! -e "$d/manifest.json" ] && partial=${d##*/}
  what="mid-step"
  if ls "$W"/k/latest.tmp."$pid" "$W"/k/step-*/*.tmp."$pid" > /dev/null 2>&1; then
    what="in a file write ($(cd "$W/k" && ls -d latest.tmp."$pid" step-*/*.tmp."$pid" 2> /dev/null | sed 's/\.tmp\..*//' | tr '\n' ' '))"
    during=$((during + 1))
  elif [ -n "$partial" ]; then what="in the write of $partial"; during=$((during + 1))
  elif [ "$L" -eq "$X" ] && [ "$S" -ne "$X" ]; then what="after the files of step $X, before its pointer"; during=$((during + 1))
  elif [ "$(echo $disk | wc -w)" -gt 2 ]; then what="after the pointer of step $S, before pruning"; during=$((during + 1)); fi
  printf "%-5s %-8s %-10s %-10s %s(%s)\n" "$kills" "$delay" "$L" "$S" "$what " "$disk"
  prev=$S
done
/usr/bin/python3 - "$W/straight.jsonl" "$W/k.jsonl" "$N" <<'PY' || exit 1
import json, sys
a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ref = {}
for l in open(a):
    d = json.loads(l)
    if "loss" in d: ref[d["step"]] = d["loss"]
seen, bad = {}, []
for l in open(b):
    d = json.loads(l)
    if "loss" not in d: continue
    seen[d["step"]] = seen.get(d["step"], 0) + 1
    if d["loss"] != ref.get(d["step"]): bad.append((d["step"], d["loss"], ref.get(d["step"])))
if sorted(ref) != list(range(1, n + 1)) or sorted(seen) != list(range(1, n + 1)):
    print("FAIL kill_resume: steps logged: straight %d, interrupted %d of %d" % (len(ref), len(seen), n)); sys.exit(1)
if bad:
    print("FAIL kill_resume: losses differ from the straight run's: %r" % bad[:3]); sys.exit(1)
print("losses: %d logged (%d steps run again after a kill), all the straight run's" % (sum(seen.values()), sum(seen.values()) - n))
PY
fa="$W/straight/$(cat "$W/straight/latest")/rank-00000.safetensors"
fb="$W/k/$(cat "$W/k/latest")/rank-00000.safetensors"
cmp -s "$fa" "$fb" || die "final checkpoints differ: $fa $fb"
echo "kill_resume: $kills kills ($during during a checkpoint write or its pruning) in $runs runs, step $N reached;" \
  "final checkpoint identical to the straight run's ($(stat -c %s "$fb") bytes)"
