#!/usr/bin/env bash
# The full model-parallel layout matrix (ctest runs a subset chosen to cover every axis value,
# see ci_subset in tests/parallel/test_model_parallel.cc): every (tp, pp, dp) of 2, 4 and 8 ranks,
# sp on and off, vpp 1 and 2, GPipe / 1F1B / interleaved, each ZeRO stage, both model families,
# each against one process over 10 steps (losses and final parameters, f32, relative <= 1e-5;
# gradient norms at that tolerance on every step, 16-bit cases on step 1 and within their
# measured drift later, each case printing its "[ grad_norm ]" deviations), and the raw reduced
# gradients with clipping off.
# Exits non-zero when any case on any rank count fails (or a run dies), after running them all.
# Usage: scripts/layout_matrix.sh [build-dir]   (15 minutes measured on a shared 2-core machine)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export OMP_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
for np in 2 4 8; do
  echo "== $np ranks"
  rc=0
  mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np "$np" \
    "$build/tests/parallel/strata_test_model_parallel" --gtest_brief=1 --gtest_color=no \
    >"$log" 2>&1 || rc=$?
  grep -E "^\[  (PASSED|FAILED) |FAILED|tests? from .* ran|^\[ grad" "$log" || true
  if [ "$rc" -ne 0 ]; then
    failed+=("$np ranks (exit $rc)")
    tail -n 20 "$log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "layout matrix FAILED: ${failed[*]}"
  exit 1
fi
echo "layout matrix passed on 2, 4 and 8 ranks"
