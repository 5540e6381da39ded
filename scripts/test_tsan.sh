#!/usr/bin/env bash
# ThreadSanitizer over the code that starts threads (issue 23, item 4): the progress engine under
# MPI, the asynchronous checkpoint writer, the optimizer offload's I/O thread, the copy queues,
# strata prepare's workers, the tracer and the log they share. A clang 14 build in build-tsan/ (STRATA_SANITIZE_THREAD,
# CMakeLists.txt); any TSan report, or any failed test, fails the script.
#
#   scripts/test_tsan.sh          what CI runs (docs/RELIABILITY.md "ThreadSanitizer" has times)
#   scripts/test_tsan.sh --full   also the comm suite on 1, 3, 4 ranks and as a singleton, and the
#                                 2-rank parallel suites (the layouts' CI subset: ~6 more minutes)
#
# One OpenMP thread everywhere (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1): the OpenMP runtimes
# are not instrumented (LLVM's libomp for strata's loops, GCC's libgomp under oneDNN and
# OpenBLAS), so with a team of threads TSan reports their internal reuse of memory as races (seen:
# __kmp_free's memset against the next parallel region's). The threads strata starts itself are
# what this run is about, and they do not depend on the OpenMP team size.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
full=0
case "${1:-}" in
  "") ;;
  --full) full=1 ;;
  *) echo "usage: scripts/test_tsan.sh [--full]" >&2; exit 2 ;;
esac
build=build-tsan

# -O1 -g1: TSan's reports need line tables only; -O1 compiles fastest of the levels that keep
# the tests quick (the layers' own -O3 is replaced under STRATA_SANITIZE_THREAD).
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_SANITIZE_THREAD=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
targets=(strata_test_core strata_test_io strata_test_optim strata_test_train strata_test_data strata_test_comm
         strata_test_model_parallel strata_cli)
((full)) && targets+=(strata_test_parallel strata_test_device_groups)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:exitcode=66:suppressions=$root/scripts/tsan_suppressions.txt"
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader
        -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x TSAN_OPTIONS)
logs=$build/tsan_logs
rm -rf "$logs"
mkdir -p "$logs"
failed=0

# run NAME COMMAND...: the command's output goes to $logs/NAME.log; a non-zero status or any
# ThreadSanitizer line in it (a report of a rank whose status mpirun did not pass on) fails.
run() {
  local name=$1 start=$SECONDS status=0
  shift
  "$@" >"$logs/$name.log" 2>&1 || status=$?
  if ((status != 0)) || grep -q "ThreadSanitizer" "$logs/$name.log"; then
    echo "== $name: FAILED (exit status $status, $(grep -c "WARNING: ThreadSanitizer" \
      "$logs/$name.log") TSan report(s)); $logs/$name.log ends:"
    tail -n 60 "$logs/$name.log"
    failed=1
  else
    echo "== $name: ok ($((SECONDS - start)) s)"
  fi
}

# Trace.OffSpanIsCheap times a span in nanoseconds: not a bound instrumented code can keep.
run core "$build/tests/strata_test_core" --gtest_brief=1 --gtest_filter=-Trace.OffSpanIsCheap
for t in io optim train data; do
  run "$t" "$build/tests/strata_test_$t" --gtest_brief=1
done
# The progress engine (Engine.*) and every collective, 2 ranks as in ctest comm_np2.
run comm_np2 "${mpirun[@]}" -np 2 "$build/tests/comm/strata_test_comm"
# A checkpoint saved asynchronously by 2 ranks (tp 2) and resumed on pipeline stages.
run model_parallel_checkpoint_np2 "${mpirun[@]}" -np 2 \
  "$build/tests/parallel/strata_test_model_parallel" \
  --gtest_filter=ModelParallelCheckpoint.ResumesOnAnotherLayout

# `strata train` on 2 ranks with every thread at once: a checkpoint written in the background
# after every step while the next one trains, the optimizer state streamed to disk by the offload
# thread (small chunks: several per step), the progress engine under ZeRO-1 data parallelism and
# then under a pipeline (send/recv), the profiler recording from all of them; then a resume.
run_dir=$build/tsan_run
rm -rf "$run_dir"
train_sets=(--set model.n_layer=2 --set model.d_model=32 --set model.n_head=2
  --set model.vocab_size=300 --set model.max_seq_len=32 --set train.seq_len=32
  --set train.batch_size=2 --set train.grad_accum=2 --set train.eval_every=0
  --set train.eval_batches=1 --set data.source=synthetic --set sample.max_new_tokens=0
  --set train.checkpoint_every=1 --set train.async_checkpoint=true --set optim.offload=nvme
  --set optim.offload_chunk_mb=0.01 --set profile.enabled=true --set profile.start_step=2
  --set profile.steps=2 --set run.dir="$run_dir")
run train_np2_zero1 "${mpirun[@]}" -np 2 "$build/strata" train configs/tiny.toml \
  "${train_sets[@]}" --set train.steps=3 --set parallel.zero=1
run train_np2_pp2_resumed "${mpirun[@]}" -np 2 "$build/strata" train configs/tiny.toml \
  "${train_sets[@]}" --set train.steps=5 --set parallel.pp=2 --set run.resume=auto
if ! grep -q "resumed from .* at step 3" "$logs/train_np2_pp2_resumed.log"; then
  echo "== train_np2_pp2_resumed: FAILED (did not resume from step 3)"
  failed=1
fi

if ((full)); then
  for np in 1 3 4; do
    run "comm_np$np" "${mpirun[@]}" -np "$np" "$build/tests/comm/strata_test_comm"
  done
  run comm_singleton "$build/tests/comm/strata_test_comm"
  run parallel_dp_np2 "${mpirun[@]}" -np 2 "$build/tests/parallel/strata_test_parallel"
  run parallel_device_groups_np2 "${mpirun[@]}" -np 2 \
    "$build/tests/parallel/strata_test_device_groups"
  run parallel_layouts_np2 "${mpirun[@]}" -x STRATA_LAYOUTS=ci -np 2 \
    "$build/tests/parallel/strata_test_model_parallel"
fi

if ((failed)); then
  echo "ThreadSanitizer: FAILED (logs in $logs)"
  exit 1
fi
echo "ThreadSanitizer: no reports, every test passed"
