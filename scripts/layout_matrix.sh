#!/usr/bin/env bash
# The full model-parallel layout matrix (ctest runs a third of it): every (tp, pp, dp) of 2, 4 and
# 8 ranks, sp on and off, vpp 1 and 2, GPipe / 1F1B / interleaved, both model families, each
# against one process over 10 steps (losses and final parameters, f32, relative <= 1e-5).
# Usage: scripts/layout_matrix.sh [build-dir]   (about 2 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export OMP_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1
for np in 2 4 8; do
  echo "== $np ranks"
  mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np "$np" \
    "$build/tests/parallel/strata_test_model_parallel" --gtest_brief=1 --gtest_color=no 2>&1 |
    grep -E "^\[  (PASSED|FAILED) |FAILED|tests? from .* ran" || true
done
