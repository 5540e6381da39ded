#!/usr/bin/env bash
# SIGKILL at random moments of a run that checkpoints every step (GitHub issue 23, item 2): the
# kill lands in the step, in the asynchronous write of the slices, in the commit (rename, the
# `latest` pointer, pruning) or between them. After each kill the run resumes (run.resume=auto)
# and must find a complete checkpoint (its checksums are verified on load) and end bitwise where
# a run that was never stopped ends. ROUNDS kills (default 50).
#
#   check_kill_during_commit.sh STRATA SOURCE_DIR [ROUNDS]
set -uo pipefail
strata=$1 src=$2 rounds=${3:-50}
fail() { echo "FAILED: $1"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_kill_commit.XXXXXX")
trap 'rm -rf "$work"' EXIT
steps=24
args=(--set data.source=synthetic --set "train.steps=$steps" --set train.eval_every=0
      --set train.eval_batches=1 --set train.checkpoint_every=1 --set train.keep_last=2
      --set run.resume=auto --set sample.max_new_tokens=0 --set model.n_layer=2
      --set model.d_model=64 --set model.n_head=2 --set model.vocab_size=256
      --set train.seq_len=64 --set model.max_seq_len=64)
export OMP_NUM_THREADS=1
timeout 300 "$strata" train "$src/configs/tiny.toml" "${args[@]}" --set "run.dir=$work/clean" \
  > "$work/clean.log" 2>&1 || { tail -20 "$work/clean.log"; fail "the run without kills"; }
start=$(date +%s.%N)
timeout 300 "$strata" train "$src/configs/tiny.toml" "${args[@]}" --set "run.dir=$work/timing" \
  > /dev/null 2>&1
span=$(python3 -c "import time; print(max(0.3, time.time() - $start))")
RANDOM=7
resumed_steps=()
for round in $(seq 1 "$rounds"); do
  dir="$work/round"
  rm -rf "$dir"
  # Kill somewhere in the run's span (its start-up included), then once more after a resume.
  for kill_no in 1 2; do
    delay=$(python3 -c "import random; random.seed($round * 7 + $kill_no); print(random.uniform(0.05, $span))")
    "$strata" train "$src/configs/tiny.toml" "${args[@]}" --set "run.dir=$dir" > "$work/killed.log" 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  timeout 300 "$strata" train "$src/configs/tiny.toml" "${args[@]}" --set "run.dir=$dir" \
    > "$work/resume.log" 2>&1 || { tail -20 "$work/resume.log"; fail "round $round: the resume failed"; }
  from=$(grep -oE "at step [0-9]+" "$work/resume.log" | head -1 | grep -oE "[0-9]+" || echo 0)
  resumed_steps+=("$from")
  python3 "$src/tests/tools/same_checkpoint.py" "$work/clean" "$dir" "$steps" > /dev/null ||
    fail "round $round: the final checkpoint differs"
  [ -z "$(find "$dir/ckpt" -name '*.tmp')" ] || fail "round $round: a temporary checkpoint was left"
done
python3 - "${resumed_steps[@]}" <<PY
import sys
s = [int(x) for x in sys.argv[1:]]
print(f"$rounds rounds of 2 kills each: every resume found a complete checkpoint (resumed at steps "
      f"{min(s)}-{max(s)}, {sum(1 for x in s if x == 0)} from scratch) and ended bitwise equal to "
      f"the run never stopped")
PY
echo "kill during commit: all checks passed"
