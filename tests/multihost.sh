#!/usr/bin/env bash
# Multi-node mpirun on one machine (docs/multihost.md): two "hosts" made by
# tools/netns_hosts.sh as network namespaces on a bridge, mpirun --hostfile
# starting its daemons there through tools/netns_agent.sh, TCP only.
#  - GPT2Tiny dp=2 x tp=2 on 2 hosts x 2 ranks gives the losses of the
#    one-host mpirun -np 4 run bit for bit (its --log JSONL);
#  - the placement lines at start name both hosts with ranks 0 1 (dp 0)
#    and 2 3 (dp 1) (mpirun fills host 1's 2 slots first);
#  - the traffic really crossed the hosts over TCP: the bytes through host
#    1's veth, each way, are at least the dp all-reduce bytes the trainers
#    sent (their comm counters in the log: rank 0's all_reduce.dp bytes x
#    2 ranks on host 1; a 2-rank all-reduce sends the whole buffer) and
#    less than that plus the tp all-reduce bytes (the tp pairs are on one
#    host each, so their traffic stays off the link) -- a shared-memory
#    path or a wrong placement would fail one bound;
#  - a dead host ends the job with a clear message, non-zero, in bounded
#    time: the agent refusing host 2; host 2's ranks killed mid-run
#    (mpirun names the rank); host 2's link cut mid-run (mpirun's TCP
#    keepalives to its daemons notice the lost host and end the job);
#  - `run` removes the hosts after SIGTERM, and `up` after a run killed
#    with SIGKILL (its leftovers) works.
# Skips (passing, with "SKIP: reason") only when namespaces cannot be made.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
NH="$MMC_SOURCE_DIR/tools/netns_hosts.sh"
AGENT="$MMC_SOURCE_DIR/tools/netns_agent.sh"
T=$(mktemp -d)
# a name and subnet of this run's own (tests may run side by side)
NAME=mh$(($$ % 100000))
NET=10.78.$(($$ % 250 + 1))
trap '"$NH" down "$NAME"; "$NH" down "${NAME}k"; rm -rf "$T"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

if ! ip netns add "${NAME}probe" 2>"$T/probe.err"; then
  echo "SKIP: cannot make a network namespace ($(head -1 "$T/probe.err")): root with CAP_NET_ADMIN is needed"
  exit 0
fi
ip netns del "${NAME}probe"

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
STEPS=10
[ "$SAN" = 1 ] && STEPS=3 && echo "note: sanitizer build: $STEPS steps, the link-cut case skipped"
HF=$("$NH" up "$NAME" 2 "$NET") || { bad "netns_hosts.sh up"; exit 1; }
[ "$(cat "$HF")" = "$NET.2 slots=2
$NET.3 slots=2" ] && ok || bad "hostfile: $(cat "$HF")"
[ "$("$AGENT" "$NET.3" hostname)" = "${NAME}-2" ] && ok || bad "the agent does not run commands in host 2"

MP=(mpirun -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS)
MH=("${MP[@]}" --hostfile "$HF" -mca plm_rsh_agent "$AGENT" -mca btl tcp,self
  -mca btl_tcp_if_include "$NET.0/24" -mca oob_tcp_if_include "$NET.0/24"
  -mca oob_tcp_keepalive_time 1 -mca oob_tcp_keepalive_intvl 1 -mca oob_tcp_keepalive_probes 3 -np 4)
G="$T/g22"
"$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/gpt2.mm" --model GPT2Tiny --dp 2 --tp 2 -o "$G" || { bad "compile"; exit 1; }
ARGS=(--steps $STEPS --eval-batches 1 --comm-timeout 20)

t0=$(date +%s%N)
timeout 120 "${MP[@]}" --oversubscribe -np 4 "$G" "${ARGS[@]}" --log "$T/one.jsonl" > "$T/one.out" 2>&1 ||
  { bad "one-host run"; tail -5 "$T/one.out"; }
t1=$(date +%s%N)
bytes() { # interface: "rx tx"
  ip -s -j link show "$1" | /usr/bin/python3 -c 'import json, sys; s = json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"], s["tx"]["bytes"])'
}
before=$(bytes "${NAME}-1-h")
timeout 120 "${MH[@]}" "$G" "${ARGS[@]}" --log "$T/two.jsonl" > "$T/two.out" 2>&1 ||
  { bad "two-host run"; tail -5 "$T/two.out"; }
t2=$(date +%s%N)
after=$(bytes "${NAME}-1-h")
echo "one host: $(((t1 - t0) / 1000000)) ms, two hosts: $(((t2 - t1) / 1000000)) ms ($STEPS steps, start-up included)"

# the placement lines
grep '^placement' "$T/two.out"
grep -qx "placement: 4 ranks on 2 hosts (dp=2 tp=2)" "$T/two.out" &&
  grep -qx "placement: host ${NAME}-1: ranks 0 1 at dp.tp 0.0 0.1" "$T/two.out" &&
  grep -qx "placement: host ${NAME}-2: ranks 2 3 at dp.tp 1.0 1.1" "$T/two.out" && ok ||
  bad "two-host placement lines: $(grep '^placement' "$T/two.out")"
[ "$(grep -c '^placement: host ' "$T/one.out")" = 1 ] && ok || bad "one-host placement: $(grep '^placement' "$T/one.out")"

# the same losses bit for bit, and the bytes on the link against the
# counters and the formula
PSI=$("$MMC" stats "$MMC_SOURCE_DIR/stdlib_models/gpt2.mm" --model GPT2Tiny | awk '$1 == "total" {print $3}')
/usr/bin/python3 - "$T/one.jsonl" "$T/two.jsonl" "$STEPS" $before $after "$PSI" <<'PY' && ok || bad "losses or link bytes"
import json, sys
one, two, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rx0, tx0, rx1, tx1 = map(int, sys.argv[4:8])
psi = int(sys.argv[8])
def rows(p):
    return [json.loads(l) for l in open(p)]
a, b = rows(one), rows(two)
la = [r["loss"] for r in a if "loss" in r]
lb = [r["loss"] for r in b if "loss" in r]
good = len(la) == steps and la == lb
print("losses: %d steps, %s" % (len(la), "the same bit for bit" if good else "DIFFER: %s vs %s" % (la, lb)))
sa = [r["samples_per_s"] for r in a if "samples_per_s" in r]
sb = [r["samples_per_s"] for r in b if "samples_per_s" in r]
print("samples/s at the last step (the trainer's running figure): one host %.1f, two hosts %.1f" % (sa[-1], sb[-1]))
comm = [r["comm"] for r in b if "comm" in r][0]["total"]
dp, tp = comm["all_reduce.dp"]["bytes"], comm["all_reduce.tp"]["bytes"]
# GPT2Tiny: L = 2 layers, h = 64, vocabulary V = 256, P = 64 positions, MLP 4h.
# Psi = L (2 layer norms 4h + qkv 3h^2 + 3h + proj h^2 + h + fc 4h^2 + 4h
# + fc2 4h^2 + h) + wte V h + wpe P h + final layer norm 2h.  Under tp=2 the
# replicated parameters (layer norms, the row-parallel biases of proj and
# fc2, wpe) are whole on each rank, the rest halved; a rank's dp
# all-reduces per step are its gradients plus 3 scalars (loss, label
# count, gradient norm; tests/mpi_counts.sh), and a 2-rank all-reduce sends
# its whole buffer once.
L, h, V, P, tpn = 2, 64, 256, 64, 2
formula_psi = L * (4 * h + 3 * h * h + 3 * h + h * h + h + 4 * h * h + 4 * h + 4 * h * h + h) + V * h + P * h + 2 * h
rep = L * (4 * h + 2 * h) + P * h + 2 * h
per_rank = (psi - rep) // tpn + rep
formula = 4 * (per_rank + 3)
print("Psi %d (mmc stats), %d (formula); dp all-reduce bytes per rank and step: %d (formula: 4 x ((Psi - %d) / tp + %d + 3)), "
      "%d (the counters)" % (psi, formula_psi, formula, rep, rep, dp // steps))
if psi != formula_psi or dp != steps * formula:
    good = False
# tp (Megatron, tests/mpi_counts.sh) per rank and step on b = 2 rows of
# s = 32: 4L + 2 all-reduces of s b h, the cross entropy's b s (tp + 1),
# the gradient norm's 1 element
s_, b_ = 32, 2
tp_formula = 4 * ((4 * L + 2) * s_ * b_ * h + b_ * s_ * (tpn + 1) + 1)
print("tp all-reduce bytes per rank and step: %d (formula), %d (the counters)" % (tp_formula, tp // steps))
if tp != steps * tp_formula:
    good = False
want = 2 * dp  # ranks 0 and 1 each send their dp all-reduce bytes to host 2, and receive as much
rx, tx = rx1 - rx0, tx1 - tx0
print("host 1's veth: %d bytes in, %d out (%.0f, %.0f per step); the dp all-reduces of its 2 ranks: %d (%.0f per step), "
      "in/out %.4f %.4f; their tp all-reduces, which must not cross: %d" % (rx, tx, rx / steps, tx / steps, want,
      want / steps, rx / want, tx / want, 2 * tp))
for what, n in (("in", rx), ("out", tx)):
    if not want <= n < want + tp:
        print("bytes %s through the veth: %d, expected in [%d, %d)" % (what, n, want, want + tp))
        good = False
sys.exit(0 if good else 1)
PY

# a dead host: the agent refuses host 2
s=$(date +%s)
MMH_AGENT_FAIL=$NET.3 timeout 60 "${MH[@]}" "$G" "${ARGS[@]}" > "$T/refuse.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "unable to reliably start one or more daemons" "$T/refuse.out" &&
  grep -q "host $NET.3: refused on purpose" "$T/refuse.out"; then ok
else bad "agent refusing host 2: exit $rc: $(head -3 "$T/refuse.out")"; fi
echo "agent refusing host 2: exit $rc after $(($(date +%s) - s)) s"

wait_step() { # log file: wait (at most 30 s) for its first line
  for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}
# a dead host: host 2's ranks killed mid-run
timeout 60 "${MH[@]}" "$G" --steps 100000 --eval-batches 1 --quiet --comm-timeout 20 --log "$T/kill.jsonl" > "$T/kill.out" 2>&1 &
p=$!
wait_step "$T/kill.jsonl" || bad "kill run: no step logged"
ranks=$(ip netns pids "${NAME}-2" | xargs -r ps -o pid=,comm= -p | awk '$2 == "g22" {print $1}')
[ "$(echo $ranks | wc -w)" = 2 ] || bad "host 2 should run 2 ranks: '$ranks'"
k=$(date +%s%N)
kill -9 $ranks
wait $p
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "process rank [23] with PID [0-9]* on node $NET.3 exited on signal 9" "$T/kill.out"; then ok
else bad "killed ranks: exit $rc: $(grep -v '^ *$' "$T/kill.out" | head -8)"; fi
echo "host 2's ranks killed: exit $rc $((($(date +%s%N) - k) / 1000000)) ms after the kill"

# a dead host: host 2's link cut mid-run (not under the sanitizer: slow).
# mpirun notices through TCP keepalives on its daemons' idle connections
# (the -mca oob_tcp_keepalive_* of MH: about 4 s) and ends the job.  The
# trainers' --comm-timeout must be longer: a trainer's MPI_Abort first
# would queue the kill for host 2's daemon behind the dead link, where no
# keepalive fires, and mpirun would wait for TCP's retransmissions
# (minutes; OpenMPI 4.1 has no setting for TCP_USER_TIMEOUT)
if [ "$SAN" = 0 ]; then
  timeout 60 "${MH[@]}" "$G" --steps 100000 --eval-batches 1 --quiet --comm-timeout 30 --log "$T/cut.jsonl" > "$T/cut.out" 2>&1 &
  p=$!
  wait_step "$T/cut.jsonl" || bad "cut run: no step logged"
  c=$(date +%s%N)
  ip link set "${NAME}-2-h" down
  wait $p
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ORTE has lost communication with a remote daemon" "$T/cut.out" &&
    grep -q "^ *Remote daemon: .* on node $NET.3\$" "$T/cut.out"; then ok
  else bad "cut link: exit $rc: $(grep -v '^ *$' "$T/cut.out" | head -8)"; fi
  echo "host 2's link cut: exit $rc $((($(date +%s%N) - c) / 1000000)) ms after the cut"
  ip link set "${NAME}-2-h" up
fi

# clean-up: run ended by SIGTERM leaves nothing; up after a SIGKILLed run works
"$NH" run "${NAME}k" 2 "10.79.$(($$ % 250 + 1))" -- sleep 30 > /dev/null &
p=$!
kids=
for _ in $(seq 100); do kids=$(pgrep -P $p -x sleep) && break; sleep 0.1; done # the command runs
kill -TERM $p
wait $p
left=$(ip netns list | grep -c "^${NAME}k-[0-9]"; ip -o link show | grep -c "${NAME}k-")
[ -n "$kids" ] && [ "$(echo $left)" = "0 0" ] && ! kill -0 $kids 2>/dev/null && ok ||
  bad "after SIGTERM: namespaces and links left: $left; the command ($kids) still running?"
"$NH" run "${NAME}k" 2 "10.79.$(($$ % 250 + 1))" -- sleep 30 > /dev/null &
p=$!
kids=
for _ in $(seq 100); do kids=$(pgrep -P $p -x sleep) && break; sleep 0.1; done # the command runs
kill -KILL $p
{ wait $p; } 2>/dev/null
[ -n "$kids" ] && kill $kids 2>/dev/null
[ "$(ip netns list | grep -c "^${NAME}k-[0-9]")" = 2 ] || bad "a SIGKILLed run should leave its 2 namespaces"
hf=$("$NH" up "${NAME}k" 2 "10.79.$(($$ % 250 + 1))") && [ "$("$AGENT" "10.79.$(($$ % 250 + 1)).3" hostname)" = "${NAME}k-2" ] && ok ||
  bad "up after a SIGKILLed run"
"$NH" down "${NAME}k"

echo "multihost: $pass passed, $fail failed"
[ $fail -eq 0 ]
