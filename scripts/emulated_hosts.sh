#!/usr/bin/env bash
# Test hosts on this machine: N network namespaces joined by veth pairs on a bridge (iproute2),
# each with its own address and, through the agent, its own hostname; for multi-host runs of the
# real engines (Open MPI over TCP, no shared memory between hosts) without other machines.
# Only the namespaces, links and addresses made here are touched; nothing is sent to any other
# address. Root is needed (ip netns).
#
#   scripts/emulated_hosts.sh up ID N     make hosts 1..N of set ID (ID 1-199: subnet 10.77.ID.0/24;
#                                         host i at 10.77.ID.(10+i), named strata-ID-hI; the
#                                         bridge strata-br-ID at 10.77.ID.1 in this namespace)
#   scripts/emulated_hosts.sh down ID     remove them again (idempotent)
#   scripts/emulated_hosts.sh hostfile ID SLOTS   an Open MPI hostfile of the set's addresses
#   scripts/emulated_hosts.sh env ID      the environment mpirun needs, as export lines: the agent
#                                         below for remote starts, TCP on the set's subnet only
#   scripts/emulated_hosts.sh agent ...   Open MPI's rsh agent (plm_rsh_agent): "agent [opts] HOST
#                                         CMD..." runs CMD inside HOST's namespace, with HOST's
#                                         hostname (unshare --uts); a host that is down (no
#                                         namespace, or its link down) fails as ssh would
#   scripts/emulated_hosts.sh exec ID I CMD...  CMD inside host I's namespace
set -euo pipefail
self=$(readlink -f "$0")

ns_of() { echo "strata-$1-h$2"; }
subnet_of() { echo "10.77.$1"; }

check_id() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 199 ] ||
    { echo "emulated_hosts: set ID must be 1-199, got '$1'" >&2; exit 2; }
}

cmd=${1:-}
case "$cmd" in
  up)
    id=$2 n=$3
    check_id "$id"
    net=$(subnet_of "$id")
    br="strata-br-$id"
    ip link add "$br" type bridge
    ip addr add "$net.1/24" dev "$br"
    ip link set "$br" up
    for i in $(seq 1 "$n"); do
      ns=$(ns_of "$id" "$i")
      ip netns add "$ns"
      ip link add "sv$id-$i" type veth peer name eth0 netns "$ns"
      ip link set "sv$id-$i" master "$br" up
      ip netns exec "$ns" ip addr add "$net.$((10 + i))/24" dev eth0
      ip netns exec "$ns" ip link set eth0 up
      ip netns exec "$ns" ip link set lo up
    done
    ;;
  down)
    id=$2
    check_id "$id"
    for ns in $(ip netns list | awk '{print $1}' | grep "^strata-$id-h" || true); do
      # Whatever still runs in the host goes with it (a test that timed out).
      for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" || true
    done
    ip link del "strata-br-$id" 2>/dev/null || true
    # What a host's /tmp would lose at its reboot: the Open MPI session directories of a host
    # whose daemon was killed (the hosts share this machine's /tmp).
    rm -rf /tmp/ompi.strata-"$id"-h*
    ;;
  hostfile)
    id=$2 slots=$3
    check_id "$id"
    for ns in $(ip netns list | awk '{print $1}' | grep "^strata-$id-h" | sort -V); do
      echo "$(subnet_of "$id").$((10 + ${ns##*-h})) slots=$slots"
    done
    ;;
  env)
    id=$2
    check_id "$id"
    echo "export OMPI_MCA_plm_rsh_agent='$self agent'"
    echo "export OMPI_MCA_oob_tcp_if_include=$(subnet_of "$id").0/24"
    echo "export OMPI_MCA_btl=tcp,self"  # no shared memory: the hosts are apart
    echo "export OMPI_MCA_btl_tcp_if_include=$(subnet_of "$id").0/24"
    # PMIx's shared-memory data store would be shared by the hosts (one /dev/shm): per process.
    echo "export PMIX_MCA_gds=hash"
    ;;
  agent)
    shift
    while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
    host=$1
    shift
    [[ "$host" =~ ^10\.77\.([0-9]+)\.([0-9]+)$ ]] ||
      { echo "emulated_hosts agent: '$host' is not an emulated host" >&2; exit 2; }
    id=${BASH_REMATCH[1]} i=$((BASH_REMATCH[2] - 10))
    # A host that is down answers as ssh does, so that the launcher reads the same words as on
    # real hosts: no namespace is a host powered off; its link set down, a dead NIC or cable (ssh
    # waits for its connect timeout first: 2 s here).
    if ! ip netns list | awk '{print $1}' | grep -qx "$(ns_of "$id" "$i")"; then
      echo "ssh: connect to host $host port 22: No route to host" >&2
      exit 255
    fi
    if ! ip link show "sv$id-$i" 2>/dev/null | grep -q "state UP"; then
      sleep 2
      echo "ssh: connect to host $host port 22: Connection timed out" >&2
      exit 255
    fi
    exec ip netns exec "$(ns_of "$id" "$i")" unshare --uts sh -c "hostname strata-$id-h$i; $*"
    ;;
  exec)
    id=$2 i=$3
    shift 3
    exec ip netns exec "$(ns_of "$id" "$i")" "$@"
    ;;
  *)
    sed -n '2,19p' "$self" >&2
    exit 2
    ;;
esac
