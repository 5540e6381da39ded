# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this
# The cluster's shape, shared by start.sh and stop.sh (sourced, not run): what differs between
# the single-node cluster and one over emulated hosts. Sets
#   hosts_set        the emulated host set's ID (STRATA_SLURM_HOSTS=ID:N), empty for one node
#   nodes, addrs     the node names and the addresses slurmctld reaches their slurmd on
#   ctl_addr         the address of slurmctld (this namespace) that the nodes reach
#   dir, port        STRATA_SLURM_DIR and STRATA_SLURM_PORT, or their defaults
#   cluster_error    why STRATA_SLURM_HOSTS cannot be used, empty when it can
# and defines slurmd_pidfile NODE (slurm.conf's SlurmdPidFile for that node).

hosts_set="" cluster_error=""
nodes=() addrs=()
if [ -n "${STRATA_SLURM_HOSTS:-}" ]; then
  if [[ "$STRATA_SLURM_HOSTS" =~ ^([0-9]+):([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] &&
     [ "${BASH_REMATCH[1]}" -le 199 ] && [ "${BASH_REMATCH[2]}" -ge 1 ]; then
    hosts_set=${BASH_REMATCH[1]}
    # The names and addresses scripts/emulated_hosts.sh gives host i of the set.
    for i in $(seq 1 "${BASH_REMATCH[2]}"); do
      nodes+=("strata-$hosts_set-h$i")
      addrs+=("10.77.$hosts_set.$((10 + i))")
    done
    ctl_addr=10.77.$hosts_set.1  # the bridge
    dir=${STRATA_SLURM_DIR:-/tmp/strata-slurm-hosts-$hosts_set}
    port=${STRATA_SLURM_PORT:-$((6900 + hosts_set))}
  else
    cluster_error="STRATA_SLURM_HOSTS must be ID:N (set ID 1-199, N hosts)"
    cluster_error+=", got '$STRATA_SLURM_HOSTS'"
  fi
fi
if [ -z "$hosts_set" ]; then
  nodes=("$(hostname -s)")
  addrs=(127.0.0.1)
  ctl_addr=127.0.0.1
  dir=${STRATA_SLURM_DIR:-/tmp/strata-slurm}
  port=${STRATA_SLURM_PORT:-6817}
fi

slurmd_pidfile() { echo "$dir/slurmd-$1.pid"; }
