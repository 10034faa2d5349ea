#!/usr/bin/env bash
# The launch agent for hosts made by tools/netns_hosts.sh (docs/multihost.md):
#   mpirun -mca plm_rsh_agent tools/netns_agent.sh --hostfile ... 
# OpenMPI calls it as it would call ssh: `netns_agent.sh HOST COMMAND...`.
# It finds the network namespace that holds the address HOST and runs
# COMMAND there through sh -c, in a UTS namespace of its own whose host
# name is the namespace's name (so each "host" has its own name, as
# MPI_Get_processor_name reports it).
# MMH_AGENT_FAIL=HOST makes it fail for that host (tests: a host that does
# not answer).
set -uo pipefail
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done # ssh-style options: none apply
[ $# -ge 2 ] || { echo "netns_agent.sh: usage: netns_agent.sh HOST COMMAND..." >&2; exit 255; }
host=$1; shift
if [ -n "${MMH_AGENT_FAIL:-}" ] && [ "$host" = "$MMH_AGENT_FAIL" ]; then
  echo "netns_agent.sh: host $host: refused on purpose (MMH_AGENT_FAIL)" >&2
  exit 255
fi
ns=
for n in $(ip netns list | awk '{print $1}'); do
  if ip -n "$n" -o -4 addr show 2>/dev/null | awk '{print $4}' | grep -qx "$host/[0-9]*"; then ns=$n; break; fi
done
[ -n "$ns" ] || { echo "netns_agent.sh: no network namespace has the address $host" >&2; exit 255; }
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && eval "$1"' "$ns" "$*"
