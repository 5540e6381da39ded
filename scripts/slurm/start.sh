#!/usr/bin/env bash
# Starts a single-node SLURM cluster on this machine by hand (no systemd), for tests and CI:
# munged, slurmctld and slurmd, with every file SLURM writes in one scratch directory.
#
#   scripts/slurm/start.sh            # prints: export SLURM_CONF=...
#   source "$STRATA_SLURM_DIR/env.sh" # or eval the printed line; then sinfo, salloc, sbatch work
#   scripts/slurm/stop.sh             # stops exactly the daemons this script started
#
# Environment: STRATA_SLURM_DIR (scratch directory, default /tmp/strata-slurm), STRATA_SLURM_PORT
# (slurmctld port, default 6817; slurmd uses the next one), STRATA_SLURM_TIMEOUT (seconds to wait
# for the node to become idle, default 60).
# Exit status: 0 when the node is idle (also when an instance from the same directory already
# runs, which is then reused and reported); 1 otherwise, with the reason and the tail of the
# daemon logs. Needs root, or sudo without a password.
set -euo pipefail

dir=${STRATA_SLURM_DIR:-/tmp/strata-slurm}
port=${STRATA_SLURM_PORT:-6817}
timeout=${STRATA_SLURM_TIMEOUT:-60}
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

say() { echo "slurm/start: $*" >&2; }
die() {
  say "$*"
  for log in "$dir"/slurmctld.log "$dir"/slurmd.log; do
    [ -f "$log" ] && { say "--- tail of $log"; tail -n 15 "$log" >&2; }
  done
  exit 1
}

# A pid file names a live process of the expected program (pids are recycled).
alive() {
  local pidfile=$1 prog=$2 pid
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$prog" ] &&
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]  # a zombie is gone
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

mkdir -p "$dir"
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

if alive "$dir/slurmctld.pid" slurmctld && alive "$dir/slurmd.pid" slurmd &&
   sinfo -h -o %T 2>/dev/null | grep -q idle; then
  say "already running from $dir"
  echo "export SLURM_CONF=$conf" >"$dir/env.sh"
  echo "export SLURM_CONF=$conf"
  exit 0
fi

# 2. Munge: SLURM authenticates every message with it. Reuse a munged that already answers.
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

# 3. The configuration: one node (this machine, by its short hostname, reached on 127.0.0.1),
# one partition; no cgroups (linuxproc tracking), so it also works in containers.
node=$(hostname -s)
# nproc honours OMP_NUM_THREADS (tests set it): count the CPUs without it.
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p "$dir/state" "$dir/spool"
cat >"$conf" <<EOF
# Written by scripts/slurm/start.sh: a single-node cluster for tests.
ClusterName=strata
SlurmctldHost=localhost(127.0.0.1)
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
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
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
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

# 4. The daemons (each forks into the background and writes its pid file). -c: a fresh start,
# without jobs a previous instance left in the state directory.
rm -f "$dir/slurmctld.pid" "$dir/slurmd.pid"
$SUDO env SLURM_CONF="$conf" slurmctld -c || die "slurmctld did not start"
for _ in $(seq 50); do
  alive "$dir/slurmctld.pid" slurmctld && break
  sleep 0.1
done
alive "$dir/slurmctld.pid" slurmctld || die "slurmctld exited"
$SUDO env SLURM_CONF="$conf" slurmd -N "$node" || die "slurmd did not start"

deadline=$((SECONDS + timeout))
until sinfo -h -o %T 2>/dev/null | grep -q idle; do
  if [ $SECONDS -ge $deadline ]; then
    die "node $node not idle after ${timeout}s: $(sinfo -h -N -o '%N %T %E' 2>&1 || true)"
  fi
  alive "$dir/slurmctld.pid" slurmctld || die "slurmctld exited"
  sleep 0.5
done
echo "export SLURM_CONF=$conf" >"$dir/env.sh"
say "node $node idle ($cpus CPUs); SLURM_CONF=$conf"
echo "export SLURM_CONF=$conf"
