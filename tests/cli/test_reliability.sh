#!/usr/bin/env bash
# Reliability end to end, through `strata launch` and `strata train` with injected faults
# ([fault] keys as STRATA_FAULT_* variables, which the launcher forwards to every rank), each
# followed by `strata diagnose` naming the cause:
#   1. a rank SIGKILLed at a random step: the supervisor restarts from the last committed
#      checkpoint and the final parameters are bitwise those of an uninterrupted run;
#   2. a rank that hangs inside the step: the others' collective times out naming the operation
#      and group, the job ends within the timeout plus a grace, the silent rank is named;
#   3. NaN gradients: updates skipped, the run stops after anomaly.max_nonfinite in a row;
#   4. a loss spike; 5. a diverging replica and a straggler; 6. out of memory;
#   7. a corrupted checkpoint: the resume falls back and diagnose names the file;
#   8. a save that fails half way: abandoned, training goes on, older checkpoints intact;
#   9. --elastic: a rank that cannot be brought back is dropped, the global batch kept.
# Usage: test_reliability.sh STRATA_BINARY SOURCE_DIR
set -uo pipefail
strata=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
passed=0
failed=0
small=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4
  --set model.vocab_size=512 --set model.max_seq_len=32 --set train.seq_len=32
  --set train.batch_size=4 --set data.source=synthetic --set train.eval_every=0
  --set train.eval_batches=1 --set sample.max_new_tokens=0 --set run.resume=auto)

check() {  # check "what" condition...
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $what"
  fi
}
contains() { grep -q -- "$2" <<<"$1"; }
slice_sums() {  # the checksum of every slice of a checkpoint, sorted (bitwise identity of the state)
  /usr/bin/python3 -c 'import json,sys; print("\n".join(sorted(s["tensor"]+"@"+str(s["begin"])+"="+s.get("xxh3", "xxh64:"+s.get("xxh64", "")) for s in json.load(open(sys.argv[1]))["slices"])))' "$1"
}
# Two checkpoints hold the same state, bitwise: both indexes exist and list slices, and their
# checksums agree (two missing or empty indexes compare nothing, and must not pass).
same_slices() {
  local a b
  a=$(slice_sums "$1") || { echo "cannot read $1"; return 1; }
  b=$(slice_sums "$2") || { echo "cannot read $2"; return 1; }
  [ -n "$a" ] || { echo "no slices in $1"; return 1; }
  [ "$a" = "$b" ]
}

# 1. SIGKILL at a random step, restart, bitwise.
step=$((3 + RANDOM % 5))  # 3..7; checkpoints every 2 steps
echo "-- crash: rank 1 SIGKILLed at the start of step $step"
"$strata" launch -n 2 -- "$src/configs/tiny.toml" "${small[@]}" --set train.steps=8 \
  --set train.checkpoint_every=2 --set run.dir="$work/straight" >"$work/straight.out" 2>&1
check "uninterrupted run" test $? -eq 0
STRATA_FAULT_CRASH_RANK=1 STRATA_FAULT_CRASH_STEP=$step "$strata" launch -n 2 --max-restarts 1 \
  -- "$src/configs/tiny.toml" "${small[@]}" --set train.steps=8 --set train.checkpoint_every=2 \
  --set run.dir="$work/crash" >"$work/crash.out" 2>&1
check "crashed run restarted and finished" test $? -eq 0
check "the supervisor named the killed rank" contains "$(cat "$work/crash.out")" \
  "rank 1 was killed by signal 9"
check "final parameters and moments bitwise identical" \
  same_slices "$work/straight/ckpt/step_00000008/index.json" \
  "$work/crash/ckpt/step_00000008/index.json"
# The comparison itself can fail: a missing index on both sides is not a match.
check "the bitwise check rejects two missing checkpoints" \
  eval '! same_slices "$work/none_a/index.json" "$work/none_b/index.json" >/dev/null 2>&1'
out=$("$strata" diagnose "$work/crash")
check "diagnose: crash" contains "$out" "\[crash\] crash: rank 1 was killed by signal 9"

# 2. A hang inside the step; comm timeout 3 s.
echo "-- hang: rank 1 stops at step 3"
start=$(date +%s.%N)
STRATA_FAULT_HANG_RANK=1 STRATA_FAULT_HANG_STEP=3 "$strata" launch -n 2 --heartbeat-timeout 60 \
  -- "$src/configs/tiny.toml" "${small[@]}" --set train.steps=6 --set parallel.comm_timeout_s=3 \
  --set run.dir="$work/hang" >"$work/hang.out" 2>&1
rc=$?
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "   exit $rc after $took s"
check "hung job ended with status 124" test $rc -eq 124
check "detected within the timeout plus a grace (3 + 10 s)" awk -v t="$took" 'BEGIN { exit !(t < 13) }'
check "the waiting rank named the operation, the group and the silent rank" \
  contains "$(cat "$work/hang.out")" \
  "comm timeout: .* on group '.*' .* at step 3 .*world rank 1 never reached it"
out=$("$strata" diagnose "$work/hang")
check "diagnose: hang" contains "$out" "\[hang\] hang: .* at step 3"
check "diagnose: the silent rank" contains "$out" "the silent rank is rank 1"
# ... and with a restart allowed, the supervisor starts the job again and it finishes.
STRATA_FAULT_HANG_RANK=1 STRATA_FAULT_HANG_STEP=3 "$strata" launch -n 2 --max-restarts 1 \
  -- "$src/configs/tiny.toml" "${small[@]}" --set train.steps=6 --set parallel.comm_timeout_s=3 \
  --set train.checkpoint_every=2 --set run.dir="$work/hang_restart" >"$work/hang_restart.out" 2>&1
check "hung job restarted from its checkpoint and finished" test $? -eq 0
check "restart after the timeout" contains "$(cat "$work/hang_restart.out")" \
  "restarting the job (job attempt 2 of 2) after: rank 0 failed with exit status 124"

# 3. NaN gradients, three in a row stop the run.
echo "-- NaN gradients from step 3"
"$strata" train "$src/configs/tiny.toml" "${small[@]}" --set train.steps=8 --set fault.nan_step=3 \
  --set fault.nan_steps=10 --set run.dir="$work/nan" >"$work/nan.out" 2>&1
check "the run stopped" test $? -ne 0
out=$("$strata" diagnose "$work/nan")
check "diagnose: non-finite steps and data positions" contains "$out" \
  "\[nonfinite\] non-finite loss or gradients at step(s) 3, 4, 5 (data position"

# 4. A loss spike.
echo "-- loss spike at step 26"
"$strata" train "$src/configs/tiny.toml" "${small[@]}" --set train.steps=28 \
  --set fault.spike_step=26 --set anomaly.spike_warmup=10 --set run.dir="$work/spike" \
  >"$work/spike.out" 2>&1
check "spike run finished" test $? -eq 0
out=$("$strata" diagnose "$work/spike")
check "diagnose: loss spike" contains "$out" "\[loss_spike\] loss spike(s) at step 26"

# 5. A diverging replica and a straggler (3 data-parallel ranks).
echo "-- rank 2 diverges after step 2, rank 1 is slow"
STRATA_FAULT_DIVERGE_RANK=2 STRATA_FAULT_DIVERGE_STEP=2 STRATA_FAULT_SLOW_RANK=1 \
  STRATA_FAULT_SLOW_MS=400 "$strata" launch -n 3 -- "$src/configs/tiny.toml" "${small[@]}" \
  --set train.steps=4 --set anomaly.replica_check_every=1 --set run.dir="$work/diverge" \
  >"$work/diverge.out" 2>&1
check "diverge run finished" test $? -eq 0
out=$("$strata" diagnose "$work/diverge")
check "diagnose: diverging replica" contains "$out" \
  "\[diverging_replica\] data-parallel replicas diverged from step 2: world rank(s) \[2\]"
check "diagnose: straggler" contains "$out" "\[straggler\] straggler(s): rank 1"

# 6. Out of memory.
echo "-- out of memory"
"$strata" train "$src/configs/tiny.toml" "${small[@]}" --set system.memory_limit_mb=2 \
  --set run.dir="$work/oom" >"$work/oom.out" 2>&1
check "oom run failed" test $? -ne 0
out=$("$strata" diagnose "$work/oom")
check "diagnose: oom with its category" contains "$out" "\[oom\] out of memory in category '"
check "diagnose: the planner names the overflow" contains "$out" "does not fit: a rank (pipeline stage 0) needs"
check "diagnose: the planner's smallest footprint" contains "$out" "no layout on 1 ranks fits"

# 7. A corrupted checkpoint.
echo "-- checkpoint of step 4 corrupted after its commit"
"$strata" train "$src/configs/tiny.toml" "${small[@]}" --set train.steps=4 \
  --set train.checkpoint_every=2 --set fault.corrupt_step=4 --set run.dir="$work/corrupt" \
  >"$work/corrupt.out" 2>&1
"$strata" train "$src/configs/tiny.toml" "${small[@]}" --set train.steps=6 \
  --set run.dir="$work/corrupt" >"$work/corrupt2.out" 2>&1
check "resumed past the damaged checkpoint" test $? -eq 0
check "resumed from step 2" contains "$(cat "$work/corrupt2.out")" "resumed from .*step_00000002"
out=$("$strata" diagnose "$work/corrupt")
check "diagnose: damaged checkpoint named" contains "$out" \
  "\[checkpoint\] a damaged checkpoint was found: .*rank_00000.safetensors"

# 8. A save that fails half way (rank 0 cannot write its slices at step 4).
echo "-- the save of step 4 fails"
"$strata" train "$src/configs/tiny.toml" "${small[@]}" --set train.steps=6 \
  --set train.checkpoint_every=2 --set fault.fail_save_step=4 --set run.dir="$work/failsave" \
  >"$work/failsave.out" 2>&1
check "training went on after the failed save" test $? -eq 0
check "no step 4 checkpoint, steps 2 and 6 committed" \
  test "$(ls "$work/failsave/ckpt" | tr '\n' ' ')" = "latest step_00000002 step_00000006 "
out=$("$strata" diagnose "$work/failsave")
check "diagnose: failed save" contains "$out" "\[checkpoint\] the checkpoint save of step 4 failed"

# 9. Elastic: rank 3 of 4 dies at step 5 on every attempt; after failing again right after a
# restart it is given up, the job continues on the remaining ranks (dp 2 x accumulation 2 keeps
# the global batch of 16), from the last checkpoint resharded, with the uninterrupted losses.
echo "-- elastic: rank 3 cannot be brought back"
"$strata" launch -n 4 -- "$src/configs/tiny.toml" "${small[@]}" --set train.steps=8 \
  --set train.checkpoint_every=2 --set run.dir="$work/el_straight" >"$work/el_straight.out" 2>&1
STRATA_FAULT_CRASH_RANK=3 STRATA_FAULT_CRASH_STEP=5 STRATA_FAULT_ATTEMPT=0 "$strata" launch -n 4 \
  --elastic --max-restarts 2 -- "$src/configs/tiny.toml" "${small[@]}" --set train.steps=8 \
  --set train.checkpoint_every=2 --set run.dir="$work/elastic" >"$work/elastic.out" 2>&1
check "elastic job finished" test $? -eq 0
check "restarted on 2 ranks keeping the global batch" contains "$(cat "$work/elastic.out")" \
  "elastic: rank 3 failed again after a restart; restarting on 2 of the 3 remaining ranks with parallel.dp = 2, train.grad_accum = 2"
# The gradient norm too: on 2 ranks with accumulation the reduction must still be the mean.
check "losses and grad norms continue within f32 tolerance (1e-5)" /usr/bin/python3 -c '
import json, sys
def read(path, key):
    return {json.loads(l)["step"]: json.loads(l)[key] for l in open(path)}
ok = True
for key in ("loss", "grad_norm"):
    a, b = read(sys.argv[1], key), read(sys.argv[2], key)
    ok = ok and len(a) == 8 and sorted(a) == sorted(b)
    ok = ok and all(abs(a[s] - b[s]) <= 1e-5 * abs(a[s]) for s in a)
sys.exit(0 if ok else 1)
' "$work/el_straight/metrics.jsonl" "$work/elastic/metrics.jsonl"

echo "reliability: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
