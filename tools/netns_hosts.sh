#!/usr/bin/env bash
# Several "hosts" on one machine, for multi-node mpirun runs (docs/multihost.md).
#
#   netns_hosts.sh up   NAME N [NET]   make N hosts NAME-1..NAME-N
#   netns_hosts.sh down NAME           remove them (their processes killed)
#   netns_hosts.sh run  NAME N [NET] -- COMMAND...
#                                      up, COMMAND (with $MMH_HOSTFILE,
#                                      $MMH_AGENT, $MMH_NET set), then down,
#                                      also on SIGINT / SIGTERM
#
# Each host is a network namespace NAME-i with one veth pair: NAME-i-h in
# the root namespace, enslaved to the bridge NAME-br (address NET.1/24),
# and eth0 inside the namespace with the address NET.(i+1)/24; lo is up.
# NET defaults to 10.77.0 (three octets).  `up` first removes what a
# killed earlier run of the same NAME left, writes the hostfile (one host
# per line, by address: "NET.2 slots=S" ...; S from $MMH_SLOTS, default 2)
# to /run/mmh/NAME/hostfile and prints its path.  The launch agent
# tools/netns_agent.sh (mpirun -mca plm_rsh_agent) starts the commands of
# a host's address in its namespace, the way ssh would on a real host.
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); names are at most 8
# characters, no '-' (interface names have 15).
set -uo pipefail

die() { echo "netns_hosts.sh: $*" >&2; exit 2; }
usage() { die "usage: netns_hosts.sh up NAME N [NET] | down NAME | run NAME N [NET] -- COMMAND..."; }

check_name() {
  [[ "$1" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "NAME '$1': expected 1-8 lower-case letters and digits, starting with a letter"
}

down() { # NAME: everything of NAME, quietly; no error when nothing is there
  local name=$1 ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}-[0-9]+$"); do
    # the processes still in the namespace (ranks, orted) first: a
    # namespace with processes in it would outlive `ip netns del`
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  local l
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${name}-([0-9]+-h|br)$"); do
    ip link del "$l" 2>/dev/null
  done
  rm -rf "/run/mmh/$name"
}

up() { # NAME N NET
  local name=$1 n=$2 net=$3 slots=${MMH_SLOTS:-2}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "N '$n': expected a number of hosts 1..200"
  [[ "$net" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "NET '$net': expected three octets, e.g. 10.77.0"
  [[ "$slots" =~ ^[1-9][0-9]*$ ]] || die "MMH_SLOTS '$slots': expected a positive number"
  down "$name"
  local used
  used=$(ip -4 route show "$net.0/24" 2>/dev/null)
  [ -z "$used" ] || die "NET $net.0/24 is already in use ($used): choose another"
  local br="$name-br" i ns
  ip link add "$br" type bridge || die "cannot make the bridge $br (root with CAP_NET_ADMIN needed)"
  ip addr add "$net.1/24" dev "$br" && ip link set "$br" up || { down "$name"; die "cannot set up $br"; }
  mkdir -p "/run/mmh/$name" || { down "$name"; die "cannot make /run/mmh/$name"; }
  : > "/run/mmh/$name/hostfile"
  for ((i = 1; i <= n; i++)); do
    ns="$name-$i"
    if ! { ip netns add "$ns" &&
        ip link add "$ns-h" type veth peer name eth0 netns "$ns" &&
        ip link set "$ns-h" master "$br" && ip link set "$ns-h" up &&
        ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0 &&
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up; }; then
      down "$name"
      die "cannot make host $ns"
    fi
    echo "$net.$((i + 1)) slots=$slots" >> "/run/mmh/$name/hostfile"
  done
  echo "/run/mmh/$name/hostfile"
}

[ $# -ge 2 ] || usage
cmd=$1 name=$2
check_name "$name"
case "$cmd" in
  up)
    [ $# -ge 3 ] && [ $# -le 4 ] || usage
    up "$name" "$3" "${4:-10.77.0}" ;;
  down)
    [ $# -eq 2 ] || usage
    down "$name" ;;
  run)
    [ $# -ge 5 ] || usage
    n=$3 net=10.77.0; shift 3
    if [ "$1" != "--" ]; then net=$1; shift; fi
    [ "${1:-}" = "--" ] || usage
    shift
    [ $# -ge 1 ] || usage
    trap 'down "$name"' EXIT
    child=
    trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 130' INT
    trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 143' TERM
    hf=$(up "$name" "$n" "$net") || exit 2
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    # the command in the background so that a signal reaches the traps at
    # once (they end it, then the EXIT trap removes the hosts)
    MMH_HOSTFILE=$hf MMH_AGENT="$here/netns_agent.sh" MMH_NET=$net "$@" &
    child=$!
    wait "$child"
    exit $? ;;
  *) usage ;;
esac
