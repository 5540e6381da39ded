#!/usr/bin/env bash
# Starts a SLURM cluster on this machine by hand (no systemd), for tests and CI: munged,
# slurmctld and slurmd, with every file SLURM writes in one scratch directory. Either one node
# (this machine), or one node per emulated host (scripts/emulated_hosts.sh): a slurmd inside each
# host's network namespace, with the host's name and address, so that jobs really span hosts.
#
#   scripts/slurm/start.sh            # prints: export SLURM_CONF=...
#   source "$STRATA_SLURM_DIR/env.sh" # or eval the printed line; then sinfo, salloc, sbatch work
#   scripts/slurm/stop.sh             # stops exactly the daemons this script started
#
#   scripts/emulated_hosts.sh up 7 2                      # hosts strata-7-h1, strata-7-h2
#   STRATA_SLURM_HOSTS=7:2 scripts/slurm/start.sh         # nodes strata-7-h1, strata-7-h2
#   STRATA_SLURM_HOSTS=7:2 scripts/slurm/stop.sh          # before emulated_hosts.sh down 7
#
# Environment: STRATA_SLURM_HOSTS (ID:N: one node per emulated host 1..N of set ID, made before
# by `scripts/emulated_hosts.sh up ID N`; unset: this machine is the one node), STRATA_SLURM_DIR
# (scratch directory, default /tmp/strata-slurm, or /tmp/strata-slurm-hosts-ID with hosts),
# STRATA_SLURM_PORT (slurmctld port, default 6817, or 6900+ID with hosts; slurmd uses the next
# one), STRATA_SLURM_TIMEOUT (seconds to wait for the nodes to become idle, default 60).
# The defaults differ with hosts so that both clusters (and those of several host sets) can run
# at once: slurmctld listens on every address of this namespace, so the ports must not collide.
# Exit status: 0 when every node is idle (also when an instance from the same directory already
# runs, which is then reused and reported); 1 otherwise, with the reason and the tail of the
# daemon logs. Needs root, or sudo without a password.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/slurm/cluster.sh
source "$here/cluster.sh"
timeout=${STRATA_SLURM_TIMEOUT:-60}
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

say() { echo "slurm/start: $*" >&2; }
# The daemons' logs tell why they failed; before they are started, the logs are an earlier run's.
daemons=0
die() {
  say "$*"
  for log in "$dir"/slurmctld.log "$dir"/slurmd*.log; do
    [ $daemons -eq 1 ] && [ -f "$log" ] && { say "--- tail of $log"; tail -n 15 "$log" >&2; }
  done
  exit 1
}
[ -n "$cluster_error" ] && die "$cluster_error"

# A pid file names a live process of the expected program (pids are recycled).
alive() {
  local pidfile=$1 prog=$2 pid
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$prog" ] &&
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]  # a zombie is gone
}
all_slurmd_alive() {
  local node
  for node in "${nodes[@]}"; do alive "$(slurmd_pidfile "$node")" slurmd || return 1; done
}
# Every node of the cluster idle (sinfo lists a node once per partition: one partition here).
all_idle() {
  [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -eq ${#nodes[@]} ]
}

# 1. Packages (Debian's), only when missing. libpmix-dev: SLURM's mpi/pmix plugin (srun
# --mpi=pmix) loads pmix2/lib/libpmix.so, which only the -dev package provides.
missing=()
for p in slurm-wlm munge libpmix-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null || die "cannot install ${missing[*]}"
fi

# The emulated hosts must exist already: this script makes no network of its own.
if [ -n "$hosts_set" ]; then
  make="run scripts/emulated_hosts.sh up $hosts_set ${#nodes[@]} first"
  ip -o -4 addr show dev "strata-br-$hosts_set" 2>/dev/null | grep -q " $ctl_addr/" ||
    die "no bridge strata-br-$hosts_set at $ctl_addr: $make"
  for node in "${nodes[@]}"; do
    ip netns list | awk '{print $1}' | grep -qx "$node" || die "no emulated host $node: $make"
  done
fi

mkdir -p "$dir"
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

if alive "$dir/slurmctld.pid" slurmctld && all_slurmd_alive && all_idle; then
  say "already running from $dir"
  echo "export SLURM_CONF=$conf" >"$dir/env.sh"
  echo "export SLURM_CONF=$conf"
  exit 0
fi

# 2. Munge: SLURM authenticates every message with it. Reuse a munged that already answers. The
# emulated hosts share it: its socket is a file (/run/munge), which network namespaces share.
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "using the running munged"
else
  $SUDO mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
  $SUDO chown munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
  $SUDO chmod 0700 /etc/munge /var/log/munge /var/lib/munge
  $SUDO chmod 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  $SUDO chown munge:munge /etc/munge/munge.key
  $SUDO chmod 0400 /etc/munge/munge.key
  rm -f "$dir/munged.pid"
  # munged forks into the background and writes its pid file once its socket is ready.
  $SUDO runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid ||
    die "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  munge -n | unmunge >/dev/null || die "munged does not answer"
  cp /run/munge/munged.pid "$dir/munged.pid"  # ours: stop.sh ends it
fi

# 3. The configuration: the nodes (this machine by its short hostname on 127.0.0.1, or the
# emulated hosts by their names and addresses), one partition; no cgroups (linuxproc tracking),
# so it also works in containers. slurmctld is "localhost" (a name it always accepts as its own)
# at the address the nodes reach it on. Every node's files are its own (%n: the node's name),
# since the emulated hosts share this file system: pid file, log, spool (where the PMIx plugin
# puts its server's socket, stepd.slurm.pmix.JOB.STEP) and TmpFS (where it makes the ranks' PMIx
# directory, spmix_appdir_UID_JOB.STEP); shared, the second node's step of a job fails to start
# (bind: "Address already in use"; mkdir: "File exists").
# nproc honours OMP_NUM_THREADS (tests set it): count the CPUs without it. Each emulated host
# gets all of them (hosts that share the machine's CPUs, as they share everything else).
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p "$dir/state"
for node in "${nodes[@]}"; do mkdir -p "$dir/spool/$node" "$dir/tmp/$node"; done
{
  cat <<EOF
# Written by scripts/slurm/start.sh: a cluster of ${#nodes[@]} node(s) for tests.
ClusterName=strata
SlurmctldHost=localhost($ctl_addr)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
EOF
  for i in "${!nodes[@]}"; do
    echo "NodeName=${nodes[$i]} NodeAddr=${addrs[$i]} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE" \
    "State=UP OverSubscribe=NO"
} >"$conf"

# 4. The daemons (each forks into the background and writes its pid file). -c: a fresh start,
# without jobs a previous instance left in the state directory.
rm -f "$dir/slurmctld.pid" "$dir"/slurmd*.pid
daemons=1
$SUDO env SLURM_CONF="$conf" slurmctld -c || die "slurmctld did not start"
for _ in $(seq 50); do
  alive "$dir/slurmctld.pid" slurmctld && break
  sleep 0.1
done
alive "$dir/slurmctld.pid" slurmctld || die "slurmctld exited"
for i in "${!nodes[@]}"; do
  if [ -n "$hosts_set" ]; then
    # Inside the host's network namespace, with its host name (a UTS namespace of its own): the
    # job steps it starts inherit both, so the ranks see the host they run on. nsenter, not `ip
    # netns exec` (emulated_hosts.sh exec): that one mounts a fresh /sys without /sys/fs/cgroup,
    # and slurmd does not start without it.
    # shellcheck disable=SC2016  # $1 is the inner shell's
    $SUDO env SLURM_CONF="$conf" nsenter --net="/run/netns/${nodes[$i]}" \
      unshare --uts sh -c 'hostname "$1" && exec slurmd -N "$1"' sh "${nodes[$i]}" ||
      die "slurmd of ${nodes[$i]} did not start"
  else
    $SUDO env SLURM_CONF="$conf" slurmd -N "${nodes[$i]}" || die "slurmd did not start"
  fi
done

deadline=$((SECONDS + timeout))
until all_idle; do
  if [ $SECONDS -ge $deadline ]; then
    die "nodes not idle after ${timeout}s: $(sinfo -h -N -o '%N %T %E' 2>&1 | tr '\n' ';' || true)"
  fi
  alive "$dir/slurmctld.pid" slurmctld || die "slurmctld exited"
  sleep 0.5
done
echo "export SLURM_CONF=$conf" >"$dir/env.sh"
say "nodes ${nodes[*]} idle ($cpus CPUs each); SLURM_CONF=$conf"
echo "export SLURM_CONF=$conf"
