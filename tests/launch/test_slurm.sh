#!/usr/bin/env bash
# `strata launch` under a real SLURM on this machine (scripts/slurm/start.sh starts a single-node
# cluster; the daemons it started are stopped on exit, whatever happens).
#
#   test_slurm.sh STRATA MPI_HELLO FAKE_RANK SOURCE_DIR launch   # (a) salloc, (b) sbatch --wait
#   test_slurm.sh STRATA MPI_HELLO FAKE_RANK SOURCE_DIR train    # (c) a 2-rank training job
#   test_slurm.sh STRATA MPI_HELLO FAKE_RANK SOURCE_DIR emit     # (d) strata launch --emit slurm
#   test_slurm.sh STRATA MPI_HELLO FAKE_RANK SOURCE_DIR prepare  # (e) strata launch -- prepare
#
# (a) inside salloc, `strata launch` takes the srun --mpi=pmix path: an MPI job of 2 ranks with
#     distinct SLURM_PROCID and PMIx ranks and MPI_COMM_WORLD of size 2; a failing rank is named
#     with its status; a hung rank is killed through srun and leaves no process behind.
# (b) the same MPI job from a generated batch script through `sbatch --wait`.
# (c) `strata launch -n 2 -- configs/tiny.toml` (synthetic data, 3 steps) inside salloc writes
#     3 lines of metrics.
# (d) the sbatch script `strata launch --emit slurm` writes for a 2-rank job (tp 2, so both ranks
#     share the node) runs through `sbatch --wait` and trains 3 steps.
# (e) the jobs `strata launch -n 2 --emit slurm -- prepare` (= `strata prepare --emit slurm
# --workers 2`) submits (scan and encode as array jobs)
#     write the same files as a prepare in one process.
# Exit status: 0 passed, 1 failed, 77 skipped (SLURM cannot start on this machine; the reason is
# printed; under CI that is a failure, 1).
set -uo pipefail

if [ $# -ne 5 ]; then
  echo "usage: $0 STRATA MPI_HELLO FAKE_RANK SOURCE_DIR launch|train|emit|prepare" >&2
  exit 2
fi
strata=$1 hello=$2 fake=$3 src=$4 mode=$5
export STRATA_SLURM_DIR=${STRATA_SLURM_DIR:-/tmp/strata-slurm}
tmp=$(mktemp -d /tmp/strata_slurm_test.XXXXXX)
started=0
failures=0

# Every job is named, so that cleanup cancels exactly ours (a reused cluster may run others).
job_name=strata-launch-test-$$
# An allocation of 2 tasks that is never queued for ever.
salloc=(salloc -n 2 -J "$job_name" --immediate=60)
cleanup() {
  [ -n "${SLURM_CONF:-}" ] && scancel -n "$job_name" 2>/dev/null
  [ $started -eq 1 ] && "$src/scripts/slurm/stop.sh"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# Outside CI a machine where SLURM cannot run skips (77) with the reason; under CI it fails.
skip() {
  if [ -n "${CI:-}" ]; then
    echo "FAILED (CI is set, so this is not a skip): $*"
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}

# --- SLURM ---------------------------------------------------------------------------------------
if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
  skip "starting SLURM needs root or passwordless sudo"
fi
# An instance from the same directory that already runs is reused and left running.
already=0
if [ -s "$STRATA_SLURM_DIR/slurmctld.pid" ] &&
   [ "$(cat "/proc/$(cat "$STRATA_SLURM_DIR/slurmctld.pid")/comm" 2>/dev/null)" = slurmctld ]; then
  already=1
fi
if ! "$src/scripts/slurm/start.sh" >"$tmp/start.out" 2>&1; then
  cat "$tmp/start.out"
  skip "SLURM cannot start on this machine (scripts/slurm/start.sh failed, output above)"
fi
[ $already -eq 0 ] && started=1
cat "$tmp/start.out"
source "$STRATA_SLURM_DIR/env.sh"
echo "SLURM_CONF=$SLURM_CONF"
sinfo

# Runs a command with a deadline, recording its output and status: run NAME SECONDS CMD...
run() {
  local name=$1 seconds=$2
  shift 2
  echo "--- $name: $*"
  timeout --kill-after=10 "$seconds" "$@" >"$tmp/$name.out" 2>&1
  status=$?
  sed 's/^/    /' "$tmp/$name.out"
  echo "    (exit status $status)"
}

# Checks the files mpi_hello wrote into DIR: 2 ranks, one world of size 2, distinct ids.
check_hello() {
  local what=$1 dir=$2 ok=1
  for r in 0 1; do
    local want="mpi_hello rank $r size 2 slurm_procid $r pmix_rank $r"
    if ! grep -qx "$want" "$dir/hello_rank_$r.txt" 2>/dev/null; then
      ok=0
      echo "    rank $r: $(cat "$dir/hello_rank_$r.txt" 2>/dev/null || echo 'no file')"
    fi
  done
  [ $ok -eq 1 ] && pass "$what: 2 MPI ranks, world size 2, SLURM_PROCID and PMIx rank 0 and 1" ||
    fail "$what: the ranks did not form one MPI world of 2 with distinct SLURM/PMIx ranks"
}

if [ "$mode" = launch ]; then
  # (a) salloc: strata launch inside an allocation uses srun --mpi=pmix.
  mkdir -p "$tmp/a/out"
  run salloc_hello 120 "${salloc[@]}" "$strata" launch -n 2 --program "$hello" \
    --run-dir "$tmp/a" --heartbeat-timeout 0 -- "$tmp/a/out"
  [ $status -eq 0 ] || fail "salloc hello: exit status $status"
  grep -q "strata launch: starting 2 ranks (job attempt 1 of 1): srun --mpi=pmix -n 2" \
    "$tmp/salloc_hello.out" && pass "salloc: strata launch ran srun --mpi=pmix" ||
    fail "salloc: strata launch did not use srun --mpi=pmix"
  check_hello "salloc" "$tmp/a/out"

  # A failing rank under srun: named with its status, which is the exit status.
  mkdir -p "$tmp/fail"
  run salloc_fail 120 env STRATA_FAKE_FAIL_RANK=1 STRATA_FAKE_FAIL_STATUS=3 \
    "${salloc[@]}" "$strata" launch -n 2 --max-restarts 1 --program "$fake" \
    --run-dir "$tmp/fail" -- "$tmp/fail"
  [ $status -eq 3 ] && pass "srun failure: exit status 3" ||
    fail "srun failure: exit status $status, not 3"
  grep -q "strata launch: rank 1 failed with exit status 3 (job attempt 2 of 2); no restarts left" \
    "$tmp/salloc_fail.out" && pass "srun failure: rank 1 named, restarted once" ||
    fail "srun failure: no line naming rank 1 after 2 attempts"

  # A hung rank under srun: killed through srun, nothing left running.
  mkdir -p "$tmp/hang"
  t0=$SECONDS
  run salloc_hang 120 env STRATA_FAKE_HANG_RANK=1 STRATA_FAKE_STEPS=100 \
    "${salloc[@]}" "$strata" launch -n 2 --heartbeat-timeout 3 --kill-grace 3 \
    --program "$fake" --run-dir "$tmp/hang" -- "$tmp/hang"
  took=$((SECONDS - t0))
  [ $status -eq 124 ] && pass "srun hang: exit status 124 after ${took}s" ||
    fail "srun hang: exit status $status, not 124"
  grep -q "strata launch: hung: rank 1 silent for" "$tmp/salloc_hang.out" &&
    pass "srun hang: rank 1 named" || fail "srun hang: no line naming rank 1"
  sleep 1
  if pgrep -af "fake_ran[k] $tmp/hang"; then fail "srun hang: processes left behind (above)"
  else pass "srun hang: no process left behind"; fi

  # (b) sbatch --wait with a generated batch script.
  mkdir -p "$tmp/b/out"
  cat >"$tmp/b/job.sh" <<JOB
#!/bin/bash
#SBATCH -n 2
#SBATCH -o $tmp/b/slurm.out
#SBATCH -J $job_name
exec "$strata" launch -n 2 --program "$hello" --run-dir "$tmp/b" --heartbeat-timeout 0 \\
  -- "$tmp/b/out"
JOB
  run sbatch_hello 120 sbatch --wait "$tmp/b/job.sh"
  [ $status -eq 0 ] || fail "sbatch: exit status $status"
  sed 's/^/    job: /' "$tmp/b/slurm.out" 2>/dev/null
  grep -q "srun --mpi=pmix -n 2" "$tmp/b/slurm.out" 2>/dev/null &&
    pass "sbatch: strata launch ran srun --mpi=pmix" ||
    fail "sbatch: no srun --mpi=pmix in the job output"
  check_hello "sbatch" "$tmp/b/out"
elif [ "$mode" = train ]; then
  # (c) A real training job of 2 ranks.
  run salloc_train 600 "${salloc[@]}" "$strata" launch -n 2 -- "$src/configs/tiny.toml" \
    --set data.source=synthetic --set train.steps=3 --set model.n_layer=1 --set model.d_model=64 \
    --set model.n_head=2 --set model.vocab_size=256 --set train.seq_len=32 \
    --set model.max_seq_len=32 --set train.batch_size=2 --set run.dir="$tmp/run"
  [ $status -eq 0 ] && pass "train: exit status 0" || fail "train: exit status $status"
  lines=$(wc -l <"$tmp/run/metrics.jsonl" 2>/dev/null || echo 0)
  [ "$lines" -eq 3 ] && pass "train: metrics.jsonl has 3 lines" ||
    fail "train: metrics.jsonl has $lines lines, not 3"
elif [ "$mode" = emit ]; then
  # (d) The generated batch script: #SBATCH lines for 1 node x 2 tasks, srun --mpi=pmix inside.
  mkdir -p "$tmp/d"
  run emit_script 60 "$strata" launch -n 2 --emit slurm --out "$tmp/d/job.sh" --job-name "$job_name" \
    --workdir "$tmp/d" --cpus-per-task 1 --time 00:15:00 -- "$src/configs/tiny.toml" \
    --set data.source=synthetic --set train.steps=3 --set model.n_layer=1 --set model.d_model=64 \
    --set model.n_head=2 --set model.vocab_size=256 --set train.seq_len=32 \
    --set model.max_seq_len=32 --set train.batch_size=2 --set parallel.tp=2 --set run.dir="$tmp/d/run"
  [ $status -eq 0 ] || fail "emit: exit status $status"
  sed 's/^/    job.sh: /' "$tmp/d/job.sh"
  grep -q "^#SBATCH --ntasks-per-node=2$" "$tmp/d/job.sh" && grep -q "^exec srun --mpi=pmix" "$tmp/d/job.sh" &&
    pass "emit: sbatch script with 2 tasks on one node and srun --mpi=pmix" ||
    fail "emit: the script lacks its #SBATCH or srun line"
  run sbatch_emit 600 sbatch --wait "$tmp/d/job.sh"
  [ $status -eq 0 ] && pass "emit: sbatch --wait exit status 0" || fail "emit: sbatch exit status $status"
  sed 's/^/    job: /' "$tmp/d/$job_name"-*.out 2>/dev/null | tail -20
  lines=$(wc -l <"$tmp/d/run/metrics.jsonl" 2>/dev/null || echo 0)
  [ "$lines" -eq 3 ] && pass "emit: the job trained 3 steps" ||
    fail "emit: metrics.jsonl has $lines lines, not 3"
elif [ "$mode" = prepare ]; then
  # (e) `strata prepare --emit slurm`: the submit script's four jobs (scan and encode as arrays of
  # 2 tasks) make the same files as a prepare in one process.
  mkdir -p "$tmp/e"
  python3 - "$tmp/e" <<'PY'
import json, random, sys
rng = random.Random(3)
words = [f"w{i}" for i in range(3000)]
for part in range(2):
    with open(f"{sys.argv[1]}/part{part}.jsonl", "w") as f:
        for i in range(1500):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(50))}) + "\n")
PY
  opts=(--input "$tmp/e/part*.jsonl" --vocab 600 --dedup exact --range-bytes 100K
    --max-shard-tokens 40000)
  run prepare_ref 120 "$strata" prepare "${opts[@]}" --out "$tmp/e/ref"
  # Written by `strata launch` (the form the issue names), and by `strata prepare` itself.
  run prepare_launch_emit 60 "$strata" launch -n 2 --emit slurm --job-name "$job_name" \
    --workdir "$tmp/e" --time 00:15:00 --out "$tmp/e/submit.sh" -- prepare "${opts[@]}" \
    --out "$tmp/e/out" --strata "$strata"
  run prepare_emit 60 "$strata" prepare "${opts[@]}" --out "$tmp/e/out" --workers 2 --emit slurm \
    --job-name "$job_name" --workdir "$tmp/e" --time 00:15:00 --strata "$strata" \
    --job-file "$tmp/e/submit_prepare.sh"
  cmp -s "$tmp/e/submit.sh" "$tmp/e/submit_prepare.sh" &&
    pass "prepare emit: strata launch -n 2 --emit slurm -- prepare writes the same script" ||
    fail "prepare emit: strata launch and strata prepare wrote different scripts"
  sed 's/^/    submit.sh: /' "$tmp/e/submit.sh"
  grep -q -- "--array=0-1" "$tmp/e/submit.sh" && pass "prepare emit: array jobs of 2 tasks" ||
    fail "prepare emit: no --array=0-1 in the script"
  SBATCH_WAIT=1 run prepare_submit 600 bash "$tmp/e/submit.sh"
  [ $status -eq 0 ] && pass "prepare emit: the four jobs succeeded" ||
    fail "prepare emit: exit status $status"
  for f in "$tmp/e/$job_name"-*.out; do sed "s|^|    $(basename "$f"): |" "$f"; done 2>/dev/null | tail -20
  digest() { (cd "$1" && ls -A | grep -v '^prepare_report.json$' | xargs sha256sum | sha256sum); }
  [ -e "$tmp/e/out/manifest.json" ] && [ "$(digest "$tmp/e/out")" = "$(digest "$tmp/e/ref")" ] &&
    pass "prepare emit: the same files as one process" ||
    fail "prepare emit: the jobs' files differ from one process's"
else
  echo "unknown mode '$mode' (launch, train, emit or prepare)" >&2
  exit 2
fi

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
exit 0
