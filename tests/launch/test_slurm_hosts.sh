#!/usr/bin/env bash
# SLURM across emulated hosts (GitHub issue 23, item 1): two network namespaces on a bridge
# (scripts/emulated_hosts.sh), each a SLURM node with its own slurmd, host name and address
# (STRATA_SLURM_HOSTS=ID:2 scripts/slurm/start.sh); slurmctld in this namespace on the bridge.
# The ranks' MPI traffic between hosts is TCP on the set's subnet only (emulated_hosts.sh env).
#  a. `salloc -N 2 -n 4 --ntasks-per-node=2` + `strata launch -n 4` (srun --mpi=pmix): one MPI
#     world of 4, ranks 0,1 on host 1 and 2,3 on host 2 (mpi_hello's records).
#  b. `strata launch -n 4` in that allocation trains tp 2 x dp 2: each tp group (adjacent ranks)
#     inside one host (the ranks' heartbeats name their host), and the losses are those of the
#     same job on one host outside SLURM (mpirun, shared memory), bit for bit.
#  c. the sbatch script `strata launch --nodes 2 --emit slurm` writes for that job runs through
#     `sbatch --wait` across both nodes, with the same placement and the same losses.
# Nothing is left behind: the cluster's daemons and job steps, the namespaces and the bridge, the
# files; the test fails if a process of its cluster or its hosts remains after the cluster stops.
#
#   test_slurm_hosts.sh STRATA MPI_HELLO SOURCE_DIR   (exit 77 without root, network namespaces
#   or a SLURM that can start, outside CI; under CI that is a failure)
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 STRATA MPI_HELLO SOURCE_DIR" >&2
  exit 2
fi
strata=$1 hello=$2 src=$3
source "$src/tests/launch/multihost_lib.sh"
require_root "ip netns, SLURM's daemons"
t0=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_slurm_hosts.XXXXXX")
# The cluster's own scratch directory and port (6900 + ID): it can run beside the single-node one.
export STRATA_SLURM_HOSTS=$id:2 STRATA_SLURM_DIR=$work/slurm
conf=$STRATA_SLURM_DIR/slurm.conf
job_name=strata-hosts-test-$$
cleanup() {
  # Only while slurmctld runs: scancel would wait for a controller that is gone.
  [ -s "$STRATA_SLURM_DIR/slurmctld.pid" ] && SLURM_CONF=$conf scancel -n "$job_name" 2>/dev/null
  "$src/scripts/slurm/stop.sh" 2>/dev/null
  "$hosts" down "$id"
  rm -rf "$work"
}
hosts_up 2  # (removes $work if it skips)
trap cleanup EXIT
trap 'exit 1' INT TERM
if ! "$src/scripts/slurm/start.sh" > "$work/start.log" 2>&1; then
  cat "$work/start.log"
  skip "SLURM cannot start on the emulated hosts (scripts/slurm/start.sh failed, output above)"
fi
tail -1 "$work/start.log"
t_up=$SECONDS

# The environment of every SLURM command below: the cluster, TCP only between the hosts, one
# thread a rank. srun passes it on to the ranks (--export=ALL is its default).
slurm_env() {
  # shellcheck source=/dev/null
  source "$STRATA_SLURM_DIR/env.sh"
  eval "$("$hosts" env "$id")"
  export OMP_NUM_THREADS=1
}
salloc=(salloc -N 2 -n 4 --ntasks-per-node=2 -J "$job_name" --immediate=60)
common=(--set data.source=synthetic --set train.steps=4 --set train.eval_every=0
        --set train.eval_batches=1 --set train.checkpoint_every=0 --set run.resume=none
        --set sample.max_new_tokens=0 --set parallel.tp=2 --set model.n_layer=2
        --set train.batch_size=2 --set train.seq_len=64 --set system.threads=1)
(
  slurm_env
  sinfo -N
  # a. One MPI world over both hosts.
  mkdir -p "$work/hello"
  timeout --kill-after=10 120 "${salloc[@]}" "$strata" launch -n 4 --program "$hello" \
    --run-dir "$work/a" --heartbeat-timeout 0 -- "$work/hello" > "$work/hello.log" 2>&1 ||
    { cat "$work/hello.log"; exit 1; }
  grep -q "srun --mpi=pmix -n 4" "$work/hello.log" ||
    { cat "$work/hello.log"; echo "strata launch did not use srun --mpi=pmix"; exit 1; }
  # b. Training inside the allocation.
  timeout --kill-after=10 240 "${salloc[@]}" "$strata" launch -n 4 -- "$src/configs/tiny.toml" \
    "${common[@]}" --set "run.dir=$work/salloc" > "$work/salloc.log" 2>&1 ||
    { tail -30 "$work/salloc.log"; exit 1; }
  # c. The batch script strata writes, 2 ranks a node, through sbatch.
  mkdir -p "$work/sbatch"
  "$strata" launch -n 4 --nodes 2 --emit slurm --out "$work/sbatch/job.sh" \
    --job-name "$job_name" --workdir "$work/sbatch" --cpus-per-task 1 --time 00:15:00 -- \
    "$src/configs/tiny.toml" "${common[@]}" --set "run.dir=$work/sbatch/run" \
    > "$work/emit.log" 2>&1 ||
    { cat "$work/emit.log"; echo "strata launch --emit slurm failed"; exit 1; }
  grep -qx "#SBATCH --nodes=2" "$work/sbatch/job.sh" &&
    grep -qx "#SBATCH --ntasks-per-node=2" "$work/sbatch/job.sh" ||
    { cat "$work/sbatch/job.sh"; echo "the script does not ask for 2 nodes of 2 tasks"; exit 1; }
  timeout --kill-after=10 240 sbatch --wait "$work/sbatch/job.sh" > "$work/sbatch.log" 2>&1 ||
    { cat "$work/sbatch.log" "$work/sbatch/$job_name"-*.out; exit 1; }
) || fail "a SLURM job across the emulated hosts failed"
t_jobs=$SECONDS

for r in 0 1 2 3; do
  want="strata-$id-h$(( r / 2 + 1 ))"
  got=$(cat "$work/hello/host_rank_$r.txt" 2>/dev/null || echo none)
  grep -qx "mpi_hello rank $r size 4 slurm_procid $r pmix_rank $r" \
    "$work/hello/hello_rank_$r.txt" ||
    fail "rank $r: $(cat "$work/hello/hello_rank_$r.txt" 2>/dev/null || echo 'no record')"
  [ "$got" = "$want" ] || fail "rank $r ran on '$got', expected $want (2 adjacent ranks a node)"
done
echo "a. salloc: one world of 4 (SLURM_PROCID = PMIx rank = MPI rank);" \
  "ranks 0,1 on strata-$id-h1, 2,3 on strata-$id-h2"

# The same training job on one host, outside SLURM (mpirun; shared memory between the ranks).
OMP_NUM_THREADS=1 timeout --kill-after=10 240 "$strata" launch -n 4 -- "$src/configs/tiny.toml" \
  "${common[@]}" --set "run.dir=$work/one" > "$work/one.log" 2>&1 ||
  { tail -30 "$work/one.log"; fail "the job on one host failed"; }
t_ref=$SECONDS

# A run's placement (each rank's host from its heartbeat; tp groups = adjacent ranks, tp 2) and
# losses against the one-host run's.
python3 - "$id" "$work/one" "b. salloc" "$work/salloc" "c. sbatch" "$work/sbatch/run" <<'PY' ||
import json, sys
hosts_set, one, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{run}/metrics.jsonl") if '"loss"' in l]
want = losses(one)
assert len(want) == 4, f"the one-host run logged {len(want)} losses, not 4"
print("   losses on one host:", want)
for what, run in zip(runs[::2], runs[1::2]):
    host = [json.load(open(f"{run}/heartbeat/rank_{r:03d}.json"))["host"] for r in range(4)]
    groups = [sorted({host[2 * g], host[2 * g + 1]}) for g in range(2)]
    assert groups == [[f"strata-{hosts_set}-h1"], [f"strata-{hosts_set}-h2"]], \
        f"{what}: ranks 0-3 ran on {host}: a tp group spans hosts or the hosts are not both used"
    got = losses(run)
    assert got == want, f"{what}: losses {got} differ from the one-host run's {want}"
    print(f"{what}: tp groups (0,1) on {host[0]} and (2,3) on {host[2]}; losses equal bit for bit")
PY
  fail "placement or losses"

# Stop the cluster now (the trap would too) to see that nothing of it or its hosts remains.
"$src/scripts/slurm/stop.sh" > "$work/stop.log" 2>&1
cat "$work/stop.log"
grep -q "left behind" "$work/stop.log" && fail "a job step outlived its job (stop.sh ended it)"
sleep 0.5
left=""
for i in 1 2; do left+=" $(ip netns pids "strata-$id-h$i" 2>/dev/null | tr '\n' ' ')"; done
for pid in $(pgrep -x 'slurmctld|slurmd|slurmstepd|srun|salloc|sbatch'); do
  tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" | grep -qxF "SLURM_CONF=$conf" && left+=" $pid"
done
if [ -n "${left// /}" ]; then
  # shellcheck disable=SC2086  # one pid a word
  ps -o pid,stat,args -p ${left// /,} 2>/dev/null
  fail "processes left behind (above)"
fi
echo "no process of the cluster or its hosts left"
echo "times: cluster up $((t_up - t0)) s, SLURM jobs $((t_jobs - t_up)) s," \
  "one-host run $((t_ref - t_jobs)) s, all $((SECONDS - t0)) s"
echo "slurm_multihost: all checks passed"
