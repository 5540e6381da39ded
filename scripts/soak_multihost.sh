#!/usr/bin/env bash
# Soak (GitHub issue 23, item 6): a small model trains across 4 emulated hosts (one rank each,
# dp 4; scripts/emulated_hosts.sh) for SOAK_MINUTES (30) while a random fault strikes every
# 60-150 s: every process of a host SIGKILLed, a host's processes stopped (SIGSTOP: a hang), its
# link cut for 12 s, or its link slowed for 40 s (tc tbf; no netem in this kernel). strata launch
# restarts the job each time (no --elastic: every host comes back). At the end:
#  - no committed step was lost: each restart resumed from the newest checkpoint committed before
#    its fault (or a newer one);
#  - the final parameters are bitwise those of the same job run without faults (same layout);
#  - nothing leaked: no process of the run, no namespace or link of the set, no new file in
#    /dev/shm, no Open MPI session directory left once the hosts are gone.
# The steps are paced (fault.slow_rank 0 sleeps SOAK_PACE_MS in each step: the job lasts the soak
# without burning the 2 cores; straggler and link-probe detectors off, as the pacing would trip
# them) so that the fault-free reference of the same steps takes minutes. Needs root. CI does not
# run it; docs/RELIABILITY.md records a run.
#
#   scripts/soak_multihost.sh [BUILD_DIR]      (SOAK_MINUTES, SOAK_PACE_MS, SOAK_SEED)
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
strata=${1:-$src/build}/strata
minutes=${SOAK_MINUTES:-30}
pace=${SOAK_PACE_MS:-1000}
seed=${SOAK_SEED:-$RANDOM}
RANDOM=$seed
hosts="$src/scripts/emulated_hosts.sh"
id=$(( $$ % 150 + 40 ))
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_soak.XXXXXX")
shm_before=$(ls /dev/shm | sort)
"$hosts" down "$id"
"$hosts" up "$id" 4 || exit 1
cleanup() {
  tc qdisc del dev "sv$id-2" root 2>/dev/null
  "$hosts" down "$id"
}
trap cleanup EXIT
"$hosts" hostfile "$id" 1 > "$work/hostfile"
say() { echo "[$(date +%T)] $*" | tee -a "$work/soak.log"; }
# Steps: the soak's length at the paced rate (one step ~ pace + 0.1 s), less what faults cost.
steps=$(( minutes * 60 * 1000 / (pace + 100) * 85 / 100 / 20 * 20 ))
args=(--set data.source=synthetic --set "train.steps=$steps" --set train.eval_every=0
      --set train.eval_batches=1 --set train.checkpoint_every=20 --set run.resume=auto
      --set sample.max_new_tokens=0 --set model.n_layer=2 --set train.batch_size=2
      --set train.seq_len=64 --set system.threads=1 --set train.log_every=10
      --set anomaly.straggler_factor=0 --set parallel.comm_timeout_s=5)
say "soak: seed $seed, $minutes min, $steps steps paced at $pace ms, hosts $(tr '\n' ' ' < "$work/hostfile")"
latest() {  # the newest committed checkpoint's step (0: none)
  local d
  d=$(ls -d "$work/soak/ckpt"/step_* 2>/dev/null | sort | tail -1)
  [ -n "$d" ] && echo $((10#${d##*step_})) || echo 0
}
(
  eval "$("$hosts" env "$id")"
  export OMP_NUM_THREADS=1
  exec "$strata" launch -n 4 --hostfile "$work/hostfile" --max-restarts 100 \
    --heartbeat-timeout 20 --startup-timeout 60 -- "$src/configs/tiny.toml" "${args[@]}" \
    --set "fault.slow_rank=0" --set "fault.slow_ms=$pace" --set "run.dir=$work/soak"
) > "$work/soak.out" 2>&1 &
job=$!
start=$SECONDS
faults=0
: > "$work/faults.txt"
while kill -0 "$job" 2>/dev/null && [ $((SECONDS - start)) -lt $((minutes * 60)) ]; do
  pause=$((60 + RANDOM % 91))
  for _ in $(seq 1 "$pause"); do kill -0 "$job" 2>/dev/null || break; sleep 1; done
  kill -0 "$job" 2>/dev/null || break
  h=$((1 + RANDOM % 4))
  kind=$(( RANDOM % 4 ))
  committed=$(latest)
  resumed=$(grep -c "resumed from" "$work/soak.out")  # the resumes before this fault
  faults=$((faults + 1))
  case $kind in
    0) say "fault $faults: host $h killed (committed: step $committed)"
       for pid in $(ip netns pids "strata-$id-h$h"); do kill -9 "$pid" 2>/dev/null; done ;;
    1) say "fault $faults: host $h stopped (SIGSTOP, a hang; committed: step $committed)"
       for pid in $(ip netns pids "strata-$id-h$h"); do kill -STOP "$pid" 2>/dev/null; done
       sleep 30
       for pid in $(ip netns pids "strata-$id-h$h"); do kill -CONT "$pid" 2>/dev/null; done ;;
    2) say "fault $faults: host $h's link cut for 12 s (committed: step $committed)"
       ip link set "sv$id-$h" down; sleep 12; ip link set "sv$id-$h" up ;;
    3) say "fault $faults: host $h's link slowed for 40 s (committed: step $committed)"
       tc qdisc add dev "sv$id-$h" root tbf rate 10mbit burst 32kb latency 100ms
       sleep 40
       tc qdisc del dev "sv$id-$h" root ;;
  esac
  echo "$faults $kind $h $committed $resumed" >> "$work/faults.txt"
done
say "soak: faults over after $(( (SECONDS - start) / 60 )) min; waiting for the job to finish"
wait "$job"
rc=$?
say "soak job: exit $rc after $(( (SECONDS - start) / 60 )) min"
failed=0
[ $rc -eq 0 ] || { tail -30 "$work/soak.out"; failed=1; }
# No committed step lost: the first resume after each fault starts from the newest checkpoint
# committed before it, or a newer one.
python3 - "$work/soak.out" "$work/faults.txt" <<'PY' || failed=1
import re, sys
text = open(sys.argv[1]).read()
resumes = [int(s) for s in re.findall(r"resumed from \S+ at step (\d+)", text)]
restarts = len(re.findall(r"restarting the job", text))
faults = [list(map(int, l.split())) for l in open(sys.argv[2]) if l.strip()]
kinds = ["host killed", "host stopped", "link cut", "link slowed"]
print(f"{len(faults)} faults ({', '.join(f'{sum(f[1] == k for f in faults)} {kinds[k]}' for k in range(4))}), "
      f"{restarts} restarts, resumed at steps {resumes}")
for n, kind, host, committed, before in faults:
    if before < len(resumes):
        r = resumes[before]
        print(f"  fault {n} ({kinds[kind]}, host {host}): committed step {committed}, next resume at {r}")
        if r < committed:
            sys.exit(f"fault {n}: resumed at step {r}, before the committed step {committed}")
print("no committed step lost")
PY
say "fault-free reference: $steps steps, same layout, no pacing"
(
  eval "$("$hosts" env "$id")"
  export OMP_NUM_THREADS=1
  "$strata" launch -n 4 --hostfile "$work/hostfile" -- "$src/configs/tiny.toml" "${args[@]}" \
    --set "run.dir=$work/clean"
) > "$work/clean.out" 2>&1 || { tail -20 "$work/clean.out"; failed=1; }
python3 "$src/tests/tools/same_checkpoint.py" "$work/clean" "$work/soak" "$steps" | tee -a "$work/soak.log" ||
  failed=1
# Open MPI session directories: left only by hosts whose daemon was killed (a host's /tmp, which
# its reboot would clear; emulated_hosts.sh down does).
say "session directories left by killed hosts: $(ls -d /tmp/ompi.strata-"$id"-h* 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
cleanup
trap - EXIT
ls -d /tmp/ompi.strata-"$id"-h* >/dev/null 2>&1 && { say "leaked session directories"; failed=1; }
leaked=$(pgrep -af "strata-$id-|$work" | grep -v pgrep || true)
[ -z "$leaked" ] || { say "leaked processes: $leaked"; failed=1; }
ip netns list | grep -q "strata-$id-" && { say "leaked namespaces"; failed=1; }
ip link show "strata-br-$id" >/dev/null 2>&1 && { say "leaked bridge"; failed=1; }
# Shared memory the job's processes make: Open MPI's segments are named after their host
# (vader_segment.HOST.*), and the hosts are the set's. Other new entries belong to other
# programs on this machine (another mpirun's segments name this machine's host): listed, not
# counted.
new_shm=$(comm -13 <(echo "$shm_before") <(ls /dev/shm | sort) | tr '\n' ' ')
ours=$(echo "$new_shm" | tr ' ' '\n' | grep -F "strata-$id-h" || true)
[ -z "$ours" ] || { say "leaked shared memory: $ours"; failed=1; }
[ -z "$new_shm" ] || say "new in /dev/shm, from other programs: $new_shm"
say "soak: $([ $failed -eq 0 ] && echo passed || echo FAILED) (logs in $work)"
exit $failed
