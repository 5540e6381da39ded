#!/usr/bin/env bash
# Stops the SLURM cluster that scripts/slurm/start.sh started: exactly the daemons whose pid files
# it wrote in its scratch directory (munged only if start.sh started it). Idempotent.
#
#   scripts/slurm/stop.sh            # STRATA_SLURM_DIR as for start.sh (default /tmp/strata-slurm)
#   STRATA_SLURM_HOSTS=ID:N scripts/slurm/stop.sh   # the cluster over emulated hosts (a slurmd
#                                                   # in each; the hosts themselves stay)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/slurm/cluster.sh
source "$here/cluster.sh"
[ -n "$cluster_error" ] && { echo "slurm/stop: $cluster_error" >&2; exit 2; }
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

# A live process (a zombie has ended; it only waits for its parent to reap it).
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

# Ends the process named in a pid file if it still is the expected program (pids are recycled):
# SIGTERM, then SIGKILL after 10 s.
stop() {
  local pidfile=$1 prog=$2 pid
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$prog" ]; then
    $SUDO kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      echo "slurm/stop: $prog ($pid) ignored SIGTERM; killing it" >&2
      $SUDO kill -KILL "$pid" 2>/dev/null
    fi
    echo "slurm/stop: stopped $prog ($pid)" >&2
  fi
  rm -f "$pidfile"
}

# The slurmds first: they would otherwise keep reporting to a controller that is gone. Every
# slurmd pid file in the directory, not only those of the nodes named now: a cluster started with
# other hosts (or before slurmd's files were per node: slurmd.pid) is stopped all the same.
for pidfile in "$dir"/slurmd*.pid; do
  [ -e "$pidfile" ] && stop "$pidfile" slurmd
done
# A job step outlives its slurmd (slurmstepd goes on while slurmd restarts, by design): this
# cluster's steps (their SLURM_CONF, inherited from slurmd, names it) are ended with the tasks
# they started. SIGKILL: slurmstepd ignores SIGTERM.
descendants() {
  local child
  for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done
}
for pid in $(pgrep -x slurmstepd); do
  $SUDO cat "/proc/$pid/environ" 2>/dev/null | tr '\0' '\n' |
    grep -qxF "SLURM_CONF=$dir/slurm.conf" || continue
  tree=$(descendants "$pid")
  echo "slurm/stop: ending a job step left behind: $(ps -o args= -p "$pid")" >&2
  # shellcheck disable=SC2086  # one pid a word
  $SUDO kill -KILL "$pid" $tree 2>/dev/null
done
stop "$dir/slurmctld.pid" slurmctld
# munged is shared by every cluster on this machine (the single-node one and those over emulated
# hosts can run at once): while another cluster's slurmctld runs, ours is handed to that cluster
# (its scratch directory, from its SLURM_CONF), whose stop.sh ends it, instead of stopped now.
if [ -s "$dir/munged.pid" ]; then
  for pid in $(pgrep -x slurmctld); do
    other=$($SUDO cat "/proc/$pid/environ" 2>/dev/null | tr '\0' '\n' | sed -n 's/^SLURM_CONF=//p')
    other=$(dirname "${other:-/nonexistent/slurm.conf}")
    if [ -d "$other" ] && [ "$other" != "$dir" ]; then
      # Where that cluster names a munged already, it is this one (there is one socket).
      [ -e "$other/munged.pid" ] || cp "$dir/munged.pid" "$other/munged.pid"
      rm -f "$dir/munged.pid"
      echo "slurm/stop: munged left running for the cluster in $other (its stop.sh ends it)" >&2
      break
    fi
  done
fi
stop "$dir/munged.pid" munged
rm -f "$dir/env.sh"
exit 0
